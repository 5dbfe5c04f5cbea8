//! Leased consistency against the exact algorithm, on random traces: N simulated replicas (each
//! a `LeasedStore`) share one store and one manual clock; requests of one or two checks arrive
//! at random replicas at random instants, and refills land at random points between them (the
//! test yields to the refill tasks a random number of times).
//!
//! Checked for every algorithm that can be leased:
//! - never more admitted than exact: each counter's admitted requests, replayed in time order
//!   through the exact algorithm, are all admitted;
//! - all or nothing: a request whose exact check denies leaves no trace in its leased counter
//!   (the replay above only holds if it does not);
//! - the shortfall against exact mode (the same requests, the same instants, one exact store) is
//!   within its bound: per window for fixed_window, (N - 1) leases of at most B/16 hits; for the
//!   others, over the trace, 2·N such leases per lease period (a lease's hits stranded, plus, for
//!   token_bucket and gcra, the refill its charge at the period's end holds back).
//!
//! The seed is printed; rerun a failure with `RATELIMITD_SEED=<seed>`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::algorithm::{self, State};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Consistency, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::lease::{LeaseSettings, LeasedStore, MAX_LEASE_SHARE};
use ratelimitd::store::{Check, MemoryStore, Store};

const REPLICAS: usize = 4;
const STEPS: usize = 6_000;
const PERIOD: Duration = Duration::from_millis(100);

fn seed() -> u64 {
    let seed = std::env::var("RATELIMITD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("RATELIMITD_SEED={seed}");
    seed
}

fn key(value: &str) -> CounterKey {
    CounterKey::new(
        "model",
        &[Entry {
            key: "k".into(),
            value: value.into(),
        }],
    )
}

/// One admitted or denied request, as offered.
struct Offered {
    at_us: u64,
    hits: u64,
    /// Whether it also carried the exact check.
    with_exact: bool,
}

/// `count` replicas on one memory store, all on `clock`.
fn replicas(clock: &Arc<ManualClock>, count: usize) -> Vec<LeasedStore<MemoryStore>> {
    let shared = Arc::new(MemoryStore::with_clock(clock.clone() as Arc<dyn Clock>));
    let settings = LeaseSettings {
        period: PERIOD,
        wait: Duration::from_secs(5),
        max_counters: 1_000,
    };
    (0..count)
        .map(|_| {
            LeasedStore::start_with_clock(
                Arc::clone(&shared),
                settings,
                clock.clone() as Arc<dyn Clock>,
            )
        })
        .collect()
}

/// Replays `admitted` (instant, hits) in order through the exact algorithm: every one must pass.
fn assert_exact_admits(rate: &Rate, admitted: &[(u64, u64)], algorithm: Algorithm) {
    let mut state: Option<State> = None;
    for (n, &(at, hits)) in admitted.iter().enumerate() {
        let verdict = algorithm::evaluate(rate, state.as_ref(), at, hits);
        assert!(
            verdict.admitted,
            "{algorithm:?}: admitted request {n} of {} ({hits} hits at {at}) is more than exact \
             admits",
            admitted.len()
        );
        if hits > 0 {
            state = Some(algorithm::commit(rate, state, at, hits));
        }
    }
}

async fn run(algorithm: Algorithm, rng: &mut StdRng) {
    let limit: u32 = rng.random_range(64..400);
    let rate = Rate::new(algorithm, limit, Unit::Second, 1, None).expect("a valid rate");
    let tight = Rate::new(Algorithm::FixedWindow, 40, Unit::Second, 1, None).unwrap();
    let start = 1_700_000_000_000_000u64 + rng.random_range(0..1_000_000);
    let clock = Arc::new(ManualClock::new(start));
    let replicas = replicas(&clock, REPLICAS);

    let leased = |hits| Check {
        key: key("hot"),
        rate,
        hits,
        shadow: false,
        consistency: Consistency::Leased,
        rule: None,
    };
    let exact = Check {
        key: key("tight"),
        rate: tight,
        hits: 1,
        shadow: false,
        consistency: Consistency::Exact,
        rule: None,
    };

    let mut offered = Vec::new();
    let mut admitted = Vec::new();
    let mut tight_admitted = Vec::new();
    // Load in phases, from a fifth of the limit to ten times it; each phase has one replica that
    // sees little of it (whose leases are spent late, the case that breaks a lease charged at
    // its grant instead of its end).
    let mut mean_gap_us = 1_000_000 / u64::from(limit);
    let mut slow = 0;
    for step in 0..STEPS {
        if step % 300 == 0 {
            mean_gap_us = (10_000_000 / u64::from(limit)) / rng.random_range(1..=100);
            slow = rng.random_range(0..REPLICAS);
        }
        let pick = if rng.random_range(0..50) == 0 {
            slow
        } else {
            (slow + rng.random_range(1..REPLICAS)) % REPLICAS
        };
        let replica = &replicas[pick];
        let hits = match rng.random_range(0..20) {
            0 => 0,
            1..=2 => rng.random_range(2..=4),
            _ => 1,
        };
        let with_exact = rng.random_range(0..10) == 0;
        let mut checks = vec![leased(hits)];
        if with_exact {
            checks.push(exact.clone());
        }
        let at = clock.now_us();
        let verdicts = replica.decide(&checks).await.expect("decided");
        let all = verdicts.iter().all(|v| v.admitted);
        if all {
            admitted.push((at, hits));
            if with_exact {
                tight_admitted.push((at, 1));
            }
        }
        offered.push(Offered {
            at_us: at,
            hits,
            with_exact,
        });
        for _ in 0..rng.random_range(0..3) {
            tokio::task::yield_now().await;
        }
        clock.advance_us(rng.random_range(0..=2 * mean_gap_us));
    }
    assert!(!admitted.is_empty());
    assert_exact_admits(&rate, &admitted, algorithm);
    assert_exact_admits(&tight, &tight_admitted, Algorithm::FixedWindow);

    // The same requests, decided exactly by one store.
    let exact_clock = Arc::new(ManualClock::new(start));
    let exact_store = MemoryStore::with_clock(exact_clock.clone() as Arc<dyn Clock>);
    let mut exact_admitted = Vec::new();
    for request in &offered {
        exact_clock.set_us(request.at_us);
        let mut checks = vec![Check {
            consistency: Consistency::Exact,
            ..leased(request.hits)
        }];
        if request.with_exact {
            checks.push(exact.clone());
        }
        let verdicts = exact_store.decide(&checks).await.expect("decided");
        if verdicts.iter().all(|v| v.admitted) {
            exact_admitted.push((request.at_us, request.hits));
        }
    }

    let lease_max = u64::from(rate.burst()) / MAX_LEASE_SHARE;
    let total = |list: &[(u64, u64)]| list.iter().map(|&(_, hits)| hits).sum::<u64>();
    let (leased_total, exact_total) = (total(&admitted), total(&exact_admitted));
    println!(
        "{algorithm:?} L={limit}: leased admitted {leased_total} hits, exact {exact_total} \
         ({:.1} %)",
        100.0 * leased_total as f64 / exact_total.max(1) as f64
    );
    if algorithm == Algorithm::FixedWindow {
        let window = rate.window_us();
        let mut per_window: HashMap<u64, (u64, u64)> = HashMap::new();
        for &(at, hits) in &admitted {
            per_window.entry(at / window).or_default().0 += hits;
        }
        for &(at, hits) in &exact_admitted {
            per_window.entry(at / window).or_default().1 += hits;
        }
        for (w, (leased_w, exact_w)) in per_window {
            assert!(
                exact_w <= leased_w + (REPLICAS as u64 - 1) * lease_max,
                "window {w}: exact admitted {exact_w}, leased {leased_w}, more apart than \
                 {} replicas' leases of {lease_max}",
                REPLICAS - 1
            );
        }
    } else {
        let duration = offered.last().map_or(0, |o| o.at_us - start);
        let periods = duration / PERIOD.as_micros() as u64 + 1;
        let bound = 2 * REPLICAS as u64 * lease_max * periods;
        assert!(
            exact_total <= leased_total + bound,
            "leased admitted {leased_total}, exact {exact_total}: more apart than {bound}"
        );
    }
}

#[tokio::test]
async fn leased_fixed_window_never_admits_more_than_exact() {
    let mut rng = StdRng::seed_from_u64(seed());
    run(Algorithm::FixedWindow, &mut rng).await;
}

#[tokio::test]
async fn leased_sliding_window_counter_never_admits_more_than_exact() {
    let mut rng = StdRng::seed_from_u64(seed());
    run(Algorithm::SlidingWindowCounter, &mut rng).await;
}

#[tokio::test]
async fn leased_token_bucket_never_admits_more_than_exact() {
    let mut rng = StdRng::seed_from_u64(seed());
    run(Algorithm::TokenBucket, &mut rng).await;
}

#[tokio::test]
async fn leased_gcra_never_admits_more_than_exact() {
    let mut rng = StdRng::seed_from_u64(seed());
    run(Algorithm::Gcra, &mut rng).await;
}

/// The case a lease charged at its grant would get wrong: replica A leases from a full counter and
/// spends its hits at the very end of the lease period, just when replica B drains the counter.
/// Spending hits later than they were charged must not add the refill of that delay on top of the
/// burst: replayed through the exact algorithm, every admitted request must pass.
async fn late_spender(algorithm: Algorithm) {
    let rate = Rate::new(algorithm, 320, Unit::Second, 1, None).unwrap();
    let start = 1_700_000_000_000_000u64;
    let clock = Arc::new(ManualClock::new(start));
    let replicas = replicas(&clock, 2);
    let (a, b) = (&replicas[0], &replicas[1]);
    let check = Check {
        key: key("hot"),
        rate,
        hits: 1,
        shadow: false,
        consistency: Consistency::Leased,
        rule: None,
    };
    let mut admitted = Vec::new();
    async fn decide(
        replica: &LeasedStore<MemoryStore>,
        check: &Check,
        at: u64,
        admitted: &mut Vec<(u64, u64)>,
    ) {
        let verdicts = replica.decide(std::slice::from_ref(check)).await;
        if verdicts.expect("decided")[0].admitted {
            admitted.push((at, 1));
        }
    }
    // A warms up: its demand grows its leases to the largest size.
    for _ in 0..200 {
        let at = clock.now_us();
        decide(a, &check, at, &mut admitted).await;
        tokio::task::yield_now().await;
        clock.advance_us(500);
    }
    // Idle long enough for the counter to be full again, then A takes one hit (and a lease).
    clock.advance_us(2_000_000);
    let at = clock.now_us();
    decide(a, &check, at, &mut admitted).await;
    tokio::task::yield_now().await;
    // Just before A's lease ends: A spends the rest, and B drains everything it can get.
    clock.advance_us(PERIOD.as_micros() as u64 - 1_000);
    for _ in 0..2_000 {
        let at = clock.now_us();
        decide(a, &check, at, &mut admitted).await;
        decide(b, &check, at, &mut admitted).await;
        tokio::task::yield_now().await;
    }
    assert_exact_admits(&rate, &admitted, algorithm);
}

#[tokio::test]
async fn a_gcra_lease_spent_at_the_end_of_its_period_admits_no_more_than_exact() {
    late_spender(Algorithm::Gcra).await;
}

#[tokio::test]
async fn a_token_bucket_lease_spent_at_the_end_of_its_period_admits_no_more_than_exact() {
    late_spender(Algorithm::TokenBucket).await;
}

/// A reset through one replica: that replica's leases go with the counter's state, the other's
/// stay spendable, so until they end the counter admits at most the other replica's outstanding
/// hits beyond what a fresh start admits: less than half a lease left when it asked for the next,
/// and that one, each at most B/16 hits.
#[tokio::test]
async fn a_reset_admits_at_most_the_other_replicas_lease_beyond_a_fresh_start() {
    let limit: u32 = 320;
    let rate = Rate::new(Algorithm::FixedWindow, limit, Unit::Minute, 1, None).unwrap();
    let start = 1_700_000_040_000_000u64;
    let clock = Arc::new(ManualClock::new(start));
    let replicas = replicas(&clock, 2);
    let check = Check {
        key: key("reset"),
        rate,
        hits: 1,
        shadow: false,
        consistency: Consistency::Leased,
        rule: None,
    };
    let mut admitted_before = 0;
    for _ in 0..60 {
        for replica in &replicas {
            if replica.decide(std::slice::from_ref(&check)).await.unwrap()[0].admitted {
                admitted_before += 1;
            }
            tokio::task::yield_now().await;
        }
        clock.advance_us(1_000);
    }
    assert_eq!(admitted_before, 120);
    let held = replicas[0]
        .reset(std::slice::from_ref(&check))
        .await
        .unwrap();
    assert_eq!(held, vec![true]);

    let mut admitted = 0u32;
    for _ in 0..limit {
        for replica in &replicas {
            if replica.decide(std::slice::from_ref(&check)).await.unwrap()[0].admitted {
                admitted += 1;
            }
            tokio::task::yield_now().await;
        }
        clock.advance_us(1_000);
    }
    let other_lease = limit / MAX_LEASE_SHARE as u32;
    let other_outstanding = other_lease * 3 / 2;
    assert!(
        admitted <= limit + other_outstanding,
        "{admitted} admitted after the reset, a fresh start admits {limit} and the other \
         replica holds at most {other_outstanding}"
    );
    assert!(
        admitted + 2 * other_lease >= limit,
        "{admitted} admitted after the reset: leases deny at most what they strand"
    );
}
