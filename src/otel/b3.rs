//! Zipkin's B3 propagation, read only: the trace context Envoy's Zipkin tracer sends, as one
//! `b3` header (`{trace id}-{span id}[-{sampling state}[-{parent span id}]]`) or as several
//! (`x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, `x-b3-flags`, `x-b3-parentspanid`).
//!
//! Trace ids of 16 hex digits (64 bits) are widened to 128 bits with leading zeros. The sampling
//! state `1`, `true` or debug (`d`, `x-b3-flags: 1`) is sampled, `0` or `false` is not; a context
//! without one (the sender defers the decision) counts as sampled, so the trace is kept whole.
//! A malformed header carries no context.

use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;

const SINGLE: &str = "b3";
const TRACE_ID: &str = "x-b3-traceid";
const SPAN_ID: &str = "x-b3-spanid";
const SAMPLED: &str = "x-b3-sampled";
const FLAGS: &str = "x-b3-flags";

/// The headers read, for [`TextMapPropagator::fields`].
static FIELDS: std::sync::LazyLock<[String; 5]> =
    std::sync::LazyLock::new(|| [SINGLE, TRACE_ID, SPAN_ID, SAMPLED, FLAGS].map(str::to_owned));

/// Extracts B3 contexts, single header first, then multi; injects nothing (ratelimitd calls no
/// one on a request's behalf).
#[derive(Debug, Default)]
pub struct B3Extractor;

impl TextMapPropagator for B3Extractor {
    fn inject_context(&self, _context: &Context, _injector: &mut dyn Injector) {}

    fn extract_with_context(&self, context: &Context, extractor: &dyn Extractor) -> Context {
        match single(extractor).or_else(|| multi(extractor)) {
            Some(parent) => context.with_remote_span_context(parent),
            None => context.clone(),
        }
    }

    fn fields(&self) -> opentelemetry::propagation::text_map_propagator::FieldIter<'_> {
        opentelemetry::propagation::text_map_propagator::FieldIter::new(&*FIELDS)
    }
}

fn single(extractor: &dyn Extractor) -> Option<SpanContext> {
    let value = extractor.get(SINGLE)?.trim();
    let mut parts = value.split('-');
    let trace = trace_id(parts.next()?)?;
    let span = span_id(parts.next()?)?;
    let flags = match parts.next() {
        None => TraceFlags::SAMPLED,
        Some(state) => sampling_state(state)?,
    };
    if let Some(parent) = parts.next() {
        span_id(parent)?;
    }
    if parts.next().is_some() {
        return None;
    }
    context(trace, span, flags)
}

fn multi(extractor: &dyn Extractor) -> Option<SpanContext> {
    let trace = trace_id(extractor.get(TRACE_ID)?.trim())?;
    let span = span_id(extractor.get(SPAN_ID)?.trim())?;
    let flags = if extractor.get(FLAGS).map(str::trim) == Some("1") {
        TraceFlags::SAMPLED
    } else {
        match extractor.get(SAMPLED) {
            None => TraceFlags::SAMPLED,
            Some(state) => sampling_state(state.trim())?,
        }
    };
    context(trace, span, flags)
}

fn context(trace_id: TraceId, span_id: SpanId, flags: TraceFlags) -> Option<SpanContext> {
    let parent = SpanContext::new(trace_id, span_id, flags, true, TraceState::default());
    parent.is_valid().then_some(parent)
}

fn is_hex(text: &str) -> bool {
    text.bytes().all(|byte| byte.is_ascii_hexdigit())
}

fn trace_id(text: &str) -> Option<TraceId> {
    if !(text.len() == 16 || text.len() == 32) || !is_hex(text) {
        return None;
    }
    TraceId::from_hex(text).ok()
}

fn span_id(text: &str) -> Option<SpanId> {
    if text.len() != 16 || !is_hex(text) {
        return None;
    }
    SpanId::from_hex(text).ok()
}

fn sampling_state(text: &str) -> Option<TraceFlags> {
    match text {
        "1" | "true" | "d" => Some(TraceFlags::SAMPLED),
        "0" | "false" => Some(TraceFlags::default()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn extract(pairs: &[(&str, &str)]) -> Option<(String, String, bool)> {
        let carrier: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let context = B3Extractor.extract(&carrier);
        let span = context.span();
        let parent = span.span_context();
        parent.is_valid().then(|| {
            (
                parent.trace_id().to_string(),
                parent.span_id().to_string(),
                parent.is_sampled(),
            )
        })
    }

    #[test]
    fn single_header_with_and_without_sampling_state() {
        let full = extract(&[(
            "b3",
            "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-0-05e3ac9a4f6e3b90",
        )]);
        assert_eq!(
            full,
            Some((
                "80f198ee56343ba864fe8b2a57d3eff7".into(),
                "e457b5a2e4d86bd1".into(),
                false
            ))
        );
        let deferred = extract(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1")]);
        assert_eq!(deferred.map(|(_, _, sampled)| sampled), Some(true));
        let debug = extract(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-d")]);
        assert_eq!(debug.map(|(_, _, sampled)| sampled), Some(true));
    }

    #[test]
    fn multi_headers_with_a_64_bit_trace_id() {
        let parent = extract(&[
            ("x-b3-traceid", "a3ce929d0e0e4736"),
            ("x-b3-spanid", "00f067aa0ba902b7"),
            ("x-b3-sampled", "1"),
        ]);
        assert_eq!(
            parent,
            Some((
                "0000000000000000a3ce929d0e0e4736".into(),
                "00f067aa0ba902b7".into(),
                true
            ))
        );
        let flagged = extract(&[
            ("x-b3-traceid", "a3ce929d0e0e4736"),
            ("x-b3-spanid", "00f067aa0ba902b7"),
            ("x-b3-sampled", "0"),
            ("x-b3-flags", "1"),
        ]);
        assert_eq!(flagged.map(|(_, _, sampled)| sampled), Some(true));
    }

    #[test]
    fn malformed_headers_carry_no_context() {
        for pairs in [
            vec![("b3", "1")],
            vec![("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-2")],
            vec![(
                "b3",
                "80f198ee56343ba8-e457b5a2e4d86bd1-1-05e3ac9a4f6e3b90-x",
            )],
            vec![("b3", "zzf198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1")],
            vec![("x-b3-traceid", "a3ce929d0e0e4736")],
            vec![
                ("x-b3-traceid", "a3ce929d0e0e473"),
                ("x-b3-spanid", "00f067aa0ba902b7"),
            ],
            vec![
                ("x-b3-traceid", "00000000000000000000000000000000"),
                ("x-b3-spanid", "00f067aa0ba902b7"),
            ],
        ] {
            assert_eq!(extract(&pairs), None, "{pairs:?}");
        }
    }
}
