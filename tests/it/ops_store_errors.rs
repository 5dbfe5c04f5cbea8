//! `--on-store-error unavailable|allow|deny` with a real redis-server killed or frozen under the
//! service: every answer comes back within the Redis timeout, follows the policy, and is counted.
//! A quick restart, over before the next health probe, leaves health SERVING.

use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

const TIMEOUT: Duration = Duration::from_millis(200);
/// What a failing answer may take beyond the Redis timeout (gRPC on loopback, scheduling).
const SLACK: Duration = Duration::from_millis(300);

fn serve(redis: &RedisServer, policy: Option<&str>) -> Ratelimitd {
    let config = ops_fixture("redis.yaml");
    let url = redis.url();
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &url,
        "--redis-timeout",
        "200ms",
    ];
    if let Some(policy) = policy {
        args.extend(["--on-store-error", policy]);
    }
    Ratelimitd::start(&args)
}

/// A request with a counted descriptor, a shadow-mode one and one without a limit.
fn mixed() -> RateLimitRequest {
    request(
        "ops",
        &[
            &[("fixed_window", "policy")],
            &[("shadow", "policy")],
            &[("unlisted", "x")],
        ],
        0,
    )
}

/// Sends `req`; returns the answer and asserts it came within the timeout.
async fn timed(c: &mut Client, req: RateLimitRequest) -> Result<RateLimitResponse, tonic::Status> {
    let started = Instant::now();
    let result = c.should_rate_limit(req).await.map(|r| r.into_inner());
    let took = started.elapsed();
    assert!(
        took <= TIMEOUT + SLACK,
        "answered after {took:?}, timeout {TIMEOUT:?}: {result:?}"
    );
    result
}

async fn counters(server: &Ratelimitd, policy: &str) -> (f64, f64) {
    let text = metrics(server.http_addr()).await;
    let errors: f64 = ["timeout", "unavailable", "protocol"]
        .iter()
        .map(|kind| {
            value(
                &text,
                "ratelimitd_store_errors_total",
                &format!("kind=\"{kind}\""),
            )
        })
        .sum();
    let answers = value(
        &text,
        "ratelimitd_store_error_answers_total",
        &format!("policy=\"{policy}\""),
    );
    (errors, answers)
}

async fn killed_redis(policy: Option<&str>) {
    let name = policy.unwrap_or("unavailable");
    let mut redis = RedisServer::start();
    let server = serve(&redis, policy);
    let mut c = server.client().await;
    let resp = timed(&mut c, mixed()).await.expect("redis is up");
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(counters(&server, name).await, (0.0, 0.0));

    redis.kill();
    if name == "unavailable" {
        liveness_stays_serving_while_readiness_follows_the_store(&server).await;
    }
    for _ in 0..5 {
        let result = timed(&mut c, mixed()).await;
        match name {
            "unavailable" => {
                let status = result.expect_err("UNAVAILABLE");
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
            }
            "allow" => {
                let resp = result.expect("an answer");
                check_invariants(&resp, 3);
                assert_eq!(overall(&resp), Code::Ok);
                assert!(resp.statuses.iter().all(|s| code(s) == Code::Ok));
                assert!(resp.statuses[0].current_limit.is_some());
            }
            "deny" => {
                let resp = result.expect("an answer");
                check_invariants(&resp, 3);
                assert_eq!(overall(&resp), Code::OverLimit);
                let codes: Vec<Code> = resp.statuses.iter().map(code).collect();
                assert_eq!(
                    codes,
                    [Code::OverLimit, Code::Ok, Code::Ok],
                    "the counted descriptor is denied; shadow mode never denies; no limit is OK"
                );
                assert_eq!(resp.statuses[0].limit_remaining, 0);
            }
            other => unreachable!("{other}"),
        }
    }
    // A request without counted descriptors never needs the store.
    let resp = timed(&mut c, request("ops", &[&[("unlisted", "y")]], 0))
        .await
        .expect("no store needed");
    assert_eq!(overall(&resp), Code::Ok);

    // /json follows the policy too.
    let json = post_json(
        server.http_addr(),
        r#"{"domain":"ops","descriptors":[{"entries":[{"key":"fixed_window","value":"policy"}]}]}"#,
    )
    .await;
    let expected = match name {
        "unavailable" => 503,
        "allow" => 200,
        _ => 429,
    };
    assert_eq!(json.status, expected, "{json:?}");

    let (errors, answers) = counters(&server, name).await;
    assert_eq!(answers, 6.0, "5 gRPC and 1 /json answers from the policy");
    assert_eq!(errors, 6.0);
    let text = metrics(server.http_addr()).await;
    let unavailable = value(&text, "ratelimitd_requests_total", "result=\"unavailable\"");
    assert_eq!(unavailable, if name == "unavailable" { 6.0 } else { 0.0 });

    // Redis back: decisions come from it again.
    redis.restart();
    eventually(Duration::from_secs(15), "recovery", || {
        let mut c = c.clone();
        async move {
            let resp = c.should_rate_limit(mixed()).await.ok()?.into_inner();
            (overall(&resp) == Code::Ok && resp.statuses[0].limit_remaining == 2).then_some(())
        }
    })
    .await;
}

/// With Redis gone, the names that follow the store turn NOT_SERVING (readiness) while
/// `ratelimitd.liveness` stays SERVING: a liveness probe must not restart a replica for an
/// outage that no restart cures.
async fn liveness_stays_serving_while_readiness_follows_the_store(server: &Ratelimitd) {
    let mut health = server.health_client().await;
    eventually(Duration::from_secs(10), "readiness NOT_SERVING", || {
        let mut health = health.clone();
        async move {
            (overall_health(&mut health).await == ServingStatus::NotServing as i32).then_some(())
        }
    })
    .await;
    let liveness = health
        .check(HealthCheckRequest {
            service: "ratelimitd.liveness".into(),
        })
        .await
        .expect("liveness answers")
        .into_inner()
        .status;
    assert_eq!(liveness, ServingStatus::Serving as i32);
}

#[tokio::test]
async fn unavailable_is_the_default_with_redis_killed() {
    killed_redis(None).await;
}

#[tokio::test]
async fn allow_with_redis_killed() {
    killed_redis(Some("allow")).await;
}

#[tokio::test]
async fn deny_with_redis_killed() {
    killed_redis(Some("deny")).await;
}

#[tokio::test]
async fn a_frozen_redis_is_a_timeout_answered_by_the_policy() {
    for policy in ["allow", "deny", "unavailable"] {
        let mut redis = RedisServer::start();
        let server = serve(&redis, Some(policy));
        let mut c = server.client().await;
        timed(&mut c, mixed()).await.expect("redis is up");
        redis.pause();
        let result = timed(&mut c, mixed()).await;
        match policy {
            "allow" => assert_eq!(overall(&result.unwrap()), Code::Ok),
            "deny" => assert_eq!(overall(&result.unwrap()), Code::OverLimit),
            _ => assert_eq!(result.unwrap_err().code(), tonic::Code::Unavailable),
        }
        let text = metrics(server.http_addr()).await;
        assert_eq!(
            value(&text, "ratelimitd_store_errors_total", "kind=\"timeout\""),
            1.0,
            "{policy}"
        );
        redis.resume();
    }
}

/// Redis restarted between two health probes (one per second) is back when the next probe meets
/// the dead connections it left in every pool: the probe replaces them and health stays SERVING,
/// rather than turning NOT_SERVING for a probe interval with Redis up.
#[tokio::test]
async fn a_quick_redis_restart_keeps_health_serving() {
    let mut redis = RedisServer::start();
    let server = serve(&redis, None);
    // One client per connection: the connections are dealt to every serving thread, and each
    // thread opens its own Redis connections.
    for _ in 0..4 {
        let mut c = server.client().await;
        timed(&mut c, mixed()).await.expect("redis is up");
    }
    let mut health = server.health_client().await;
    assert_eq!(
        overall_health(&mut health).await,
        ServingStatus::Serving as i32
    );

    redis.restart();
    let restarted = Instant::now();
    while restarted.elapsed() < Duration::from_millis(2_500) {
        assert_eq!(
            overall_health(&mut health).await,
            ServingStatus::Serving as i32,
            "NOT_SERVING {:?} after a restart that was over",
            restarted.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let text = metrics(server.http_addr()).await;
    assert!(value(&text, "ratelimitd_redis_connections_lost_total", "") >= 1.0);
    let mut c = server.client().await;
    timed(&mut c, mixed()).await.expect("redis is back");
}
