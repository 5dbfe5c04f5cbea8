//! The rate limit quota service (RLQS) against the real binary, spoken to by a test client built
//! from the generated RLQS client, as an Envoy's rate_limit_quota filter speaks it: the first
//! report of a bucket answered at once, each rule's strategy, one limit shared between two
//! streams and released by one going idle, idle buckets abandoned, malformed buckets ignored,
//! unknown domains, hot reload pushing assignments, the bucket cap, `/rlqs` and the metrics.

use std::fs;
use std::path::Path;
use std::time::Duration;

use ratelimitd::proto::rlqs::BucketId;
use testkit::ratelimitd::{http_get, Ratelimitd};
use testkit::rlqs_client::{bucket, key, usage, Envoy, Told};
use tonic::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

const DOMAIN: &str = "rlqs";

/// How long an answer may take.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

fn config(shared_per_second: u32) -> String {
    format!(
        "domain: {DOMAIN}
descriptors:
  - key: name
    value: shared
    rate_limit: {{unit: second, requests_per_unit: {shared_per_second}}}
  - key: name
    value: zero
    rate_limit: {{unit: second, requests_per_unit: 0}}
  - key: name
    value: free
    rate_limit: {{unlimited: true}}
"
    )
}

fn write_config(dir: &Path, shared_per_second: u32) -> String {
    let path = dir.join("rlqs.yaml");
    let temporary = dir.join("rlqs.yaml.tmp~");
    fs::write(&temporary, config(shared_per_second)).unwrap();
    fs::rename(&temporary, &path).unwrap();
    path.display().to_string()
}

/// Three report rounds in which `a` and `b` each demand 20/s of `bucket`'s 10/s (each round:
/// `a` reports and reads its answers, then `b`): their shares add up to at most the limit, and
/// each is within 10 % of half of it.
async fn assert_halves_when_both_demand_twice_the_limit(
    a: &mut Envoy,
    b: &mut Envoy,
    bucket: &BucketId,
) {
    for _ in 0..3 {
        for envoy in [&mut *a, &mut *b] {
            envoy
                .report(DOMAIN, vec![usage(bucket.clone(), 50, 50, 5)])
                .await;
            envoy.drain(Duration::from_millis(200)).await;
        }
    }
    let (ra, rb) = (a.latest[&key(bucket)].rate(), b.latest[&key(bucket)].rate());
    assert!(ra + rb <= 10.0, "{ra} + {rb}");
    assert!(
        (4.5..=5.0).contains(&ra) && (4.5..=5.0).contains(&rb),
        "{ra}, {rb}"
    );
}

#[tokio::test]
async fn each_rule_gets_its_strategy_at_the_first_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), 10);
    let server = Ratelimitd::start(&["--config", &path]);

    let mut health = server.health_client().await;
    let status = health
        .check(HealthCheckRequest {
            service: "envoy.service.rate_limit_quota.v3.RateLimitQuotaService".into(),
        })
        .await
        .expect("the RLQS service has a health status")
        .into_inner()
        .status;
    assert_eq!(status, ServingStatus::Serving as i32);

    let mut envoy = Envoy::connect(&server).await;
    let shared = bucket(&[("name", "shared")]);
    envoy
        .report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)])
        .await;
    assert_eq!(
        envoy.told(&shared, ANSWER_WITHIN).await,
        Told::Tokens {
            per_fill: 10,
            interval_s: 1,
            max: 10
        },
        "alone, all of L"
    );
    for (value, want) in [
        ("zero", Told::Deny),
        ("free", Told::Allow),
        ("unmatched", Told::Allow),
    ] {
        let id = bucket(&[("name", value)]);
        envoy.report(DOMAIN, vec![usage(id.clone(), 1, 0, 0)]).await;
        assert_eq!(envoy.told(&id, ANSWER_WITHIN).await, want, "{value}");
    }

    // An empty bucket map and an empty key are ignored; the report's other bucket is answered.
    let other = bucket(&[("name", "free"), ("path", "/x")]);
    envoy
        .report(
            DOMAIN,
            vec![
                usage(bucket(&[]), 1, 0, 0),
                usage(bucket(&[("", "x")]), 1, 0, 0),
                usage(other.clone(), 1, 0, 0),
            ],
        )
        .await;
    assert_eq!(envoy.told(&other, ANSWER_WITHIN).await, Told::Allow);

    // A domain no configuration defines: the blanket rule for every bucket.
    let mut stranger = Envoy::connect(&server).await;
    stranger
        .report("nowhere", vec![usage(shared.clone(), 1, 0, 0)])
        .await;
    assert_eq!(stranger.told(&shared, ANSWER_WITHIN).await, Told::Allow);
    stranger
        .report(DOMAIN, vec![usage(bucket(&[("name", "zero")]), 0, 4, 5)])
        .await;
    stranger.drain(Duration::from_millis(300)).await;

    let (code, body) = http_get(server.http_addr(), "/rlqs").await;
    assert_eq!(code, 200, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let buckets = json["buckets"].as_array().expect("buckets");
    let shared_view = buckets
        .iter()
        .find(|b| b["domain"] == DOMAIN && b["bucket"]["name"] == "shared")
        .unwrap_or_else(|| panic!("the shared bucket in {body}"));
    assert_eq!(shared_view["rule"], "rlqs.name_shared");
    assert_eq!(shared_view["limit_per_second"], 10.0);
    assert_eq!(
        shared_view["streams"][0]["assignment"]["token_bucket"]["tokens_per_fill"],
        10
    );
    assert!(
        buckets
            .iter()
            .any(|b| b["domain"] == "nowhere" && b["rule"] == "unmatched"),
        "{body}"
    );

    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    for line in [
        "ratelimitd_rlqs_streams 2",
        "ratelimitd_rlqs_reported_allowed_total{rule=\"rlqs.name_shared\"} 1",
        "ratelimitd_rlqs_reported_denied_total{rule=\"rlqs.name_zero\"} 4",
        "ratelimitd_rlqs_reported_allowed_total{rule=\"unmatched\"} 3",
    ] {
        assert!(metrics.lines().any(|l| l == line), "{line} in:\n{metrics}");
    }
    assert!(metrics.contains("\nratelimitd_rlqs_buckets "), "{metrics}");
    let sent: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("ratelimitd_rlqs_assignments_sent_total "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("assignments sent in:\n{metrics}"));
    assert!(sent >= 7, "{sent}");
}

#[tokio::test]
async fn two_streams_share_one_limit_and_an_idle_one_releases_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), 10);
    let server = Ratelimitd::start(&["--config", &path]);
    let shared = bucket(&[("name", "shared")]);

    let mut a = Envoy::connect(&server).await;
    let mut b = Envoy::connect(&server).await;
    a.report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)]).await;
    assert_eq!(a.told(&shared, ANSWER_WITHIN).await.rate(), 10.0);
    b.report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)]).await;
    assert_eq!(b.told(&shared, ANSWER_WITHIN).await.rate(), 5.0);
    assert_eq!(
        a.told(&shared, ANSWER_WITHIN).await.rate(),
        5.0,
        "pushed to the first stream without a report of its own"
    );

    // Both demand 20/s, twice the limit.
    assert_halves_when_both_demand_twice_the_limit(&mut a, &mut b, &shared).await;

    // b goes idle (reports 0/0): that one report hands its share to a, pushed to a's stream
    // without a report of a's, and b keeps the floor.
    b.report(DOMAIN, vec![usage(shared.clone(), 0, 0, 5)]).await;
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while a.latest[&key(&shared)].rate() < 9.0 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", a.latest);
        a.drain(Duration::from_millis(200)).await;
    }
    b.drain(Duration::from_millis(200)).await;
    let (ra, rb) = (
        a.latest[&key(&shared)].rate(),
        b.latest[&key(&shared)].rate(),
    );
    assert!(ra + rb <= 10.0, "{ra} + {rb}");
    assert!((0.25..=1.0).contains(&rb), "b keeps the floor: {rb}");

    // b leaves: a gets all of L without reporting.
    drop(b);
    let deadline = tokio::time::Instant::now() + ANSWER_WITHIN;
    while a.latest[&key(&shared)].rate() < 10.0 {
        assert!(tokio::time::Instant::now() < deadline, "{:?}", a.latest);
        a.drain(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
async fn flags_unmatched_deny_idle_abandon_and_the_bucket_cap() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), 10);
    let server = Ratelimitd::start(&[
        "--config",
        &path,
        "--rlqs-unmatched",
        "deny",
        "--rlqs-idle-timeout",
        "1s",
        "--rlqs-max-buckets-per-stream",
        "3",
    ]);
    let mut envoy = Envoy::connect(&server).await;
    let unmatched = bucket(&[("name", "unmatched")]);
    envoy
        .report(DOMAIN, vec![usage(unmatched.clone(), 1, 0, 0)])
        .await;
    assert_eq!(envoy.told(&unmatched, ANSWER_WITHIN).await, Told::Deny);
    let started = std::time::Instant::now();
    assert_eq!(
        envoy.told(&unmatched, ANSWER_WITHIN).await,
        Told::Abandon,
        "idle for more than --rlqs-idle-timeout"
    );
    assert!(started.elapsed() >= Duration::from_millis(900));

    let capped = Envoy::connect(&server).await;
    let mut capped = capped;
    capped
        .report(
            DOMAIN,
            (0..4)
                .map(|i| usage(bucket(&[("name", &format!("b{i}"))]), 1, 0, 0))
                .collect(),
        )
        .await;
    let status = loop {
        match capped.next(ANSWER_WITHIN).await {
            Ok(Some(_)) => continue,
            Ok(None) => panic!("the stream did not end"),
            Err(status) => break status,
        }
    };
    assert_eq!(status.code(), Code::ResourceExhausted, "{status:?}");
    assert!(
        status.message().contains("--rlqs-max-buckets-per-stream"),
        "{status:?}"
    );
    assert!(capped.latest.len() <= 3, "{:?}", capped.latest);
}

#[tokio::test]
async fn a_changed_rule_is_pushed_without_a_report() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), 10);
    let server = Ratelimitd::start(&["--config", &path, "--reload-interval", "1s"]);
    let mut envoy = Envoy::connect(&server).await;
    let shared = bucket(&[("name", "shared")]);
    envoy
        .report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)])
        .await;
    assert_eq!(envoy.told(&shared, ANSWER_WITHIN).await.rate(), 10.0);
    write_config(dir.path(), 20);
    assert_eq!(
        envoy.told(&shared, Duration::from_secs(10)).await.rate(),
        20.0
    );
    fs::write(
        dir.path().join("rlqs.yaml"),
        config(10).replace("requests_per_unit: 10", "requests_per_unit: 0"),
    )
    .unwrap();
    server.signal("HUP");
    assert_eq!(
        envoy.told(&shared, Duration::from_secs(10)).await,
        Told::Deny
    );
}

/// Two replicas on one Redis Cluster, a stream on each reporting one bucket: the bucket's
/// demands live on the master of its hash's slot, so each replica shares the limit over both
/// streams, as two streams on one replica do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicas_on_a_redis_cluster_share_one_limit() {
    let cluster = testkit::redis_cluster::RedisCluster::start(3, 0);
    let seeds = cluster.seeds();
    let dir = tempfile::tempdir().unwrap();
    let path = write_config(dir.path(), 10);
    let flags = [
        "--config",
        &path,
        "--redis-cluster",
        &seeds,
        "--redis-timeout",
        "2s",
    ];
    let (first, second) = (Ratelimitd::start(&flags), Ratelimitd::start(&flags));
    let shared = bucket(&[("name", "shared")]);
    let mut a = Envoy::connect(&first).await;
    let mut b = Envoy::connect(&second).await;
    a.report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)]).await;
    assert_eq!(
        a.told(&shared, ANSWER_WITHIN).await.rate(),
        10.0,
        "alone: all of L"
    );
    b.report(DOMAIN, vec![usage(shared.clone(), 1, 0, 0)]).await;
    assert_eq!(
        b.told(&shared, ANSWER_WITHIN).await.rate(),
        5.0,
        "a newcomer beside a's stream"
    );
    // Both demand 20/s; each replica learns of the other's stream at its own reports.
    assert_halves_when_both_demand_twice_the_limit(&mut a, &mut b, &shared).await;
}
