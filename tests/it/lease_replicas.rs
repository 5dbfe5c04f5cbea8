//! Leased rules decided by three real replicas sharing one real redis-server: under a flood of
//! concurrent requests they admit no more than the limit, decide most requests from their leases
//! without a store call, and a request whose exact descriptor denies it consumes nothing of its
//! leased one.

use std::net::SocketAddr;

use ratelimitd::proto::envoy::service::ratelimit::v3::rate_limit_response::Code;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;

const CONFIG: &str = "\
domain: hot
descriptors:
  - key: fixed
    rate_limit: {unit: hour, requests_per_unit: 400, consistency: leased}
  - key: gcra
    rate_limit: {unit: hour, requests_per_unit: 400, algorithm: gcra, consistency: leased}
  - key: tight
    rate_limit: {unit: hour, requests_per_unit: 5}
";

/// The configuration above, written to a file in `dir`.
fn config_file(dir: &tempfile::TempDir) -> std::path::PathBuf {
    let config = dir.path().join("hot.yaml");
    std::fs::write(&config, CONFIG).expect("config written");
    config
}

/// A replica serving `config` on `redis`, each store call bounded by `timeout`.
fn replica(
    redis: &RedisServer,
    config: &std::path::Path,
    timeout: &str,
    threads: &str,
) -> Ratelimitd {
    Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &redis.url(),
        "--redis-timeout",
        timeout,
        "--threads",
        threads,
    ])
}

/// One series of a metric family from `/metrics`.
async fn metric(addr: SocketAddr, series: &str) -> u64 {
    let (status, body) = http_get(addr, "/metrics").await;
    assert_eq!(status, 200);
    body.lines()
        .find_map(|line| line.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {series} in /metrics"))
}

async fn admitted_of(addrs: &[SocketAddr], key: &str, requests: usize) -> usize {
    let responses = hammer(addrs, 6, requests, |_| request("hot", &[&[(key, "v")]], 0)).await;
    responses
        .iter()
        .filter(|r| r.overall_code == Code::Ok as i32)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_replicas_never_admit_more_than_a_leased_limit() {
    wait_for_window_room(3600, 60);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_file(&dir);
    let servers: Vec<Ratelimitd> = (0..3)
        .map(|_| replica(&redis, &config, "5s", "1"))
        .collect();
    let addrs: Vec<SocketAddr> = servers.iter().map(Ratelimitd::grpc_addr).collect();

    for key in ["fixed", "gcra"] {
        let mut admitted = 0;
        for _ in 0..4 {
            admitted += admitted_of(&addrs, key, 300).await;
        }
        // 400 per hour: gcra refills one hit per 9 s, which the test does not last.
        assert!(
            admitted <= 400,
            "{key}: {admitted} of 1200 admitted by three replicas, over the limit of 400"
        );
        // gcra takes nothing back: the unused hits of a lease that ended stay spent until the
        // rate refills them (docs/leases.md), so they are owed on top of the leases in hand.
        let mut expired = 0;
        if key == "gcra" {
            for server in &servers {
                expired += metric(
                    server.http_addr(),
                    "ratelimitd_lease_hits_total{domain=\"hot\",rule=\"hot.gcra\",hits=\"expired\"}",
                )
                .await;
            }
        }
        assert!(
            admitted + expired as usize >= 400 - 3 * 400 / 16,
            "{key}: {admitted} admitted and {expired} hits of ended leases, fewer than the limit less three leases"
        );
    }

    let mut calls = 0;
    let mut local = 0;
    // Which replica wins the race for the last leases depends on scheduling: each rule is
    // decided from leases somewhere, not necessarily on every replica.
    let mut local_by_rule = std::collections::BTreeMap::new();
    for server in &servers {
        calls += metric(server.http_addr(), "ratelimitd_lease_calls_total").await;
        for rule in ["hot.fixed", "hot.gcra"] {
            let series = |family: &str, kind: &str| {
                format!("{family}{{domain=\"hot\",rule=\"{rule}\",{kind}}}")
            };
            // From hits in hand, or from hits in hand once a refill came (a busy machine
            // makes requests wait for refills).
            let mut by_rule = 0;
            for decided in ["local", "after_refill"] {
                by_rule += metric(
                    server.http_addr(),
                    &series(
                        "ratelimitd_lease_decisions_total",
                        &format!("decided=\"{decided}\""),
                    ),
                )
                .await;
            }
            local += by_rule;
            *local_by_rule.entry(rule).or_insert(0) += by_rule;
            let granted = metric(
                server.http_addr(),
                &series("ratelimitd_lease_hits_total", "hits=\"granted\""),
            )
            .await;
            let used = metric(
                server.http_addr(),
                &series("ratelimitd_lease_hits_total", "hits=\"used\""),
            )
            .await;
            assert!(
                0 < used && used <= granted,
                "{rule}: {used} hits used of {granted} granted"
            );
        }
        let (_, body) = http_get(server.http_addr(), "/metrics").await;
        assert!(
            !body.contains("rule=\"hot.tight\",decided="),
            "an exact rule has no lease series"
        );
    }
    for (rule, local) in &local_by_rule {
        assert!(
            *local > 0,
            "{rule}: no decision from a lease on any replica"
        );
    }
    assert!(
        calls < local,
        "leases decided requests locally: {local} local decisions, {calls} lease calls"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_request_denied_by_its_exact_descriptor_takes_nothing_from_its_leased_one() {
    wait_for_window_room(3600, 60);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let server = replica(&redis, &config_file(&dir), "5s", "2");
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..50 {
        let response = should(
            &mut client,
            request("hot", &[&[("fixed", "mixed")], &[("tight", "t")]], 0),
        )
        .await;
        codes.push(response.overall_code);
    }
    let ok = codes.iter().filter(|&&c| c == Code::Ok as i32).count();
    assert_eq!(ok, 5, "the exact descriptor admits 5");
    // The 45 denied requests took nothing: 395 of the leased 400 are still there.
    let mut admitted = 0;
    for _ in 0..400 {
        let response = should(&mut client, request("hot", &[&[("fixed", "mixed")]], 0)).await;
        if response.overall_code == Code::Ok as i32 {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted, 395,
        "the leased descriptor alone admits the rest of its limit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_redis_gone_the_hits_in_hand_are_spent_then_the_failure_policy_answers() {
    wait_for_window_room(3600, 60);
    let mut redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    // A long lease period: an idle replica gives back what it holds after two of them, which
    // must not happen before Redis is gone.
    let config = config_file(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &redis.url(),
        "--redis-timeout",
        "500ms",
        "--lease-period",
        "10s",
    ]);
    let mut client = server.client().await;
    let one = || request("hot", &[&[("fixed", "outage")]], 0);
    // Enough requests for the replica to hold a lease sized to them.
    for _ in 0..40 {
        let response = should(&mut client, one()).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    let hits = |kind: &str| {
        format!("ratelimitd_lease_hits_total{{domain=\"hot\",rule=\"hot.fixed\",hits=\"{kind}\"}}")
    };
    let held = metric(server.http_addr(), &hits("granted")).await
        - metric(server.http_addr(), &hits("used")).await;
    assert!(held > 0, "the replica holds hits of its lease");
    redis.kill();
    let mut admitted = 0;
    let mut failed = None;
    for _ in 0..held + 1 {
        match client.should_rate_limit(one()).await {
            Ok(response) if response.get_ref().overall_code == Code::Ok as i32 => admitted += 1,
            Ok(response) => panic!("denied while hits were held: {response:?}"),
            Err(status) => {
                failed = Some(status);
                break;
            }
        }
    }
    assert_eq!(
        admitted, held,
        "every hit in hand was spent with Redis gone"
    );
    let status = failed.expect("once they are spent, the store failure shows");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hits_a_replica_stops_using_go_back_to_the_other_replicas() {
    wait_for_window_room(3600, 60);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_file(&dir);
    let first = replica(&redis, &config, "5s", "2");
    let second = replica(&redis, &config, "5s", "2");
    let one = || request("hot", &[&[("fixed", "moved")]], 0);
    let mut client = first.client().await;
    for _ in 0..40 {
        let response = should(&mut client, one()).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    let hits = |kind: &str| {
        format!("ratelimitd_lease_hits_total{{domain=\"hot\",rule=\"hot.fixed\",hits=\"{kind}\"}}")
    };
    let granted = metric(first.http_addr(), &hits("granted")).await;
    assert!(granted > 40, "the first replica holds more than it used");
    // Idle for two lease periods (100 ms), the first replica gives back what it holds.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let returned = loop {
        let returned = metric(first.http_addr(), &hits("returned")).await;
        if returned > 0 || std::time::Instant::now() > deadline {
            break returned;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let used = metric(first.http_addr(), &hits("used")).await;
    assert_eq!(used, 40);
    assert_eq!(
        returned,
        granted - used,
        "every unused hit went back: {granted} granted, {used} used"
    );

    let mut client = second.client().await;
    let mut admitted = 0;
    for _ in 0..400 {
        if should(&mut client, one()).await.overall_code == Code::Ok as i32 {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        400 - 40,
        "the second replica admits all the first one did not use"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_that_stops_gives_back_what_it_did_not_use() {
    wait_for_window_room(3600, 60);
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().expect("tempdir");
    let config = config_file(&dir);
    // A long lease period: the first replica would not give its hits back for being idle
    // before the test stops it.
    let mut first = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &redis.url(),
        "--lease-period",
        "10s",
    ]);
    let one = || request("hot", &[&[("fixed", "stopped")]], 0);
    let mut client = first.client().await;
    for _ in 0..40 {
        let response = should(&mut client, one()).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    }
    let hits = |kind: &str| {
        format!("ratelimitd_lease_hits_total{{domain=\"hot\",rule=\"hot.fixed\",hits=\"{kind}\"}}")
    };
    assert!(
        metric(first.http_addr(), &hits("granted")).await > 40,
        "the first replica holds more than it used"
    );
    drop(client);
    first.terminate();
    let status = first
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("the first replica stops on SIGTERM");
    assert!(status.success(), "{status:?}");

    let second = replica(&redis, &config, "5s", "2");
    let mut client = second.client().await;
    let mut admitted = 0;
    for _ in 0..400 {
        if should(&mut client, one()).await.overall_code == Code::Ok as i32 {
            admitted += 1;
        }
    }
    assert_eq!(
        admitted,
        400 - 40,
        "the second replica admits all the first one did not use"
    );
}
