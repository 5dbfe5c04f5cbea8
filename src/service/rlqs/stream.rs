//! The gRPC method: one bidirectional stream per Envoy, its reports read on one task of the
//! RLQS runtime, its assignments sent as the registry queues them.

use std::pin::Pin;
use std::sync::Arc;

use futures::Stream;
use tokio::runtime::Handle;
use tonic::{Request, Response, Status, Streaming};

use super::connection::Connection;
use super::registry::QuotaRegistry;
use crate::proto::rlqs::rate_limit_quota_service_server::RateLimitQuotaService;
use crate::proto::rlqs::{RateLimitQuotaResponse, RateLimitQuotaUsageReports};
use crate::service::throttle::WarnThrottle;
use crate::store::QuotaDemands;

/// The RLQS service over a [`QuotaRegistry`].
pub struct RlqsService<D> {
    registry: Arc<QuotaRegistry<D>>,
    errors: Arc<StreamErrors>,
    /// Where each stream's reports are read and applied: off the thread that serves its
    /// connection, so that RLQS work never runs between that thread's RLS calls.
    work: Handle,
}

/// One throttle per kind of stream error, so a flood of one kind does not hide another.
#[derive(Debug, Default)]
struct StreamErrors {
    refused: WarnThrottle,
    read: WarnThrottle,
    ended: WarnThrottle,
}

impl<D: QuotaDemands> RlqsService<D> {
    /// The service over `registry`, its streams' reports applied on `work`'s runtime.
    pub fn new(registry: Arc<QuotaRegistry<D>>, work: Handle) -> RlqsService<D> {
        RlqsService {
            registry,
            errors: Arc::default(),
            work,
        }
    }
}

type Responses = Pin<Box<dyn Stream<Item = Result<RateLimitQuotaResponse, Status>> + Send>>;

#[tonic::async_trait]
impl<D: QuotaDemands> RateLimitQuotaService for RlqsService<D> {
    type StreamRateLimitQuotasStream = Responses;

    async fn stream_rate_limit_quotas(
        &self,
        request: Request<Streaming<RateLimitQuotaUsageReports>>,
    ) -> Result<Response<Responses>, Status> {
        let connection = request.extensions().get::<Connection>().copied();
        let (stream, outbox) = match self.registry.open(connection) {
            Ok(opened) => opened,
            Err(status) => {
                if let Some(suppressed) = self.errors.refused.admit() {
                    tracing::warn!(suppressed, "RLQS stream refused: {}", status.message());
                }
                return Err(status);
            }
        };
        let mut reports = request.into_inner();
        let registry = self.registry.clone();
        let errors = self.errors.clone();
        let reader_outbox = outbox.clone();
        self.work.spawn(async move {
            let idle = registry.silence_limit();
            let ended = loop {
                let Ok(next) = tokio::time::timeout(idle, reports.message()).await else {
                    let status = registry.idle_stream();
                    if let Some(suppressed) = errors.ended.admit() {
                        tracing::warn!(
                            stream,
                            suppressed,
                            "RLQS stream ended: {}",
                            status.message()
                        );
                    }
                    break Err(status);
                };
                match next {
                    Ok(Some(report)) => {
                        if let Err(status) = registry.report(stream, report).await {
                            if let Some(suppressed) = errors.ended.admit() {
                                tracing::warn!(
                                    stream,
                                    suppressed,
                                    "RLQS stream ended: {}",
                                    status.message()
                                );
                            }
                            break Err(status);
                        }
                    }
                    Ok(None) => break Ok(()),
                    Err(status) => {
                        if let Some(suppressed) = errors.read.admit() {
                            tracing::warn!(
                                stream,
                                suppressed,
                                code = ?status.code(),
                                "RLQS stream broke: {}",
                                status.message()
                            );
                        }
                        // A refused message (its size, the memory budget) is the call's status.
                        break Err(status);
                    }
                }
            };
            registry.leave(stream).await;
            reader_outbox.end(ended);
        });
        let responses = futures::stream::unfold(outbox, |outbox| async move {
            let next = outbox.next().await?;
            Some((next, outbox))
        });
        Ok(Response::new(Box::pin(responses)))
    }
}
