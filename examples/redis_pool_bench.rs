//! Throughput of the Redis store's connection strategies against a local redis-server (started
//! here on a free port): 64 concurrent tasks, each sending `REQUESTS_PER_TASK` decisions, per
//! strategy. The raw strategies send one EVALSHA per decision; the store batches.
//!
//! ```text
//! cargo run --release --example redis_pool_bench [requests_per_task] [checks_per_request]
//! ```
//!
//! Strategies:
//! - `bb8-redis stock`: `bb8_redis::RedisConnectionManager` with bb8's defaults (a PING on every
//!   check-out), connection held for the round trip. What bb8-redis gives out of the box.
//! - `RedisStore exclusive`: the store's pool, connection held for the round trip, no PING.
//! - `RedisStore multiplexed`: the store's default: a pooled multiplexed connection is cloned
//!   and released at once; concurrent requests share script calls (see `store::redis::batch`),
//!   up to `pool_size` calls in flight.
//! - `redis ConnectionManager`: one auto-reconnecting multiplexed connection, cloned per request.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bb8_redis::{bb8, RedisConnectionManager};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::store::redis::scripts::reply::decode_batch_reply;
use ratelimitd::store::redis::scripts::request::{evalsha, Invocation};
use ratelimitd::store::redis::{ConnectionMode, RedisSettings};
use ratelimitd::store::{Check, RedisStore, Store};
use testkit::redis_server::RedisServer;

const TASKS: usize = 64;

fn checks_for(task: usize, per_request: usize) -> Vec<Check> {
    let rate = Rate::new(Algorithm::FixedWindow, u32::MAX, Unit::Hour, 1, None).unwrap();
    (0..per_request)
        .map(|i| Check {
            key: CounterKey::new(
                "bench",
                &[Entry {
                    key: "task".into(),
                    value: format!("{task}/{i}"),
                }],
            ),
            rate,
            hits: 1,
            shadow: false,
            consistency: ratelimitd::limiter::Consistency::Exact,
            rule: None,
        })
        .collect()
}

/// Decodes the reply of a call carrying one request of `checks` checks.
fn decode_one(reply: redis::Value, checks: usize) {
    let mut replies = decode_batch_reply(reply, std::iter::once(checks)).unwrap();
    assert_eq!(replies.pop().unwrap().unwrap().len(), checks);
}

/// Runs `TASKS` tasks of `requests` calls of `call(task)`; returns (requests/s, p50, p99, max).
async fn run<F, Fut>(requests: usize, call: F) -> (f64, Duration, Duration, Duration)
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let call = Arc::new(call);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let call = call.clone();
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(requests);
            for _ in 0..requests {
                let t = Instant::now();
                call(task).await;
                latencies.push(t.elapsed());
            }
            latencies
        }));
    }
    let mut latencies = Vec::new();
    for task in tasks {
        latencies.extend(task.await.unwrap());
    }
    let elapsed = started.elapsed();
    latencies.sort();
    let pick = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    (
        latencies.len() as f64 / elapsed.as_secs_f64(),
        pick(0.5),
        pick(0.99),
        pick(1.0),
    )
}

fn report(name: &str, (rate, p50, p99, max): (f64, Duration, Duration, Duration)) {
    println!(
        "| {name} | {:.0} | {:.0} | {:.0} | {:.0} |",
        rate,
        p50.as_secs_f64() * 1e6,
        p99.as_secs_f64() * 1e6,
        max.as_secs_f64() * 1e6
    );
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(2_000, |a| a.parse().unwrap());
    let per_request: usize = args.next().map_or(1, |a| a.parse().unwrap());
    let server = RedisServer::start();
    let url = server.url();
    let settings = |pool_size| RedisSettings {
        // Generous: exclusive pools starve some waiters for a long time (see the table).
        timeout: Duration::from_secs(60),
        pool_size,
        ..RedisSettings::new(url.clone())
    };
    println!(
        "\n{TASKS} tasks x {requests} requests, {per_request} check(s) per request (raw pools: one \
         EVALSHA each; RedisStore: shared calls)\n"
    );
    println!("| strategy | requests/s | p50 µs | p99 µs | max µs |");
    println!("|---|---|---|---|---|");

    // The store loads the script; the raw strategies below rely on that.
    let store = RedisStore::connect(settings(4)).await.unwrap();
    drop(store);

    for pool_size in [8u32, 32, 64] {
        let manager = RedisConnectionManager::new(url.as_str()).unwrap();
        let pool = bb8::Pool::builder()
            .max_size(pool_size)
            .connection_timeout(Duration::from_secs(60))
            .build(manager)
            .await
            .unwrap();
        let result = run(requests, move |task| {
            let pool = pool.clone();
            async move {
                let invocation = Invocation::new(&checks_for(task, per_request), None);
                let mut conn = pool.get().await.unwrap();
                let reply = evalsha(std::iter::once(&invocation))
                    .query_async(&mut *conn)
                    .await
                    .unwrap();
                decode_one(reply, per_request);
            }
        })
        .await;
        report(&format!("bb8-redis stock, pool {pool_size}"), result);
    }

    for (mode, sizes) in [
        (ConnectionMode::Exclusive, &[8u32, 32, 64][..]),
        (ConnectionMode::Multiplexed, &[1u32, 2, 4, 8][..]),
    ] {
        for &pool_size in sizes {
            let store = RedisStore::connect_with_mode(settings(pool_size), mode)
                .await
                .unwrap();
            let result = run(requests, move |task| {
                let store = store.clone();
                async move {
                    let verdicts = store.decide(&checks_for(task, per_request)).await.unwrap();
                    assert!(verdicts.iter().all(|v| v.admitted));
                }
            })
            .await;
            report(&format!("RedisStore {mode:?}, pool {pool_size}"), result);
        }
    }

    let client = redis::Client::open(url.as_str()).unwrap();
    let manager = client.get_connection_manager().await.unwrap();
    let result = run(requests, move |task| {
        let mut conn = manager.clone();
        async move {
            let invocation = Invocation::new(&checks_for(task, per_request), None);
            let reply = evalsha(std::iter::once(&invocation))
                .query_async(&mut conn)
                .await
                .unwrap();
            decode_one(reply, per_request);
        }
    })
    .await;
    report("redis ConnectionManager (1 socket)", result);
}
