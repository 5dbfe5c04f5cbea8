//! One trace across Envoy and ratelimitd: a real Envoy 1.40 with its OpenTelemetry tracer on
//! (every request sampled) asks ratelimitd before forwarding; both export their spans to the same
//! test OTLP collector, and ratelimitd's call span is the child of Envoy's span for the call.
//!
//! Configuration: `tests/fixtures/envoy/tracing.yaml`; Envoy from `scripts/ensure-envoy.sh`.

use std::time::Duration;

use testkit::envoy::{try_get, Envoy, Upstream};
use testkit::otlp_collector::OtlpCollector;
use testkit::ratelimitd::{self as rld, Ratelimitd};

const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// Envoy exports in the background: how long its spans may take to arrive.
const EXPORT_WAIT: Duration = Duration::from_secs(30);

#[tokio::test]
async fn one_trace_id_across_envoy_and_ratelimitd() {
    let collector = OtlpCollector::grpc().await;
    let config = rld::fixture("tracing/tracing.yaml").display().to_string();
    let endpoint = collector.url();
    let mut server = Ratelimitd::start(&[
        "--config",
        &config,
        "--tracing",
        "--tracing-protocol",
        "grpc",
        "--tracing-endpoint",
        &endpoint,
    ]);
    let upstream = Upstream::start().await;
    let template = std::fs::read_to_string(rld::fixture("envoy/tracing.yaml"))
        .expect("read tests/fixtures/envoy/tracing.yaml");
    let envoy = Envoy::start(
        &template
            .replace("{{UPSTREAM_PORT}}", &upstream.addr.port().to_string())
            .replace(
                "{{RATELIMITD_PORT}}",
                &server.grpc_addr().port().to_string(),
            )
            .replace("{{COLLECTOR_PORT}}", &collector.addr().port().to_string()),
    )
    .await;

    let reply = try_get(envoy.addr(), "/hello", &[("x-user", "alice")])
        .await
        .expect("GET through Envoy");
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (200, "upstream ok\n"),
        "{}",
        envoy.log()
    );

    // ratelimitd exports what it holds on exit; Envoy's spans come when it flushes.
    server.terminate();
    assert!(server.exited(Duration::from_secs(15)).await.is_some());
    let spans = collector
        .wait_for(EXPORT_WAIT, |spans| {
            let Some(call) = spans.iter().find(|span| span.name == SERVER_SPAN) else {
                return false;
            };
            spans
                .iter()
                .any(|span| span.service == "envoy-edge" && span.span_id == call.parent_span_id)
        })
        .await;

    let call = spans
        .iter()
        .find(|span| span.name == SERVER_SPAN)
        .expect("ratelimitd's call span");
    assert_eq!(call.service, "ratelimitd");
    assert_eq!(call.attribute("ratelimit.domain"), Some("tracing"));
    assert_eq!(call.attribute("ratelimit.descriptors"), Some("2"));
    assert_eq!(call.attribute("ratelimit.overall_code"), Some("OK"));
    let parent = spans
        .iter()
        .find(|span| span.span_id == call.parent_span_id)
        .expect("the call's parent");
    assert_eq!(parent.service, "envoy-edge");
    assert_eq!(parent.trace_id, call.trace_id, "one trace: {spans:#?}");
    assert_eq!(
        parent.kind, 3,
        "Envoy's CLIENT span for the call: {parent:#?}"
    );
    let envoy_spans: Vec<_> = spans.iter().filter(|s| s.service == "envoy-edge").collect();
    assert!(
        envoy_spans
            .iter()
            .all(|span| span.trace_id == call.trace_id),
        "every Envoy span of the request is in the call's trace: {envoy_spans:#?}"
    );
    let ratelimitd_spans: Vec<_> = spans.iter().filter(|s| s.service == "ratelimitd").collect();
    assert_eq!(ratelimitd_spans.len(), 3, "{ratelimitd_spans:#?}");
    assert!(ratelimitd_spans
        .iter()
        .all(|span| span.trace_id == call.trace_id));
}
