//! OpenTelemetry tracing, end to end: the real binary exports the spans of known requests to a
//! test OTLP collector (testkit/src/otlp_collector.rs), over gRPC and over HTTP/protobuf.
//!
//! Every test stops ratelimitd with SIGTERM before it looks: shutdown exports every span still
//! queued, so what the collector holds then is all there will ever be (no waiting on the
//! exporter's batching delay, and "no span" is a fact, not a timeout).

use std::time::Duration;

use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::otlp_collector::{OtlpCollector, ReceivedSpan};
use testkit::ratelimitd::{self as rld, Ratelimitd};
use testkit::redis_server::RedisServer;
use tonic::metadata::MetadataValue;

const DOMAIN: &str = "tracing";
const SERVER_SPAN: &str = "envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// A descriptor value no span may carry unless asked to.
const SECRET_USER: &str = "user-7f3a9c";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT_SPAN_ID: &str = "00f067aa0ba902b7";
const B3_TRACE_ID: &str = "80f198ee56343ba864fe8b2a57d3eff7";

fn config() -> String {
    rld::fixture("tracing/tracing.yaml").display().to_string()
}

/// Two descriptors: the user (2 an hour) and the path.
fn known_request() -> RateLimitRequest {
    rld::request(
        DOMAIN,
        &[&[("user", SECRET_USER)], &[("path", "/login")]],
        0,
    )
}

/// `request` with gRPC metadata `headers`, as Envoy's tracers send them.
fn with_headers(
    request: RateLimitRequest,
    headers: &[(&'static str, &str)],
) -> tonic::Request<RateLimitRequest> {
    let mut request = tonic::Request::new(request);
    for (name, value) in headers {
        let value: MetadataValue<_> = value.parse().expect("an ASCII header value");
        request.metadata_mut().insert(*name, value);
    }
    request
}

/// Starts ratelimitd exporting to `collector` with `extra` flags.
fn start_traced(collector: &OtlpCollector, protocol: &str, extra: &[&str]) -> Ratelimitd {
    let endpoint = match protocol {
        "grpc" => collector.url(),
        _ => format!("{}/v1/traces", collector.url()),
    };
    let config = config();
    let mut args = vec![
        "--config",
        config.as_str(),
        "--tracing",
        "--tracing-protocol",
        protocol,
        "--tracing-endpoint",
        endpoint.as_str(),
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

/// SIGTERM, and wait for the exit (which exports what is queued).
async fn stop(mut server: Ratelimitd) {
    server.terminate();
    let status = server.exited(Duration::from_secs(15)).await;
    assert!(
        status.is_some_and(|status| status.success()),
        "ratelimitd did not exit cleanly on SIGTERM: {status:?}\n{}",
        server.output()
    );
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|span| span.name == name).collect()
}

fn only<'a>(spans: &'a [ReceivedSpan], name: &str) -> &'a ReceivedSpan {
    let found = named(spans, name);
    assert_eq!(found.len(), 1, "one {name} span expected: {spans:#?}");
    found[0]
}

/// The server span's family: its decision child and the store grandchild, all in its trace.
fn assert_family(spans: &[ReceivedSpan], server: &ReceivedSpan) {
    let decision = spans
        .iter()
        .find(|span| span.name == "ratelimit.decision" && span.parent_span_id == server.span_id)
        .unwrap_or_else(|| panic!("no decision span under {server:#?}: {spans:#?}"));
    let store = spans
        .iter()
        .find(|span| span.name == "ratelimit.store" && span.parent_span_id == decision.span_id)
        .unwrap_or_else(|| panic!("no store span under {decision:#?}: {spans:#?}"));
    for child in [decision, store] {
        assert_eq!(child.trace_id, server.trace_id, "{child:#?}");
    }
    assert_eq!(decision.attribute("ratelimit.checks"), Some("2"));
    assert_eq!(store.attribute("ratelimit.store.checks"), Some("2"));
}

fn assert_no_descriptor_values(spans: &[ReceivedSpan]) {
    for span in spans {
        for (key, value) in &span.attributes {
            assert!(
                !value.contains(SECRET_USER),
                "{key} of {} carries a descriptor value: {value}",
                span.name
            );
        }
    }
}

#[tokio::test]
async fn grpc_export_joins_the_trace_of_the_traceparent_sent() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &[]);
    let mut client = server.client().await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    let answer = client
        .should_rate_limit(with_headers(
            known_request(),
            &[("traceparent", traceparent.as_str())],
        ))
        .await
        .expect("ShouldRateLimit")
        .into_inner();
    assert_eq!(answer.overall_code, Code::Ok as i32);
    stop(server).await;

    let spans = collector.spans();
    let server_span = only(&spans, SERVER_SPAN);
    assert_eq!(server_span.trace_id, TRACE_ID);
    assert_eq!(server_span.parent_span_id, PARENT_SPAN_ID);
    assert_eq!(server_span.kind, 2, "a SERVER span");
    assert_eq!(server_span.service, "ratelimitd");
    assert_eq!(server_span.attribute("ratelimit.domain"), Some(DOMAIN));
    assert_eq!(server_span.attribute("ratelimit.descriptors"), Some("2"));
    assert_eq!(server_span.attribute("ratelimit.overall_code"), Some("OK"));
    assert_eq!(server_span.attribute("rpc.grpc.status_code"), Some("0"));
    assert_eq!(server_span.attribute("rpc.system"), Some("grpc"));
    assert_family(&spans, server_span);
    assert_no_descriptor_values(&spans);
}

#[tokio::test]
async fn b3_multi_and_single_headers_give_the_parent() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &[]);
    let mut client = server.client().await;
    let multi_trace = "80f198ee56343ba864fe8b2a57d3eff7";
    let single_trace = "463ac35c9f6413ad48485a3953bb6124";
    client
        .should_rate_limit(with_headers(
            known_request(),
            &[
                ("x-b3-traceid", multi_trace),
                ("x-b3-spanid", "e457b5a2e4d86bd1"),
                ("x-b3-parentspanid", "05e3ac9a4f6e3b90"),
                ("x-b3-sampled", "1"),
            ],
        ))
        .await
        .expect("ShouldRateLimit with B3 headers");
    let single = format!("{single_trace}-a2fb4a1d1a96d312-1");
    client
        .should_rate_limit(with_headers(known_request(), &[("b3", single.as_str())]))
        .await
        .expect("ShouldRateLimit with a b3 header");
    stop(server).await;

    let spans = collector.spans();
    let servers = named(&spans, SERVER_SPAN);
    assert_eq!(servers.len(), 2, "{spans:#?}");
    let parent_of = |trace: &str| {
        servers
            .iter()
            .find(|span| span.trace_id == trace)
            .map(|span| span.parent_span_id.clone())
    };
    assert_eq!(parent_of(multi_trace).as_deref(), Some("e457b5a2e4d86bd1"));
    assert_eq!(parent_of(single_trace).as_deref(), Some("a2fb4a1d1a96d312"));
}

#[tokio::test]
async fn http_protobuf_export_through_the_standard_variables() {
    let collector = OtlpCollector::http().await;
    let config = config();
    let base = collector.url();
    let server = Ratelimitd::start_with_env(
        &["--config", &config, "--tracing"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", base.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=edge"),
            ("OTEL_SERVICE_NAME", "edge-ratelimit"),
            ("OTEL_RESOURCE_ATTRIBUTES", "deployment.environment=test"),
        ],
    );
    let mut client = server.client().await;
    // Three times the same user: the third is over its limit of two.
    let mut codes = Vec::new();
    for _ in 0..3 {
        codes.push(rld::should(&mut client, known_request()).await.overall_code);
    }
    assert_eq!(codes.last(), Some(&(Code::OverLimit as i32)));
    stop(server).await;

    let spans = collector.spans();
    let servers = named(&spans, SERVER_SPAN);
    assert_eq!(servers.len(), 3, "{spans:#?}");
    for span in &servers {
        assert_eq!(span.service, "edge-ratelimit");
        assert!(span.parent_span_id.is_empty(), "a root span: {span:#?}");
        assert_family(&spans, span);
    }
    let over: Vec<_> = servers
        .iter()
        .filter(|span| span.attribute("ratelimit.overall_code") == Some("OVER_LIMIT"))
        .collect();
    assert_eq!(over.len(), 1, "{servers:#?}");
    assert!(
        collector
            .export_headers()
            .iter()
            .all(|headers| headers.get("x-tenant").map(String::as_str) == Some("edge")),
        "OTEL_EXPORTER_OTLP_HEADERS on every export: {:?}",
        collector.export_headers()
    );
    assert_no_descriptor_values(&spans);
}

#[tokio::test]
async fn no_span_leaves_when_tracing_is_off() {
    let collector = OtlpCollector::grpc().await;
    let config = config();
    let endpoint = collector.url();
    // Everything but --tracing points at the collector.
    let server = Ratelimitd::start_with_env(
        &["--config", &config, "--tracing-endpoint", &endpoint],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ],
    );
    let mut client = server.client().await;
    let traceparent = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    for _ in 0..3 {
        client
            .should_rate_limit(with_headers(
                known_request(),
                &[("traceparent", traceparent.as_str())],
            ))
            .await
            .expect("ShouldRateLimit");
    }
    stop(server).await;
    assert!(collector.spans().is_empty(), "{:#?}", collector.spans());
    assert!(collector.export_headers().is_empty(), "no export at all");
}

#[tokio::test]
async fn the_sampling_ratio_follows_the_parent_and_samples_roots() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &["--tracing-sampling-ratio", "0"]);
    let mut client = server.client().await;
    let sampled = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-01");
    let unsampled = format!("00-{}-{PARENT_SPAN_ID}-00", "5".repeat(32));
    let b3_sampled = format!("{B3_TRACE_ID}-e457b5a2e4d86bd1-1");
    for headers in [
        vec![("traceparent", sampled.as_str())],
        vec![("traceparent", unsampled.as_str())],
        vec![("b3", b3_sampled.as_str())],
        vec![],
    ] {
        client
            .should_rate_limit(with_headers(known_request(), &headers))
            .await
            .expect("ShouldRateLimit");
    }
    stop(server).await;

    let spans = collector.spans();
    let servers = named(&spans, SERVER_SPAN);
    assert_eq!(
        sorted_trace_ids(&servers),
        sorted(vec![TRACE_ID, B3_TRACE_ID]),
        "ratio 0: only the calls whose parent was sampled: {spans:#?}"
    );
    for server in &servers {
        assert_family(&spans, server);
    }
    assert_eq!(spans.len(), 3 * servers.len(), "{spans:#?}");
}

#[tokio::test]
async fn an_unsampled_parent_is_not_traced_even_at_ratio_1() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &["--tracing-sampling-ratio", "1"]);
    let mut client = server.client().await;
    let unsampled = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-00");
    let b3_unsampled = format!("{B3_TRACE_ID}-e457b5a2e4d86bd1-0");
    let sampled_trace = "463ac35c9f6413ad48485a3953bb6124";
    let sampled = format!("00-{sampled_trace}-{PARENT_SPAN_ID}-01");
    for headers in [
        vec![("traceparent", unsampled.as_str())],
        vec![("b3", b3_unsampled.as_str())],
        vec![
            ("x-b3-traceid", "0af7651916cd43dd8448eb211c80319c"),
            ("x-b3-spanid", "b7ad6b7169203331"),
            ("x-b3-sampled", "0"),
        ],
        vec![("traceparent", sampled.as_str())],
    ] {
        client
            .should_rate_limit(with_headers(known_request(), &headers))
            .await
            .expect("ShouldRateLimit");
    }
    stop(server).await;

    let spans = collector.spans();
    let servers = named(&spans, SERVER_SPAN);
    assert_eq!(
        sorted_trace_ids(&servers),
        vec![sampled_trace],
        "ratio 1: every call but those whose parent was not sampled: {spans:#?}"
    );
    assert_eq!(spans.len(), 3, "no span of an unsampled call: {spans:#?}");
}

#[tokio::test]
async fn a_low_ratio_traces_few_root_calls_chosen_by_their_trace_id() {
    const CALLS: usize = 200;
    const RATIO: f64 = 0.01;
    let collector = OtlpCollector::grpc().await;
    let ratio = RATIO.to_string();
    let server = start_traced(&collector, "grpc", &["--tracing-sampling-ratio", &ratio]);
    let mut client = server.client().await;
    for _ in 0..CALLS {
        rld::should(&mut client, known_request()).await;
    }
    stop(server).await;

    let spans = collector.spans();
    let servers = named(&spans, SERVER_SPAN);
    // 2 expected; more than 20 of 200 at 1 % has a probability below 1e-12.
    assert!(
        servers.len() <= 20,
        "{} of {CALLS} calls traced at ratio {RATIO}",
        servers.len()
    );
    let bound = (RATIO * (1u64 << 63) as f64) as u64;
    for server in &servers {
        assert!(server.parent_span_id.is_empty(), "a root span: {server:#?}");
        let low = u64::from_str_radix(&server.trace_id[16..], 16).expect("a hex trace id");
        assert!(
            low >> 1 < bound,
            "trace id {} is one the SDK's ratio sampler would drop",
            server.trace_id
        );
        assert_family(&spans, server);
    }
    assert_eq!(spans.len(), 3 * servers.len(), "{spans:#?}");
}

#[tokio::test]
async fn the_standard_sampler_variable_decides_without_the_flag() {
    let collector = OtlpCollector::grpc().await;
    let config = config();
    let endpoint = collector.url();
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            &config,
            "--tracing",
            "--tracing-protocol",
            "grpc",
            "--tracing-endpoint",
            &endpoint,
        ],
        &[("OTEL_TRACES_SAMPLER", "always_on")],
    );
    let mut client = server.client().await;
    let unsampled = format!("00-{TRACE_ID}-{PARENT_SPAN_ID}-00");
    client
        .should_rate_limit(with_headers(
            known_request(),
            &[("traceparent", unsampled.as_str())],
        ))
        .await
        .expect("ShouldRateLimit");
    stop(server).await;

    let spans = collector.spans();
    let server_span = only(&spans, SERVER_SPAN);
    assert_eq!(
        (
            server_span.trace_id.as_str(),
            server_span.parent_span_id.as_str()
        ),
        (TRACE_ID, PARENT_SPAN_ID),
        "always_on traces a call whose parent was not sampled"
    );
}

fn sorted(mut ids: Vec<&str>) -> Vec<&str> {
    ids.sort_unstable();
    ids
}

fn sorted_trace_ids<'a>(spans: &[&'a ReceivedSpan]) -> Vec<&'a str> {
    sorted(spans.iter().map(|span| span.trace_id.as_str()).collect())
}

#[tokio::test]
async fn descriptor_values_only_when_asked() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &["--tracing-descriptor-values"]);
    let mut client = server.client().await;
    rld::should(&mut client, known_request()).await;
    stop(server).await;

    let spans = collector.spans();
    let server_span = only(&spans, SERVER_SPAN);
    assert_eq!(
        server_span.attribute("ratelimit.descriptor_entries"),
        Some(format!("user={SECRET_USER}; path=/login").as_str())
    );
}

#[tokio::test]
async fn an_error_answer_marks_the_span() {
    let collector = OtlpCollector::grpc().await;
    let server = start_traced(&collector, "grpc", &[]);
    let mut client = server.client().await;
    let status = client
        .should_rate_limit(rld::request("", &[&[("user", "x")]], 0))
        .await
        .expect_err("an empty domain is refused");
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    stop(server).await;

    let spans = collector.spans();
    let server_span = only(&spans, SERVER_SPAN);
    assert_eq!(server_span.status_code, 2, "ERROR: {server_span:#?}");
    assert_eq!(
        server_span.attribute("rpc.grpc.status_code"),
        Some((tonic::Code::InvalidArgument as i32).to_string().as_str())
    );
}

#[tokio::test]
async fn the_redis_store_span_carries_the_script_call_batch() {
    let redis = RedisServer::start();
    let collector = OtlpCollector::grpc().await;
    let url = redis.url();
    let server = start_traced(&collector, "grpc", &["--redis-url", &url]);
    let mut client = server.client().await;
    rld::should(&mut client, known_request()).await;
    stop(server).await;

    let spans = collector.spans();
    let store = only(&spans, "ratelimit.store");
    assert_eq!(store.attribute("ratelimit.store.batch_requests"), Some("1"));
    assert_eq!(store.attribute("ratelimit.store.batch_checks"), Some("2"));
}

#[tokio::test]
async fn a_collector_that_is_down_is_logged_once_a_minute_and_counted() {
    let down = format!("http://127.0.0.1:{}", testkit::redis_server::free_port());
    let config = config();
    for protocol in ["grpc", "http/protobuf"] {
        let server = Ratelimitd::start_with_env(
            &[
                "--config",
                &config,
                "--tracing",
                "--tracing-protocol",
                protocol,
                "--tracing-endpoint",
                &down,
                "--tracing-timeout",
                "500ms",
            ],
            &[("OTEL_BSP_SCHEDULE_DELAY", "100")],
        );
        let mut client = server.client().await;
        let mut failures = 0.0;
        for _ in 0..100 {
            rld::should(&mut client, known_request()).await;
            tokio::time::sleep(Duration::from_millis(100)).await;
            let (_, metrics) = rld::http_get(server.http_addr(), "/metrics").await;
            failures = metrics
                .lines()
                .find_map(|line| line.strip_prefix("ratelimitd_tracing_export_failures_total "))
                .and_then(|value| value.parse::<f64>().ok())
                .unwrap_or(0.0);
            if failures >= 3.0 {
                break;
            }
        }
        assert!(
            failures >= 3.0,
            "{protocol}: {failures} failed exports counted"
        );
        let output = server.output();
        let warnings = output
            .lines()
            .filter(|line| line.contains("WARN") && line.contains("spans could not be exported"))
            .count();
        assert_eq!(warnings, 1, "{protocol}: once a minute:\n{output}");
        stop(server).await;
    }
}
