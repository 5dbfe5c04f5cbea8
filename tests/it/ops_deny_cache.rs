//! The local deny cache never changes a decision (randomized traces, compared with and without
//! it: in process on a pinned clock, and through two real servers on two real redis-servers)
//! and cuts Redis calls for a hot denied key (script calls counted with `INFO commandstats`).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, ManualClock, Rate, Unit};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use ratelimitd::store::{
    Check, DenyCache, DenyCacheSettings, MemoryStore, RedisSettings, RedisStore, Store,
};
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;

const S: u64 = 1_000_000;
const T0: u64 = 1_700_000_000 * S;

/// The rates a key may be checked with: two per algorithm sharing the counter (same algorithm
/// and window, another limit, as a per-request override would), one for token bucket, whose
/// refill depends on the rate (see the deny cache's documented limit).
fn rates(rng: &mut StdRng, algorithm: Algorithm) -> Vec<Rate> {
    let window = rng.random_range(1..=3u32);
    let count = if algorithm == Algorithm::TokenBucket {
        1
    } else {
        2
    };
    (0..count)
        .map(|_| {
            let limit = rng.random_range(1..=4u32);
            let burst = rng.random_bool(0.5).then(|| rng.random_range(1..=6u32));
            Rate::new(algorithm, limit, Unit::Second, window, burst).unwrap()
        })
        .collect()
}

struct Key {
    key: CounterKey,
    rates: Vec<Rate>,
}

fn keys(rng: &mut StdRng, algorithms: &[Algorithm]) -> Vec<Key> {
    let mut keys = Vec::new();
    for &algorithm in algorithms {
        for value in ["a", "b"] {
            keys.push(Key {
                key: CounterKey::new(
                    "d",
                    &[Entry {
                        key: algorithm.as_str().into(),
                        value: value.into(),
                    }],
                ),
                rates: rates(rng, algorithm),
            });
        }
    }
    keys
}

fn random_checks(rng: &mut StdRng, keys: &[Key]) -> Vec<Check> {
    // Mostly one hot key, sometimes several (and sometimes the same twice).
    let count = match rng.random_range(0..10) {
        0..=5 => 1,
        6..=8 => 2,
        _ => 3,
    };
    let first = rng.random_range(0..keys.len());
    (0..count)
        .map(|i| {
            let key = if i == 0 || rng.random_bool(0.3) {
                &keys[first]
            } else {
                &keys[rng.random_range(0..keys.len())]
            };
            let hits = match rng.random_range(0..20) {
                0..=1 => 0,
                2..=15 => 1,
                16..=18 => rng.random_range(2..=4),
                _ => u64::MAX,
            };
            Check {
                key: key.key.clone(),
                rate: key.rates[rng.random_range(0..key.rates.len())],
                hits,
                shadow: rng.random_bool(0.08),
                consistency: ratelimitd::limiter::Consistency::Exact,
                rule: None,
            }
        })
        .collect()
}

/// Replays a random trace through a bare memory store and through a deny cache in front of
/// another one, both on the same pinned clock; every verdict must agree.
async fn differential(
    seed: u64,
    settings: DenyCacheSettings,
    algorithms: &[Algorithm],
) -> (u64, u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let keys = keys(&mut rng, algorithms);
    let clock = Arc::new(ManualClock::new(T0 + rng.random_range(0..3 * S)));
    let bare = MemoryStore::with_clock(clock.clone());
    let cached = DenyCache::with_clock(
        Arc::new(MemoryStore::with_clock(clock.clone())),
        settings,
        clock.clone(),
    );
    let mut last_reset: u64 = 0;
    let mut requests = 0;
    for step in 0..20_000 {
        // Often come back exactly when told to (±1 µs, or within the safety margin): that is
        // where a cache that outlives the store's denial would show.
        let advance = match rng.random_range(0..10) {
            0..=3 => 0,
            4..=5 => rng.random_range(1..2_000),
            6 => (last_reset + rng.random_range(0..3)).saturating_sub(1),
            7 => last_reset.saturating_sub(rng.random_range(0..3_000)),
            _ => rng.random_range(1..S),
        };
        clock.advance_us(advance);
        let checks = random_checks(&mut rng, &keys);
        let hits_before = cached.hits();
        let expected = bare.decide(&checks).await.unwrap();
        let actual = cached.decide(&checks).await.unwrap();
        requests += 1;
        let from_cache = cached.hits() > hits_before;
        for (i, (e, a)) in expected.iter().zip(&actual).enumerate() {
            let context = || {
                format!(
                    "seed {seed}, step {step}, check {i} of {checks:?}: store {e:?}, cache {a:?}"
                )
            };
            assert_eq!(e.admitted, a.admitted, "{}", context());
            assert_eq!(e.remaining, a.remaining, "{}", context());
            if from_cache {
                // The time until one hit fits, as the store computed it when it denied (later
                // admissions under another rate of the counter can only push it back). Token
                // bucket times are float refills rounded up: computed at another instant, they
                // may differ by 1 µs.
                assert!(a.reset_after_us <= e.reset_after_us + 1, "{}", context());
            } else {
                assert_eq!(e.reset_after_us, a.reset_after_us, "{}", context());
            }
        }
        last_reset = expected.iter().map(|v| v.reset_after_us).max().unwrap_or(0);
    }
    (cached.hits(), requests)
}

#[tokio::test]
async fn the_cache_never_changes_a_verdict_on_a_pinned_clock() {
    let mut answered = 0;
    for seed in 0..10 {
        let (hits, requests) =
            differential(seed, DenyCacheSettings::default(), &Algorithm::ALL).await;
        assert!(
            hits > 0,
            "seed {seed}: the cache answered nothing of {requests}"
        );
        answered += hits;
    }
    eprintln!("answered from the cache: {answered}");
}

#[tokio::test]
async fn integer_algorithms_need_no_safety_margin_on_a_pinned_clock() {
    // On one clock, T is exact for the algorithms whose state and times are integers. The float
    // ones (sliding window counter, token bucket) round their waits up to whole µs and may
    // overshoot by a µs: one of the reasons for the margin (the other is clock drift between
    // hosts), which the test above covers.
    let exact = DenyCacheSettings {
        margin_us: 0,
        margin_ratio: 0.0,
        ..DenyCacheSettings::default()
    };
    let integer = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowLog,
        Algorithm::Gcra,
    ];
    for seed in 100..110 {
        let (hits, _) = differential(seed, exact, &integer).await;
        assert!(hits > 0);
    }
}

// ---------------------------------------------------------------------------------------------
// Through the real binary and real redis-servers.

fn serve(redis: &RedisServer, cache: bool) -> Ratelimitd {
    let config = ops_fixture("redis.yaml");
    let url = redis.url();
    let mut args = vec!["--config", config.to_str().unwrap(), "--redis-url", &url];
    if !cache {
        args.push("--no-deny-cache");
    }
    Ratelimitd::start(&args)
}

fn run_id() -> String {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
        .to_string()
}

fn assert_same(with: &RateLimitResponse, without: &RateLimitResponse, what: &str) {
    assert_eq!(
        with.overall_code, without.overall_code,
        "{what}: with cache {with:?}, without {without:?}"
    );
    assert_eq!(with.statuses.len(), without.statuses.len());
    for (a, b) in with.statuses.iter().zip(&without.statuses) {
        assert_eq!(a.code, b.code, "{what}: {with:?} / {without:?}");
        assert_eq!(a.limit_remaining, b.limit_remaining, "{what}");
        assert_eq!(a.current_limit, b.current_limit, "{what}");
        let (x, y) = (reset_secs(a), reset_secs(b));
        assert!((x - y).abs() <= 1.0, "{what}: reset {x} / {y}");
    }
}

#[tokio::test]
async fn a_hot_denied_key_stops_reaching_redis() {
    wait_for_window_room(3600, 60);
    let id = run_id();
    let redis_on = RedisServer::start();
    let redis_off = RedisServer::start();
    let on = serve(&redis_on, true);
    let off = serve(&redis_off, false);
    let (mut c_on, mut c_off) = (on.client().await, off.client().await);
    let mut conn_on = redis_on.connection();
    let mut conn_off = redis_off.connection();
    let (before_on, before_off) = (script_calls(&mut conn_on), script_calls(&mut conn_off));

    const REQUESTS: u64 = 200;
    for i in 0..REQUESTS {
        let req = request("ops", &[&[("hot", &id)]], 0);
        let with = should(&mut c_on, req.clone()).await;
        let without = should(&mut c_off, req).await;
        assert_same(&with, &without, &format!("request {i}"));
        let expected = if i == 0 { Code::Ok } else { Code::OverLimit };
        assert_eq!(overall(&with), expected, "request {i}");
    }
    let calls_on = script_calls(&mut conn_on) - before_on;
    let calls_off = script_calls(&mut conn_off) - before_off;
    assert_eq!(
        calls_off, REQUESTS,
        "without the cache every request is a call"
    );
    assert_eq!(
        calls_on, 2,
        "with it: the admitted request and the first denied one"
    );

    let text = metrics(on.http_addr()).await;
    assert_eq!(
        value(&text, "ratelimitd_deny_cache_hits_total", ""),
        (REQUESTS - 2) as f64
    );
    assert_eq!(value(&text, "ratelimitd_deny_cache_entries", ""), 1.0);
    assert_eq!(
        value(&text, "ratelimitd_redis_script_reloads_total", ""),
        0.0
    );
    // One request at a time: each call carries one, and the calls are the ones Redis counted.
    assert_eq!(
        value(&text, "ratelimitd_redis_script_calls_total", ""),
        calls_on as f64
    );
    assert_eq!(
        value(&text, "ratelimitd_redis_script_call_requests_total", ""),
        calls_on as f64
    );
    // Cache answers are decisions like any other in the rule metrics.
    assert_eq!(
        value(
            &text,
            "ratelimitd_over_limit_total",
            "domain=\"ops\",rule=\"ops.hot\""
        ),
        (REQUESTS - 1) as f64
    );
    let text = metrics(off.http_addr()).await;
    assert!(
        !text.contains("ratelimitd_deny_cache_hits_total"),
        "--no-deny-cache"
    );
    assert_eq!(
        value(&text, "ratelimitd_redis_script_calls_total", ""),
        REQUESTS as f64
    );

    // A check-only request (hits 0) is never answered from the cache.
    let mut peek = descriptor(&[("hot", &id)]);
    peek.hits_addend = Some(0);
    let before = script_calls(&mut conn_on);
    let resp = should(
        &mut c_on,
        RateLimitRequest {
            domain: "ops".into(),
            descriptors: vec![peek],
            hits_addend: 0,
        },
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(script_calls(&mut conn_on) - before, 1);
}

#[tokio::test]
async fn a_redis_restart_clears_the_cache() {
    wait_for_window_room(3600, 60);
    let id = run_id();
    let mut redis = RedisServer::start();
    let server = serve(&redis, true);
    let mut c = server.client().await;
    for code in [Code::Ok, Code::OverLimit, Code::OverLimit] {
        let resp = should(&mut c, request("ops", &[&[("hot", &id)]], 0)).await;
        assert_eq!(overall(&resp), code);
    }
    // Redis loses everything (no persistence): the key must be admitted again, not denied by a
    // stale cache entry.
    redis.restart();
    eventually(
        Duration::from_secs(15),
        "admitted after the restart",
        || {
            let mut c = c.clone();
            let id = id.clone();
            async move {
                let resp = c
                    .should_rate_limit(request("ops", &[&[("hot", &id)]], 0))
                    .await
                    .ok()?
                    .into_inner();
                (overall(&resp) == Code::Ok).then_some(())
            }
        },
    )
    .await;
    let text = metrics(server.http_addr()).await;
    assert!(value(&text, "ratelimitd_redis_connections_lost_total", "") >= 1.0);
}

/// The case the binary test above only meets by chance: the health probe reaches Redis after it
/// came back, finds its connection dead and heals on a new one, so the store never reports
/// itself unhealthy, and no request reaches Redis to see `NOSCRIPT`. The dead connection alone
/// must clear the cache.
#[tokio::test]
async fn a_restart_the_health_probe_heals_unnoticed_still_clears_the_cache() {
    let mut redis = RedisServer::start();
    let store = Arc::new(
        RedisStore::connect(RedisSettings::new(redis.url()))
            .await
            .expect("connect to the test redis-server"),
    );
    let epoch = store.clone();
    let cache = DenyCache::new(store.clone(), DenyCacheSettings::default())
        .with_epoch(move || epoch.epoch());
    let rate = Rate::new(Algorithm::FixedWindow, 1, Unit::Hour, 1, None).unwrap();
    let check = Check {
        key: CounterKey::new(
            "restart",
            &[Entry {
                key: "hot".into(),
                value: run_id(),
            }],
        ),
        rate,
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    };
    let checks = std::slice::from_ref(&check);
    assert!(store.is_healthy().await);
    assert!(cache.decide(checks).await.unwrap()[0].admitted);
    assert!(!cache.decide(checks).await.unwrap()[0].admitted);
    assert_eq!(cache.len(), 1);

    redis.restart();
    let lost_before = store.connections_lost();
    // The probe as the server runs it, without the cache's own clearing on an unhealthy answer:
    // it may meet several dead connections before a live one.
    eventually(Duration::from_secs(10), "redis healthy again", || {
        let store = store.clone();
        async move { store.is_healthy().await.then_some(()) }
    })
    .await;
    assert!(store.connections_lost() > lost_before);
    assert_eq!(
        store.script_reloads(),
        0,
        "no script call reached Redis yet"
    );

    let verdict = cache.decide(checks).await.unwrap();
    assert!(
        verdict[0].admitted,
        "the restarted Redis has no counter, so one hit fits: {verdict:?}"
    );
    assert_eq!(cache.hits(), 0, "answered from a stale entry");
}

#[tokio::test]
async fn two_servers_with_and_without_the_cache_agree_on_a_random_trace() {
    wait_for_window_room(3600, 120);
    let id = run_id();
    let redis_on = RedisServer::start();
    let redis_off = RedisServer::start();
    let on = serve(&redis_on, true);
    let off = serve(&redis_off, false);
    let (mut c_on, mut c_off) = (on.client().await, off.client().await);
    let mut rng = StdRng::seed_from_u64(7);
    let keys = [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "gcra",
        "shadow",
        "hot",
    ];
    for step in 0..600 {
        let count = match rng.random_range(0..10) {
            0..=5 => 1,
            6..=8 => 2,
            _ => 3,
        };
        let descriptors = (0..count)
            .map(|_| {
                let key = keys[rng.random_range(0..keys.len())];
                let value = format!("{id}-{}", rng.random_range(0..3));
                let mut d = descriptor(&[(key, &value)]);
                d.hits_addend = match rng.random_range(0..10) {
                    0 => Some(0),
                    1 => Some(2),
                    _ => None,
                };
                d
            })
            .collect();
        let req = RateLimitRequest {
            domain: "ops".into(),
            descriptors,
            hits_addend: 0,
        };
        let with = should(&mut c_on, req.clone()).await;
        let without = should(&mut c_off, req.clone()).await;
        assert_same(&with, &without, &format!("step {step}: {req:?}"));
    }
    let text = metrics(on.http_addr()).await;
    let hits = value(&text, "ratelimitd_deny_cache_hits_total", "");
    assert!(hits > 0.0, "the trace exercised the cache");
    let calls_on = script_calls(&mut redis_on.connection());
    let calls_off = script_calls(&mut redis_off.connection());
    assert_eq!(
        calls_on + hits as u64,
        calls_off,
        "each cache hit saved one call"
    );
}

#[tokio::test]
async fn the_cache_is_on_by_default_with_redis_and_can_be_turned_off() {
    let redis = RedisServer::start();
    let config = ops_fixture("redis.yaml");
    let url = redis.url();
    let base = ["--config", config.to_str().unwrap(), "--redis-url", &url];
    let has_cache = |text: &str| text.contains("ratelimitd_deny_cache_hits_total ");

    let default = Ratelimitd::start(&base);
    assert!(has_cache(&metrics(default.http_addr()).await));
    let mut args = base.to_vec();
    args.push("--deny-cache=false");
    let off = Ratelimitd::start(&args);
    assert!(!has_cache(&metrics(off.http_addr()).await));
    let by_env = Ratelimitd::start_with_env(&base, &[("RATELIMITD_DENY_CACHE", "false")]);
    assert!(!has_cache(&metrics(by_env.http_addr()).await));
    // The in-memory store has no round trip to save.
    let memory = Ratelimitd::start(&["--config", config.to_str().unwrap()]);
    assert!(!has_cache(&metrics(memory.http_addr()).await));
}
