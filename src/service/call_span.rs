//! The spans of one `ShouldRateLimit` call, exported as OpenTelemetry when tracing is on (see
//! [`crate::otel`]):
//!
//! ```text
//! envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit   server span; parent: the caller's
//!   │  ratelimit.domain, ratelimit.descriptors, ratelimit.overall_code, rpc.grpc.status_code
//!   └─ ratelimit.decision       matching the descriptors, the store call, the outcome
//!        │  ratelimit.checks, ratelimit.overall_code
//!        └─ ratelimit.store     the store call
//!             ratelimit.store.checks, ratelimit.store.batch_requests / _checks (Redis: the
//!             script call that carried the request)
//! ```
//!
//! Only a call that tracing samples has spans (decided in [`CallSpan::start`], before any span is
//! built); for any other call every method here does nothing.
//!
//! Descriptor values are recorded (`ratelimit.descriptor_entries`) only with
//! `--tracing-descriptor-values`. A call answered with an error has `otel.status_code` ERROR and
//! the gRPC status. Built without the `otel` feature, every type here is empty and every method
//! does nothing.

use std::future::Future;

use tonic::metadata::MetadataMap;
use tonic::Status;

use crate::limiter::{Code, Request};
#[cfg(feature = "otel")]
use crate::proto::rls::rate_limit_response::Code as ProtoCode;
use crate::proto::rls::RateLimitResponse;

#[cfg(feature = "otel")]
use tracing::{field::Empty, instrument::Instrumented, Instrument, Span};

#[cfg(feature = "otel")]
use crate::otel::SPAN_TARGET;

/// The server span's name (the gRPC method's full name).
#[cfg(feature = "otel")]
const CALL_SPAN_NAME: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The server span of one call.
pub struct CallSpan {
    #[cfg(feature = "otel")]
    span: Span,
}

/// The decision's span, a child of the call's.
pub struct DecisionSpan {
    #[cfg(feature = "otel")]
    span: Span,
}

impl CallSpan {
    /// The span of a call with `metadata`, its parent the trace context the metadata carries
    /// (W3C `traceparent` or B3). No span at all when tracing is off or the call is not sampled
    /// (decided here, before any span is built: see [`crate::otel::sampling`]).
    #[inline]
    pub fn start(metadata: &MetadataMap) -> CallSpan {
        #[cfg(feature = "otel")]
        {
            if !crate::otel::is_exporting() {
                return CallSpan::none();
            }
            match crate::otel::sampling::sample(metadata, CALL_SPAN_NAME) {
                Some(sampled) => CallSpan::sampled(sampled),
                None => CallSpan::none(),
            }
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = metadata;
            CallSpan {}
        }
    }

    /// The span of a call the edge sampled.
    #[cfg(feature = "otel")]
    #[inline(never)]
    fn sampled(sampled: crate::otel::sampling::Sampled) -> CallSpan {
        let span = tracing::info_span!(
            target: SPAN_TARGET,
            "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
            otel.kind = "server",
            rpc.system = "grpc",
            rpc.service = "envoy.service.ratelimit.v3.RateLimitService",
            rpc.method = "ShouldRateLimit",
            ratelimit.domain = Empty,
            ratelimit.descriptors = Empty,
            ratelimit.descriptor_entries = Empty,
            ratelimit.overall_code = Empty,
            rpc.grpc.status_code = Empty,
            otel.status_code = Empty,
            otel.status_description = Empty,
        );
        sampled.start(&span);
        CallSpan { span }
    }

    /// No span: a decision asked for outside a gRPC call (the HTTP `/json` endpoint).
    #[inline]
    pub fn none() -> CallSpan {
        CallSpan {
            #[cfg(feature = "otel")]
            span: Span::none(),
        }
    }

    /// `future`, run inside the call's span.
    #[inline]
    pub fn instrument<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        #[cfg(feature = "otel")]
        return within(&self.span, future);
        #[cfg(not(feature = "otel"))]
        future
    }

    /// Records what the request asks: its domain and descriptor count (and, with
    /// `--tracing-descriptor-values`, every entry).
    #[inline]
    pub fn record_request(&self, request: &Request) {
        #[cfg(feature = "otel")]
        if !self.span.is_disabled() {
            self.span
                .record("ratelimit.domain", request.domain.as_str())
                .record("ratelimit.descriptors", request.descriptors.len() as u64);
            if crate::otel::records_descriptor_values() {
                self.span
                    .record("ratelimit.descriptor_entries", descriptor_entries(request));
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = request;
    }

    /// The span of the decision, a child of this one (none under no span).
    #[inline]
    pub fn decision(&self) -> DecisionSpan {
        DecisionSpan {
            #[cfg(feature = "otel")]
            span: if self.span.is_none() {
                Span::none()
            } else {
                tracing::info_span!(
                    target: SPAN_TARGET,
                    parent: &self.span,
                    "ratelimit.decision",
                    ratelimit.checks = Empty,
                    ratelimit.overall_code = Empty,
                )
            },
        }
    }

    /// Records how the call ended: the overall code, or the gRPC error.
    #[inline]
    pub fn record_result(&self, result: &Result<RateLimitResponse, Status>) {
        #[cfg(feature = "otel")]
        if !self.span.is_disabled() {
            match result {
                Ok(response) => {
                    let code = if response.overall_code == ProtoCode::OverLimit as i32 {
                        Code::OverLimit
                    } else {
                        Code::Ok
                    };
                    self.span
                        .record("ratelimit.overall_code", code_name(code))
                        .record("rpc.grpc.status_code", 0_i64);
                }
                Err(status) => {
                    self.span
                        .record("rpc.grpc.status_code", status.code() as i64)
                        .record("otel.status_code", "error")
                        .record("otel.status_description", status.message());
                }
            }
        }
        #[cfg(not(feature = "otel"))]
        let _ = result;
    }
}

impl DecisionSpan {
    /// `future`, run inside the decision's span.
    #[inline]
    pub fn instrument<F: Future>(&self, future: F) -> impl Future<Output = F::Output> {
        #[cfg(feature = "otel")]
        return within(&self.span, future);
        #[cfg(not(feature = "otel"))]
        future
    }

    /// Records how many checks (limits counted in the store) the descriptors matched.
    #[inline]
    pub fn record_checks(&self, checks: usize) {
        #[cfg(feature = "otel")]
        if !self.span.is_none() {
            self.span.record("ratelimit.checks", checks as u64);
        }
        #[cfg(not(feature = "otel"))]
        let _ = checks;
    }

    /// Records the decision's overall code.
    #[inline]
    pub fn record_overall(&self, code: Code) {
        #[cfg(feature = "otel")]
        if !self.span.is_none() {
            self.span.record("ratelimit.overall_code", code_name(code));
        }
        #[cfg(not(feature = "otel"))]
        let _ = code;
    }

    /// `call` (the store deciding `checks` checks), run inside a span of its own, a child of
    /// the decision's; a failed call sets the span's status to ERROR.
    #[inline]
    pub async fn store_call<T, E: std::fmt::Display>(
        &self,
        checks: usize,
        call: impl Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        #[cfg(feature = "otel")]
        {
            if self.span.is_none() {
                return call.await;
            }
            let span = tracing::info_span!(
                target: SPAN_TARGET,
                parent: &self.span,
                "ratelimit.store",
                ratelimit.store.checks = checks as u64,
                ratelimit.store.batch_requests = Empty,
                ratelimit.store.batch_checks = Empty,
                otel.status_code = Empty,
                otel.status_description = Empty,
            );
            let result = call.instrument(span.clone()).await;
            if let Err(error) = &result {
                span.record("otel.status_code", "error")
                    .record("otel.status_description", error.to_string());
            }
            result
        }
        #[cfg(not(feature = "otel"))]
        {
            let _ = checks;
            call.await
        }
    }
}

/// `future` inside `span`; as it is when there is no span (no wrapper entering nothing on every
/// poll).
#[cfg(feature = "otel")]
#[inline]
fn within<F: Future>(span: &Span, future: F) -> futures::future::Either<F, Instrumented<F>> {
    if span.is_none() {
        futures::future::Either::Left(future)
    } else {
        futures::future::Either::Right(future.instrument(span.clone()))
    }
}

#[cfg(feature = "otel")]
fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "OK",
        Code::OverLimit => "OVER_LIMIT",
    }
}

/// Every descriptor's entries, `key=value` joined by `,`, descriptors joined by `; `.
#[cfg(feature = "otel")]
fn descriptor_entries(request: &Request) -> String {
    let mut text = String::new();
    for (index, descriptor) in request.descriptors.iter().enumerate() {
        if index > 0 {
            text.push_str("; ");
        }
        for (position, entry) in descriptor.entries.iter().enumerate() {
            if position > 0 {
                text.push(',');
            }
            text.push_str(&entry.key);
            text.push('=');
            text.push_str(&entry.value);
        }
    }
    text
}
