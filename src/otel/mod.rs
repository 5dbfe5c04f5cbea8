//! OpenTelemetry traces: one span per `ShouldRateLimit`, exported over OTLP.
//!
//! The service already logs through `tracing`; its request spans (target [`SPAN_TARGET`]) reach
//! an OpenTelemetry layer of the same subscriber when tracing is on, and nothing else: the log
//! output's filter leaves them out (see [`without_spans`]). A call gets spans only when tracing
//! is on and [`sampling`] samples it, which is decided before any span is built: with tracing
//! off a call costs one load of a flag, and an unsampled call the reading of its trace headers
//! and the sampler's decision.
//!
//! - [`TraceSettings`]: what the `--tracing*` flags (`cli`) and the standard `OTEL_*` variables
//!   ask for.
//! - [`Pipeline`]: the exporter (OTLP over gRPC or HTTP/protobuf), the batching tracer provider
//!   and the subscriber layer; flushed by [`Pipeline::shutdown`].
//! - [`propagation`]: the caller's trace context from W3C `traceparent` or B3 (single and multi)
//!   headers in the gRPC metadata.
//! - [`sampling`]: whether a call is sampled, decided at the edge by the configured sampler.
//! - [`StoreCallSpan`]: what the Redis store records on the span of the request it decides (the
//!   script call's batch).
//!
//! Built without the `otel` cargo feature, [`Pipeline::start`] refuses `--tracing` and the span
//! types are empty: the request path carries no span code at all.

mod failure_count;
pub mod settings;
mod span_target;
mod store_span;

#[cfg(feature = "otel")]
mod export_failures;

#[cfg(feature = "otel")]
mod b3;
#[cfg(feature = "otel")]
mod pipeline;
#[cfg(not(feature = "otel"))]
#[path = "pipeline_absent.rs"]
mod pipeline;
#[cfg(feature = "otel")]
pub mod propagation;
#[cfg(feature = "otel")]
pub mod sampling;

#[cfg(feature = "otel")]
pub(crate) use pipeline::records_descriptor_values;
pub use pipeline::Pipeline;

pub use failure_count::export_failures;
pub use settings::{Protocol, TraceSettings};
pub use span_target::SPAN_TARGET;
pub use store_span::StoreCallSpan;

/// Whether a [`Pipeline`] exports spans (never, in a build without the `otel` feature).
#[inline]
pub fn is_exporting() -> bool {
    #[cfg(feature = "otel")]
    return pipeline::is_running();
    #[cfg(not(feature = "otel"))]
    false
}

/// `filter` (the log output's) with the exported spans left out, so logs read the same whether
/// tracing is on or not and, with it off, no span is ever built.
pub fn without_spans(filter: tracing_subscriber::EnvFilter) -> tracing_subscriber::EnvFilter {
    match format!("{SPAN_TARGET}=off").parse() {
        Ok(directive) => filter.add_directive(directive),
        Err(_) => filter,
    }
}
