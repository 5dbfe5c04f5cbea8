//! Leases granted by the Lua script in a real redis-server against the pure Rust grant
//! (`algorithm::lease::grant`, through the memory store), on one random trace that mixes leases
//! with ordinary requests and give-backs of leased hits on the same counters, time pinned to the
//! same instants: every grant (hits and µs), every verdict and so every state after them must be
//! identical.
//!
//! The seed is printed; rerun a failure with `RATELIMITD_SEED=<seed>`.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::algorithm::lease::LeaseTerms;
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Consistency, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, LeaseAsk, LeaseReturn, MemoryStore, RedisStore, Store};
use testkit::redis_server::RedisServer;

const STEPS: usize = 4_000;

fn random_rate(rng: &mut StdRng, algorithm: Algorithm) -> Rate {
    let limit = rng.random_range(1..200);
    let (unit, multiplier) = match rng.random_range(0..3) {
        0 => (Unit::Minute, 1),
        _ => (Unit::Second, rng.random_range(1..3)),
    };
    let burst = match (algorithm, rng.random_range(0..3)) {
        (Algorithm::Gcra | Algorithm::TokenBucket, 0) => Some(rng.random_range(1..300)),
        _ => None,
    };
    Rate::new(algorithm, limit, unit, multiplier, burst).expect("a valid rate")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_grant_the_same_leases_and_leave_the_same_states() {
    let seed = std::env::var("RATELIMITD_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random::<u64>);
    println!("RATELIMITD_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);

    let server = RedisServer::start();
    let start = 1_700_000_000_000_000u64;
    let clock = Arc::new(ManualClock::new(start));
    let memory = MemoryStore::with_clock(clock.clone() as Arc<dyn Clock>);
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("redis connects")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);

    let algorithms = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowCounter,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];
    let counters: Vec<(CounterKey, Rate)> = (0..12)
        .map(|i| {
            let entry = Entry {
                key: "k".into(),
                value: format!("v{i}"),
            };
            let algorithm = algorithms[i % algorithms.len()];
            (
                CounterKey::new("lease", &[entry]),
                random_rate(&mut rng, algorithm),
            )
        })
        .collect();

    let mut grants = 0u64;
    let mut given_back = 0u64;
    // Grants not given back yet: (counter, hits, granted at).
    let mut held: Vec<(usize, u64, u64)> = Vec::new();
    for step in 0..STEPS {
        let counter = rng.random_range(0..counters.len());
        let (key, rate) = &counters[counter];
        if !held.is_empty() && rng.random_bool(0.2) {
            let (counter, hits, granted_at_us) = held.swap_remove(rng.random_range(0..held.len()));
            let (key, rate) = &counters[counter];
            let returned = [LeaseReturn {
                key: key.clone(),
                rate: *rate,
                hits: rng.random_range(1..=hits),
                granted_at_us,
            }];
            memory
                .give_back(&returned)
                .await
                .expect("memory gives back");
            redis.give_back(&returned).await.expect("redis gives back");
            given_back += returned[0].hits;
            let probe = [Check {
                key: key.clone(),
                rate: *rate,
                hits: 0,
                shadow: false,
                consistency: Consistency::Leased,
                rule: None,
            }];
            let rust = memory.decide(&probe).await.expect("memory decides");
            let lua = redis.decide(&probe).await.expect("redis decides");
            assert_eq!(rust, lua, "step {step}: after giving back {returned:?}");
        } else if rng.random_bool(0.5) {
            let want = rng.random_range(0..=u64::from(rate.burst()) + 2);
            let terms = LeaseTerms {
                want,
                min: rng.random_range(0..=want + 1),
                period_us: rng.random_range(1..rate.window_us().max(2)),
            };
            let ask = [LeaseAsk {
                key: key.clone(),
                rate: *rate,
                terms,
            }];
            let rust = memory.lease(&ask).await.expect("memory leases");
            let lua = redis.lease(&ask).await.expect("redis leases");
            assert_eq!(
                format!("{rust:?}"),
                format!("{lua:?}"),
                "step {step}: lease {terms:?} on {rate:?}"
            );
            if let Ok(Some(grant)) = &rust[0] {
                grants += grant.hits;
                if grant.hits > 0 {
                    held.push((counter, grant.hits, grant.granted_at_us));
                }
            }
        } else {
            let check = [Check {
                key: key.clone(),
                rate: *rate,
                hits: rng.random_range(0..3),
                shadow: false,
                consistency: Consistency::Leased,
                rule: None,
            }];
            let rust = memory.decide(&check).await.expect("memory decides");
            let lua = redis.decide(&check).await.expect("redis decides");
            assert_eq!(rust, lua, "step {step}: request on {rate:?}");
        }
        let step_us = match rng.random_range(0..10) {
            0..=4 => 0,
            5..=7 => rng.random_range(1..50_000),
            _ => rng.random_range(50_000..3_000_000),
        };
        clock.advance_us(step_us);
    }
    assert!(grants > 0, "the trace granted leases");
    assert!(given_back > 0, "the trace gave leased hits back");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_window_log_is_never_leased() {
    let server = RedisServer::start();
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("redis connects");
    let rate = Rate::new(Algorithm::SlidingWindowLog, 100, Unit::Second, 1, None).unwrap();
    let ask = [LeaseAsk {
        key: CounterKey::new("lease", &[]),
        rate,
        terms: LeaseTerms {
            want: 10,
            min: 1,
            period_us: 100_000,
        },
    }];
    let answers = redis.lease(&ask).await.expect("the call succeeds");
    assert!(
        matches!(&answers[0], Err(error) if error.to_string().contains("cannot be leased")),
        "{answers:?}"
    );
    let memory = MemoryStore::new()
        .lease(&ask)
        .await
        .expect("memory answers");
    assert_eq!(memory, vec![Ok(None)]);
}
