use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::slot::{Compact, CounterId, Slot};
use super::*;
use crate::limiter::algorithm::State;
use crate::limiter::clock::ManualClock;
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::{Algorithm, Unit, MICROS_PER_SECOND};
use crate::limiter::request::Entry as DescriptorEntry;

const S: u64 = MICROS_PER_SECOND;
const T0: u64 = 1_700_000_000 * S;

fn key(value: &str) -> CounterKey {
    CounterKey::new(
        "domain",
        &[DescriptorEntry {
            key: "k".into(),
            value: value.into(),
        }],
    )
}

fn rate(algorithm: Algorithm, limit: u32, unit: Unit) -> Rate {
    Rate::new(algorithm, limit, unit, 1, None).unwrap()
}

fn check(value: &str, rate: Rate, hits: u64) -> Check {
    Check {
        key: key(value),
        rate,
        hits,
        shadow: false,
        consistency: crate::limiter::Consistency::Exact,
        rule: None,
    }
}

fn shadow(value: &str, rate: Rate, hits: u64) -> Check {
    Check {
        shadow: true,
        ..check(value, rate, hits)
    }
}

fn store_at(now: u64) -> (Arc<ManualClock>, MemoryStore) {
    let clock = Arc::new(ManualClock::new(now));
    let store = MemoryStore::with_clock(clock.clone());
    (clock, store)
}

/// Goes through the `Store` trait, as the service does.
fn decide(store: &MemoryStore, checks: &[Check]) -> Vec<Verdict> {
    futures::executor::block_on(store.decide(checks)).unwrap()
}

/// What a check of 0 hits says about `value`'s counter: its remaining.
fn remaining(store: &MemoryStore, value: &str, rate: Rate) -> u32 {
    let verdicts = decide(store, &[check(value, rate, 0)]);
    assert!(verdicts[0].admitted);
    verdicts[0].remaining
}

#[test]
fn many_threads_on_one_key_never_over_admit() {
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let store = Arc::new(store);
        let rate = rate(algorithm, 50, Unit::Minute);
        let admitted = AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    let checks = [check("shared", rate, 1)];
                    for _ in 0..100 {
                        if decide(&store, &checks)[0].admitted {
                            admitted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
            }
        });
        assert_eq!(admitted.into_inner(), 50, "{algorithm}");
        assert_eq!(remaining(&store, "shared", rate), 0, "{algorithm}");
        assert_eq!(store.len(), 1);
    }
}

#[test]
fn concurrent_multi_key_requests_are_exact_and_never_deadlock() {
    // Requests of 1..=5 keys in random order across shards, from 8 threads: every key's
    // counter must equal the hits of the admitted requests that named it, and never exceed L.
    const KEYS: u64 = 24;
    const LIMIT: u32 = 40;
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let rate = rate(algorithm, LIMIT, Unit::Hour);
        let consumed: Vec<AtomicUsize> = (0..KEYS).map(|_| AtomicUsize::new(0)).collect();
        std::thread::scope(|scope| {
            for thread in 0..8u64 {
                let (store, consumed) = (&store, &consumed);
                scope.spawn(move || {
                    let mut seed = thread.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
                    let mut next = move || {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        seed
                    };
                    for _ in 0..400 {
                        let size = 1 + next() % 5;
                        let keys: Vec<u64> = (0..size).map(|_| next() % KEYS).collect();
                        let checks: Vec<Check> = keys
                            .iter()
                            .map(|k| check(&k.to_string(), rate, 1 + next() % 2))
                            .collect();
                        let verdicts = decide(store, &checks);
                        if verdicts.iter().all(|v| v.admitted) {
                            for c in &checks {
                                let k: usize =
                                    c.key.as_str().rsplit('=').next().unwrap().parse().unwrap();
                                consumed[k].fetch_add(c.hits as usize, Ordering::Relaxed);
                            }
                        }
                    }
                });
            }
        });
        for (k, used) in consumed.iter().enumerate() {
            let used = used.load(Ordering::Relaxed) as u32;
            assert!(used <= LIMIT, "{algorithm} key {k}: {used}");
            assert_eq!(
                remaining(&store, &k.to_string(), rate),
                LIMIT - used,
                "{algorithm} key {k}"
            );
        }
    }
}

#[test]
fn a_denied_request_consumes_nothing_anywhere() {
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let roomy = rate(algorithm, 10, Unit::Minute);
        let tight = rate(algorithm, 1, Unit::Minute);
        assert!(decide(&store, &[check("b", tight, 1)])[0].admitted);
        let verdicts = decide(&store, &[check("a", roomy, 3), check("b", tight, 1)]);
        assert!(verdicts[0].admitted, "{algorithm}: A alone has room");
        assert_eq!(verdicts[0].remaining, 7);
        assert!(!verdicts[1].admitted);
        assert_eq!(
            remaining(&store, "a", roomy),
            10,
            "{algorithm}: A unchanged"
        );
        assert_eq!(store.len(), 1, "{algorithm}: A was never written");
    }
}

#[test]
fn shadow_checks_never_veto_and_are_counted_when_they_admit() {
    let (_clock, store) = store_at(T0);
    let rate = rate(Algorithm::FixedWindow, 2, Unit::Minute);
    assert!(decide(&store, &[shadow("s", rate, 2)])[0].admitted);
    // The full shadow counter denies but does not veto; the enforced one is committed.
    let verdicts = decide(&store, &[check("a", rate, 1), shadow("s", rate, 1)]);
    assert!(verdicts[0].admitted);
    assert!(!verdicts[1].admitted);
    assert_eq!(remaining(&store, "a", rate), 1);
    assert_eq!(remaining(&store, "s", rate), 0);
    // An enforced denial vetoes everything, admitted shadow checks included.
    let verdicts = decide(&store, &[shadow("t", rate, 1), check("a", rate, 2)]);
    assert!(verdicts[0].admitted);
    assert!(!verdicts[1].admitted);
    assert_eq!(store.len(), 2, "t was not written");
    // A shadow check that denies on a shared counter adds nothing for the later checks.
    let verdicts = decide(
        &store,
        &[
            shadow("u", rate, 1),
            shadow("u", rate, 2),
            check("u", rate, 1),
        ],
    );
    let admitted: Vec<bool> = verdicts.iter().map(|v| v.admitted).collect();
    assert_eq!(admitted, [true, false, true]);
    assert_eq!(verdicts[2].remaining, 0);
    assert_eq!(remaining(&store, "u", rate), 0, "1 + 1 committed once");
}

#[test]
fn checks_sharing_a_counter_accumulate_and_commit_once() {
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let rate = rate(algorithm, 5, Unit::Minute);
        let verdicts = decide(&store, &[check("d", rate, 3), check("d", rate, 3)]);
        assert!(verdicts[0].admitted);
        assert_eq!(verdicts[0].remaining, 2);
        assert!(!verdicts[1].admitted, "{algorithm}: 3 + 3 > 5");
        assert_eq!(store.len(), 0);

        let verdicts = decide(
            &store,
            &[
                check("d", rate, 2),
                check("other", rate, 1),
                check("d", rate, 3),
            ],
        );
        assert!(verdicts.iter().all(|v| v.admitted), "{algorithm}");
        assert_eq!(verdicts[0].remaining, 3);
        assert_eq!(verdicts[2].remaining, 0);
        assert_eq!(remaining(&store, "d", rate), 0);
        assert_eq!(remaining(&store, "other", rate), 4);
        assert!(!decide(&store, &[check("d", rate, 1)])[0].admitted);
        if algorithm == Algorithm::SlidingWindowLog {
            // One commit of the total: a single log entry (a second commit at the same instant
            // would merge into it anyway, so also look at the count).
            let map = store.shards.iter().map(|s| s.0.lock().clone());
            let logs: Vec<Slot> = map.flat_map(|m| m.into_values()).collect();
            assert!(logs.iter().any(|slot| matches!(&slot.state,
                Compact::Log(l) if l.to_state().entries == [(T0, 5)])));
        }
    }
}

#[test]
fn the_algorithm_and_the_window_are_part_of_the_counter_identity() {
    let (_clock, store) = store_at(T0);
    let per_minute = rate(Algorithm::FixedWindow, 1, Unit::Minute);
    let per_hour = rate(Algorithm::FixedWindow, 1, Unit::Hour);
    let gcra = rate(Algorithm::Gcra, 1, Unit::Minute);
    let verdicts = decide(
        &store,
        &[
            check("x", per_minute, 1),
            check("x", per_hour, 1),
            check("x", gcra, 1),
        ],
    );
    assert!(verdicts.iter().all(|v| v.admitted));
    assert_eq!(store.len(), 3);
    // Same key, algorithm and window but another limit: the same counter.
    let bigger = rate(Algorithm::FixedWindow, 3, Unit::Minute);
    assert_eq!(remaining(&store, "x", bigger), 2);
}

#[test]
fn zero_hits_write_nothing() {
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let rate = rate(algorithm, 3, Unit::Second);
        let verdicts = decide(&store, &[check("a", rate, 0), check("b", rate, 0)]);
        assert!(verdicts.iter().all(|v| v.admitted && v.remaining == 3));
        assert_eq!(store.len(), 0, "{algorithm}");
        decide(
            &store,
            &[
                check("a", rate, 0),
                check("b", rate, 1),
                check("a", rate, 0),
            ],
        );
        assert_eq!(store.len(), 1, "{algorithm}: only b");
        assert_eq!(remaining(&store, "b", rate), 2);
    }
}

#[test]
fn huge_hits_are_denied_and_saturate() {
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let rate = Rate::new(algorithm, u32::MAX, Unit::Day, 1, Some(u32::MAX)).unwrap();
        let verdicts = decide(&store, &[check("h", rate, u64::MAX)]);
        assert!(!verdicts[0].admitted);
        let verdicts = decide(
            &store,
            &[
                check("h", rate, u64::MAX / 2 + 1),
                check("h", rate, u64::MAX / 2 + 1),
            ],
        );
        assert!(verdicts.iter().all(|v| !v.admitted));
        assert_eq!(store.len(), 0);
        let verdicts = decide(
            &store,
            &[check("h", rate, u64::from(u32::MAX)), check("h", rate, 0)],
        );
        assert!(verdicts.iter().all(|v| v.admitted));
        assert_eq!(verdicts[1].remaining, 0);
        assert!(!decide(&store, &[check("h", rate, u64::MAX)])[0].admitted);
    }
}

#[test]
fn no_checks_no_verdicts_and_always_healthy() {
    let store = MemoryStore::new();
    assert!(decide(&store, &[]).is_empty());
    assert!(futures::executor::block_on(store.is_healthy()));
    assert!(store.is_empty());
    assert!(format!("{store:?}").contains("MemoryStore"));
}

#[test]
fn idle_counters_expire_lazily_and_by_sweep() {
    let (clock, store) = store_at(T0);
    let rates: Vec<Rate> = Algorithm::ALL
        .into_iter()
        .map(|a| rate(a, 10, Unit::Second))
        .collect();
    for (i, rate) in rates.iter().enumerate() {
        assert!(decide(&store, &[check(&i.to_string(), *rate, 4)])[0].admitted);
    }
    assert_eq!(store.len(), 5);
    // Token bucket and GCRA are full again once 4 of 10/s have refilled (0.4 s); the fixed
    // window and the log end with the window (1 s); the sliding window counter's count weighs
    // on the estimate until the end of the next window (2 s).
    for (at, removed, left) in [
        (T0 + 400_000 - 1, 0, 5),
        (T0 + 400_000, 2, 3),
        (T0 + S - 1, 0, 3),
        (T0 + S, 2, 1),
        (T0 + 2 * S - 1, 0, 1),
        (T0 + 2 * S, 1, 0),
    ] {
        clock.set_us(at);
        assert_eq!(store.sweep_expired(), removed, "at T0 + {} µs", at - T0);
        assert_eq!(store.len(), left);
    }
    assert!(store.is_empty());

    // Lazily: touching an expired counter (even with a check of 0) removes it.
    for (i, rate) in rates.iter().enumerate() {
        decide(&store, &[check(&i.to_string(), *rate, 1)]);
    }
    assert_eq!(store.len(), 5);
    clock.advance_us(10 * S);
    for (i, rate) in rates.iter().enumerate() {
        let v = decide(&store, &[check(&i.to_string(), *rate, 0)]);
        assert_eq!(v[0].remaining, 10);
    }
    assert_eq!(store.len(), 0);
    assert_eq!(store.sweep_expired(), 0);
}

#[test]
fn an_expired_counter_decides_as_new() {
    let (clock, store) = store_at(T0);
    let rate = rate(Algorithm::Gcra, 2, Unit::Second);
    assert!(decide(&store, &[check("g", rate, 2)])[0].admitted);
    assert!(!decide(&store, &[check("g", rate, 1)])[0].admitted);
    clock.advance_us(S);
    let v = decide(&store, &[check("g", rate, 2)]);
    assert!(v[0].admitted);
    assert_eq!(v[0].remaining, 0);
    assert_eq!(store.len(), 1);
}

#[tokio::test]
async fn the_sweeper_runs_periodically_and_stops_with_the_store() {
    let (clock, store) = store_at(T0);
    let store = Arc::new(store);
    let rate = rate(Algorithm::FixedWindow, 5, Unit::Second);
    for i in 0..100 {
        store
            .decide(&[check(&i.to_string(), rate, 1)])
            .await
            .unwrap();
    }
    assert_eq!(store.len(), 100);
    let sweeper = store.spawn_sweeper(Duration::from_millis(5)).unwrap();
    clock.advance_us(S);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !store.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the sweeper never ran"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    drop(store);
    tokio::time::timeout(Duration::from_secs(5), sweeper)
        .await
        .expect("the sweeper outlived its store")
        .unwrap();
}

#[test]
fn the_sweeper_needs_a_runtime_and_says_so() {
    let store = Arc::new(MemoryStore::new());
    assert!(store.spawn_sweeper(Duration::ZERO).is_none());
}

#[test]
fn the_store_decides_exactly_like_the_algorithms() {
    // A differential test against a model: per counter, the pure algorithm functions, with an
    // expired state treated as absent (as the store does).
    let mut seed = 0x0123_4567_89AB_CDEFu64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for algorithm in Algorithm::ALL {
        let (clock, store) = store_at(T0);
        let rates = [
            Rate::new(algorithm, 3, Unit::Second, 1, Some(5)).unwrap(),
            Rate::new(algorithm, 7, Unit::Second, 2, None).unwrap(),
        ];
        let mut model: HashMap<(String, usize), (u64, State)> = HashMap::new();
        let mut now = T0;
        for step in 0..3_000 {
            now += [0, 1, 1_000, 150_000, 900_000, 3 * S][(next() % 6) as usize];
            clock.set_us(now);
            let size = 1 + next() % 3;
            let picks: Vec<(String, usize, u64)> = (0..size)
                .map(|_| {
                    let hits = [0, 1, 1, 2, 4, u64::MAX][(next() % 6) as usize];
                    ((next() % 3).to_string(), (next() % 2) as usize, hits)
                })
                .collect();
            let checks: Vec<Check> = picks
                .iter()
                .map(|(k, r, hits)| check(k, rates[*r], *hits))
                .collect();
            let got = decide(&store, &checks);

            // The model: cumulative hits per counter, all or nothing.
            let mut admitted_hits: HashMap<(String, usize), u64> = HashMap::new();
            let mut want = Vec::new();
            for (k, r, hits) in &picks {
                let id = (k.clone(), *r);
                let rate = &rates[*r];
                let state = model
                    .get(&id)
                    .filter(|(expiry, _)| *expiry > now)
                    .map(|(_, s)| s);
                let total = admitted_hits
                    .get(&id)
                    .copied()
                    .unwrap_or(0)
                    .saturating_add(*hits);
                let v = algorithm::evaluate(rate, state, now, total);
                if v.admitted {
                    admitted_hits.insert(id, total);
                }
                want.push(v);
            }
            assert_eq!(got, want, "{algorithm} step {step}");
            if want.iter().all(|v| v.admitted) {
                for ((k, r), total) in admitted_hits {
                    if total == 0 {
                        continue;
                    }
                    let rate = &rates[r];
                    let old = model
                        .remove(&(k.clone(), r))
                        .filter(|(expiry, _)| *expiry > now)
                        .map(|(_, s)| s);
                    let new = algorithm::commit(rate, old, now, total);
                    model.insert((k, r), (algorithm::expires_at_us(rate, &new), new));
                }
            }
            if step % 500 == 0 {
                store.sweep_expired();
            }
        }
    }
}

#[test]
fn entries_are_small() {
    assert_eq!(std::mem::size_of::<CounterId>(), 16);
    assert_eq!(std::mem::size_of::<Compact>(), 24);
    assert_eq!(std::mem::size_of::<(CounterId, Slot)>(), 48);

    // Table bytes per counter (buckets × (entry + control byte)) for O(1)-state algorithms.
    for count in [1_000usize, 100_000, 180_000] {
        let (_clock, store) = store_at(T0);
        let rate = rate(Algorithm::Gcra, 10, Unit::Minute);
        for i in 0..count {
            store.decide_now(&[check(&i.to_string(), rate, 1)]);
        }
        assert_eq!(store.len(), count);
        let bytes: usize = store
            .shards
            .iter()
            .map(|shard| {
                let map = shard.0.lock();
                let buckets = (map.capacity() * 8 / 7).next_power_of_two();
                buckets * (std::mem::size_of::<(CounterId, Slot)>() + 1)
            })
            .sum();
        let per_key = bytes / count;
        assert!(per_key <= 150, "{count} counters: {per_key} bytes each");
    }
}

#[test]
fn large_requests_group_their_counters_too() {
    // More checks than the linear scan handles: 4 counters, interleaved.
    for algorithm in Algorithm::ALL {
        let (_clock, store) = store_at(T0);
        let rate = rate(algorithm, 5, Unit::Minute);
        let request = |per_key: usize| -> Vec<Check> {
            (0..4 * per_key)
                .map(|i| check(&(i % 4).to_string(), rate, 1))
                .collect()
        };
        let verdicts = decide(&store, &request(6));
        assert_eq!(verdicts.iter().filter(|v| !v.admitted).count(), 4);
        assert!(verdicts[20..].iter().all(|v| !v.admitted), "{algorithm}");
        assert_eq!(store.len(), 0);
        let verdicts = decide(&store, &request(5));
        assert!(verdicts.iter().all(|v| v.admitted), "{algorithm}");
        let remaining: Vec<u32> = verdicts.iter().map(|v| v.remaining).collect();
        assert_eq!(remaining, [[4; 4], [3; 4], [2; 4], [1; 4], [0; 4]].concat());
        for k in 0..4 {
            assert_eq!(remaining_of(&store, k, rate), 0);
        }
    }
}

fn remaining_of(store: &MemoryStore, k: usize, rate: Rate) -> u32 {
    remaining(store, &k.to_string(), rate)
}

#[test]
fn a_decision_on_a_full_100k_log_reads_logarithmically_many_entries() {
    use crate::limiter::algorithm::sliding_window_log::probe;

    const LIMIT: u32 = 100_000;
    let step = 3_600 * S / u64::from(LIMIT);
    let (clock, store) = store_at(T0);
    let log = rate(Algorithm::SlidingWindowLog, LIMIT, Unit::Hour);
    let full = [check("full", log, 1)];
    for _ in 0..LIMIT {
        clock.advance_us(step);
        assert!(decide(&store, &full)[0].admitted);
    }
    let reads = |checks: &[Check]| {
        let before = probe::reads();
        let verdicts = decide(&store, checks);
        (verdicts, probe::reads() - before)
    };
    // Far below the 100 000 entries a walk would read: two binary searches of ≈ 17 steps.
    let bound = 2 * (u64::from(LIMIT.ilog2()) + 4);
    clock.advance_us(1);
    for hits in [1, 1_000, u64::from(LIMIT)] {
        let (verdicts, read) = reads(&[check("full", log, hits)]);
        assert!(!verdicts[0].admitted);
        assert_eq!(verdicts[0].remaining, 0);
        assert!(read <= bound, "{hits} hits: {read} entries read");
    }
    let (verdicts, read) = reads(&[check("full", log, 1), check("other", log, 1)]);
    assert!(!verdicts[0].admitted && verdicts[1].admitted);
    assert!(read <= bound, "{read} entries read");
    for _ in 0..100 {
        clock.advance_us(step);
        let (verdicts, read) = reads(&full);
        assert!(verdicts[0].admitted, "the oldest hit has left");
        assert!(read <= bound, "an admission read {read} entries");
    }
}
