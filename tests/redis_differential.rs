//! Differential test: a long random trace of requests is replayed through the pure Rust algorithm
//! functions (a reference model of the request-level contract, plus the memory store) and through
//! the Lua script in a real redis-server (time pinned to the same instants). Every step must give
//! identical verdicts: admitted, remaining and reset_after_us, to the microsecond.
//!
//! The seed is printed; rerun a failure with `RATELIMITD_SEED=<seed>`.

mod common;

use std::collections::HashMap;
use std::sync::Arc;

use common::redis_server::RedisServer;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::algorithm::{self, State, Verdict};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, MemoryStore, RedisStore, Store};

const S: u64 = 1_000_000;
const STEPS: usize = 6_000;
const EXTREME_STEPS: usize = 1_500;
const LATEST_INSTANT: u64 = (1 << 53) - ratelimitd::limiter::rate::MAX_WINDOW_US;

/// The request-level contract of `Store::decide`, written directly on the algorithm functions:
/// each check is evaluated with the hits of the earlier admitted checks of its counter added; all
/// or nothing over the non-shadow checks; one commit per counter with the hits of its admitted
/// checks, at the rate of the last one. States never expire here: an expired state must decide
/// like an absent one, which the stores that drop them (Redis TTLs, the memory store) rely on.
#[derive(Default)]
struct Model {
    states: HashMap<(CounterKey, Algorithm, u64), State>,
}

impl Model {
    fn decide(&mut self, checks: &[Check], now: u64) -> Vec<Verdict> {
        type Counter = (CounterKey, Algorithm, u64);
        let mut admitted_hits: HashMap<Counter, (u64, Option<Rate>)> = HashMap::new();
        let mut order: Vec<Counter> = Vec::new();
        let mut vetoed = false;
        let mut verdicts = Vec::new();
        for check in checks {
            let counter = (
                check.key.clone(),
                check.rate.algorithm(),
                check.rate.window_us(),
            );
            if !admitted_hits.contains_key(&counter) {
                order.push(counter.clone());
            }
            let (so_far, _) = admitted_hits.entry(counter.clone()).or_insert((0, None));
            let hits = so_far.saturating_add(check.hits);
            let verdict = algorithm::evaluate(&check.rate, self.states.get(&counter), now, hits);
            if verdict.admitted {
                admitted_hits.insert(counter, (hits, Some(check.rate)));
            } else if !check.shadow {
                vetoed = true;
            }
            verdicts.push(verdict);
        }
        if !vetoed {
            for counter in order {
                let Some(&(total, Some(rate))) = admitted_hits.get(&counter) else {
                    continue;
                };
                if total == 0 {
                    continue;
                }
                let state = self.states.remove(&counter);
                let state = algorithm::commit(&rate, state, now, total);
                self.states.insert(counter, state);
            }
        }
        verdicts
    }
}

fn rate(algorithm: Algorithm, limit: u32, unit: Unit, multiplier: u32, burst: Option<u32>) -> Rate {
    Rate::new(algorithm, limit, unit, multiplier, burst).expect("valid rate")
}

/// Several limits, windows and bursts per algorithm; some share (algorithm, window) with a
/// different limit or burst, so a counter may see checks with different rates (as with a
/// descriptor's `limit` override).
fn rates() -> Vec<Rate> {
    use Algorithm::*;
    vec![
        rate(FixedWindow, 5, Unit::Second, 1, None),
        rate(FixedWindow, 3, Unit::Second, 1, None),
        rate(FixedWindow, 10, Unit::Minute, 1, None),
        rate(FixedWindow, 7, Unit::Second, 3, None),
        rate(SlidingWindowLog, 5, Unit::Second, 1, None),
        rate(SlidingWindowLog, 4, Unit::Second, 2, None),
        rate(SlidingWindowLog, 12, Unit::Minute, 1, None),
        rate(SlidingWindowLog, 2, Unit::Second, 1, None),
        rate(SlidingWindowCounter, 5, Unit::Second, 1, None),
        rate(SlidingWindowCounter, 7, Unit::Second, 1, None),
        rate(SlidingWindowCounter, 9, Unit::Minute, 1, None),
        rate(SlidingWindowCounter, 3, Unit::Second, 7, None),
        // Token bucket states expire when full *at their rate*: a counter shared by buckets of
        // different capacity would expire early for the larger one, so each window has one rate.
        rate(TokenBucket, 5, Unit::Second, 1, None),
        rate(TokenBucket, 5, Unit::Second, 2, Some(12)),
        rate(TokenBucket, 7, Unit::Minute, 1, Some(3)),
        rate(TokenBucket, 3, Unit::Second, 5, Some(1)),
        rate(TokenBucket, 13, Unit::Second, 3, Some(4)),
        rate(Gcra, 5, Unit::Second, 1, None),
        rate(Gcra, 5, Unit::Second, 1, Some(12)),
        rate(Gcra, 7, Unit::Minute, 1, Some(3)),
        rate(Gcra, 3, Unit::Second, 1, Some(1)),
        rate(Gcra, 13, Unit::Second, 3, Some(4)),
    ]
}

fn identities() -> Vec<CounterKey> {
    let values = ["a", "b", "x:y", "{tag}", "a=b", "é", "", "long"];
    values
        .iter()
        .enumerate()
        .map(|(i, value)| {
            let value = if *value == "long" {
                "v".repeat(300)
            } else {
                (*value).to_owned()
            };
            CounterKey::new(
                if i % 2 == 0 { "diff" } else { "other" },
                &[Entry {
                    key: "k".into(),
                    value,
                }],
            )
        })
        .collect()
}

fn random_hits(rng: &mut StdRng, rate: &Rate) -> u64 {
    match rng.random_range(0..100) {
        0..=14 => 0,
        15..=84 => rng.random_range(1..=5),
        85..=92 => u64::from(rate.burst()),
        93..=97 => u64::from(rate.burst()) + rng.random_range(1..=3),
        _ => u64::MAX - rng.random_range(0..2),
    }
}

/// Moves time: often not at all or by a little, often by round amounts (so hits land exactly a
/// window apart and refills land on whole tokens, where one ulp or an off-by-one shows), sometimes
/// exactly onto (or just before) a window boundary, sometimes past several windows.
fn advance(rng: &mut StdRng, now: u64, history: &[u64]) -> u64 {
    match rng.random_range(0..100) {
        // Exactly a window (or a window ± 1 µs) after an earlier request, where a hit leaves a
        // sliding log or a refill completes.
        0..=9 if !history.is_empty() => {
            let earlier = history[rng.random_range(0..history.len())];
            let window = [S, 2 * S, 3 * S, 5 * S, 7 * S, 60 * S][rng.random_range(0..6)];
            let target = earlier + window + 1 - rng.random_range(0..=2);
            target.max(now)
        }
        0..=19 => now,
        20..=34 => now + rng.random_range(1..=250_000),
        35..=44 => now + rng.random_range(1..=3 * S),
        45..=64 => {
            let quantum =
                [1_000, 50_000, 100_000, 200_000, 250_000, S / 3, S][rng.random_range(0..7)];
            now + quantum * rng.random_range(1..=8)
        }
        65..=74 => {
            let window = [S, 2 * S, 3 * S, 5 * S, 7 * S, 60 * S][rng.random_range(0..6)];
            let boundary = now - now % window + window;
            boundary - rng.random_range(0..=1)
        }
        75..=84 => now + rng.random_range(1..=40) * 1_000,
        85..=97 => now + rng.random_range(3 * S..=20 * S),
        _ => now + rng.random_range(60 * S..=200 * S),
    }
}

fn seed(test: &str) -> u64 {
    let seed = match std::env::var("RATELIMITD_SEED") {
        Ok(text) => text.parse().expect("RATELIMITD_SEED is a u64"),
        Err(_) => rand::rng().random(),
    };
    eprintln!("{test} seed: {seed} (rerun with RATELIMITD_SEED={seed})");
    seed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_agree_on_a_random_trace() {
    let seed = seed("random trace");
    let mut rng = StdRng::seed_from_u64(seed);

    let server = RedisServer::start();
    // Not minute-aligned, so windows start at various offsets from the first instant.
    let start = 1_700_000_000 * S + 123_457;
    let clock = Arc::new(ManualClock::new(start));
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let memory = MemoryStore::with_clock(clock.clone() as Arc<dyn Clock>);
    let mut model = Model::default();

    let rates = rates();
    let identities = identities();
    let mut now = start;
    let mut history: Vec<u64> = Vec::new();
    let mut recent: Vec<(CounterKey, Rate)> = Vec::new();
    let (mut admitted, mut denied, mut multi) = (0usize, 0usize, 0usize);
    for step in 0..STEPS {
        now = advance(&mut rng, now, &history);
        if history.len() == 32 {
            history.remove(0);
        }
        history.push(now);
        clock.set_us(now);
        let count = rng.random_range(1..=3);
        let mut checks: Vec<Check> = Vec::with_capacity(count);
        for _ in 0..count {
            // Often repeat a counter of this request (same identity and rate, or same identity
            // with another rate of the same algorithm and window).
            let check = if !checks.is_empty() && rng.random_bool(0.3) {
                let earlier = checks[rng.random_range(0..checks.len())].clone();
                let rate = if rng.random_bool(0.5) {
                    earlier.rate
                } else {
                    let same_counter: Vec<&Rate> = rates
                        .iter()
                        .filter(|r| {
                            r.algorithm() == earlier.rate.algorithm()
                                && r.window_us() == earlier.rate.window_us()
                        })
                        .collect();
                    *same_counter[rng.random_range(0..same_counter.len())]
                };
                Check {
                    hits: random_hits(&mut rng, &rate),
                    rate,
                    shadow: rng.random_bool(0.1),
                    ..earlier
                }
            } else if !recent.is_empty() && rng.random_bool(0.5) {
                // A counter used by a recent request: keeps counters busy, so their states
                // reach boundaries (a hit leaving the log exactly W later, a refill landing on a
                // whole token).
                let (key, rate): (CounterKey, Rate) =
                    recent[rng.random_range(0..recent.len())].clone();
                Check {
                    key,
                    hits: random_hits(&mut rng, &rate),
                    rate,
                    shadow: rng.random_bool(0.1),
                }
            } else {
                let rate = rates[rng.random_range(0..rates.len())];
                Check {
                    key: identities[rng.random_range(0..identities.len())].clone(),
                    hits: random_hits(&mut rng, &rate),
                    rate,
                    shadow: rng.random_bool(0.1),
                }
            };
            if recent.len() == 12 {
                recent.remove(0);
            }
            recent.push((check.key.clone(), check.rate));
            checks.push(check);
        }
        if count > 1 {
            multi += 1;
        }

        let expected = model.decide(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        let from_memory = memory.decide(&checks).await.expect("memory decides");
        let context = || {
            format!(
                "seed {seed}, step {step}, now {now} (+{} µs from start)\nchecks: {checks:#?}",
                now - start
            )
        };
        assert_eq!(
            from_redis,
            expected,
            "Lua differs from the Rust math\n{}",
            context()
        );
        assert_eq!(
            from_memory,
            expected,
            "memory store differs from the Rust math\n{}",
            context()
        );
        for verdict in &expected {
            if verdict.admitted {
                admitted += 1;
            } else {
                denied += 1;
            }
        }
    }
    eprintln!(
        "{STEPS} requests ({multi} with several checks): {admitted} verdicts admitted, \
         {denied} denied; {} Redis keys at the end",
        redis::cmd("DBSIZE")
            .query::<u64>(&mut server.connection())
            .expect("DBSIZE")
    );
    assert!(
        admitted > STEPS / 4 && denied > STEPS / 10,
        "trace too one-sided"
    );
}

/// Limits, windows and bursts at the edges of what `Rate::new` accepts.
fn extreme_rates() -> Vec<Rate> {
    use Algorithm::*;
    let max = u32::MAX;
    vec![
        rate(FixedWindow, max, Unit::Second, 1, None),
        rate(FixedWindow, 1, Unit::Year, 100, None),
        rate(SlidingWindowLog, 1, Unit::Second, 1, None),
        rate(SlidingWindowLog, 300, Unit::Year, 100, None),
        rate(SlidingWindowCounter, max, Unit::Second, 1, None),
        // L·W beyond 2^63: the wait computation saturates and must still compare without overflow.
        rate(SlidingWindowCounter, 1_000_000, Unit::Year, 1, None),
        rate(SlidingWindowCounter, 1, Unit::Year, 100, None),
        rate(SlidingWindowCounter, 3, Unit::Day, 1, None),
        // Refilling a whole burst may take up to 100 years (`RateError::BurstTooLong` beyond).
        rate(TokenBucket, 1, Unit::Year, 100, Some(1)),
        rate(TokenBucket, 3, Unit::Year, 1, Some(300)),
        rate(TokenBucket, max, Unit::Second, 1, Some(1)),
        rate(TokenBucket, max, Unit::Week, 7, Some(max)),
        rate(TokenBucket, 7, Unit::Day, 1, Some(250_000)),
        rate(Gcra, max, Unit::Second, 1, Some(max)),
        rate(Gcra, 1, Unit::Year, 100, Some(1)),
        rate(Gcra, 3, Unit::Year, 1, Some(90)),
        rate(Gcra, 1_000_000, Unit::Day, 1, Some(1)),
    ]
}

fn extreme_hits(rng: &mut StdRng, rate: &Rate) -> u64 {
    let burst = u64::from(rate.burst());
    match rng.random_range(0..10) {
        0 => 0,
        1 | 2 => rng.random_range(1..=3),
        3 => burst,
        4 => burst + 1,
        5 => burst.saturating_sub(1),
        6 => burst / 2,
        7 => u64::MAX,
        8 => u64::from(u32::MAX) + rng.random_range(0..3),
        _ => rng.random_range(1..=burst.min(1_000)),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_agree_at_the_extremes() {
    let seed = seed("extremes");
    let mut rng = StdRng::seed_from_u64(seed);
    let server = RedisServer::start();
    let start = 1_700_000_000 * S + 999_999;
    let clock = Arc::new(ManualClock::new(start));
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let mut model = Model::default();
    let rates = extreme_rates();
    let identities = identities();
    let mut now = start;
    for step in 0..EXTREME_STEPS {
        let jump = match rng.random_range(0..10) {
            0..=3 => 0,
            4..=5 => rng.random_range(1..=1_000),
            6 => rng.random_range(1..=10 * S),
            7 => rng.random_range(1..=86_400 * S),
            8 => rng.random_range(1..=400 * 86_400 * S),
            _ => rng.random_range(1..=20 * 365 * 86_400 * S),
        };
        // Instants stay below 2^53 − 100 years (year 2155), as `rate::MAX_WINDOW_US` assumes, so
        // every sum of an instant and a window is exact in the script's doubles.
        if now + jump < LATEST_INSTANT {
            now += jump;
        }
        clock.set_us(now);
        let checks: Vec<Check> = (0..rng.random_range(1..=3))
            .map(|_| {
                let rate = rates[rng.random_range(0..rates.len())];
                Check {
                    key: identities[rng.random_range(0..3)].clone(),
                    hits: extreme_hits(&mut rng, &rate),
                    rate,
                    shadow: rng.random_bool(0.2),
                }
            })
            .collect();
        let expected = model.decide(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        assert_eq!(
            from_redis, expected,
            "Lua differs from the Rust math\nseed {seed}, step {step}, now {now}\nchecks: {checks:#?}"
        );
    }
}

/// A sliding window counter whose wait for a large request exceeds `u64::MAX` µs when computed
/// as `ceil(excess·W / previous)`: the previous window's weight decays far too slowly, so the
/// answer is the next-window branch. Lua compares in doubles; the Rust code must not overflow.
#[tokio::test]
async fn sliding_window_counter_with_a_wait_beyond_u64() {
    let server = RedisServer::start();
    let rate = rate(
        Algorithm::SlidingWindowCounter,
        1_000_000,
        Unit::Year,
        1,
        None,
    );
    let window = rate.window_us();
    let first = (1_700_000_000 * S / window + 1) * window + 12_345;
    let clock = Arc::new(ManualClock::new(first));
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let mut model = Model::default();
    let key = identities()[0].clone();
    for (now, hits) in [
        (first, 1),
        (first + window, 999_999),
        (first + window + 1, 1_000_000),
    ] {
        clock.set_us(now);
        let checks = [Check {
            key: key.clone(),
            rate,
            hits,
            shadow: false,
        }];
        let expected = model.decide(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        assert_eq!(from_redis, expected, "hits {hits} at {now}");
    }
}
