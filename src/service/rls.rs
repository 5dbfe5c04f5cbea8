//! `envoy.service.ratelimit.v3.RateLimitService`: decode, plan, decide in the store, encode.

use std::sync::Arc;
use std::time::Instant;

use arc_swap::ArcSwap;
use tonic::{Code as GrpcCode, Request, Response, Status};

use super::call_span::CallSpan;
use super::convert::{dynamic_metadata, request_from_proto, response_to_proto, Refused};
use super::decision_log::{self, StoreCall};
use super::headers::ResponseHeaders;
use super::metrics::{Metrics, RequestResult};
use super::store_error_policy::StoreErrorPolicy;
use super::throttle::WarnThrottle;
use super::unknown_domains::UnknownDomains;
use crate::limiter::algorithm::Verdict;
use crate::limiter::{outcome, plan_with, response_metadata, Modes, RequestBounds, Rules};
use crate::proto::rls::rate_limit_response::Code as ProtoCode;
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::proto::rls::{RateLimitRequest, RateLimitResponse};
use crate::store::{Store, StoreError};

/// The RLS gRPC service over a store and the current rules (swapped atomically on reload; a
/// request keeps the rules it started with).
pub struct RateLimitEdge<S> {
    rules: Arc<ArcSwap<Rules>>,
    store: Arc<S>,
    headers: ResponseHeaders,
    metrics: Option<Arc<Metrics>>,
    on_store_error: StoreErrorPolicy,
    /// Global shadow and quota mode.
    modes: Modes,
    /// Fill `dynamic_metadata` in every response (envoyproxy/ratelimit's
    /// `RESPONSE_DYNAMIC_METADATA`).
    dynamic_metadata: bool,
    /// What one request may carry; a request beyond it is refused before it is converted.
    request_bounds: RequestBounds,
    /// Store-error warnings are logged at most once per second, with the count of the others.
    warnings: WarnThrottle,
    unknown_domains: UnknownDomains,
    /// Until it says a configuration has loaded, requests are answered `UNAVAILABLE` with the
    /// message beside it (see [`RateLimitEdge::with_initial_config`]).
    initial_config: Option<(ConfigLoaded, &'static str)>,
}

/// Whether a configuration has loaded yet.
pub type ConfigLoaded = Arc<dyn Fn() -> bool + Send + Sync>;

impl<S: Store> RateLimitEdge<S> {
    pub fn new(rules: Arc<ArcSwap<Rules>>, store: Arc<S>) -> RateLimitEdge<S> {
        RateLimitEdge {
            rules,
            store,
            headers: ResponseHeaders::None,
            metrics: None,
            on_store_error: StoreErrorPolicy::Unavailable,
            modes: Modes::default(),
            dynamic_metadata: false,
            request_bounds: RequestBounds::default(),
            warnings: WarnThrottle::new(),
            unknown_domains: UnknownDomains::default(),
            initial_config: None,
        }
    }

    /// Answers every request `UNAVAILABLE` with `message` until `loaded` says a configuration
    /// has loaded: a server that has none cannot decide, so Envoy applies its
    /// `failure_mode_deny` as for a server it cannot reach, rather than meeting no limits.
    pub fn with_initial_config(
        mut self,
        loaded: ConfigLoaded,
        message: &'static str,
    ) -> RateLimitEdge<S> {
        self.initial_config = Some((loaded, message));
        self
    }

    /// Global shadow mode (no limit denies) and quota mode (every limit in quota mode).
    pub fn with_modes(mut self, modes: Modes) -> RateLimitEdge<S> {
        self.modes = modes;
        self
    }

    /// Fills every response's `dynamic_metadata` as envoyproxy/ratelimit does.
    pub fn with_dynamic_metadata(mut self, enabled: bool) -> RateLimitEdge<S> {
        self.dynamic_metadata = enabled;
        self
    }

    /// Refuses requests beyond `bounds` with `INVALID_ARGUMENT` (default:
    /// [`RequestBounds::default`]).
    pub fn with_request_bounds(mut self, bounds: RequestBounds) -> RateLimitEdge<S> {
        self.request_bounds = bounds;
        self
    }

    /// Adds rate-limit headers of `style` to every response (`response_headers_to_add`).
    pub fn with_response_headers(mut self, style: ResponseHeaders) -> RateLimitEdge<S> {
        self.headers = style;
        self
    }

    /// Records every request in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> RateLimitEdge<S> {
        metrics.set_store_error_policy(self.on_store_error.name());
        self.metrics = Some(metrics);
        self
    }

    /// What to answer when the store fails.
    pub fn with_store_error_policy(mut self, policy: StoreErrorPolicy) -> RateLimitEdge<S> {
        self.on_store_error = policy;
        if let Some(metrics) = &self.metrics {
            metrics.set_store_error_policy(policy.name());
        }
        self
    }

    /// The rules in use.
    pub fn rules(&self) -> &Arc<ArcSwap<Rules>> {
        &self.rules
    }

    /// The store the requests are decided in (`/counters` reads and resets it).
    pub fn store(&self) -> &Arc<S> {
        &self.store
    }

    /// What one request may carry (`/counters` selectors are bounded alike).
    pub fn request_bounds(&self) -> &RequestBounds {
        &self.request_bounds
    }

    /// Decides one request; also used by the HTTP `/json` endpoint (untraced).
    pub async fn decide(&self, request: RateLimitRequest) -> Result<RateLimitResponse, Status> {
        self.decide_traced(request, &CallSpan::none()).await
    }

    /// Decides one request within `call`'s span.
    async fn decide_traced(
        &self,
        request: RateLimitRequest,
        call: &CallSpan,
    ) -> Result<RateLimitResponse, Status> {
        let started = Instant::now();
        let result = self.decide_timed(request, call).await;
        call.record_result(&result);
        if let Some(metrics) = &self.metrics {
            let ended = match &result {
                Ok(response) if response.overall_code == ProtoCode::OverLimit as i32 => {
                    RequestResult::OverLimit
                }
                Ok(_) => RequestResult::Ok,
                Err(status) if status.code() == GrpcCode::InvalidArgument => {
                    RequestResult::InvalidArgument
                }
                Err(_) => RequestResult::Unavailable,
            };
            metrics.record_request(ended, started.elapsed());
        }
        result
    }

    async fn decide_timed(
        &self,
        request: RateLimitRequest,
        call: &CallSpan,
    ) -> Result<RateLimitResponse, Status> {
        if let Some((loaded, message)) = &self.initial_config {
            if !loaded() {
                return Err(Status::unavailable(*message));
            }
        }
        let logged = decision_log::enabled();
        let domain = logged.then(|| request.domain.clone());
        let request = request_from_proto(request, &self.request_bounds).map_err(|refused| {
            if let (Refused::Bound(exceeded), Some(metrics)) = (&refused, &self.metrics) {
                metrics.record_request_bound(exceeded.bound());
            }
            let status = Status::from(refused);
            if let Some(domain) = &domain {
                decision_log::refused(domain, &status.message());
            }
            status
        })?;
        call.record_request(&request);
        let rules = self.rules.load();
        let decision = call.decision();
        let (plan, verdicts, from_store, outcome) = decision
            .instrument(async {
                let plan = plan_with(&rules, &request, self.modes).map_err(|error| {
                    if logged {
                        decision_log::refused(&request.domain, &error);
                    }
                    Status::invalid_argument(error.to_string())
                })?;
                decision.record_checks(plan.checks.len());
                let mut store = StoreCall::default();
                let (verdicts, from_store) = if plan.checks.is_empty() {
                    (Vec::new(), true)
                } else {
                    let started = logged.then(Instant::now);
                    let decided = decision
                        .store_call(plan.checks.len(), self.store.decide(&plan.checks))
                        .await;
                    store = StoreCall::answered(started);
                    match decided {
                        Ok(verdicts) => (verdicts, true),
                        Err(error) => {
                            store = store.failed(self.on_store_error);
                            match self.on_store_error(error, plan.checks.len()) {
                                Ok(verdicts) => (verdicts, false),
                                Err(status) => {
                                    if logged {
                                        decision_log::decided(&rules, &request, &plan, None, store);
                                    }
                                    return Err(status);
                                }
                            }
                        }
                    }
                };
                let outcome = outcome(&plan, &verdicts);
                decision.record_overall(outcome.overall);
                if logged {
                    decision_log::decided(&rules, &request, &plan, Some(&outcome), store);
                }
                Ok::<_, Status>((plan, verdicts, from_store, outcome))
            })
            .await?;
        let unknown_domain = plan.checks.is_empty() && rules.domain(&request.domain).is_none();
        if unknown_domain {
            self.unknown_domains.record(&request.domain, &rules);
        }
        if let Some(metrics) = &self.metrics {
            metrics.record_decision(&request, &plan, from_store.then_some(&verdicts), &outcome);
            if unknown_domain {
                metrics.record_domain_not_found(&request.domain, request.descriptors.len());
            }
        }
        let mut response = response_to_proto(&outcome);
        if self.dynamic_metadata {
            let facts = response_metadata(&plan, &outcome);
            response.dynamic_metadata = Some(dynamic_metadata(&request, &facts));
        }
        self.headers.apply(&request, &mut response);
        Ok(response)
    }

    /// Applies the store-failure policy: an error for `unavailable`, else stand-in verdicts (the
    /// counts are unknown: nothing remaining, no reset time).
    fn on_store_error(&self, error: StoreError, checks: usize) -> Result<Vec<Verdict>, Status> {
        if let Some(suppressed) = self.warnings.admit() {
            tracing::warn!(
                kind = error.kind(),
                %error,
                policy = %self.on_store_error,
                suppressed,
                "store failed"
            );
        }
        if let Some(metrics) = &self.metrics {
            metrics.record_store_error(&error);
            metrics.record_policy_answer();
        }
        let admitted = match self.on_store_error {
            StoreErrorPolicy::Unavailable => return Err(Status::unavailable(error.to_string())),
            StoreErrorPolicy::Allow => true,
            StoreErrorPolicy::Deny => false,
        };
        Ok(vec![
            Verdict {
                admitted,
                remaining: 0,
                reset_after_us: 0,
                counted_when_vetoed: false,
            };
            checks
        ])
    }
}

#[tonic::async_trait]
impl<S: Store> RateLimitService for RateLimitEdge<S> {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let call = CallSpan::start(request.metadata());
        call.instrument(self.decide_traced(request.into_inner(), &call))
            .await
            .map(Response::new)
    }
}
