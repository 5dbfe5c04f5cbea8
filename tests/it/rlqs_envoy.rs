//! End to end through two real Envoy 1.40 processes whose `envoy.filters.http.rate_limit_quota`
//! asks ratelimitd's RLQS service (`RateLimitQuotaService/StreamRateLimitQuotas` on the gRPC
//! port) for their buckets' assignments, under a steady open-loop load per Envoy
//! (testkit/src/http_load.rs: requests counted per second by send time, 200 admitted, 429
//! denied).
//!
//! Configurations: `tests/fixtures/envoy/rlqs.yaml` (the Envoy template: buckets by path prefix,
//! a direct 200, no upstream) and `tests/fixtures/envoy/rlqs.ratelimit.yaml` (the rules: /api's
//! bucket `{name: api}` has one global limit L = [`LIMIT`] per second, `{name: free}` is
//! unlimited, `{name: closed}` has a zero limit, `{name: nomatch}` has no rule).
//!
//! # The bound on global admission
//!
//! Each Envoy is sent 2L requests per second on /api ([`DEMAND`]). Both ask for more than an
//! equal split, so the max-min fair shares are exactly L/2 each (docs/rlqs.md, "One limit, shared
//! fairly"); L is even, so a share is a whole number of requests per second and its token bucket
//! is `tokens_per_fill` L/2 every 1 s with `max_tokens` L/2 ("From a share to a token bucket").
//! Envoy refills a token bucket continuously at `tokens_per_fill / fill_interval`, holds at most
//! `max_tokens`, and starts a new or changed assignment's bucket full. So over any D seconds in
//! which no assignment changes, Envoy i admits at most what its bucket holds at the start
//! (≤ `max_tokens`ᵢ) plus its rate × D, and as the rates add up to at most L:
//!
//! ```text
//! admitted by both in D seconds ≤ L·D + Σ max_tokensᵢ + slack = L·D + L + 2·EDGE_SLACK
//! ```
//!
//! `EDGE_SLACK` ([`EDGE_SLACK`]) covers counting by send time: a request sent in the window's
//! last 100 ms may take a token just after it (2L × 0.1 s = 4 per Envoy). The window opens once
//! both Envoys have denied a request (each holds a token bucket: the first report's
//! `no_assignment_behavior` ALLOW_ALL is over) and two more report periods have passed (the
//! newcomer shares of the first reports are re-balanced by demand), and lasts [`WINDOW`] s.
//! With L = 20 and D = 15: at most 300 + 20 + 8 = 328 admitted (21.9 per second), where a server
//! that hands each Envoy all of L admits 2L·D = 600 (40 per second). The tests also require at
//! least 0.8·L·D: a server that denies everything is no better. Shares that are not exactly L/2
//! (e.g. 9.99/s, which becomes 49 tokens per 5 s) make the bursts larger and fail the bound: that
//! is a fault of the shares, not of the test.
//!
//! Two tests run without the service: the Envoy configuration validates, and two Envoys whose
//! RLQS server is down apply `no_assignment_behavior` (ALLOW_ALL admits everything, DENY_ALL
//! refuses everything: the counting of both outcomes). The others need the RLQS service.
//! A token bucket as `no_assignment_behavior` is not used: Envoy 1.40 crashes (SIGSEGV) on the
//! second request of such a bucket while its RLQS server is down.
//!
//! Envoy comes from `scripts/ensure-envoy.sh` or `ENVOY_BIN`; without it these tests fail.

use std::net::SocketAddr;
use std::time::Duration;

use testkit::envoy::{self, Envoy};
use testkit::http_load::{Load, Tally};
use testkit::ratelimitd::{self as rld, Ratelimitd};
use testkit::redis_server::{free_port, RedisServer};
use tokio::time::Instant;

/// The configuration domain of `tests/fixtures/envoy/rlqs.ratelimit.yaml`.
const DOMAIN: &str = "rlqs_e2e";
/// L: /api's one global limit per second (`requests_per_unit` of the rule `name: api`). Even,
/// so that two equal shares are whole numbers.
const LIMIT: u64 = 20;
/// Requests per second each Envoy is sent on /api: twice the global limit.
const DEMAND: u32 = 2 * LIMIT as u32;
/// Envoy 1.40 reports every 5 s.
const PERIOD: u64 = 5;
/// How long the admission bound is measured: three report periods.
const WINDOW: usize = 15;
/// Requests per Envoy that counting by send time may place inside a window edge although their
/// token was taken outside it (100 ms of [`DEMAND`]).
const EDGE_SLACK: u64 = 4;
/// `no_assignment_behavior` that lets everything through until the first assignment.
const ALLOW_ALL: &str = "{blanket_rule: ALLOW_ALL}";
/// `no_assignment_behavior` that refuses everything until the first assignment.
const DENY_ALL: &str = "{blanket_rule: DENY_ALL}";
/// How long Envoys may take to hold assignments, or to reach a restarted ratelimitd.
const WAIT: Duration = Duration::from_secs(30);

// ---------------------------------------------------------------------------------------------
// Parts
// ---------------------------------------------------------------------------------------------

/// `tests/fixtures/envoy/rlqs.yaml` asking the RLQS server at `rlqs_port`, /api applying
/// `no_assignment` (a RateLimitStrategy in flow YAML) before its first assignment.
fn envoy_config(rlqs_port: u16, no_assignment: &str) -> String {
    std::fs::read_to_string(rld::fixture("envoy/rlqs.yaml"))
        .expect("read tests/fixtures/envoy/rlqs.yaml")
        .replace("{{RLQS_PORT}}", &rlqs_port.to_string())
        .replace("{{DOMAIN}}", DOMAIN)
        .replace("{{NO_ASSIGNMENT}}", no_assignment)
}

/// An Envoy asking the RLQS server at `rlqs`.
async fn start_envoy(rlqs: SocketAddr, no_assignment: &str) -> Envoy {
    Envoy::start(&envoy_config(rlqs.port(), no_assignment)).await
}

/// `ratelimitd serve` with the rules of `rlqs.ratelimit.yaml` on `grpc_addr` (`127.0.0.1:0`
/// for a free port), `extra` appended.
fn start_ratelimitd(grpc_addr: &str, extra: &[&str]) -> Ratelimitd {
    let config = rld::fixture("envoy/rlqs.ratelimit.yaml");
    let mut args = vec!["--config", config.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    Ratelimitd::start_on(grpc_addr, &args)
}

/// The sum of every series of metric `name` on `server`'s `/metrics`; 0 when absent.
async fn metric(server: &Ratelimitd, name: &str) -> f64 {
    let (status, body) = rld::http_get(server.http_addr(), "/metrics").await;
    assert_eq!(status, 200, "/metrics: {body}");
    body.lines()
        .filter(|line| {
            line.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
        })
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Waits until metric `name` of `server` is `want`; panics after [`WAIT`].
async fn await_metric(server: &Ratelimitd, name: &str, want: f64) {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let got = metric(server, name).await;
        if got == want {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{name} is {got}, not {want}, after {WAIT:?}\n{}",
            server.output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `GET /rlqs` of `server`: its current assignments as JSON.
async fn assignments(server: &Ratelimitd) -> String {
    let (status, body) = rld::http_get(server.http_addr(), "/rlqs").await;
    assert_eq!(status, 200, "GET /rlqs: {body}");
    body
}

/// Waits until every load's Envoy has denied a request (it holds a token bucket or a DENY_ALL
/// from the server) and returns the latest of those seconds; panics after [`WAIT`].
async fn await_denials(loads: &[&Load]) -> usize {
    let deadline = std::time::Instant::now() + WAIT;
    loop {
        let firsts: Vec<Option<usize>> = loads.iter().map(|l| l.tally().first_denied()).collect();
        if firsts.iter().all(Option::is_some) {
            return firsts.into_iter().flatten().max().unwrap_or(0);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no denial from every Envoy within {WAIT:?}: {firsts:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until seconds `range` of every load are over and fully answered, and returns the
/// loads' tallies.
async fn window(loads: &[&Load], epoch: Instant, range: std::ops::Range<usize>) -> Vec<Tally> {
    tokio::time::sleep_until(epoch + Duration::from_millis(range.end as u64 * 1000 + 300)).await;
    let deadline = std::time::Instant::now() + testkit::http_load::REQUEST_TIMEOUT;
    loop {
        let tallies: Vec<Tally> = loads.iter().map(|l| l.tally()).collect();
        let complete = tallies.iter().all(|t| {
            range
                .clone()
                .all(|i| t.second(i).sent > 0 && t.second(i).answered() == t.second(i).sent)
        });
        if complete || std::time::Instant::now() > deadline {
            for (n, t) in tallies.iter().enumerate() {
                t.assert_complete(range.clone(), u64::from(DEMAND), &format!("Envoy {n}"));
            }
            return tallies;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Asserts the bound of the module's doc over `range` of `tallies` (one per Envoy, each holding
/// a token bucket of `max_tokens` per 1 s, unchanged in the window): together at most
/// `L·D + Σ max_tokens + EDGE_SLACK per Envoy`, at least `0.8·L·D`, and no failed request.
#[track_caller]
fn assert_bound(tallies: &[Tally], range: std::ops::Range<usize>, max_tokens: &[u64], what: &str) {
    let both = Tally::merged(tallies);
    let total = both.sum(range.clone());
    let d = range.len() as u64;
    let upper = LIMIT * d + max_tokens.iter().sum::<u64>() + EDGE_SLACK * tallies.len() as u64;
    let lower = LIMIT * d * 4 / 5;
    let detail = || {
        tallies
            .iter()
            .enumerate()
            .map(|(n, t)| format!("Envoy {n}:\n{}", t.render()))
            .collect::<String>()
    };
    assert_eq!(total.failed, 0, "{what}: failed requests\n{}", detail());
    eprintln!(
        "{what}: {} admitted in {d} s by both Envoys (bound {upper}, L·D = {}, 2L·D = {})",
        total.admitted,
        LIMIT * d,
        2 * LIMIT * d
    );
    assert!(
        total.admitted <= upper,
        "{what}: {} admitted in seconds {range:?} by both Envoys, above the bound {upper} \
         (L = {LIMIT}/s over {d} s, bursts {max_tokens:?}, slack {EDGE_SLACK} per Envoy)\n{}",
        total.admitted,
        detail()
    );
    assert!(
        total.admitted >= lower,
        "{what}: {} admitted in seconds {range:?}, below 0.8·L·D = {lower}\n{}",
        total.admitted,
        detail()
    );
}

/// Two Envoys under [`DEMAND`] on /api each: waits for their token buckets, lets two report
/// periods re-balance the shares, and asserts the bound over the next [`WINDOW`] seconds;
/// returns the window's end.
async fn assert_steady_bound(loads: &[&Load], epoch: Instant, from: usize, what: &str) -> usize {
    let start = from + 2 * PERIOD as usize + 1;
    let range = start..start + WINDOW;
    let tallies = window(loads, epoch, range.clone()).await;
    let halves = vec![LIMIT / 2; loads.len()];
    assert_bound(&tallies, range.clone(), &halves, what);
    range.end
}

// ---------------------------------------------------------------------------------------------
// Without the service
// ---------------------------------------------------------------------------------------------

/// The template, filled in as the tests fill it, is a configuration Envoy 1.40 accepts.
#[test]
fn envoy_config_validates() {
    for no_assignment in [ALLOW_ALL, DENY_ALL] {
        envoy::validate(&envoy_config(free_port(), no_assignment))
            .unwrap_or_else(|e| panic!("no_assignment_behavior {no_assignment}: {e}"));
    }
}

/// With the RLQS server down (a port nobody listens on), each Envoy applies its
/// `no_assignment_behavior` through two report periods of failed connections: under ALLOW_ALL
/// every request is admitted, under DENY_ALL every one is denied, and the load generator counts
/// each request once, in its second, by its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlqs_server_down_no_assignment_behavior_applies() {
    let down = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let a = start_envoy(down, ALLOW_ALL).await;
    let b = start_envoy(down, DENY_ALL).await;
    let epoch = Instant::now();
    let loads = [
        Load::start(a.addr(), "/api", DEMAND, epoch),
        Load::start(b.addr(), "/api", DEMAND, epoch),
    ];
    let range = 1..1 + 2 * PERIOD as usize;
    let tallies = window(&[&loads[0], &loads[1]], epoch, range.clone()).await;
    let want = u64::from(DEMAND) * range.len() as u64;
    for (n, (tally, outcome)) in tallies.iter().zip([(want, 0), (0, want)]).enumerate() {
        let total = tally.sum(range.clone());
        assert_eq!(
            (total.sent, total.admitted, total.denied, total.failed),
            (want, outcome.0, outcome.1, 0),
            "Envoy {n}, RLQS server down:\n{}",
            tally.render()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// With the service
// ---------------------------------------------------------------------------------------------

/// Two Envoys at 2L each share one limit of L: the bound of the module's doc holds over three
/// report periods; ratelimitd holds two streams and shows the `api` assignments. Then one
/// Envoy's traffic stops: its demand decays report by report to the floor, and within four
/// periods the other admits close to all of L alone (at least 0.8·L per second, at most
/// `L·D + L + slack`: its share is L minus the idle Envoy's floor, a whole number).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_envoys_share_one_limit_and_an_idle_one_releases_it() {
    let server = start_ratelimitd("127.0.0.1:0", &[]);
    let a = start_envoy(server.grpc_addr(), ALLOW_ALL).await;
    let b = start_envoy(server.grpc_addr(), ALLOW_ALL).await;
    let epoch = Instant::now();
    let load_a = Load::start(a.addr(), "/api", DEMAND, epoch);
    let load_b = Load::start(b.addr(), "/api", DEMAND, epoch);
    let from = await_denials(&[&load_a, &load_b]).await;
    let end = assert_steady_bound(&[&load_a, &load_b], epoch, from, "two Envoys").await;
    assert_eq!(metric(&server, "ratelimitd_rlqs_streams").await, 2.0);
    assert!(metric(&server, "ratelimitd_rlqs_assignments_sent_total").await >= 2.0);
    let shown = assignments(&server).await;
    assert!(shown.contains("\"api\""), "GET /rlqs: {shown}");

    let stopped = load_b.finish().await;
    let stop = end.max(stopped.0.len());
    let start = stop + 4 * PERIOD as usize + 1;
    let range = start..start + 10;
    let alone = window(&[&load_a], epoch, range.clone()).await;
    let total = alone[0].sum(range.clone());
    let d = range.len() as u64;
    assert!(
        total.admitted >= LIMIT * d * 4 / 5 && total.admitted <= LIMIT * d + LIMIT + EDGE_SLACK,
        "Envoy A alone admitted {} in {d} s, not within 0.8·L·D ..= L·D + L + slack\n{}",
        total.admitted,
        alone[0].render()
    );
    assert_eq!(total.failed, 0, "{}", alone[0].render());
}

/// A bucket no rule names (`{name: nomatch}`) gets ratelimitd's default blanket rule, ALLOW_ALL,
/// as does the unlimited rule (`{name: free}`): at 2L per second for three periods everything
/// is admitted, and the assignments are ratelimitd's (GET /rlqs shows them), not the filter's
/// no-assignment fallback. The zero limit (`{name: closed}`) gets DENY_ALL: from the second after
/// its first report every request is denied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_and_unlimited_allow_and_a_zero_limit_denies() {
    let server = start_ratelimitd("127.0.0.1:0", &[]);
    let envoy = start_envoy(server.grpc_addr(), ALLOW_ALL).await;
    let epoch = Instant::now();
    let other = Load::start(envoy.addr(), "/other", DEMAND, epoch);
    let free = Load::start(envoy.addr(), "/free", DEMAND, epoch);
    let closed = Load::start(envoy.addr(), "/closed", DEMAND, epoch);
    let range = 1..1 + 3 * PERIOD as usize;
    let tallies = window(&[&other, &free, &closed], epoch, range.clone()).await;
    for (path, tally) in ["/other", "/free"].iter().zip(&tallies) {
        let total = tally.sum(range.clone());
        assert_eq!(
            (total.admitted, total.denied, total.failed),
            (total.sent, 0, 0),
            "{path}: everything admitted\n{}",
            tally.render()
        );
    }
    let closed_tally = &tallies[2];
    let first = closed_tally
        .first_denied()
        .unwrap_or_else(|| panic!("/closed: nothing denied\n{}", closed_tally.render()));
    assert!(first <= 2, "/closed: first denial in second {first}");
    let after = closed_tally.sum(first + 1..range.end);
    assert_eq!(
        (after.admitted, after.failed),
        (0, 0),
        "/closed: everything denied once assigned\n{}",
        closed_tally.render()
    );
    let shown = assignments(&server).await;
    for bucket in ["\"nomatch\"", "\"free\"", "\"closed\""] {
        assert!(shown.contains(bucket), "GET /rlqs lacks {bucket}: {shown}");
    }
}

/// `--rlqs-unmatched deny`: the bucket no rule names is denied once its first report is
/// answered (the counterpart of the default's ALLOW_ALL above: the server decides it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unmatched_deny_denies_a_bucket_no_rule_names() {
    let server = start_ratelimitd("127.0.0.1:0", &["--rlqs-unmatched", "deny"]);
    let envoy = start_envoy(server.grpc_addr(), ALLOW_ALL).await;
    let epoch = Instant::now();
    let other = Load::start(envoy.addr(), "/other", DEMAND, epoch);
    let range = 1..1 + 2 * PERIOD as usize;
    let tally = window(&[&other], epoch, range.clone()).await.remove(0);
    let first = tally
        .first_denied()
        .unwrap_or_else(|| panic!("/other: nothing denied\n{}", tally.render()));
    assert!(first <= 2, "/other: first denial in second {first}");
    let after = tally.sum(first + 1..range.end);
    assert_eq!((after.admitted, after.failed), (0, 0), "{}", tally.render());
}

/// ratelimitd killed (SIGKILL) and started again on the same port: the Envoys enforce their
/// cached assignments meanwhile, reconnect on their report tick (the new process counts two
/// streams), and once the shares have settled again the bound holds as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restarted_ratelimitd_envoys_reconnect_and_the_bound_holds() {
    let mut server = start_ratelimitd("127.0.0.1:0", &[]);
    let grpc = server.grpc_addr();
    let a = start_envoy(grpc, ALLOW_ALL).await;
    let b = start_envoy(grpc, ALLOW_ALL).await;
    let epoch = Instant::now();
    let load_a = Load::start(a.addr(), "/api", DEMAND, epoch);
    let load_b = Load::start(b.addr(), "/api", DEMAND, epoch);
    let loads = [&load_a, &load_b];
    let from = await_denials(&loads).await;
    assert_steady_bound(&loads, epoch, from, "before the restart").await;

    server.signal("KILL");
    assert!(
        server.exited(WAIT).await.is_some(),
        "ratelimitd still running after SIGKILL"
    );
    let server = start_ratelimitd(&grpc.to_string(), &[]);
    assert_eq!(server.grpc_addr(), grpc);
    await_metric(&server, "ratelimitd_rlqs_streams", 2.0).await;
    let reconnected = load_a.now_second();
    assert_steady_bound(&loads, epoch, reconnected, "after the restart").await;
}

/// The first scenario across two ratelimitd replicas sharing one redis-server, each Envoy at a
/// different replica: L is still one limit for both.
///
/// NEEDS the Redis-shared demands: each replica sees only its own Envoy's reports, so unless
/// the replicas share every Envoy's demand through Redis, each hands its Envoy all of L and the
/// Envoys admit 2L together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_sharing_redis_share_one_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let one = start_ratelimitd("127.0.0.1:0", &["--redis-url", &url]);
    let two = start_ratelimitd("127.0.0.1:0", &["--redis-url", &url]);
    let a = start_envoy(one.grpc_addr(), ALLOW_ALL).await;
    let b = start_envoy(two.grpc_addr(), ALLOW_ALL).await;
    let epoch = Instant::now();
    let load_a = Load::start(a.addr(), "/api", DEMAND, epoch);
    let load_b = Load::start(b.addr(), "/api", DEMAND, epoch);
    let from = await_denials(&[&load_a, &load_b]).await;
    assert_steady_bound(&[&load_a, &load_b], epoch, from, "two replicas, one Redis").await;
    assert_eq!(metric(&one, "ratelimitd_rlqs_streams").await, 1.0);
    assert_eq!(metric(&two, "ratelimitd_rlqs_streams").await, 1.0);
}
