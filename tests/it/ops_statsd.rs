//! The statsd sink (`--statsd-addr`): a UDP socket of the test is the statsd server, and what it
//! receives must be envoyproxy/ratelimit's stats, names and counts, as its gostats sink sends
//! them. The expected names come from envoyproxy/ratelimit's own source and tests, cited where
//! they are used.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use ratelimitd::proto::common::rate_limit_descriptor::RateLimitOverride;
use ratelimitd::proto::envoy::r#type::v3::RateLimitUnit;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;

/// gostats' UDP buffer size, the most one datagram may carry.
const MAX_DATAGRAM: usize = 1432;
const FLUSH: &str = "100ms";
const PREFIX: &str = "ratelimit.service.rate_limit.";
const TOTAL_REQUESTS: &str = "ratelimit_server.ShouldRateLimit.total_requests";
const RESPONSE_TIME: &str = "ratelimit_server.ShouldRateLimit.response_time";
const LOAD_SUCCESS: &str = "ratelimit.service.config_load_success";
const LOAD_ERROR: &str = "ratelimit.service.config_load_error";
const REDIS_ERROR: &str = "ratelimit.service.call.should_rate_limit.redis_error";
const SERVICE_ERROR: &str = "ratelimit.service.call.should_rate_limit.service_error";

/// The test's statsd server: every datagram received on a loopback UDP port.
struct StatsdServer {
    addr: SocketAddr,
    datagrams: Arc<Mutex<Vec<Vec<u8>>>>,
    stop: Arc<AtomicBool>,
}

/// What the statsd server received, line by line.
#[derive(Debug, Default)]
struct Received {
    /// Counter name -> sum of its deltas.
    counters: BTreeMap<String, u64>,
    /// Timer lines: (name, milliseconds).
    timers: Vec<(String, u64)>,
}

impl StatsdServer {
    fn start() -> StatsdServer {
        let socket = UdpSocket::bind("127.0.0.1:0").expect("bind the statsd socket");
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let datagrams = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (into, stopped) = (datagrams.clone(), stop.clone());
        thread::spawn(move || {
            let mut buffer = vec![0u8; 65_536];
            while !stopped.load(Ordering::Relaxed) {
                if let Ok(n) = socket.recv(&mut buffer) {
                    into.lock().unwrap().push(buffer[..n].to_vec());
                }
            }
        });
        StatsdServer {
            addr,
            datagrams,
            stop,
        }
    }

    fn addr(&self) -> String {
        self.addr.to_string()
    }

    /// Parses every datagram so far; each must be at most 1432 bytes of whole `name:value|type`
    /// lines, each ended by `\n`.
    fn received(&self) -> Received {
        let mut received = Received::default();
        for datagram in self.datagrams.lock().unwrap().iter() {
            assert!(datagram.len() <= MAX_DATAGRAM, "{} bytes", datagram.len());
            let text = std::str::from_utf8(datagram).expect("UTF-8");
            assert!(
                text.ends_with('\n'),
                "a datagram ends its last line: {text:?}"
            );
            for line in text.lines() {
                let (name, rest) = line.rsplit_once(':').unwrap_or_else(|| panic!("{line:?}"));
                let (value, kind) = rest.split_once('|').unwrap_or_else(|| panic!("{line:?}"));
                let value: u64 = value.parse().unwrap_or_else(|_| panic!("{line:?}"));
                match kind {
                    "c" => {
                        assert!(value > 0, "gostats sends no zero counter: {line:?}");
                        *received.counters.entry(name.to_string()).or_default() += value;
                    }
                    "ms" => received.timers.push((name.to_string(), value)),
                    other => panic!("unexpected type {other:?} in {line:?}"),
                }
            }
        }
        received
    }

    /// Waits until the counters received are exactly `expected`, then a few more flushes to
    /// see that nothing more arrives.
    async fn expect_counters(&self, expected: &BTreeMap<String, u64>) -> Received {
        let what = format!("statsd counters {expected:#?}");
        eventually(Duration::from_secs(10), &what, || async {
            (self.received().counters == *expected).then_some(())
        })
        .await;
        tokio::time::sleep(Duration::from_millis(400)).await;
        let received = self.received();
        assert_eq!(received.counters, *expected, "after more flushes");
        received
    }

    /// Waits until the counter `name` has summed to `value`.
    async fn expect_counter(&self, name: &str, value: u64) {
        let what = format!("{name} = {value}");
        eventually(Duration::from_secs(10), &what, || async {
            (self.received().counters.get(name) == Some(&value)).then_some(())
        })
        .await;
    }
}

impl Drop for StatsdServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn serve(statsd: &StatsdServer, config: &str, extra: &[&str]) -> Ratelimitd {
    let addr = statsd.addr();
    let mut args = vec![
        "--config",
        config,
        "--statsd-addr",
        &addr,
        "--statsd-flush-interval",
        FLUSH,
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

fn fixture_path() -> String {
    ops_fixture("statsd.yaml").to_str().unwrap().to_string()
}

async fn expect(c: &mut Client, req: RateLimitRequest, code: Code) {
    let resp = should(c, req.clone()).await;
    assert_eq!(overall(&resp), code, "{req:?} -> {resp:?}");
}

fn in_domain(entries: &[&[(&str, &str)]]) -> RateLimitRequest {
    request("test-domain", entries, 0)
}

/// A request whose one descriptor carries a limit override of 1 per hour.
fn overridden(entries: &[(&str, &str)]) -> RateLimitRequest {
    let mut d = descriptor(entries);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: 1,
        unit: RateLimitUnit::Hour as i32,
        unit_multiplier: None,
    });
    RateLimitRequest {
        domain: "test-domain".into(),
        descriptors: vec![d],
        hits_addend: 0,
    }
}

/// The five per-rule counters of `key`, leaving out those at zero (gostats sends none).
fn rule(expected: &mut BTreeMap<String, u64>, key: &str, counts: [u64; 5]) {
    let stats = [
        "total_hits",
        "within_limit",
        "near_limit",
        "over_limit",
        "shadow_mode",
    ];
    for (stat, count) in stats.iter().zip(counts) {
        if count > 0 {
            expected.insert(format!("{PREFIX}{key}.{stat}"), count);
        }
    }
}

#[tokio::test]
async fn a_known_sequence_gives_upstreams_names_and_counts() {
    wait_for_window_room(3600, 30);
    let statsd = StatsdServer::start();
    let server = serve(&statsd, &fixture_path(), &[]);
    let mut c = server.client().await;
    let mut requests = 0;

    // Nested, key only at the 2nd level (3 per hour): 3 admitted, the 3rd near the limit
    // (above floor(3 x 0.8) = 2), 2 over.
    for i in 0..5 {
        let code = if i < 3 { Code::Ok } else { Code::OverLimit };
        expect(
            &mut c,
            in_domain(&[&[("key1", "value1"), ("subkey1", "something")]]),
            code,
        )
        .await;
        requests += 1;
    }
    // Nested, key and value at the 2nd level.
    expect(
        &mut c,
        in_domain(&[&[("key1", "value1"), ("subkey1", "subvalue1")]]),
        Code::Ok,
    )
    .await;
    // Key only at the top level.
    expect(&mut c, in_domain(&[&[("key2", "something")]]), Code::Ok).await;
    // Unlimited: envoyproxy/ratelimit counts nothing for it.
    for _ in 0..2 {
        expect(&mut c, in_domain(&[&[("key6", "foo")]]), Code::Ok).await;
    }
    // detailed_metric: one stat per descriptor value, `:` and `|` sanitized, an empty value
    // written `key7_`.
    for value in [
        "unspecified_value",
        "unspecified_value",
        "another_value",
        "a:b|c",
        "",
    ] {
        expect(&mut c, in_domain(&[&[("key7", value)]]), Code::Ok).await;
    }
    // Shadow mode (1 per hour): the 2nd would be denied: OK, counted over and shadow_mode.
    for _ in 0..2 {
        expect(&mut c, in_domain(&[&[("shadow", "x")]]), Code::Ok).await;
    }
    // A wildcard rule: its stat is named after the configured pattern, not the value.
    expect(
        &mut c,
        in_domain(&[&[("user_agent", "curl/8.1")]]),
        Code::Ok,
    )
    .await;
    // detailed_metric with an IPv4 value: its dots become `_`.
    expect(
        &mut c,
        in_domain(&[&[("remote_address", "10.0.0.1")]]),
        Code::Ok,
    )
    .await;
    // Overrides are named after the request's values, matched or not.
    expect(
        &mut c,
        overridden(&[("key1", "value1"), ("subkey1", "other")]),
        Code::Ok,
    )
    .await;
    expect(
        &mut c,
        overridden(&[("key1", "value1"), ("subkey1", "other")]),
        Code::OverLimit,
    )
    .await;
    expect(&mut c, overridden(&[("nomatch", "1")]), Code::Ok).await;
    requests += 1 + 1 + 2 + 5 + 2 + 1 + 1 + 3;
    // An unknown domain, two descriptors: counted per descriptor.
    expect(
        &mut c,
        request("nope", &[&[("key2", "a")], &[("key2", "b")]], 0),
        Code::Ok,
    )
    .await;
    // An empty domain: INVALID_ARGUMENT, a service error.
    let invalid = c
        .should_rate_limit(request("", &[&[("key2", "a")]], 0))
        .await
        .expect_err("empty domain");
    assert_eq!(invalid.code(), tonic::Code::InvalidArgument);
    requests += 2;

    let mut expected = BTreeMap::new();
    //                                                           total within near over shadow
    // envoyproxy/ratelimit test/config/config_test.go, TestBasicConfig:
    // "test-domain.key1_value1.subkey1.total_hits" and so on.
    rule(
        &mut expected,
        "test-domain.key1_value1.subkey1",
        [5, 3, 1, 2, 0],
    );
    // TestBasicConfig: "test-domain.key1_value1.subkey1_subvalue1.total_hits".
    rule(
        &mut expected,
        "test-domain.key1_value1.subkey1_subvalue1",
        [1, 1, 0, 0, 0],
    );
    // TestBasicConfig: "test-domain.key2.total_hits".
    rule(&mut expected, "test-domain.key2", [1, 1, 0, 0, 0]);
    // TestBasicConfig: "test-domain.key7_unspecified_value.total_hits" and
    // "test-domain.key7_another_value.total_hits" (detailed_metric: true).
    rule(
        &mut expected,
        "test-domain.key7_unspecified_value",
        [2, 2, 0, 0, 0],
    );
    rule(
        &mut expected,
        "test-domain.key7_another_value",
        [1, 1, 0, 0, 0],
    );
    // src/utils/utilities.go SanitizeStatName: `:` and `|` become `_`.
    rule(&mut expected, "test-domain.key7_a_b_c", [1, 1, 0, 0, 0]);
    // src/config/config_impl.go GetLimit: a detailed key is `key + "_" + value` per entry.
    rule(&mut expected, "test-domain.key7_", [1, 1, 0, 0, 0]);
    rule(&mut expected, "test-domain.shadow", [2, 1, 1, 1, 1]);
    // The rule's own key (config_impl.go loadDescriptors: `key_value`, the value as configured).
    rule(
        &mut expected,
        "test-domain.user_agent_curl*",
        [1, 1, 0, 0, 0],
    );
    // src/utils/utilities_test.go TestSanitizeStatName:
    // "domain.remote_address_172.18.0.1" -> "domain.remote_address_172_18_0_1".
    rule(
        &mut expected,
        "test-domain.remote_address_10_0_0_1",
        [1, 1, 0, 0, 0],
    );
    // TestConfigLimitOverride: "test-domain.key1_value1.subkey1_something.total_hits".
    rule(
        &mut expected,
        "test-domain.key1_value1.subkey1_other",
        [2, 1, 1, 1, 0],
    );
    rule(&mut expected, "test-domain.nomatch_1", [1, 1, 1, 0, 0]);
    // src/stats/manager_impl.go NewDomainStats: `<domain>.domain_not_found`.
    expected.insert(format!("{PREFIX}nope.domain_not_found"), 2);
    // manager_impl.go NewShouldRateLimitStats / NewServiceStats, runner.go's
    // "ratelimit_server" scope (src/metrics/metrics.go: `<method>.total_requests`).
    expected.insert(SERVICE_ERROR.into(), 1);
    expected.insert(LOAD_SUCCESS.into(), 1);
    expected.insert(TOTAL_REQUESTS.into(), requests);

    let received = statsd.expect_counters(&expected).await;
    // One timer line per request, in whole milliseconds (metrics.go: `<method>.response_time`).
    assert_eq!(
        received.timers.len() as u64,
        requests,
        "{:?}",
        received.timers
    );
    for (name, ms) in &received.timers {
        assert_eq!(name, RESPONSE_TIME);
        assert!(*ms < 1_000, "{ms} ms");
    }

    // /metrics reports the sink.
    let text = metrics(server.http_addr()).await;
    assert!(value(&text, "ratelimitd_statsd_datagrams_sent_total", "") >= 1.0);
    assert_eq!(value(&text, "ratelimitd_statsd_send_errors_total", ""), 0.0);
}

#[tokio::test]
async fn extra_tags_end_every_name_as_gostats_writes_them() {
    wait_for_window_room(3600, 30);
    let statsd = StatsdServer::start();
    // Global shadow mode: the 4th request is over the limit and answered OK.
    let server = serve(
        &statsd,
        &fixture_path(),
        &[
            "--statsd-extra-tags",
            "zone:eu.west|1a,env:prod",
            "--shadow-mode",
        ],
    );
    let mut c = server.client().await;
    for _ in 0..4 {
        expect(
            &mut c,
            in_domain(&[&[("key1", "value1"), ("subkey1", "x")]]),
            Code::Ok,
        )
        .await;
    }
    // lyft/gostats internal/tags/tags.go: `.__key=value` per tag, sorted by key, the value's
    // `.`, `:` and `|` replaced by `_`.
    let tags = ".__env=prod.__zone=eu_west_1a";
    let mut expected = BTreeMap::new();
    for (stat, count) in [
        ("total_hits", 4),
        ("within_limit", 3),
        ("near_limit", 1),
        ("over_limit", 1),
    ] {
        expected.insert(
            format!("{PREFIX}test-domain.key1_value1.subkey1.{stat}{tags}"),
            count,
        );
    }
    // manager_impl.go NewServiceStats: "global_shadow_mode".
    expected.insert(format!("ratelimit.service.global_shadow_mode{tags}"), 1);
    expected.insert(format!("{LOAD_SUCCESS}{tags}"), 1);
    expected.insert(format!("{TOTAL_REQUESTS}{tags}"), 4);
    let received = statsd.expect_counters(&expected).await;
    assert_eq!(received.timers.len(), 4);
    assert!(received
        .timers
        .iter()
        .all(|(name, _)| *name == format!("{RESPONSE_TIME}{tags}")));
}

#[tokio::test]
async fn config_loads_count_at_start_on_reload_and_on_a_rejected_reload() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.yaml");
    let write = |text: &str| std::fs::write(&path, text).unwrap();
    write("domain: reload\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 1}\n");
    let statsd = StatsdServer::start();
    let _server = serve(
        &statsd,
        path.to_str().unwrap(),
        &["--reload-interval", "100ms"],
    );
    statsd.expect_counter(LOAD_SUCCESS, 1).await;

    write("domain: reload\ndescriptors:\n  - key: b\n    rate_limit: {unit: hour, requests_per_unit: 2}\n");
    statsd.expect_counter(LOAD_SUCCESS, 2).await;

    write("domain: reload\ndescriptors:\n  - key: c\n    rate_limit: {unit: fortnight, requests_per_unit: 2}\n");
    statsd.expect_counter(LOAD_ERROR, 1).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let counters = statsd.received().counters;
    assert_eq!(counters.get(LOAD_SUCCESS), Some(&2), "{counters:#?}");
    assert_eq!(counters.get(LOAD_ERROR), Some(&1), "{counters:#?}");
}

#[tokio::test]
async fn a_request_that_redis_fails_counts_a_redis_error() {
    let mut redis = RedisServer::start();
    let url = redis.url();
    let statsd = StatsdServer::start();
    let server = serve(
        &statsd,
        &fixture_path(),
        &["--redis-url", &url, "--redis-timeout", "200ms"],
    );
    let mut c = server.client().await;
    expect(&mut c, in_domain(&[&[("key2", "redis")]]), Code::Ok).await;
    redis.kill();
    let failed = c
        .should_rate_limit(in_domain(&[&[("key2", "redis")]]))
        .await
        .expect_err("Redis is gone");
    assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");

    statsd.expect_counter(REDIS_ERROR, 1).await;
    statsd.expect_counter(TOTAL_REQUESTS, 2).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    let counters = statsd.received().counters;
    assert_eq!(counters.get(REDIS_ERROR), Some(&1), "{counters:#?}");
    // Only the first request was decided by the store (the second has no hits counted).
    assert_eq!(
        counters.get(&format!("{PREFIX}test-domain.key2.total_hits")),
        Some(&1),
        "{counters:#?}"
    );
}

#[tokio::test]
async fn an_unreachable_or_unknown_statsd_server_is_counted_and_logged_never_fatal() {
    // Nobody listens on this port: the kernel answers the datagrams with ICMP port unreachable,
    // and the next send on the connected socket fails.
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let config = fixture_path();
    let addr = format!("127.0.0.1:{port}");
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--statsd-addr",
        &addr,
        "--statsd-flush-interval",
        "50ms",
    ]);
    let mut c = server.client().await;
    let errors = eventually(Duration::from_secs(10), "send errors counted", || {
        let mut c = c.clone();
        let http = server.http_addr();
        async move {
            expect(&mut c, in_domain(&[&[("key2", "unreachable")]]), Code::Ok).await;
            let text = metrics(http).await;
            let errors = value(&text, "ratelimitd_statsd_send_errors_total", "");
            (errors >= 1.0).then_some(errors)
        }
    })
    .await;
    assert!(errors >= 1.0);
    expect(&mut c, in_domain(&[&[("key2", "still")]]), Code::Ok).await;
    assert!(
        server.output().contains("sending to statsd failed"),
        "{}",
        server.output()
    );

    // A name that never resolves (RFC 6761 `.invalid`): logged, and the server serves.
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--statsd-addr",
        "statsd.invalid:8125",
        "--statsd-flush-interval",
        "50ms",
    ]);
    let mut c = server.client().await;
    expect(&mut c, in_domain(&[&[("key2", "unknown")]]), Code::Ok).await;
    eventually(
        Duration::from_secs(10),
        "the lookup failure logged",
        || async {
            server
                .output()
                .contains("cannot reach statsd")
                .then_some(())
        },
    )
    .await;
    let text = metrics(server.http_addr()).await;
    assert!(value(&text, "ratelimitd_statsd_send_errors_total", "") >= 1.0);
}

/// A closed port fails every other flush (the ICMP answer to one flush's datagrams fails the
/// next send, and the flush after it connects again): over 3 s at a 100 ms flush, the address
/// is announced once and the failures are logged at most once a second.
#[tokio::test]
async fn a_closed_statsd_port_logs_its_address_once_and_its_failures_once_a_second() {
    let closed = UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let addr = format!("127.0.0.1:{port}");
    let config = fixture_path();
    let started = std::time::Instant::now();
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--statsd-addr",
        &addr,
        "--statsd-flush-interval",
        FLUSH,
    ]);
    let mut c = server.client().await;
    let watched = std::time::Instant::now();
    while watched.elapsed() < Duration::from_secs(3) {
        // Over its limit after 20: each answer, OK or OVER_LIMIT, is counted and flushed.
        should(&mut c, in_domain(&[&[("key2", "closed")]])).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let text = metrics(server.http_addr()).await;
    let errors = value(&text, "ratelimitd_statsd_send_errors_total", "");
    assert!(
        errors >= 5.0,
        "about one failed send every other flush: {errors}"
    );
    let output = server.output();
    let lifetime = started.elapsed();
    let count = |needle: &str| output.lines().filter(|l| l.contains(needle)).count();
    assert_eq!(
        count("sending stats to statsd"),
        1,
        "the address is announced once:\n{output}"
    );
    let failures = count("sending to statsd failed");
    let most = lifetime.as_secs() as usize + 1;
    assert!(
        (1..=most).contains(&failures),
        "{failures} failure lines, at most one a second:\n{output}"
    );
}

#[test]
fn bad_statsd_flags_are_refused_by_name() {
    let config = fixture_path();
    for (args, flag) in [
        (&["--statsd-addr", "statsd"][..], "--statsd-addr"),
        (&["--statsd-addr", "statsd:0"][..], "--statsd-addr"),
        (
            &["--statsd-addr", "statsd:8125", "--statsd-extra-tags", "env"][..],
            "--statsd-extra-tags",
        ),
        (
            &[
                "--statsd-addr",
                "statsd:8125",
                "--statsd-flush-interval",
                "0s",
            ][..],
            "--statsd-flush-interval",
        ),
        // Settings of the sink without the sink.
        (&["--statsd-extra-tags", "env:prod"][..], "--statsd-addr"),
        (&["--statsd-flush-interval", "1s"][..], "--statsd-addr"),
    ] {
        let mut cmd = command();
        cmd.args(["serve", "--config", &config]).args(args);
        let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(10));
        assert!(!status.success(), "{args:?} accepted");
        assert!(stderr.contains(flag), "{args:?}: {stderr}");
    }
}

/// The address of the `envoyproxy_metrics` port, from its `serving HTTP` line.
fn envoyproxy_metrics_port(server: &Ratelimitd) -> SocketAddr {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let output = server.output();
        if let Some(addr) = output
            .lines()
            .filter(|line| line.contains("port=\"envoyproxy_metrics\""))
            .find_map(|line| log_field(line, "addr"))
        {
            return addr;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no port in:\n{output}"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[tokio::test]
async fn native_flags_serve_upstreams_prometheus_families_beside_dogstatsd() {
    wait_for_window_room(3600, 30);
    let statsd = StatsdServer::start();
    let server = serve(
        &statsd,
        &fixture_path(),
        &[
            "--statsd-format",
            "dogstatsd",
            "--statsd-extra-tags",
            "env:prod",
            "--envoyproxy-metrics-addr",
            "127.0.0.1:0",
        ],
    );
    let mut c = server.client().await;
    for _ in 0..2 {
        expect(&mut c, in_domain(&[&[("key2", "a")]]), Code::Ok).await;
    }
    // The extra tags end every stat name here too, as upstream's gostats writes them before
    // its Prometheus sink maps them: the built-in globs no longer match, the names are escaped,
    // and the unmapped timer is a summary (statsd_exporter's default for timers).
    let (status, body) = http_get(envoyproxy_metrics_port(&server), "/metrics").await;
    assert_eq!(status, 200);
    for line in [
        "ratelimit_service_rate_limit_test_domain_key2_total_hits___env_prod 2\n",
        "ratelimit_server_ShouldRateLimit_total_requests___env_prod 2\n",
        "# TYPE ratelimit_server_ShouldRateLimit_response_time___env_prod summary\n",
        "ratelimit_server_ShouldRateLimit_response_time___env_prod_count 2\n",
    ] {
        assert!(body.contains(line), "{line}{body}");
    }
    // The statsd sink speaks DogStatsD meanwhile: the tags as tags.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let text: String = statsd
            .datagrams
            .lock()
            .unwrap()
            .iter()
            .map(|d| String::from_utf8_lossy(d).into_owned())
            .collect();
        if text.contains("ratelimit.service.rate_limit.test-domain.key2.total_hits:2|c|#env:prod\n")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn dogstatsd_and_envoyproxy_metrics_flags_are_checked_by_name() {
    let config = fixture_path();
    for (args, expected) in [
        (
            &["--statsd-addr", "127.0.0.1:9", "--statsd-mogrifiers", "A"][..],
            "--statsd-mogrifiers applies to DogStatsD: add --statsd-format dogstatsd",
        ),
        (
            &[
                "--statsd-addr",
                "127.0.0.1:9",
                "--statsd-format",
                "dogstatsd",
                "--statsd-mogrifiers",
                "A",
            ][..],
            "--statsd-mogrifiers: DOG_STATSD_MOGRIFIER_A_PATTERN is not set",
        ),
        (&["--statsd-format", "dogstatsd"][..], "--statsd-addr"),
        (
            &["--envoyproxy-metrics-mapper", "/m.yaml"][..],
            "--envoyproxy-metrics-addr",
        ),
        (
            &[
                "--envoyproxy-metrics-addr",
                "127.0.0.1:0",
                "--envoyproxy-metrics-mapper",
                "/m.yaml",
                "--envoyproxy-metrics-response-time-ms",
            ][..],
            "--envoyproxy-metrics-response-time-ms",
        ),
        (
            &[
                "--envoyproxy-metrics-addr",
                "127.0.0.1:0",
                "--envoyproxy-metrics-mapper",
                "/nonexistent/m.yaml",
            ][..],
            "--envoyproxy-metrics-mapper: /nonexistent/m.yaml:",
        ),
    ] {
        let mut cmd = command();
        cmd.args(["serve", "--config", &config]).args(args);
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(10));
        assert_eq!(status.code(), Some(1), "{args:?}: {stdout}{stderr}");
        assert!(
            stdout.contains(expected) || stderr.contains(expected),
            "{args:?}: {stdout}{stderr}"
        );
    }
}
