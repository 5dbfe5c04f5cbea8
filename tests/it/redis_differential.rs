//! Differential test: a long random trace of requests is replayed through the pure Rust algorithm
//! functions (a reference model of the request-level contract, plus the memory store) and through
//! the Lua script in a real redis-server (time pinned to the same instants). Every step must give
//! identical verdicts: admitted, remaining and reset_after_us, to the microsecond. A second trace
//! also refunds some admitted requests later (`algorithm::refund` against the refund script), after
//! other requests used their counters, and compares the refunded states too.
//!
//! The seed is printed; rerun a failure with `RATELIMITD_SEED=<seed>`.

use std::collections::HashMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::algorithm::{self, State, Verdict};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::redis::scripts::keys::{redis_key, state_key};
use ratelimitd::store::redis::scripts::refund::{
    evalsha_refund, refund_script_load, refund_sha1, Refund,
};
use ratelimitd::store::redis::scripts::request::CounterKind;
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, MemoryStore, RedisStore, Store};
use testkit::redis_server::RedisServer;

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
    states: HashMap<Counter, State>,
}

/// A counter of the model: identity, algorithm and window, as its Redis key.
type Counter = (CounterKey, Algorithm, u64);

/// What a request committed to one counter, as a refund names it.
#[derive(Debug, Clone)]
struct Committed {
    counter: Counter,
    rate: Rate,
    hits: u64,
    /// `algorithm::debt_before_us` of the verdict of the counter's last admitted check.
    debt_before: u64,
}

impl Model {
    fn decide(&mut self, checks: &[Check], now: u64) -> Vec<Verdict> {
        self.decide_committing(checks, now).0
    }

    /// The verdicts, and what was committed to each counter (nothing when the request was
    /// denied).
    fn decide_committing(&mut self, checks: &[Check], now: u64) -> (Vec<Verdict>, Vec<Committed>) {
        let mut admitted_hits: HashMap<Counter, (u64, Option<Rate>)> = HashMap::new();
        let mut last_reset: HashMap<Counter, u64> = HashMap::new();
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
                last_reset.insert(counter.clone(), verdict.reset_after_us);
                admitted_hits.insert(counter, (hits, Some(check.rate)));
            } else if !check.shadow {
                vetoed = true;
            }
            verdicts.push(verdict);
        }
        let mut committed = Vec::new();
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
                self.states.insert(counter.clone(), state);
                let reset = last_reset.get(&counter).copied().unwrap_or(0);
                committed.push(Committed {
                    debt_before: algorithm::debt_before_us(&rate, reset, total),
                    counter,
                    rate,
                    hits: total,
                });
            }
        }
        (verdicts, committed)
    }

    /// Refunds what one request committed at `committed_at`; returns how many states changed (as
    /// the refund script counts its keys).
    fn refund(&mut self, committed: &[Committed], committed_at: u64, now: u64) -> u64 {
        let mut changed = 0;
        for commit in committed {
            let before = self.states.remove(&commit.counter);
            let after = algorithm::refund(
                &commit.rate,
                before.clone(),
                committed_at,
                now,
                commit.hits,
                commit.debt_before,
            );
            if after != before {
                changed += 1;
            }
            if let Some(state) = after {
                self.states.insert(commit.counter.clone(), state);
            }
        }
        changed
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

/// A request of one to three checks.
fn random_checks(
    rng: &mut StdRng,
    rates: &[Rate],
    identities: &[CounterKey],
    recent: &mut Vec<(CounterKey, Rate)>,
) -> Vec<Check> {
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
                hits: random_hits(rng, &rate),
                rate,
                shadow: rng.random_bool(0.1),
                ..earlier
            }
        } else if !recent.is_empty() && rng.random_bool(0.5) {
            // A counter used by a recent request: keeps counters busy, so their states
            // reach boundaries (a hit leaving the log exactly W later, a refill landing on a
            // whole token).
            let (key, rate): (CounterKey, Rate) = recent[rng.random_range(0..recent.len())].clone();
            Check {
                key,
                hits: random_hits(rng, &rate),
                rate,
                shadow: rng.random_bool(0.1),
                consistency: ratelimitd::limiter::Consistency::Exact,
                rule: None,
            }
        } else {
            let rate = rates[rng.random_range(0..rates.len())];
            Check {
                key: identities[rng.random_range(0..identities.len())].clone(),
                hits: random_hits(rng, &rate),
                rate,
                shadow: rng.random_bool(0.1),
                consistency: ratelimitd::limiter::Consistency::Exact,
                rule: None,
            }
        };
        if recent.len() == 12 {
            recent.remove(0);
        }
        recent.push((check.key.clone(), check.rate));
        checks.push(check);
    }
    checks
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
        let checks = random_checks(&mut rng, &rates, &identities, &mut recent);
        let count = checks.len();
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

/// A request admitted at `committed_at` whose commits are to be refunded later.
struct Reservation {
    committed_at: u64,
    committed: Vec<Committed>,
}

/// The counter's state as stored in Redis, parsed back into the model's terms: `None` when absent.
/// A sliding log comes back with its live hits only, merged per timestamp.
fn stored_state(conn: &mut redis::Connection, commit: &Committed, now: u64) -> Option<State> {
    use algorithm::{
        FixedWindowState, GcraState, SlidingWindowCounterState, SlidingWindowLogState,
        TokenBucketState,
    };
    let key = redis_key(&commit.counter.0, &commit.rate);
    if commit.rate.algorithm() == Algorithm::SlidingWindowLog {
        let members: Vec<(String, u64)> = redis::cmd("ZRANGE")
            .arg(&key)
            .arg(0)
            .arg(-1)
            .arg("WITHSCORES")
            .query(conn)
            .expect("ZRANGE");
        if members.is_empty() {
            return None;
        }
        let mut entries = std::collections::VecDeque::<(u64, u64)>::new();
        for (_, ts) in members {
            if now.saturating_sub(ts) >= commit.rate.window_us() {
                continue;
            }
            match entries.back_mut() {
                Some((last, hits)) if *last == ts => *hits += 1,
                _ => entries.push_back((ts, 1)),
            }
        }
        return Some(State::SlidingWindowLog(SlidingWindowLogState { entries }));
    }
    if commit.rate.algorithm() == Algorithm::FixedWindow {
        // The count of the window of `now`, under that window's own key.
        let window_us = commit.rate.window_us();
        let count: Option<u64> = redis::cmd("GET")
            .arg(state_key(&key, &commit.rate, now))
            .query(conn)
            .expect("GET");
        return Some(State::FixedWindow(FixedWindowState {
            window_start_us: now - now % window_us,
            count: count?,
        }));
    }
    let raw: Option<String> = redis::cmd("GET").arg(&key).query(conn).expect("GET");
    let raw = raw?;
    let fields: Vec<&str> = raw.split(':').collect();
    let int = |i: usize| -> u64 { fields[i].parse().expect("an integer field") };
    let state = match commit.rate.algorithm() {
        Algorithm::SlidingWindowCounter => State::SlidingWindowCounter(SlidingWindowCounterState {
            window_start_us: int(0),
            previous: int(1),
            current: int(2),
        }),
        Algorithm::TokenBucket => State::TokenBucket(TokenBucketState {
            tokens: fields[0].parse().expect("tokens"),
            last_us: int(1),
        }),
        Algorithm::Gcra => State::Gcra(GcraState { tat_us: int(0) }),
        Algorithm::SlidingWindowLog | Algorithm::FixedWindow => unreachable!(),
    };
    Some(state)
}

/// The model's state of a refunded counter against the one stored in Redis: the same (a sliding
/// log's live hits), or both gone. A state already worthless at `now` may or may not still be
/// stored (keys expire after it), so it is not compared.
fn assert_same_state(
    conn: &mut redis::Connection,
    model: &Model,
    commit: &Committed,
    now: u64,
    context: &dyn Fn() -> String,
) {
    let modelled = model.states.get(&commit.counter);
    let stored = stored_state(conn, commit, now);
    match modelled {
        None => assert!(
            stored.is_none(),
            "refunded away in Rust only: {stored:?}\n{}",
            context()
        ),
        Some(state) if algorithm::expires_at_us(&commit.rate, state) <= now => {}
        Some(State::SlidingWindowLog(log)) => {
            let live: Vec<(u64, u64)> = log
                .entries
                .iter()
                .copied()
                .filter(|&(ts, _)| now.saturating_sub(ts) < commit.rate.window_us())
                .collect();
            let stored = match stored {
                Some(State::SlidingWindowLog(s)) => s.entries.into_iter().collect(),
                _ => Vec::new(),
            };
            assert_eq!(stored, live, "sliding log after a refund\n{}", context());
        }
        Some(state) => {
            assert_eq!(
                stored.as_ref(),
                Some(state),
                "state after a refund\n{}",
                context()
            );
        }
    }
}

/// Refunds `reservation` at `refunded_at` through the refund script and in the model: the same
/// number of keys must change, to the same states (compared at `now`, the trace's instant).
/// Returns the number of keys changed.
fn refund_both(
    conn: &mut redis::Connection,
    model: &mut Model,
    reservation: &Reservation,
    refunded_at: u64,
    now: u64,
    context: &str,
) -> u64 {
    let to_refund: Vec<Refund> = reservation
        .committed
        .iter()
        .map(|commit| Refund {
            key: redis_key(&commit.counter.0, &commit.rate),
            rate: commit.rate,
            counter: CounterKind::Native,
            hits: commit.hits,
            committed_at_us: reservation.committed_at,
            debt_before_us: commit.debt_before,
        })
        .collect();
    let context = || {
        format!(
            "{context}: refund at {refunded_at} of the commit at {}: {to_refund:#?}",
            reservation.committed_at
        )
    };
    let behind = behind_window_counts(conn, model, reservation, refunded_at);
    let from_redis: u64 = evalsha_refund(&to_refund, Some(refunded_at))
        .query(conn)
        .unwrap_or_else(|e| panic!("refund script failed: {e}\n{}", context()));
    let expected = model.refund(
        &reservation.committed,
        reservation.committed_at,
        refunded_at,
    );
    for (key, before, hits) in &behind {
        let after: Option<u64> = redis::cmd("GET").arg(key).query(conn).expect("GET");
        let taken_back = before.checked_sub(*hits).filter(|&count| count > 0);
        assert_eq!(after, taken_back, "{key} after a refund\n{}", context());
    }
    let behind = u64::try_from(behind.len()).expect("a few");
    assert_eq!(from_redis, expected + behind, "keys changed\n{}", context());
    for commit in &reservation.committed {
        assert_same_state(conn, model, commit, refunded_at.max(now), &context);
    }
    from_redis
}

/// The fixed-window counts a refund with a clock behind finds in Redis where the model has none:
/// Redis keeps each window's count under a key of its own, the model only its counter's latest
/// window. A refund into a window the model has moved past (at an instant still inside it) finds
/// that window's count in Redis until its key expires, and takes the hits back there: key, count
/// before, hits.
fn behind_window_counts(
    conn: &mut redis::Connection,
    model: &Model,
    reservation: &Reservation,
    refunded_at: u64,
) -> Vec<(String, u64, u64)> {
    let mut behind = Vec::new();
    for commit in &reservation.committed {
        if commit.rate.algorithm() != Algorithm::FixedWindow || commit.hits == 0 {
            continue;
        }
        let window_us = commit.rate.window_us();
        let window_start = reservation.committed_at - reservation.committed_at % window_us;
        // The model keeps that window's count only while it is the counter's latest and still
        // live: a later window, or none (dropped once expired at a later instant), moved on.
        let moved_on = !matches!(
            model.states.get(&commit.counter),
            Some(State::FixedWindow(state)) if state.window_start_us == window_start
        );
        if !moved_on || refunded_at >= window_start + window_us {
            continue;
        }
        let key = state_key(
            &redis_key(&commit.counter.0, &commit.rate),
            &commit.rate,
            reservation.committed_at,
        );
        let count: Option<u64> = redis::cmd("GET").arg(&key).query(conn).expect("GET");
        if let Some(count) = count {
            behind.push((key, count, commit.hits));
        }
    }
    behind
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lua_and_rust_agree_on_a_random_trace_with_refunds() {
    let seed = seed("trace with refunds");
    let mut rng = StdRng::seed_from_u64(seed);

    let server = RedisServer::start();
    let start = 1_700_000_000 * S + 654_321;
    let clock = Arc::new(ManualClock::new(start));
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let mut conn = server.connection();
    let sha: String = refund_script_load().query(&mut conn).expect("SCRIPT LOAD");
    assert_eq!(sha, refund_sha1());
    let mut model = Model::default();

    let rates = rates();
    let identities = identities();
    let mut now = start;
    let mut history: Vec<u64> = Vec::new();
    let mut recent: Vec<(CounterKey, Rate)> = Vec::new();
    let mut pending: Vec<Reservation> = Vec::new();
    let (mut refunds, mut keys, mut changed, mut behind) = (0usize, 0usize, 0u64, 0usize);
    // Steps left at the instant of the last reservation: requests and refunds at the instant of
    // a commit are where a refund's effect on later commits of that instant shows (a sliding log
    // numbers the hits of one timestamp).
    let mut hold = 0;
    for step in 0..STEPS {
        if hold > 0 {
            hold -= 1;
        } else {
            now = advance(&mut rng, now, &history);
        }
        if history.len() == 32 {
            history.remove(0);
        }
        history.push(now);

        // Refund a reservation now and then, after a few other requests (often on its counters:
        // they are recent); rarely with a clock behind the reservation's, as after a failover.
        if !pending.is_empty() && rng.random_bool(0.4) {
            let reservation = pending.swap_remove(rng.random_range(0..pending.len()));
            let refunded_at = if rng.random_bool(0.05) {
                behind += 1;
                reservation.committed_at - rng.random_range(1..=1_000)
            } else {
                now
            };
            let context = format!("seed {seed}, step {step}, now {now}");
            changed += refund_both(
                &mut conn,
                &mut model,
                &reservation,
                refunded_at,
                now,
                &context,
            );
            refunds += 1;
            keys += reservation.committed.len();
        }

        clock.set_us(now);
        let checks = random_checks(&mut rng, &rates, &identities, &mut recent);
        let (expected, committed) = model.decide_committing(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        assert_eq!(
            from_redis,
            expected,
            "Lua differs from the Rust math\nseed {seed}, step {step}, now {now}\nchecks: {checks:#?}"
        );
        if !committed.is_empty() && rng.random_bool(0.25) {
            if pending.len() == 6 {
                pending.remove(0);
            }
            pending.push(Reservation {
                committed_at: now,
                committed,
            });
            if rng.random_bool(0.3) {
                hold = rng.random_range(1..=4);
            }
        }
    }
    eprintln!(
        "{STEPS} requests, {refunds} refunds of {keys} keys ({behind} with a clock behind): \
         {changed} keys changed"
    );
    assert!(
        refunds > STEPS / 20 && changed as usize > keys / 4,
        "too few refunds had an effect"
    );
}

/// A sliding log numbers the hits of one timestamp from the count already there: a refund that
/// took other members than the last-numbered ones would let a later commit of the same instant
/// overwrite a hit. Requests and refunds at one instant, on one counter, against the model; the
/// second series refunds more members than one ZREM takes.
#[tokio::test]
async fn a_sliding_log_refund_keeps_every_later_hit_of_its_instant() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: String = refund_script_load().query(&mut conn).expect("SCRIPT LOAD");
    let now = 1_700_000_000 * S + 777;
    let clock = Arc::new(ManualClock::new(now));
    let redis = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let mut model = Model::default();
    // Hits, whether to reserve them, whether to refund the oldest reservation after them.
    type Step = (u64, bool, bool);
    // The log's limit, its steps, and the hits left in it.
    let series: [(u32, &[Step], u64); 2] = [
        (
            30,
            &[
                (2, false, false),
                (3, true, false),
                (1, false, true),
                (2, true, false),
                (4, false, true),
                (5, false, false),
            ],
            2 + 1 + 4 + 5,
        ),
        (
            1_000,
            &[
                (300, false, false),
                (520, true, false),
                (10, false, true),
                (7, false, false),
            ],
            300 + 10 + 7,
        ),
    ];
    for (i, (limit, steps, left)) in series.into_iter().enumerate() {
        let rate = rate(Algorithm::SlidingWindowLog, limit, Unit::Minute, 1, None);
        let check = |hits| Check {
            key: identities()[i].clone(),
            rate,
            hits,
            shadow: false,
            consistency: ratelimitd::limiter::Consistency::Exact,
            rule: None,
        };
        let mut reserved: Vec<Reservation> = Vec::new();
        for &(hits, reserve, refund_one) in steps {
            let checks = [check(hits)];
            let (expected, committed) = model.decide_committing(&checks, now);
            assert!(expected[0].admitted);
            assert_eq!(redis.decide(&checks).await.expect("decide"), expected);
            if reserve {
                reserved.push(Reservation {
                    committed_at: now,
                    committed,
                });
            }
            if refund_one {
                let reservation = reserved.remove(0);
                let context = format!("series {i}");
                assert_eq!(
                    refund_both(&mut conn, &mut model, &reservation, now, now, &context),
                    1
                );
            }
            let probe = [check(0)];
            assert_eq!(
                redis.decide(&probe).await.expect("decide"),
                model.decide(&probe, now)
            );
        }
        let members: u64 = redis::cmd("ZCARD")
            .arg(redis_key(&identities()[i], &rate))
            .query(&mut conn)
            .expect("ZCARD");
        assert_eq!(members, left);
    }
}

/// A refund whose arguments do not add up is an error reply, and changes nothing.
#[test]
fn the_refund_script_refuses_a_bad_layout_and_changes_nothing() {
    let server = RedisServer::start();
    let mut conn = server.connection();
    let _: String = refund_script_load().query(&mut conn).expect("SCRIPT LOAD");
    let rate = rate(Algorithm::FixedWindow, 5, Unit::Second, 1, None);
    let now = 1_700_000_000 * S + 250_000;
    let keys: Vec<String> = identities()[..2]
        .iter()
        .map(|identity| redis_key(identity, &rate))
        .collect();
    // Each counter's window of `now` holds 4.
    let counts: Vec<String> = keys.iter().map(|key| state_key(key, &rate, now)).collect();
    for count in &counts {
        let _: () = redis::cmd("SET")
            .arg(count)
            .arg(4)
            .query(&mut conn)
            .expect("SET");
    }
    let table = ["1", "0", "5", "1000000", "5", "200000"];
    let now_text = now.to_string();
    let committed = (now - 1).to_string();
    let good = [
        &table[..],
        &[now_text.as_str()],
        &["1", "2", &committed, "0"],
        &["1", "1", &committed, "0"],
    ]
    .concat();
    let call = |keys: &[String], argv: &[&str]| -> redis::RedisResult<u64> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(refund_sha1()).arg(keys.len()).arg(keys).arg(argv);
        cmd.query(&mut server.connection())
    };
    let mut bad: Vec<Vec<&str>> = Vec::new();
    bad.push(good[..good.len() - 1].to_vec());
    bad.push([&good[..], &["1"]].concat());
    for (index, value) in [
        (0, "0"),
        (0, "2"),
        (1, "9"),
        (2, "0"),
        (6, "soon"),
        (6, "-1"),
        (7, "2"),
        (7, "0"),
        (8, "6"),
        (8, "1.5"),
        (12, "x"),
        (9, "-3"),
        (10, "-1"),
        (14, "0.5"),
    ] {
        let mut argv = good.clone();
        argv[index] = value;
        bad.push(argv);
    }
    for argv in &bad {
        let reply = call(&keys, argv);
        assert!(reply.is_err(), "{argv:?} gave {reply:?}");
        for count in &counts {
            let value: u64 = redis::cmd("GET").arg(count).query(&mut conn).expect("GET");
            assert_eq!(value, 4, "{argv:?}");
        }
    }
    assert_eq!(call(&keys, &good).expect("a good layout"), 2);
    let values: Vec<u64> = redis::cmd("MGET")
        .arg(&counts)
        .query(&mut conn)
        .expect("MGET");
    assert_eq!(values, [2, 3]);
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
    let mut conn = server.connection();
    let _: String = refund_script_load().query(&mut conn).expect("SCRIPT LOAD");
    let mut model = Model::default();
    let rates = extreme_rates();
    let identities = identities();
    let mut now = start;
    let mut pending: Vec<Reservation> = Vec::new();
    let mut changed = 0;
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
        // Refunds too: a sliding log of 300 takes chunks of members back, a 100-year GCRA or
        // bucket refunds products near the exact range of doubles.
        if !pending.is_empty() && rng.random_bool(0.3) {
            let reservation = pending.swap_remove(rng.random_range(0..pending.len()));
            let context = format!("extremes: seed {seed}, step {step}, now {now}");
            changed += refund_both(&mut conn, &mut model, &reservation, now, now, &context);
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
                    consistency: ratelimitd::limiter::Consistency::Exact,
                    rule: None,
                }
            })
            .collect();
        let (expected, committed) = model.decide_committing(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        assert_eq!(
            from_redis, expected,
            "Lua differs from the Rust math\nseed {seed}, step {step}, now {now}\nchecks: {checks:#?}"
        );
        if !committed.is_empty() && rng.random_bool(0.3) {
            if pending.len() == 6 {
                pending.remove(0);
            }
            pending.push(Reservation {
                committed_at: now,
                committed,
            });
        }
    }
    assert!(changed > 20, "only {changed} keys changed by refunds");
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
            consistency: ratelimitd::limiter::Consistency::Exact,
            rule: None,
        }];
        let expected = model.decide(&checks, now);
        let from_redis = redis.decide(&checks).await.expect("redis decides");
        assert_eq!(from_redis, expected, "hits {hits} at {now}");
    }
}
