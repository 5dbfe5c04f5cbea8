//! The sampling decision, taken at the edge before a call's spans are built.
//!
//! The SDK's sampler runs when a span starts, after the `tracing` span, its fields and its
//! OpenTelemetry builder exist; an unsampled call would still pay for all of them. So the
//! configured sampler (`--tracing-sampling-ratio`, else `OTEL_TRACES_SAMPLER`) is asked here,
//! with the parent context the call's metadata carries, and only a sampled call gets spans; the
//! provider itself then samples everything it is given. ratelimitd propagates no context
//! downstream, so a call without spans loses nothing.
//!
//! A root call (no parent) is decided on a trace id drawn here, and that trace id is the one its
//! span gets (through [`EdgeIdGenerator`]): a ratio sampler keeps exactly the trace ids it
//! would keep if the SDK had drawn them.

use std::cell::Cell;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use opentelemetry::trace::{SpanKind, TraceContextExt, TraceId};
use opentelemetry::Context;
use opentelemetry_sdk::trace::{IdGenerator, RandomIdGenerator, SamplingDecision, ShouldSample};
use tonic::metadata::MetadataMap;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use super::propagation::parent_context;

/// The running pipeline's sampler; `None` while no pipeline runs.
static SAMPLER: ArcSwapOption<Box<dyn ShouldSample>> = ArcSwapOption::const_empty();

thread_local! {
    /// The trace id a root call was sampled on, until its span starts on this thread.
    static ROOT_TRACE_ID: Cell<Option<TraceId>> = const { Cell::new(None) };
}

/// Installs `sampler` as the edge's (`None`: the pipeline stopped).
pub(super) fn install(sampler: Option<Box<dyn ShouldSample>>) {
    SAMPLER.store(sampler.map(Arc::new));
}

/// A call that was sampled: the parent its span joins, and for a root call the trace id the
/// decision was taken on.
#[derive(Debug)]
pub struct Sampled {
    parent: Context,
    root_trace_id: Option<TraceId>,
}

/// Whether the call with `metadata`, a span named `name`, is sampled; `None` also when no
/// pipeline runs.
pub fn sample(metadata: &MetadataMap, name: &str) -> Option<Sampled> {
    let sampler = SAMPLER.load();
    let sampler = sampler.as_deref()?;
    decide(&**sampler, parent_context(metadata), name, || {
        RandomIdGenerator::default().new_trace_id()
    })
}

/// `sampler`'s decision for a server span `name` under `parent`, a root call's trace id drawn by
/// `draw`.
fn decide(
    sampler: &dyn ShouldSample,
    parent: Context,
    name: &str,
    draw: impl FnOnce() -> TraceId,
) -> Option<Sampled> {
    let parent_span = parent.span().span_context().clone();
    let (trace_id, root_trace_id) = if parent_span.is_valid() {
        (parent_span.trace_id(), None)
    } else {
        let drawn = draw();
        (drawn, Some(drawn))
    };
    let result = sampler.should_sample(Some(&parent), trace_id, name, &SpanKind::Server, &[], &[]);
    (result.decision == SamplingDecision::RecordAndSample).then_some(Sampled {
        parent,
        root_trace_id,
    })
}

impl Sampled {
    /// Starts `span`'s OpenTelemetry span at once, as the sampled call's: under the parent, or
    /// for a root call with the trace id it was sampled on.
    pub fn start(self, span: &tracing::Span) {
        if span.is_disabled() {
            return;
        }
        let _ = span.set_parent(self.parent);
        ROOT_TRACE_ID.set(self.root_trace_id);
        // Reading the context builds the SDK span now, on this thread, from the id just set.
        drop(span.context());
        ROOT_TRACE_ID.set(None);
    }
}

/// The provider's id generator: a root span takes the trace id its call was sampled on (see
/// [`Sampled::start`]); every other id is random, as the SDK's own generator draws them.
#[derive(Debug, Default)]
pub(super) struct EdgeIdGenerator {
    random: RandomIdGenerator,
}

impl IdGenerator for EdgeIdGenerator {
    fn new_trace_id(&self) -> TraceId {
        ROOT_TRACE_ID
            .take()
            .unwrap_or_else(|| self.random.new_trace_id())
    }

    fn new_span_id(&self) -> opentelemetry::trace::SpanId {
        self.random.new_span_id()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceState};
    use opentelemetry_sdk::trace::Sampler;

    use super::*;

    const NAME: &str = "call";

    fn parent_based(ratio: f64) -> Sampler {
        Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(ratio)))
    }

    fn remote_parent(sampled: bool) -> Context {
        let flags = if sampled {
            TraceFlags::SAMPLED
        } else {
            TraceFlags::default()
        };
        Context::new().with_remote_span_context(SpanContext::new(
            TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736),
            SpanId::from(0x00f0_67aa_0ba9_02b7),
            flags,
            true,
            TraceState::default(),
        ))
    }

    fn never_drawn() -> TraceId {
        panic!("a call with a parent draws no trace id")
    }

    #[test]
    fn a_sampled_parent_is_sampled_at_ratio_0() {
        let sampled = decide(&parent_based(0.0), remote_parent(true), NAME, never_drawn)
            .expect("sampled, as its parent");
        assert_eq!(sampled.root_trace_id, None);
        assert!(sampled.parent.span().span_context().is_sampled());
    }

    #[test]
    fn an_unsampled_parent_is_not_sampled_at_ratio_1() {
        assert!(decide(&parent_based(1.0), remote_parent(false), NAME, never_drawn).is_none());
    }

    #[test]
    fn a_root_call_is_decided_on_its_drawn_trace_id() {
        let ratio = 0.25;
        let sampler = parent_based(ratio);
        let below = TraceId::from(u128::from((0.2 * (1u64 << 63) as f64) as u64) << 1);
        let above = TraceId::from(u128::from((0.3 * (1u64 << 63) as f64) as u64) << 1);
        let sampled = decide(&sampler, Context::new(), NAME, || below).expect("below the ratio");
        assert_eq!(sampled.root_trace_id, Some(below));
        assert!(decide(&sampler, Context::new(), NAME, || above).is_none());
        // The same trace ids, decided by the SDK's ratio sampler itself.
        let sdk = |trace_id| {
            Sampler::TraceIdRatioBased(ratio)
                .should_sample(None, trace_id, NAME, &SpanKind::Server, &[], &[])
                .decision
        };
        assert_eq!(sdk(below), SamplingDecision::RecordAndSample);
        assert_eq!(sdk(above), SamplingDecision::Drop);
    }

    #[test]
    fn a_root_call_follows_a_non_parent_based_sampler_too() {
        assert!(decide(&Sampler::AlwaysOff, remote_parent(true), NAME, never_drawn).is_none());
        let drawn = TraceId::from(7);
        let sampled = decide(&Sampler::AlwaysOn, Context::new(), NAME, || drawn).expect("on");
        assert_eq!(sampled.root_trace_id, Some(drawn));
    }

    #[test]
    fn the_id_generator_hands_the_sampled_trace_id_over_once() {
        let ids = EdgeIdGenerator::default();
        let drawn = TraceId::from(42);
        ROOT_TRACE_ID.set(Some(drawn));
        assert_eq!(ids.new_trace_id(), drawn);
        assert_ne!(ids.new_trace_id(), drawn);
    }
}
