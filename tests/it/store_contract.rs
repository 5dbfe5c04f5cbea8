//! The store contract: ONE set of test bodies, run against the memory store and against the Redis
//! store (a real redis-server, time pinned to the same kind of manual clock), for every algorithm.

use std::sync::Arc;

use ratelimitd::limiter::algorithm::Verdict;
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, MemoryStore, RedisStore, Store};
use testkit::redis_server::RedisServer;

const S: u64 = 1_000_000;
/// A minute-aligned instant (2023-11-14), so a minute window starts exactly here.
const T0: u64 = 1_700_000_040 * S;
const MINUTE: u64 = 60 * S;

fn memory_store() -> (MemoryStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = MemoryStore::with_clock(clock.clone() as Arc<dyn Clock>);
    (store, clock)
}

async fn redis_store(server: &RedisServer) -> (RedisStore, Arc<ManualClock>) {
    let clock = Arc::new(ManualClock::new(T0));
    let store = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect to the test redis-server")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    (store, clock)
}

/// Runs every listed body against both stores: `memory::<name>` and `redis::<name>`.
macro_rules! contract {
    ($($name:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test]
                async fn $name() {
                    let (store, clock) = super::memory_store();
                    super::$name(&store, &clock).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $name() {
                    let server = super::RedisServer::start();
                    let (store, clock) = super::redis_store(&server).await;
                    super::$name(&store, &clock).await;
                }
            )*
        }
    };
}

contract!(
    capacity_is_exact_from_idle,
    a_single_request_takes_the_whole_capacity,
    fixed_window_boundaries_and_resets,
    sliding_window_log_boundaries_and_resets,
    sliding_window_counter_weighting_and_resets,
    token_bucket_refill_and_resets,
    gcra_spacing_and_resets,
    all_or_nothing_across_three_descriptors,
    duplicate_counters_in_one_request,
    zero_hits_consume_nothing,
    shadow_checks_never_veto,
    empty_request_is_empty,
    a_read_sees_what_a_zero_hit_check_sees_and_consumes_nothing,
    a_reset_starts_its_counter_afresh_and_no_other,
);

fn key(domain: &str, value: &str) -> CounterKey {
    CounterKey::new(
        domain,
        &[Entry {
            key: "k".into(),
            value: value.into(),
        }],
    )
}

fn rate(algorithm: Algorithm, limit: u32, unit: Unit, burst: Option<u32>) -> Rate {
    Rate::new(algorithm, limit, unit, 1, burst).expect("valid rate")
}

fn check(key: &CounterKey, rate: Rate, hits: u64) -> Check {
    Check {
        key: key.clone(),
        rate,
        hits,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

async fn decide<S: Store>(store: &S, checks: &[Check]) -> Vec<Verdict> {
    store.decide(checks).await.expect("store answers")
}

async fn one<S: Store>(store: &S, check: Check) -> Verdict {
    let verdicts = decide(store, &[check]).await;
    assert_eq!(verdicts.len(), 1);
    verdicts[0]
}

fn admitted(remaining: u32, reset_after_us: u64) -> Verdict {
    Verdict {
        admitted: true,
        remaining,
        reset_after_us,
        counted_when_vetoed: false,
    }
}

fn denied(remaining: u32, reset_after_us: u64) -> Verdict {
    Verdict {
        admitted: false,
        remaining,
        reset_after_us,
        counted_when_vetoed: false,
    }
}

/// Every algorithm at 10 per minute, plus token bucket and GCRA with bursts below and above it.
fn rates() -> Vec<Rate> {
    let mut rates: Vec<Rate> = Algorithm::ALL
        .into_iter()
        .map(|a| rate(a, 10, Unit::Minute, None))
        .collect();
    for burst in [4, 25] {
        rates.push(rate(Algorithm::TokenBucket, 10, Unit::Minute, Some(burst)));
        rates.push(rate(Algorithm::Gcra, 10, Unit::Minute, Some(burst)));
    }
    rates
}

/// `reset_after_us` after `taken` single hits at the start of a minute window (10 per minute).
fn reset_after_taking(rate: &Rate, taken: u64) -> u64 {
    match rate.algorithm() {
        Algorithm::FixedWindow | Algorithm::SlidingWindowLog | Algorithm::SlidingWindowCounter => {
            MINUTE
        }
        // One token / one emission interval (6 s) per hit.
        Algorithm::TokenBucket | Algorithm::Gcra => taken * 6 * S,
    }
}

/// `reset_after_us` of one more hit once the capacity is used up at the window start.
fn reset_when_full(rate: &Rate) -> u64 {
    match rate.algorithm() {
        Algorithm::FixedWindow | Algorithm::SlidingWindowLog => MINUTE,
        // est = 10 until the window ends, then the current count weighs 10 and decays: 11 ≤ 10 +
        // 10·(1 − x) needs x ≥ 1/10 of the next window.
        Algorithm::SlidingWindowCounter => MINUTE + 6 * S,
        Algorithm::TokenBucket | Algorithm::Gcra => 6 * S,
    }
}

async fn capacity_is_exact_from_idle<S: Store>(store: &S, _clock: &ManualClock) {
    for (i, rate) in rates().into_iter().enumerate() {
        let key = key("capacity", &i.to_string());
        let capacity = rate.burst();
        for taken in 1..=capacity {
            let v = one(store, check(&key, rate, 1)).await;
            assert_eq!(
                v,
                admitted(
                    capacity - taken,
                    reset_after_taking(&rate, u64::from(taken))
                ),
                "{rate:?} hit {taken}"
            );
        }
        for _ in 0..3 {
            let v = one(store, check(&key, rate, 1)).await;
            assert_eq!(v, denied(0, reset_when_full(&rate)), "{rate:?}");
        }
    }
}

async fn a_single_request_takes_the_whole_capacity<S: Store>(store: &S, _clock: &ManualClock) {
    for (i, rate) in rates().into_iter().enumerate() {
        let capacity = u64::from(rate.burst());
        let key = key("whole", &i.to_string());
        let over = one(store, check(&key, rate, capacity + 1)).await;
        assert!(!over.admitted, "{rate:?}");
        assert_eq!(over.remaining, rate.burst(), "{rate:?}");
        let huge = one(store, check(&key, rate, u64::MAX)).await;
        assert_eq!(huge, over, "{rate:?}: u64::MAX hits is just over capacity");
        let all = one(store, check(&key, rate, capacity)).await;
        assert_eq!(
            all,
            admitted(0, reset_after_taking(&rate, capacity)),
            "{rate:?}"
        );
        assert!(!one(store, check(&key, rate, 1)).await.admitted, "{rate:?}");
    }
}

async fn fixed_window_boundaries_and_resets<S: Store>(store: &S, clock: &ManualClock) {
    let rate = rate(Algorithm::FixedWindow, 3, Unit::Minute, None);
    let key = key("fw", "a");
    clock.set_us(T0 + 17 * S);
    assert_eq!(one(store, check(&key, rate, 2)).await, admitted(1, 43 * S));
    assert_eq!(one(store, check(&key, rate, 2)).await, denied(1, 43 * S));
    assert_eq!(one(store, check(&key, rate, 1)).await, admitted(0, 43 * S));
    clock.set_us(T0 + MINUTE - 1);
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, 1));
    // The new window starts exactly at the boundary.
    clock.set_us(T0 + MINUTE);
    assert_eq!(one(store, check(&key, rate, 3)).await, admitted(0, MINUTE));
    clock.set_us(T0 + MINUTE + 1);
    assert_eq!(
        one(store, check(&key, rate, 1)).await,
        denied(0, MINUTE - 1)
    );
}

async fn sliding_window_log_boundaries_and_resets<S: Store>(store: &S, clock: &ManualClock) {
    let rate = rate(Algorithm::SlidingWindowLog, 3, Unit::Minute, None);
    let key = key("swl", "a");
    clock.set_us(T0 + 10 * S);
    assert_eq!(one(store, check(&key, rate, 1)).await, admitted(2, MINUTE));
    clock.set_us(T0 + 20 * S);
    // The oldest hit (at 10 s) leaves at 70 s.
    assert_eq!(one(store, check(&key, rate, 2)).await, admitted(0, 50 * S));
    clock.set_us(T0 + 30 * S);
    // One more needs the hit at 10 s gone (at 70 s); three more need all of them gone (at 80 s).
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, 40 * S));
    assert_eq!(one(store, check(&key, rate, 3)).await, denied(0, 50 * S));
    // Over the limit: waits until the log is empty.
    assert_eq!(one(store, check(&key, rate, 4)).await, denied(0, 50 * S));
    // (now − W, now]: the hit at 10 s still counts at 70 s − 1 µs, not at 70 s.
    clock.set_us(T0 + 70 * S - 1);
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, 1));
    clock.set_us(T0 + 70 * S);
    assert_eq!(one(store, check(&key, rate, 1)).await, admitted(0, 10 * S));
    clock.set_us(T0 + 80 * S);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(2, 50 * S));
    clock.set_us(T0 + 130 * S);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(3, 0));
}

async fn sliding_window_counter_weighting_and_resets<S: Store>(store: &S, clock: &ManualClock) {
    let rate = rate(Algorithm::SlidingWindowCounter, 10, Unit::Minute, None);
    let key = key("swc", "a");
    clock.set_us(T0 + 30 * S);
    assert_eq!(one(store, check(&key, rate, 10)).await, admitted(0, 30 * S));
    // Next window, a quarter in: est = 10·0.75 = 7.5.
    clock.set_us(T0 + MINUTE + 15 * S);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(2, 45 * S));
    // 7.5 + 3 > 10: admissible once the previous weight drops to 7, at 18 s (3 s from now).
    assert_eq!(one(store, check(&key, rate, 3)).await, denied(2, 3 * S));
    // 7.5 + 2 ≤ 10: admitted, est after = 9.5.
    assert_eq!(one(store, check(&key, rate, 2)).await, admitted(0, 45 * S));
    // Halfway: est = 5 + 2 = 7.
    clock.set_us(T0 + MINUTE + 30 * S);
    assert_eq!(one(store, check(&key, rate, 3)).await, admitted(0, 30 * S));
    // Two windows later both counts are gone.
    clock.set_us(T0 + 3 * MINUTE);
    assert_eq!(one(store, check(&key, rate, 10)).await, admitted(0, MINUTE));
    // Over the limit: the window end.
    assert_eq!(one(store, check(&key, rate, 11)).await, denied(0, MINUTE));
}

async fn token_bucket_refill_and_resets<S: Store>(store: &S, clock: &ManualClock) {
    let rate = rate(Algorithm::TokenBucket, 10, Unit::Second, Some(5));
    let key = key("tb", "a");
    assert_eq!(one(store, check(&key, rate, 5)).await, admitted(0, 500_000));
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, 100_000));
    assert_eq!(one(store, check(&key, rate, 3)).await, denied(0, 300_000));
    // Over the burst: the time until the bucket is full.
    assert_eq!(one(store, check(&key, rate, 6)).await, denied(0, 500_000));
    clock.set_us(T0 + 99_999);
    assert!(!one(store, check(&key, rate, 1)).await.admitted);
    clock.set_us(T0 + 100_000);
    assert_eq!(one(store, check(&key, rate, 1)).await, admitted(0, 500_000));
    // 2.5 tokens 250 ms later.
    clock.set_us(T0 + 350_000);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(2, 250_000));
    assert_eq!(one(store, check(&key, rate, 3)).await, denied(2, 50_000));
    assert_eq!(one(store, check(&key, rate, 2)).await, admitted(0, 450_000));
    // Refill stops at the burst.
    clock.set_us(T0 + 100 * S);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(5, 0));
}

async fn gcra_spacing_and_resets<S: Store>(store: &S, clock: &ManualClock) {
    let rate = rate(Algorithm::Gcra, 10, Unit::Second, Some(5));
    let key = key("gcra", "a");
    let t = rate.emission_interval_us();
    assert_eq!(t, 100_000);
    assert_eq!(one(store, check(&key, rate, 5)).await, admitted(0, 5 * t));
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, t));
    assert_eq!(one(store, check(&key, rate, 2)).await, denied(0, 2 * t));
    assert_eq!(one(store, check(&key, rate, 6)).await, denied(0, 5 * t));
    clock.set_us(T0 + t - 1);
    assert_eq!(one(store, check(&key, rate, 1)).await, denied(0, 1));
    clock.set_us(T0 + t);
    assert_eq!(one(store, check(&key, rate, 1)).await, admitted(0, 5 * t));
    clock.set_us(T0 + t + 250_000);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(2, 250_000));
    clock.set_us(T0 + 100 * S);
    assert_eq!(one(store, check(&key, rate, 0)).await, admitted(5, 0));
}

async fn all_or_nothing_across_three_descriptors<S: Store>(store: &S, _clock: &ManualClock) {
    for algorithm in Algorithm::ALL {
        let rate5 = rate(algorithm, 5, Unit::Minute, None);
        let rate1 = rate(algorithm, 1, Unit::Minute, None);
        let (a, b, c) = (key("aon", "a"), key("aon", "b"), key("aon", "c"));
        // Use up c.
        assert!(one(store, check(&c, rate1, 1)).await.admitted);
        let verdicts = decide(
            store,
            &[
                check(&a, rate5, 2),
                check(&b, rate5, 3),
                check(&c, rate1, 1),
            ],
        )
        .await;
        assert_eq!(verdicts.len(), 3);
        assert!(verdicts[0].admitted && verdicts[1].admitted, "{algorithm}");
        assert!(!verdicts[2].admitted, "{algorithm}");
        assert_eq!(verdicts[0].remaining, 3, "{algorithm}");
        assert_eq!(verdicts[1].remaining, 2, "{algorithm}");
        // The denial at c consumed nothing at a or b.
        let verdicts = decide(store, &[check(&a, rate5, 0), check(&b, rate5, 0)]).await;
        assert_eq!(verdicts[0].remaining, 5, "{algorithm}: a untouched");
        assert_eq!(verdicts[1].remaining, 5, "{algorithm}: b untouched");
        // Without c the same request passes and consumes at both.
        let verdicts = decide(store, &[check(&a, rate5, 2), check(&b, rate5, 3)]).await;
        assert!(verdicts.iter().all(|v| v.admitted), "{algorithm}");
        let verdicts = decide(store, &[check(&a, rate5, 0), check(&b, rate5, 0)]).await;
        assert_eq!(verdicts[0].remaining, 3, "{algorithm}");
        assert_eq!(verdicts[1].remaining, 2, "{algorithm}");
        // Only the denied check is denied: the others report what they alone would get.
        let verdicts = decide(
            store,
            &[
                check(&a, rate5, 3),
                check(&c, rate1, 1),
                check(&b, rate5, 1),
            ],
        )
        .await;
        assert_eq!(
            verdicts.iter().map(|v| v.admitted).collect::<Vec<_>>(),
            [true, false, true],
            "{algorithm}"
        );
        let verdicts = decide(store, &[check(&a, rate5, 0), check(&b, rate5, 0)]).await;
        assert_eq!(verdicts[0].remaining, 3, "{algorithm}: still untouched");
        assert_eq!(verdicts[1].remaining, 2, "{algorithm}: still untouched");
    }
}

async fn duplicate_counters_in_one_request<S: Store>(store: &S, _clock: &ManualClock) {
    for algorithm in Algorithm::ALL {
        let rate = rate(algorithm, 5, Unit::Minute, None);
        let k = key("dup", algorithm.as_str());
        // Cumulative: 3 then 3 more is 6 > 5, so the second is denied and nothing is written.
        let verdicts = decide(store, &[check(&k, rate, 3), check(&k, rate, 3)]).await;
        assert!(verdicts[0].admitted, "{algorithm}");
        assert_eq!(verdicts[0].remaining, 2, "{algorithm}");
        assert!(!verdicts[1].admitted, "{algorithm}");
        assert_eq!(
            one(store, check(&k, rate, 0)).await.remaining,
            5,
            "{algorithm}"
        );
        // 2 then 3: both admitted, the total committed once.
        let verdicts = decide(store, &[check(&k, rate, 2), check(&k, rate, 3)]).await;
        assert_eq!(
            verdicts
                .iter()
                .map(|v| (v.admitted, v.remaining))
                .collect::<Vec<_>>(),
            [(true, 3), (true, 0)],
            "{algorithm}"
        );
        assert_eq!(
            one(store, check(&k, rate, 0)).await.remaining,
            0,
            "{algorithm}"
        );
        assert!(
            !one(store, check(&k, rate, 1)).await.admitted,
            "{algorithm}"
        );
        // The same counter three times with a check-only one in the middle.
        let k = key("dup3", algorithm.as_str());
        let verdicts = decide(
            store,
            &[check(&k, rate, 1), check(&k, rate, 0), check(&k, rate, 1)],
        )
        .await;
        assert_eq!(
            verdicts
                .iter()
                .map(|v| (v.admitted, v.remaining))
                .collect::<Vec<_>>(),
            [(true, 4), (true, 4), (true, 3)],
            "{algorithm}"
        );
        assert_eq!(
            one(store, check(&k, rate, 0)).await.remaining,
            3,
            "{algorithm}"
        );
    }
}

async fn zero_hits_consume_nothing<S: Store>(store: &S, clock: &ManualClock) {
    for rate in rates() {
        let k = key("zero", &format!("{rate:?}"));
        let first = one(store, check(&k, rate, 0)).await;
        assert!(first.admitted, "{rate:?}");
        assert_eq!(first.remaining, rate.burst(), "{rate:?}");
        let expected_reset = match rate.algorithm() {
            Algorithm::FixedWindow | Algorithm::SlidingWindowCounter => MINUTE,
            _ => 0,
        };
        assert_eq!(first.reset_after_us, expected_reset, "{rate:?}");
        for _ in 0..5 {
            assert_eq!(one(store, check(&k, rate, 0)).await, first, "{rate:?}");
        }
        let all = one(store, check(&k, rate, u64::from(rate.burst()))).await;
        assert!(all.admitted, "{rate:?}: zero-hit checks consumed something");
        // A check of 0 on a used-up counter is still admitted, and changes nothing.
        clock.advance_us(1);
        let full = one(store, check(&k, rate, 0)).await;
        assert!(full.admitted, "{rate:?}");
        assert_eq!(full.remaining, 0, "{rate:?}");
        assert_eq!(one(store, check(&k, rate, 0)).await, full, "{rate:?}");
        clock.set_us(T0);
    }
}

async fn shadow_checks_never_veto<S: Store>(store: &S, _clock: &ManualClock) {
    for algorithm in Algorithm::ALL {
        let rate = rate(algorithm, 2, Unit::Minute, None);
        let (enforced, shadow) = (key("shadow", "enforced"), key("shadow", "shadow"));
        let shadow_check = |hits| Check {
            shadow: true,
            ..check(&shadow, rate, hits)
        };
        assert!(one(store, shadow_check(2)).await.admitted, "{algorithm}");
        // The shadow counter is used up: it reports a denial but the request passes.
        let verdicts = decide(store, &[check(&enforced, rate, 1), shadow_check(1)]).await;
        assert!(verdicts[0].admitted && !verdicts[1].admitted, "{algorithm}");
        assert_eq!(
            one(store, check(&enforced, rate, 0)).await.remaining,
            1,
            "{algorithm}: the request was committed"
        );
        // An enforced denial vetoes the shadow check too.
        let other = key("shadow", algorithm.as_str());
        let verdicts = decide(
            store,
            &[
                check(&enforced, rate, 2),
                Check {
                    shadow: true,
                    ..check(&other, rate, 1)
                },
            ],
        )
        .await;
        assert!(!verdicts[0].admitted && verdicts[1].admitted, "{algorithm}");
        let untouched = one(store, check(&other, rate, 0)).await;
        assert_eq!(
            untouched.remaining, 2,
            "{algorithm}: vetoed shadow consumed"
        );
        // An admitted shadow check is counted when the request passes.
        let verdicts = decide(
            store,
            &[
                check(&enforced, rate, 1),
                Check {
                    shadow: true,
                    ..check(&other, rate, 1)
                },
            ],
        )
        .await;
        assert!(verdicts.iter().all(|v| v.admitted), "{algorithm}");
        assert_eq!(
            one(store, check(&other, rate, 0)).await.remaining,
            1,
            "{algorithm}"
        );
    }
}

async fn empty_request_is_empty<S: Store>(store: &S, _clock: &ManualClock) {
    assert!(decide(store, &[]).await.is_empty());
    assert!(store.is_healthy().await);
}

/// Atomicity under concurrency, Redis only: many tasks over TWO stores (separate pools) sharing
/// one redis-server, with Redis's own clock (windows of 100 years, so no boundary is crossed).
mod redis_concurrency {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    const TASKS: usize = 240;

    async fn two_stores(server: &RedisServer) -> [RedisStore; 2] {
        let settings = RedisSettings {
            // A loose bound: 240 requests arrive at once on a small test machine.
            timeout: Duration::from_secs(5),
            ..RedisSettings::new(server.url())
        };
        [
            RedisStore::connect(settings.clone()).await.unwrap(),
            RedisStore::connect(settings).await.unwrap(),
        ]
    }

    /// Sends `TASKS` concurrent requests (1 hit per check), alternating between the two stores,
    /// and returns how many were admitted.
    async fn hammer(stores: &[RedisStore; 2], checks: Vec<Check>) -> usize {
        let admitted = Arc::new(AtomicUsize::new(0));
        let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
        let mut tasks = Vec::with_capacity(TASKS);
        for i in 0..TASKS {
            let store = stores[i % 2].clone();
            let checks = checks.clone();
            let admitted = admitted.clone();
            let barrier = barrier.clone();
            tasks.push(tokio::spawn(async move {
                barrier.wait().await;
                let verdicts = store.decide(&checks).await.expect("redis decides");
                assert_eq!(verdicts.len(), checks.len());
                if verdicts.iter().all(|v| v.admitted) {
                    admitted.fetch_add(1, Ordering::SeqCst);
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        admitted.load(Ordering::SeqCst)
    }

    fn century(algorithm: Algorithm, limit: u32) -> Rate {
        Rate::new(algorithm, limit, Unit::Year, 100, None).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn exactly_the_limit_is_admitted_across_two_instances() {
        let server = RedisServer::start();
        let stores = two_stores(&server).await;
        for algorithm in Algorithm::ALL {
            let rate = century(algorithm, 50);
            let k = key("concurrent", algorithm.as_str());
            let admitted = hammer(&stores, vec![check(&k, rate, 1)]).await;
            assert_eq!(admitted, 50, "{algorithm}");
            let left = one(&stores[0], check(&k, rate, 0)).await;
            assert_eq!(left.remaining, 0, "{algorithm}");
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn three_checks_per_request_stay_all_or_nothing_across_two_instances() {
        let server = RedisServer::start();
        let stores = two_stores(&server).await;
        for algorithm in Algorithm::ALL {
            // Limits 50, 80 and 100: the 50 decides, and the others must count exactly the
            // admitted requests (a denied request consumes nothing anywhere).
            let (a, b, c) = (
                key("concurrent3", &format!("{algorithm}/a")),
                key("concurrent3", &format!("{algorithm}/b")),
                key("concurrent3", &format!("{algorithm}/c")),
            );
            let checks = vec![
                check(&b, century(algorithm, 80), 1),
                check(&a, century(algorithm, 50), 1),
                check(&c, century(algorithm, 100), 1),
            ];
            let admitted = hammer(&stores, checks).await;
            assert_eq!(admitted, 50, "{algorithm}");
            let left = decide(
                &stores[1],
                &[
                    check(&a, century(algorithm, 50), 0),
                    check(&b, century(algorithm, 80), 0),
                    check(&c, century(algorithm, 100), 0),
                ],
            )
            .await;
            assert_eq!(
                left.iter().map(|v| v.remaining).collect::<Vec<_>>(),
                [0, 30, 50],
                "{algorithm}"
            );
        }
    }
}

async fn peek<S: Store>(store: &S, checks: &[Check]) -> Vec<Verdict> {
    store.peek(checks).await.expect("store answers a read")
}

async fn a_read_sees_what_a_zero_hit_check_sees_and_consumes_nothing<S: Store>(
    store: &S,
    clock: &ManualClock,
) {
    clock.set_us(T0);
    for (i, rate) in rates().into_iter().enumerate() {
        let used = key("read", &i.to_string());
        let idle = key("read-idle", &i.to_string());
        assert!(one(store, check(&used, rate, 3)).await.admitted, "{rate:?}");
        clock.set_us(T0 + S);
        let zero_hits = one(store, check(&used, rate, 0)).await;
        let checks = [check(&used, rate, 5), check(&idle, rate, 1)];
        for _ in 0..3 {
            let read = peek(store, &checks).await;
            assert_eq!(read[0], zero_hits, "{rate:?}");
            assert_eq!(read[1], one(store, check(&idle, rate, 0)).await, "{rate:?}");
            assert_eq!(read[1].remaining, rate.burst(), "{rate:?}");
        }
        for _ in 3..rate.burst() {
            assert!(one(store, check(&used, rate, 1)).await.admitted, "{rate:?}");
        }
        assert!(
            !one(store, check(&used, rate, 1)).await.admitted,
            "{rate:?}"
        );
        assert!(
            one(store, check(&idle, rate, u64::from(rate.burst())))
                .await
                .admitted,
            "{rate:?}: reading the idle counter left it idle"
        );
        clock.set_us(T0);
    }
}

async fn a_reset_starts_its_counter_afresh_and_no_other<S: Store>(store: &S, clock: &ManualClock) {
    for (i, rate) in rates().into_iter().enumerate() {
        clock.set_us(T0 + 50 * S);
        let reset_one = key("reset", &i.to_string());
        let other = key("reset-other", &i.to_string());
        let capacity = u64::from(rate.burst());
        assert!(one(store, check(&reset_one, rate, capacity)).await.admitted);
        assert!(one(store, check(&other, rate, 1)).await.admitted);
        // Into the next window: a fixed window's previous window still has its key.
        clock.set_us(T0 + MINUTE + S);
        let _ = one(store, check(&reset_one, rate, 1)).await;
        let before_other = peek(store, &[check(&other, rate, 1)]).await;

        let held = store
            .reset(&[check(&reset_one, rate, 1)])
            .await
            .expect("store answers a reset");
        assert_eq!(held, vec![true], "{rate:?}");
        let again = store
            .reset(&[check(&reset_one, rate, 1)])
            .await
            .expect("store answers a reset");
        assert_eq!(again, vec![false], "{rate:?}: nothing left to reset");

        assert_eq!(
            peek(store, &[check(&other, rate, 1)]).await,
            before_other,
            "{rate:?}: the other counter is untouched"
        );
        assert_eq!(
            peek(store, &[check(&reset_one, rate, 1)]).await[0].remaining,
            rate.burst(),
            "{rate:?}"
        );
        let fresh = one(store, check(&reset_one, rate, capacity)).await;
        assert!(
            fresh.admitted,
            "{rate:?}: a full burst again after the reset"
        );
        assert!(
            !one(store, check(&reset_one, rate, 1)).await.admitted,
            "{rate:?}"
        );
    }
}
