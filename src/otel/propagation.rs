//! The caller's trace context, read from the gRPC metadata of a call.
//!
//! Envoy's tracers put it in the headers of the calls they make: the OpenTelemetry tracer as
//! W3C `traceparent` (and `tracestate`), the Zipkin tracer as B3, multi-header
//! (`x-b3-traceid`, `x-b3-spanid`, `x-b3-sampled`, ...) or single (`b3`). All three are read;
//! when a call carries both, `traceparent` wins.

use std::sync::LazyLock;

use opentelemetry::propagation::{Extractor, TextMapCompositePropagator, TextMapPropagator};
use opentelemetry::Context;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use tonic::metadata::{Ascii, KeyRef, MetadataKey, MetadataMap};

use super::b3::B3Extractor;

/// B3 first, W3C last: each propagator that finds its headers replaces the context before it.
static PROPAGATOR: LazyLock<TextMapCompositePropagator> = LazyLock::new(|| {
    TextMapCompositePropagator::new(vec![
        Box::new(B3Extractor),
        Box::new(TraceContextPropagator::new()),
    ])
});

/// The headers every context is read from (`traceparent`; B3 single; B3 multi's trace id): a call
/// without any of them has no parent, and the propagators are not run for it.
static CONTEXT_HEADERS: LazyLock<[MetadataKey<Ascii>; 3]> =
    LazyLock::new(|| ["traceparent", "b3", "x-b3-traceid"].map(MetadataKey::from_static));

/// The parent context `metadata` carries; an empty context (the call starts a trace) when it
/// carries none, or only headers that do not parse.
pub fn parent_context(metadata: &MetadataMap) -> Context {
    if !CONTEXT_HEADERS.iter().any(|key| metadata.contains_key(key)) {
        return Context::new();
    }
    PROPAGATOR.extract_with_context(&Context::new(), &Metadata(metadata))
}

/// gRPC metadata as a propagator carrier (ASCII values only; names are lower case on the wire).
struct Metadata<'a>(&'a MetadataMap);

impl Extractor for Metadata<'_> {
    fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(|value| value.to_str().ok())
    }

    fn keys(&self) -> Vec<&str> {
        self.0
            .keys()
            .filter_map(|key| match key {
                KeyRef::Ascii(key) => Some(key.as_str()),
                KeyRef::Binary(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use opentelemetry::trace::TraceContextExt;

    use super::*;

    fn metadata(pairs: &[(&'static str, &'static str)]) -> MetadataMap {
        let mut map = MetadataMap::new();
        for (key, value) in pairs {
            map.insert(*key, value.parse().expect("an ASCII value"));
        }
        map
    }

    fn trace_and_span(metadata: &MetadataMap) -> (String, String, bool) {
        let context = parent_context(metadata);
        let span = context.span();
        let parent = span.span_context();
        (
            parent.trace_id().to_string(),
            parent.span_id().to_string(),
            parent.is_sampled(),
        )
    }

    #[test]
    fn traceparent_gives_the_parent() {
        let carried = metadata(&[(
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        )]);
        assert_eq!(
            trace_and_span(&carried),
            (
                "4bf92f3577b34da6a3ce929d0e0e4736".into(),
                "00f067aa0ba902b7".into(),
                true
            )
        );
    }

    #[test]
    fn b3_multi_and_single_headers_give_the_parent() {
        let multi = metadata(&[
            ("x-b3-traceid", "80f198ee56343ba864fe8b2a57d3eff7"),
            ("x-b3-spanid", "e457b5a2e4d86bd1"),
            ("x-b3-sampled", "1"),
        ]);
        let single = metadata(&[("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1")]);
        let expected = (
            "80f198ee56343ba864fe8b2a57d3eff7".to_string(),
            "e457b5a2e4d86bd1".to_string(),
            true,
        );
        assert_eq!(trace_and_span(&multi), expected);
        assert_eq!(trace_and_span(&single), expected);
    }

    #[test]
    fn traceparent_wins_over_b3() {
        let both = metadata(&[
            ("b3", "80f198ee56343ba864fe8b2a57d3eff7-e457b5a2e4d86bd1-1"),
            (
                "traceparent",
                "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            ),
        ]);
        assert_eq!(trace_and_span(&both).0, "4bf92f3577b34da6a3ce929d0e0e4736");
    }

    #[test]
    fn no_or_broken_headers_start_a_trace() {
        for carried in [
            metadata(&[]),
            metadata(&[("traceparent", "00-not-a-trace-01")]),
            metadata(&[("x-b3-traceid", "zz")]),
        ] {
            let context = parent_context(&carried);
            assert!(!context.span().span_context().is_valid());
        }
    }
}
