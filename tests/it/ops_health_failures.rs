//! Health follows the store's recent failures, not only its probe: a real redis-server out of
//! memory (`maxmemory 1`, `noeviction`) answers PING but refuses every script call with OOM.
//! Under traffic, gRPC health turns NOT_SERVING and `/healthcheck` 503 within a bounded time,
//! and both come back once calls succeed again. Denials are answers, not failures.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;
use tonic_health::pb::health_check_response::ServingStatus;

const SERVING: i32 = ServingStatus::Serving as i32;
const NOT_SERVING: i32 = ServingStatus::NotServing as i32;

/// The health window the server is given, and the bound on each change of health: the window
/// (failures must fill half of it, or age out of it) plus the 1 s probe, with room for a loaded
/// machine.
const WINDOW: &str = "3s";
const BOUND: Duration = Duration::from_secs(10);

fn serve(redis: &RedisServer, extra: &[&str], envs: &[(&str, &str)]) -> Ratelimitd {
    let config = ops_fixture("redis.yaml");
    let url = redis.url();
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &url,
        // Denials come from Redis itself, not from the local cache.
        "--no-deny-cache",
        // The failures are Redis's own error answers: a call slowed by a loaded machine must
        // not time out and count as one (or fail the denial phase's `should`).
        "--redis-timeout",
        "2s",
        "--health-failure-min-calls",
        "10",
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start_with_env(&args, envs)
}

/// Sends requests on one key, one after another, until dropped; counts the answers and the
/// failures. A fresh key's first hit writes, so under OOM every call fails.
struct Traffic {
    stop: Arc<AtomicBool>,
    failed: Arc<AtomicU64>,
    answered: Arc<AtomicU64>,
}

impl Traffic {
    async fn start(server: &Ratelimitd, value: &'static str) -> Traffic {
        let mut client = server.client().await;
        let stop = Arc::new(AtomicBool::new(false));
        let failed = Arc::new(AtomicU64::new(0));
        let answered = Arc::new(AtomicU64::new(0));
        let (until, failures, answers) = (stop.clone(), failed.clone(), answered.clone());
        tokio::spawn(async move {
            while !until.load(Ordering::Relaxed) {
                let req = request("ops", &[&[("fixed_window", value)]], 0);
                match client.should_rate_limit(req).await {
                    Ok(_) => answers.fetch_add(1, Ordering::Relaxed),
                    Err(_) => failures.fetch_add(1, Ordering::Relaxed),
                };
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        });
        Traffic {
            stop,
            failed,
            answered,
        }
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// Health as gRPC and `/healthcheck` see it, once both agree.
async fn health(server: &Ratelimitd) -> i32 {
    let mut client = server.health_client().await;
    loop {
        let grpc = overall_health(&mut client).await;
        let (http, _) = http_get(server.http_addr(), "/healthcheck").await;
        match (grpc, http) {
            (SERVING, 200) => return SERVING,
            (NOT_SERVING, 503) => return NOT_SERVING,
            // One changed between the two reads.
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// How long health took to read `wanted` (gRPC and HTTP), failing after [`BOUND`].
async fn turns(server: &Ratelimitd, wanted: i32, what: &str) -> Duration {
    let started = Instant::now();
    while health(server).await != wanted {
        assert!(
            started.elapsed() < BOUND,
            "{what}: health not {wanted} within {BOUND:?}; output:\n{}",
            server.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    started.elapsed()
}

fn out_of_memory(redis: &RedisServer, oom: bool) {
    let mut connection = redis.connection();
    let limit = if oom { "1" } else { "0" };
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory-policy")
        .arg("noeviction")
        .query(&mut connection)
        .unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg(limit)
        .query(&mut connection)
        .unwrap();
    let pong: String = redis::cmd("PING").query(&mut connection).unwrap();
    assert_eq!(pong, "PONG", "Redis out of memory still answers PING");
}

#[tokio::test]
async fn redis_refusing_every_call_turns_health_off_and_back() {
    let redis = RedisServer::start();
    let server = serve(&redis, &["--health-failure-window", WINDOW], &[]);
    assert_eq!(health(&server).await, SERVING);

    // Denials: the key admits 3 an hour (tests/fixtures/ops/redis.yaml), so nearly every answer
    // is OVER_LIMIT from Redis, for longer than the window.
    let mut c = server.client().await;
    let denied = request("ops", &[&[("fixed_window", "denied")]], 0);
    let started = Instant::now();
    let mut over = 0;
    while started.elapsed() < Duration::from_secs(4) {
        let resp = should(&mut c, denied.clone()).await;
        over += u32::from(overall(&resp) == Code::OverLimit);
    }
    assert!(over > 100, "{over} denials");
    assert_eq!(health(&server).await, SERVING, "denials are not failures");

    let traffic = Traffic::start(&server, "oom").await;
    out_of_memory(&redis, true);
    let took = turns(&server, NOT_SERVING, "Redis out of memory").await;
    let failed = traffic.failed.load(Ordering::Relaxed);
    assert!(failed > 10, "{failed} calls failed in {took:?}");
    assert!(
        server.output().contains("store calls failing"),
        "{}",
        server.output()
    );
    let text = metrics(server.http_addr()).await;
    assert!(
        value(&text, "ratelimitd_health_store_failures", "") >= 10.0,
        "{text}"
    );
    assert_eq!(
        value(&text, "ratelimitd_health_store_failure_trips_total", ""),
        1.0
    );

    out_of_memory(&redis, false);
    let answered = traffic.answered.load(Ordering::Relaxed);
    turns(&server, SERVING, "Redis answering again").await;
    assert!(
        traffic.answered.load(Ordering::Relaxed) > answered,
        "the calls succeed again"
    );
    drop(traffic);
}

/// envoyproxy/ratelimit's REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false (its default, and so
/// drop-in mode's): health does not follow failed calls, only the probe of Redis.
#[tokio::test]
async fn redis_health_check_active_connection_false_keeps_health_on_failed_calls() {
    let redis = RedisServer::start();
    let server = serve(
        &redis,
        &[],
        &[("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "false")],
    );
    let traffic = Traffic::start(&server, "oom-upstream").await;
    out_of_memory(&redis, true);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        assert_eq!(health(&server).await, SERVING, "{:?}", started.elapsed());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(traffic.failed.load(Ordering::Relaxed) > 10);
    drop(traffic);
}
