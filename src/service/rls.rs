//! `envoy.service.ratelimit.v3.RateLimitService`: decode, plan, decide in the store, encode.

use std::sync::Arc;

use arc_swap::ArcSwap;
use tonic::{Request, Response, Status};

use super::convert::{request_from_proto, response_to_proto};
use super::headers::ResponseHeaders;
use crate::limiter::{outcome, plan, Rules};
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};
use crate::store::{Store, StoreError};

/// The RLS gRPC service over a store and the current rules (swapped atomically on reload; a
/// request keeps the rules it started with).
pub struct RateLimitEdge<S> {
    rules: Arc<ArcSwap<Rules>>,
    store: Arc<S>,
    headers: ResponseHeaders,
}

impl<S: Store> RateLimitEdge<S> {
    pub fn new(rules: Arc<ArcSwap<Rules>>, store: Arc<S>) -> RateLimitEdge<S> {
        RateLimitEdge {
            rules,
            store,
            headers: ResponseHeaders::None,
        }
    }

    /// Adds rate-limit headers of `style` to every response (`response_headers_to_add`).
    pub fn with_response_headers(mut self, style: ResponseHeaders) -> RateLimitEdge<S> {
        self.headers = style;
        self
    }

    /// Decides one request; also used by the HTTP `/json` endpoint.
    pub async fn decide(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        let request = request_from_proto(request)?;
        let rules = self.rules.load();
        let plan = plan(&rules, &request).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let verdicts = if plan.checks.is_empty() {
            Vec::new()
        } else {
            self.store
                .decide(&plan.checks)
                .await
                .map_err(store_status)?
        };
        let mut response = response_to_proto(&outcome(&plan, &verdicts));
        self.headers.apply(&request, &mut response);
        Ok(response)
    }
}

fn store_status(error: StoreError) -> Status {
    tracing::warn!(kind = error.kind(), %error, "store failed");
    Status::unavailable(error.to_string())
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimitEdge<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.into_inner()).await.map(Response::new)
    }
}
