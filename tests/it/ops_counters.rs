//! `GET /counters` and `POST /counters/reset` (docs/operations/http-endpoints.md) over real
//! sockets, the real binary and real redis-server processes: one body run against every store
//! (memory, one Redis, a Cluster, Sentinel) reads each algorithm's counter without consuming and
//! resets it so the next requests start fresh, touching no other key; resets need the admin
//! token (401, 403, off without `--admin-token-file`), which is read again when its file changes;
//! malformed selectors are 400s naming the problem; a store that does not answer is a 503 that
//! changes nothing; a leased counter shows the hits granted to leases as used.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use ratelimitd::proto::rls::rate_limit_response::Code;
use serde_json::Value;
use testkit::ratelimitd::*;
use testkit::redis_cluster::RedisCluster;
use testkit::redis_sentinel::RedisSentinel;
use testkit::redis_server::{all_keys, RedisServer};

const ALGORITHMS: [&str; 5] = [
    "fixed_window",
    "sliding_window_log",
    "sliding_window_counter",
    "token_bucket",
    "gcra",
];
const TOKEN: &str = "an-admin-token-0123456789";

/// A directory of this test's own for token files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "ratelimitd-ops-counters-{}-{name}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

fn token_file(name: &str, token: &str) -> PathBuf {
    let path = scratch(name).join("admin-token");
    std::fs::write(&path, format!("{token}\n")).expect("write the token file");
    path
}

fn serve(token: Option<&Path>, store: &[&str]) -> Ratelimitd {
    let config = fixture("ops/counters.yaml");
    let mut args = vec!["--config", config.to_str().unwrap()];
    if let Some(token) = token {
        args.extend(["--admin-token-file", token.to_str().unwrap()]);
    }
    args.extend_from_slice(store);
    Ratelimitd::start(&args)
}

/// `domain=counters` and one `descriptor=<algorithm>=<value>` per algorithm.
fn every_algorithm(value: &str) -> String {
    let mut selector = "domain=counters".to_owned();
    for algorithm in ALGORITHMS {
        selector.push_str(&format!("&descriptor={algorithm}={value}"));
    }
    selector
}

async fn read(server: &Ratelimitd, selector: &str) -> Value {
    let (status, body) = http_get(server.http_addr(), &format!("/counters?{selector}")).await;
    assert_eq!(status, 200, "/counters?{selector}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("not JSON ({e}): {body}"))
}

async fn reset(server: &Ratelimitd, selector: &str, token: Option<&str>) -> (u16, String, String) {
    let authorization = token.map(|token| format!("Bearer {token}"));
    let headers: Vec<(&str, &str)> = authorization
        .as_deref()
        .map(|value| ("Authorization", value))
        .into_iter()
        .collect();
    http_request(
        server.http_addr(),
        "POST",
        &format!("/counters/reset?{selector}"),
        &headers,
    )
    .await
}

/// How many of `tries` one-hit requests on `<algorithm>=<value>` are admitted.
async fn admitted(client: &mut Client, algorithm: &str, value: &str, tries: u32) -> u32 {
    let mut admitted = 0;
    for _ in 0..tries {
        let response = should(client, request("counters", &[&[(algorithm, value)]], 0)).await;
        if overall(&response) == Code::Ok {
            admitted += 1;
        }
    }
    admitted
}

/// Checks the state `/counters` shows for every algorithm's counter.
#[track_caller]
fn assert_states(read: &Value, value: &str, used: u64) {
    let counters = read["counters"].as_array().expect("a list of counters");
    assert_eq!(counters.len(), ALGORITHMS.len(), "{read}");
    for (counter, algorithm) in counters.iter().zip(ALGORITHMS) {
        assert_eq!(
            counter["rule"],
            format!("counters.{algorithm}"),
            "{counter}"
        );
        assert_eq!(counter["limit"], "counted", "{counter}");
        assert_eq!(counter["algorithm"], algorithm, "{counter}");
        assert_eq!(counter["requests_per_unit"], 3, "{counter}");
        assert_eq!(counter["window_seconds"], 3600, "{counter}");
        assert_eq!(counter["consistency"], "exact", "{counter}");
        assert_eq!(counter["descriptor"][0]["value"], value, "{counter}");
        assert_eq!(counter["used"], used, "{algorithm}: {counter}");
        assert_eq!(counter["remaining"], 3 - used, "{algorithm}: {counter}");
        let reset_after = counter["reset_after_ms"].as_u64().expect("reset_after_ms");
        assert!(reset_after <= 3_600_000, "{counter}");
        if used > 0 {
            assert!(reset_after > 0, "{counter}");
        }
    }
}

/// The keys a store holds: `None` for the memory store, which has none to list.
type Keys<'a> = &'a dyn Fn() -> Option<BTreeSet<String>>;

/// The one body every store runs.
async fn read_then_reset(server: &Ratelimitd, keys: Keys<'_>) {
    let mut client = server.client().await;
    for algorithm in ALGORITHMS {
        assert_eq!(admitted(&mut client, algorithm, "alice", 4).await, 3);
        assert_eq!(admitted(&mut client, algorithm, "bob", 1).await, 1);
    }

    for _ in 0..2 {
        assert_states(&read(server, &every_algorithm("alice")).await, "alice", 3);
        assert_states(&read(server, &every_algorithm("bob")).await, "bob", 1);
    }

    let before = keys();
    let (status, head, body) = reset(server, &every_algorithm("alice"), None).await;
    assert_eq!(status, 401, "{body}");
    assert!(
        head.to_ascii_lowercase()
            .contains("www-authenticate: bearer"),
        "{head}"
    );
    let (status, _, body) = reset(
        server,
        &every_algorithm("alice"),
        Some("not-the-token-0123"),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert_eq!(keys(), before, "a refused reset changes nothing");
    assert_states(&read(server, &every_algorithm("alice")).await, "alice", 3);

    let (status, _, body) = reset(server, &every_algorithm("alice"), Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).expect("JSON");
    for counter in answer["counters"].as_array().expect("counters") {
        assert_eq!(counter["reset"], true, "{counter}");
        assert_eq!(counter["held_state"], true, "{counter}");
    }

    if let (Some(before), Some(after)) = (before, keys()) {
        let removed: BTreeSet<&String> = before.difference(&after).collect();
        assert!(!removed.is_empty(), "alice's keys were removed: {before:?}");
        assert!(
            removed.iter().all(|key| key.contains("alice")),
            "only alice's keys were removed: {removed:?}"
        );
        assert!(
            after.is_subset(&before),
            "nothing written: {after:?} / {before:?}"
        );
        assert!(
            after.iter().all(|key| !key.contains("alice")),
            "every key of alice's counters is gone: {after:?}"
        );
        let bobs = before.iter().filter(|key| key.contains("bob")).count();
        assert!(bobs >= ALGORITHMS.len(), "{before:?}");
    }

    assert_states(&read(server, &every_algorithm("alice")).await, "alice", 0);
    assert_states(&read(server, &every_algorithm("bob")).await, "bob", 1);
    for algorithm in ALGORITHMS {
        assert_eq!(
            admitted(&mut client, algorithm, "alice", 4).await,
            3,
            "{algorithm} starts fresh after the reset"
        );
        assert_eq!(
            admitted(&mut client, algorithm, "bob", 3).await,
            2,
            "{algorithm}: reading and resetting alice left bob's counter as it was"
        );
    }

    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    for line in [
        "ratelimitd_counter_resets_total{result=\"reset\"} 1",
        "ratelimitd_counter_resets_total{result=\"refused\"} 2",
        "ratelimitd_counter_resets_total{result=\"failed\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} in\n{metrics}");
    }
    let output = server.output();
    let logged = output
        .lines()
        .find(|line| line.contains("counters reset"))
        .unwrap_or_else(|| panic!("the reset is logged:\n{output}"));
    assert!(
        logged.contains("127.0.0.1") && logged.contains("gcra=alice"),
        "with the caller's address and the selector: {logged}"
    );
}

#[tokio::test]
async fn memory_reads_without_consuming_and_resets_only_the_selected_counters() {
    let token = token_file("memory", TOKEN);
    let server = serve(Some(&token), &[]);
    read_then_reset(&server, &|| None).await;
}

#[tokio::test]
async fn redis_reads_without_consuming_and_resets_only_the_selected_counters() {
    let redis = RedisServer::start();
    let token = token_file("redis", TOKEN);
    let url = redis.url();
    let server = serve(Some(&token), &["--redis-url", &url]);
    read_then_reset(&server, &|| Some(all_keys(&mut redis.connection()))).await;
}

#[tokio::test]
async fn redis_in_envoyproxy_key_format_reads_without_consuming_and_resets_only_the_selected_counters(
) {
    let redis = RedisServer::start();
    let token = token_file("envoyproxy", TOKEN);
    let url = redis.url();
    let server = serve(
        Some(&token),
        &["--redis-url", &url, "--key-format", "envoyproxy"],
    );
    let keys = || Some(all_keys(&mut redis.connection()));
    read_then_reset(&server, &keys).await;
    let after = all_keys(&mut redis.connection());
    assert!(
        after
            .iter()
            .any(|key| key.starts_with("counters_fixed_window_bob_")),
        "fixed windows are kept in envoyproxy/ratelimit's format: {after:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cluster_reads_without_consuming_and_resets_only_the_selected_counters() {
    let cluster = RedisCluster::start(3, 0);
    let token = token_file("cluster", TOKEN);
    let seeds = cluster.seeds();
    let server = serve(Some(&token), &["--redis-cluster", &seeds]);
    let keys = || {
        Some(
            cluster
                .masters()
                .into_iter()
                .flat_map(|port| all_keys(&mut cluster.connection(port)))
                .collect(),
        )
    };
    read_then_reset(&server, &keys).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sentinel_reads_without_consuming_and_resets_only_the_selected_counters() {
    let setup = RedisSentinel::start("counters");
    let token = token_file("sentinel", TOKEN);
    let target = format!("{}@{}", setup.master_name(), setup.sentinel_addrs());
    let server = serve(Some(&token), &["--redis-sentinel", &target]);
    let keys = || Some(all_keys(&mut setup.connection(setup.master_port())));
    read_then_reset(&server, &keys).await;
}

#[tokio::test]
async fn resets_are_off_without_an_admin_token_file() {
    let server = serve(None, &[]);
    let mut client = server.client().await;
    assert_eq!(admitted(&mut client, "gcra", "carol", 4).await, 3);
    let (status, _, body) = reset(
        &server,
        "domain=counters&descriptor=gcra=carol",
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 403, "{body}");
    assert!(body.contains("--admin-token-file"), "{body}");
    let state = read(&server, "domain=counters&descriptor=gcra=carol").await;
    assert_eq!(state["counters"][0]["used"], 3, "{state}");
    assert_eq!(admitted(&mut client, "gcra", "carol", 1).await, 0);
}

#[tokio::test]
async fn each_descriptor_shows_what_its_rule_is() {
    let server = serve(None, &[]);
    let state = read(
        &server,
        "domain=counters&descriptor=open=x&descriptor=tenant=acme,path=%2Fv1&descriptor=unknown=y",
    )
    .await;
    let counters = &state["counters"];
    assert_eq!(counters[0]["limit"], "unlimited", "{state}");
    assert_eq!(counters[1]["limit"], "counted", "{state}");
    assert_eq!(counters[1]["name"], "acme_paths", "{state}");
    assert_eq!(counters[1]["descriptor"][1]["value"], "/v1", "{state}");
    assert_eq!(counters[1]["used"], 0, "{state}");
    assert_eq!(counters[2]["limit"], "none", "{state}");
    assert_eq!(counters[2]["rule"], Value::Null, "{state}");
}

#[tokio::test]
async fn malformed_selectors_are_400s_naming_the_problem() {
    let token = token_file("malformed", TOKEN);
    let server = serve(Some(&token), &["--max-descriptors", "2"]);
    for (selector, named) in [
        ("descriptor=gcra=x", "`domain` is missing"),
        ("domain=counters", "`descriptor` is missing"),
        ("domain=counters&descriptor=gcra", "is not key=value"),
        ("domain=counters&descriptor==x", "empty key"),
        ("domain=counters&descriptor=gcra=%zz", "not percent-encoded"),
        ("domain=counters&descriptor=gcra=x&limit=3", "not `limit`"),
        (
            "domain=counters&descriptor=a=1&descriptor=b=2&descriptor=c=3",
            "--max-descriptors",
        ),
    ] {
        let (status, body) = http_get(server.http_addr(), &format!("/counters?{selector}")).await;
        assert_eq!(status, 400, "{selector}: {body}");
        assert!(body.contains(named), "{selector}: {body}");
        let (status, _, body) = reset(&server, selector, Some(TOKEN)).await;
        assert_eq!(status, 400, "reset {selector}: {body}");
        assert!(body.contains(named), "reset {selector}: {body}");
    }
    let (status, _, body) = reset(&server, "domain=counters&descriptor=gcra", None).await;
    assert_eq!(
        status, 401,
        "the token is checked before the selector is read: {body}"
    );
    let (status, body) = http_get(
        server.http_addr(),
        "/counters?domain=nowhere&descriptor=a=b",
    )
    .await;
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("nowhere"), "{body}");
    let (status, _) = http_get(
        server.http_addr(),
        "/counters/reset?domain=counters&descriptor=gcra=x",
    )
    .await;
    assert_eq!(status, 405);
    let (status, _, _) = http_request(
        server.http_addr(),
        "POST",
        "/counters?domain=counters&descriptor=gcra=x",
        &[],
    )
    .await;
    assert_eq!(status, 405);
    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    assert!(
        metrics.contains("ratelimitd_counter_resets_total{result=\"invalid\"} 7"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_changed_token_file_is_in_force_at_the_next_reset() {
    let path = token_file("reload", TOKEN);
    let server = serve(Some(&path), &[]);
    let selector = "domain=counters&descriptor=fixed_window=dave";
    let (status, _, body) = reset(&server, selector, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    let rotated = "a-rotated-token-9876543210";
    std::fs::write(&path, rotated).expect("rotate the token");
    let (status, _, body) = reset(&server, selector, Some(TOKEN)).await;
    assert_eq!(status, 403, "the old token no longer works: {body}");
    let (status, _, body) = reset(&server, selector, Some(rotated)).await;
    assert_eq!(status, 200, "{body}");
    std::fs::write(&path, "short").expect("write a bad token");
    let (status, _, body) = reset(&server, selector, Some(rotated)).await;
    assert_eq!(
        status, 200,
        "a token file that cannot be used keeps the token: {body}"
    );
    assert!(
        server.output().contains("cannot be used"),
        "{}",
        server.output()
    );
}

#[test]
fn an_unusable_token_file_stops_the_start_naming_the_flag() {
    let short = token_file("short", "short");
    let config = fixture("ops/counters.yaml");
    let message = refused_start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--admin-token-file",
            short.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        message.contains("--admin-token-file") && message.contains("fewer than 16"),
        "{message}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_that_does_not_answer_is_a_503_and_nothing_changes() {
    let mut redis = RedisServer::start();
    let token = token_file("down", TOKEN);
    let url = redis.url();
    let server = serve(
        Some(&token),
        &["--redis-url", &url, "--redis-timeout", "300ms"],
    );
    let mut client = server.client().await;
    assert_eq!(admitted(&mut client, "token_bucket", "erin", 4).await, 3);
    let before = all_keys(&mut redis.connection());
    let selector = "domain=counters&descriptor=token_bucket=erin";

    redis.pause();
    let started = std::time::Instant::now();
    let (status, _, body) = reset(&server, selector, Some(TOKEN)).await;
    let (read_status, read_body) =
        http_get(server.http_addr(), &format!("/counters?{selector}")).await;
    let took = started.elapsed();
    redis.resume();
    assert!(
        took < Duration::from_secs(3),
        "each answered within about its --redis-timeout of 300ms: {took:?}"
    );
    assert_eq!(status, 503, "{body}");
    assert_eq!(read_status, 503, "{read_body}");

    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(all_keys(&mut redis.connection()), before);
    assert_eq!(read(&server, selector).await["counters"][0]["used"], 3);
    assert_eq!(admitted(&mut client, "token_bucket", "erin", 1).await, 0);
    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    assert!(
        metrics.contains("ratelimitd_counter_resets_total{result=\"failed\"} 1"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leased_counter_shows_the_hits_granted_to_leases_as_used() {
    let redis = RedisServer::start();
    let token = token_file("leased", TOKEN);
    let url = redis.url();
    let server = serve(Some(&token), &["--redis-url", &url]);
    let mut client = server.client().await;
    assert_eq!(admitted(&mut client, "hot", "frank", 5).await, 5);
    let selector = "domain=counters&descriptor=hot=frank";
    let state = read(&server, selector).await;
    let counter = &state["counters"][0];
    assert_eq!(counter["consistency"], "leased", "{state}");
    let used = counter["used"].as_u64().expect("used");
    assert!(
        (5..=160).contains(&used),
        "the store counts the hits granted to leases, spent or not: {state}"
    );
    assert_eq!(counter["remaining"].as_u64(), Some(160 - used), "{state}");
    let (status, _, body) = reset(&server, selector, Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"held_state\":true"), "{body}");
}
