//! The five algorithms as pure functions of (state, rate, now, hits).
//!
//! Each algorithm splits a decision in two steps so a store can decide a whole request all or
//! nothing: [`evaluate`] says whether `hits` would be admitted on top of the stored state, and
//! [`commit`] returns the state after admitting them. A store evaluates every descriptor of a
//! request first and commits only when all admit. When several descriptors of one request share a
//! counter, the store evaluates each with the hits of the earlier ones added (`hits` is cumulative)
//! and commits the total once; for every algorithm that equals deciding them one after the other
//! (same admissions, same verdicts for admitted checks; a denied check reports the counter without
//! the request's hits, since a denied request consumes nothing). When the checks of one request
//! are decided in separate calls (one per Redis Cluster node), [`refund`] takes back what the
//! calls that admitted committed once another call denied.
//!
//! The Lua scripts in `lua/` implement the same math operation for operation; the differential
//! test replays random traces through both and demands identical answers.

pub mod fixed_window;
pub mod gcra;
pub mod lease;
pub mod sliding_window_counter;
pub mod sliding_window_log;
pub mod token_bucket;

use super::rate::{Algorithm, Rate};

pub use fixed_window::FixedWindowState;
pub use gcra::GcraState;
pub use sliding_window_counter::SlidingWindowCounterState;
pub use sliding_window_log::SlidingWindowLogState;
pub use token_bucket::TokenBucketState;

/// The answer for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub admitted: bool,
    /// Requests still admissible after this decision (`limit_remaining`).
    pub remaining: u32,
    /// `duration_until_reset` in µs: when admitted, the time until the limit is fully
    /// replenished; when denied, the time after which the same request could be admitted.
    pub reset_after_us: u64,
    /// Whether an admitted check's hits stay counted when another check of its request denies
    /// the request. False for every algorithm here (a denied request consumes nothing); set by
    /// the Redis store for envoyproxy/ratelimit's counters in its default counting (drop-in
    /// mode), which count every descriptor's hits whatever the others decide.
    pub counted_when_vetoed: bool,
}

/// Stored state of one counter, whatever its algorithm.
#[derive(Debug, Clone, PartialEq)]
pub enum State {
    FixedWindow(FixedWindowState),
    SlidingWindowLog(SlidingWindowLogState),
    SlidingWindowCounter(SlidingWindowCounterState),
    TokenBucket(TokenBucketState),
    Gcra(GcraState),
}

/// Hits above this can never be admitted by `rate`; they are clamped to it before any arithmetic
/// so that nothing overflows, here or in Lua (where numbers are doubles).
pub fn clamp_hits(rate: &Rate, hits: u64) -> u64 {
    hits.min(u64::from(rate.burst()) + 1)
}

/// Decides whether `hits` more would be admitted on top of `state` at `now_us`. `None` is a
/// counter never used or expired. A state of another algorithm counts as absent.
pub fn evaluate(rate: &Rate, state: Option<&State>, now_us: u64, hits: u64) -> Verdict {
    let hits = clamp_hits(rate, hits);
    match rate.algorithm() {
        Algorithm::FixedWindow => {
            let state = state.and_then(|s| match s {
                State::FixedWindow(s) => Some(s),
                _ => None,
            });
            fixed_window::evaluate(rate, state, now_us, hits)
        }
        Algorithm::SlidingWindowLog => {
            let state = state.and_then(|s| match s {
                State::SlidingWindowLog(s) => Some(s),
                _ => None,
            });
            sliding_window_log::evaluate(rate, state, now_us, hits)
        }
        Algorithm::SlidingWindowCounter => {
            let state = state.and_then(|s| match s {
                State::SlidingWindowCounter(s) => Some(s),
                _ => None,
            });
            sliding_window_counter::evaluate(rate, state, now_us, hits)
        }
        Algorithm::TokenBucket => {
            let state = state.and_then(|s| match s {
                State::TokenBucket(s) => Some(s),
                _ => None,
            });
            token_bucket::evaluate(rate, state, now_us, hits)
        }
        Algorithm::Gcra => {
            let state = state.and_then(|s| match s {
                State::Gcra(s) => Some(s),
                _ => None,
            });
            gcra::evaluate(rate, state, now_us, hits)
        }
    }
}

/// The state after admitting `hits` at `now_us`. Call only after [`evaluate`] admitted them, and
/// not at all for `hits == 0` (a check-only request writes nothing).
pub fn commit(rate: &Rate, state: Option<State>, now_us: u64, hits: u64) -> State {
    let hits = clamp_hits(rate, hits);
    match (rate.algorithm(), state) {
        (Algorithm::FixedWindow, Some(State::FixedWindow(s))) => {
            State::FixedWindow(fixed_window::commit(rate, Some(s), now_us, hits))
        }
        (Algorithm::FixedWindow, _) => {
            State::FixedWindow(fixed_window::commit(rate, None, now_us, hits))
        }
        (Algorithm::SlidingWindowLog, Some(State::SlidingWindowLog(s))) => {
            State::SlidingWindowLog(sliding_window_log::commit(rate, Some(s), now_us, hits))
        }
        (Algorithm::SlidingWindowLog, _) => {
            State::SlidingWindowLog(sliding_window_log::commit(rate, None, now_us, hits))
        }
        (Algorithm::SlidingWindowCounter, Some(State::SlidingWindowCounter(s))) => {
            State::SlidingWindowCounter(sliding_window_counter::commit(rate, Some(s), now_us, hits))
        }
        (Algorithm::SlidingWindowCounter, _) => {
            State::SlidingWindowCounter(sliding_window_counter::commit(rate, None, now_us, hits))
        }
        (Algorithm::TokenBucket, Some(State::TokenBucket(s))) => {
            State::TokenBucket(token_bucket::commit(rate, Some(s), now_us, hits))
        }
        (Algorithm::TokenBucket, _) => {
            State::TokenBucket(token_bucket::commit(rate, None, now_us, hits))
        }
        (Algorithm::Gcra, Some(State::Gcra(s))) => {
            State::Gcra(gcra::commit(rate, Some(s), now_us, hits))
        }
        (Algorithm::Gcra, _) => State::Gcra(gcra::commit(rate, None, now_us, hits)),
    }
}

/// The state after taking a reservation back: `hits`, the total one commit at `committed_at_us`
/// (that call's `now`) added to this counter, refunded at `now_us` because another part of the
/// same request was denied (a request spanning Redis Cluster nodes is decided on each of them in
/// parallel, and all or nothing must still hold). `state` is the counter's state at `now_us`,
/// which commits of other requests may have changed since; `None`, given or returned, is an
/// absent counter (returned: delete it).
///
/// The contract, whatever the other commits at instants in [committed_at, now] were: from `now_us`
/// on, the result never admits anything that the counter would deny had the reservation never
/// happened (the same other commits, in the same order). Refunding too little only keeps the
/// counter stricter for a while; refunding too much would admit more than the limit. When nothing
/// else committed in between, the result decides exactly like that counterfactual, except for
/// token_bucket and gcra refunded later than they committed on a counter that was nearly full:
/// `debt_before_us`, how far from full the counter was just before the reservation (see
/// [`debt_before_us`]; 0 is always safe), tells how much of the refill of (committed_at, now]
/// other commits of that span could not have lost to the cap; the rest is kept as spent (see
/// [`gcra::refund`]). The window algorithms ignore it.
///
/// `hits` is at most the burst (what one commit can add) and is not clamped. A `now_us` before
/// `committed_at_us` (the clock of a promoted replica) counts as `committed_at_us` in the math. A
/// state already worthless at `now_us`, or of another algorithm, is returned as it is.
pub fn refund(
    rate: &Rate,
    state: Option<State>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
    debt_before_us: u64,
) -> Option<State> {
    let (t0, t1) = (committed_at_us, now_us);
    match (rate.algorithm(), state?) {
        (Algorithm::FixedWindow, State::FixedWindow(s)) => {
            fixed_window::refund(rate, Some(s), t0, t1, hits).map(State::FixedWindow)
        }
        (Algorithm::SlidingWindowLog, State::SlidingWindowLog(s)) => {
            sliding_window_log::refund(rate, Some(s), t0, t1, hits).map(State::SlidingWindowLog)
        }
        (Algorithm::SlidingWindowCounter, State::SlidingWindowCounter(s)) => {
            sliding_window_counter::refund(rate, Some(s), t0, t1, hits)
                .map(State::SlidingWindowCounter)
        }
        (Algorithm::TokenBucket, State::TokenBucket(s)) => {
            token_bucket::refund(rate, Some(s), t0, t1, hits, debt_before_us)
                .map(State::TokenBucket)
        }
        (Algorithm::Gcra, State::Gcra(s)) => {
            gcra::refund(rate, Some(s), t0, t1, hits, debt_before_us).map(State::Gcra)
        }
        (_, foreign) => Some(foreign),
    }
}

/// How far from full (µs) a token_bucket or gcra counter was just before a commit of `hits`,
/// from that commit's admitted verdict (`reset_after_us`: the time until full after it), rounded
/// down so that a refund using it never gives back too much: gcra's is exact (the verdict is
/// TAT − now), token_bucket's verdict is rounded up to a whole µs. 0 for the other algorithms.
pub fn debt_before_us(rate: &Rate, reset_after_us: u64, hits: u64) -> u64 {
    match rate.algorithm() {
        Algorithm::Gcra => {
            reset_after_us.saturating_sub(hits.saturating_mul(rate.emission_interval_us()))
        }
        Algorithm::TokenBucket => {
            let refill_us =
                (hits as f64 * rate.window_us() as f64 / f64::from(rate.limit())).ceil();
            reset_after_us.saturating_sub(refill_us as u64 + 1)
        }
        _ => 0,
    }
}

/// The instant (µs) after which `state` is equivalent to an absent counter and may be dropped.
pub fn expires_at_us(rate: &Rate, state: &State) -> u64 {
    match state {
        State::FixedWindow(s) => fixed_window::expires_at_us(rate, s),
        State::SlidingWindowLog(s) => sliding_window_log::expires_at_us(rate, s),
        State::SlidingWindowCounter(s) => sliding_window_counter::expires_at_us(rate, s),
        State::TokenBucket(s) => token_bucket::expires_at_us(rate, s),
        State::Gcra(s) => gcra::expires_at_us(rate, s),
    }
}

/// Start of the epoch-aligned window of length `window_us` that contains `now_us`.
pub fn window_start_us(window_us: u64, now_us: u64) -> u64 {
    now_us - now_us % window_us
}

/// Helpers shared by the algorithms' unit tests: deciding like a store, checking that a denied
/// verdict's `reset_after_us` names the first instant the same request is admitted, random rates
/// and traces, and the properties of [`refund`] over random reservations.
#[cfg(test)]
pub(crate) mod testkit {
    use std::fmt::Debug;

    use super::*;
    use crate::limiter::rate::{Unit, MICROS_PER_SECOND};

    pub const S: u64 = MICROS_PER_SECOND;
    /// A realistic instant (2023-11-14 22:13:20 UTC): a whole second and a multiple of 10 s, but
    /// not a whole minute.
    pub const T0: u64 = 1_700_000_000 * S;

    /// An algorithm's own state type, convertible to and from [`State`].
    pub trait Typed: Clone + Debug + Sized {
        fn wrap(self) -> State;
        fn unwrap(state: State) -> Option<Self>;
    }

    macro_rules! typed {
        ($($state:ident => $variant:ident,)*) => {
            $(impl Typed for $state {
                fn wrap(self) -> State {
                    State::$variant(self)
                }
                fn unwrap(state: State) -> Option<Self> {
                    match state {
                        State::$variant(s) => Some(s),
                        _ => None,
                    }
                }
            })*
        };
    }

    typed! {
        FixedWindowState => FixedWindow,
        SlidingWindowLogState => SlidingWindowLog,
        SlidingWindowCounterState => SlidingWindowCounter,
        TokenBucketState => TokenBucket,
        GcraState => Gcra,
    }

    /// SplitMix64: a small deterministic PRNG, enough for reproducible traces.
    pub struct Rng(pub u64);

    impl Rng {
        pub fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        }

        /// Uniform in `0..n` (n > 0; the modulo bias is irrelevant here).
        pub fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        pub fn range(&mut self, lo: u64, hi_inclusive: u64) -> u64 {
            lo + self.below(hi_inclusive - lo + 1)
        }
    }

    /// A small random rate: 1 to 12 per 1-3 s or per minute, a burst of 1 to 20 or none.
    pub fn random_rate(rng: &mut Rng, algorithm: Algorithm) -> Rate {
        let limit = rng.range(1, 12) as u32;
        let (unit, multiplier) = match rng.below(4) {
            0 => (Unit::Minute, 1),
            _ => (Unit::Second, rng.range(1, 3) as u32),
        };
        let burst = match rng.below(3) {
            0 => None,
            _ => Some(rng.range(1, 20) as u32),
        };
        Rate::new(algorithm, limit, unit, multiplier, burst).unwrap()
    }

    /// Mostly 0, 1 or up to B + 1, sometimes far beyond any capacity.
    pub fn random_hits(rng: &mut Rng, rate: &Rate) -> u64 {
        match rng.below(20) {
            0..=1 => 0,
            2..=13 => 1,
            14..=18 => rng.range(2, u64::from(rate.burst()) + 1),
            _ => [u64::MAX, u64::MAX / 2, u64::from(u32::MAX) + 1][rng.below(3) as usize],
        }
    }

    /// Often no time at all, often a little, sometimes up to two windows.
    pub fn random_step_us(rng: &mut Rng, rate: &Rate) -> u64 {
        let w = rate.window_us();
        match rng.below(10) {
            0..=3 => 0,
            4..=5 => rng.range(1, 1_000),
            6..=8 => rng.range(1, w / 3),
            _ => rng.range(w / 3, 2 * w),
        }
    }

    fn verdict<T: Typed>(rate: &Rate, state: &T, now: u64, hits: u64) -> Verdict {
        evaluate(rate, Some(&state.clone().wrap()), now, hits)
    }

    /// Decides like a store: evaluate, and commit only when admitted with hits.
    pub fn decide<T: Typed>(rate: &Rate, state: &mut Option<T>, now: u64, hits: u64) -> Verdict {
        let wrapped = state.clone().map(T::wrap);
        let verdict = evaluate(rate, wrapped.as_ref(), now, hits);
        if verdict.admitted && hits > 0 {
            let committed = commit(rate, wrapped, now, hits);
            *state = Some(T::unwrap(committed).expect("commit keeps the algorithm"));
        }
        verdict
    }

    /// The exact-retry contract: denied 1 µs before `now + reset_after_us`, admitted at it.
    pub fn assert_retry_exact<T: Typed>(rate: &Rate, state: &T, now: u64, hits: u64) {
        let denied = verdict(rate, state, now, hits);
        assert!(!denied.admitted);
        let at = now + denied.reset_after_us;
        assert!(!verdict(rate, state, at - 1, hits).admitted);
        assert!(verdict(rate, state, at, hits).admitted);
    }

    /// The first instant from `from` at which `hits` would be admitted on top of the unchanged
    /// `state` (admission is monotone in time for a fixed state), by bisection.
    fn first_admitted<T: Typed>(rate: &Rate, state: &T, from: u64, hits: u64) -> u64 {
        let refill = u64::from(rate.burst()) * rate.window_us() / u64::from(rate.limit());
        let (mut lo, mut hi) = (from, from + 3 * rate.window_us() + refill + 2);
        assert!(verdict(rate, state, hi, hits).admitted);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if verdict(rate, state, mid, hits).admitted {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        lo
    }

    /// Retry-after names the first admissible instant within 1 µs (for the float algorithms).
    pub fn assert_retry_within_1us<T: Typed>(rate: &Rate, state: &T, now: u64, hits: u64) {
        let denied = verdict(rate, state, now, hits);
        assert!(!denied.admitted);
        let promised = now + denied.reset_after_us;
        let actual = first_admitted(rate, state, now, hits);
        assert!(
            promised.abs_diff(actual) <= 1,
            "promised {promised}, first admitted at {actual} (now {now}, hits {hits}, {state:?})"
        );
    }

    /// What fills the span between a reservation and its refund.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum Span {
        /// Refunded at the instant it committed, nothing in between.
        Instant,
        /// Refunded up to a window later (or by a clock up to 1 ms behind), after up to four
        /// commits of other requests at instants in between.
        Random,
    }

    /// A reservation taken back, next to the counter as it would be had it never happened.
    #[derive(Debug)]
    pub struct RefundCase {
        pub rate: Rate,
        pub committed_at: u64,
        pub refunded_at: u64,
        pub hits: u64,
        pub refunded: Option<State>,
        /// The same history and other commits, without the reservation.
        pub counterfactual: Option<State>,
        /// Commits of other requests between the reservation and its refund.
        pub others: usize,
        /// Whether the counter was as good as absent right before the reservation.
        pub idle: bool,
    }

    impl RefundCase {
        /// Whether the contract of [`refund`] promises the counterfactual's decisions exactly:
        /// nothing else committed, and no time passed, or the algorithm counts hits rather than
        /// refilling, or the counter was idle.
        pub fn exact(&self) -> bool {
            self.others == 0
                && (self.refunded_at <= self.committed_at
                    || self.idle
                    || !self.rate.algorithm().uses_burst())
        }

        /// The first instant the two states are compared at: the refund, read as the reservation's
        /// instant when its clock is behind.
        fn from(&self) -> u64 {
            self.refunded_at.max(self.committed_at)
        }
    }

    /// A random history, a reservation admitted on it, the `span`, then the refund; `None` when
    /// the reservation drawn is denied.
    pub fn refund_case(rng: &mut Rng, rate: &Rate, span: Span) -> Option<RefundCase> {
        let mut state = None;
        let mut now = T0 + rng.below(rate.window_us());
        let history = match rng.below(3) {
            0 => 0,
            _ => rng.below(12),
        };
        for _ in 0..history {
            now += random_step_us(rng, rate);
            let hits = random_hits(rng, rate);
            if evaluate(rate, state.as_ref(), now, hits).admitted && hits > 0 {
                state = Some(commit(rate, state, now, hits));
            }
        }
        now += random_step_us(rng, rate);
        let hits = match rng.below(3) {
            0 => 1,
            _ => rng.range(1, u64::from(rate.burst())),
        };
        if !evaluate(rate, state.as_ref(), now, hits).admitted {
            return None;
        }
        let idle = state.as_ref().is_none_or(|s| expires_at_us(rate, s) <= now);
        let debt = debt_before_us(
            rate,
            evaluate(rate, state.as_ref(), now, hits).reset_after_us,
            hits,
        );
        let committed_at = now;
        let mut with = Some(commit(rate, state.clone(), now, hits));
        let mut without = state;
        let refunded_at = match (span, rng.below(8)) {
            (Span::Instant, _) | (Span::Random, 0..=1) => now,
            (Span::Random, 2) => now - rng.range(1, 1_000),
            (Span::Random, 3..=4) => now + rng.range(1, 1_000),
            (Span::Random, _) => now + rng.range(1, rate.window_us()),
        };
        let mut others = 0;
        if span == Span::Random {
            let last = refunded_at.max(committed_at);
            // Often one at the refund's instant, where a refund that gave back too much shows.
            let mut instants: Vec<u64> = (0..rng.below(5))
                .map(|_| match rng.below(3) {
                    0 => last,
                    _ => rng.range(committed_at, last),
                })
                .collect();
            instants.sort_unstable();
            for at in instants {
                let hits = random_hits(rng, rate);
                if evaluate(rate, with.as_ref(), at, hits).admitted && hits > 0 {
                    with = Some(commit(rate, with, at, hits));
                    without = Some(commit(rate, without, at, hits));
                    others += 1;
                }
            }
        }
        Some(RefundCase {
            rate: *rate,
            committed_at,
            refunded_at,
            hits,
            refunded: refund(rate, with, committed_at, refunded_at, hits, debt),
            counterfactual: without,
            others,
            idle,
        })
    }

    /// Instants from the case's refund on (the next window boundaries and the instant the
    /// reservation's hits would leave a sliding window, ±1 µs, and random ones over three windows
    /// and a whole refill), each with hits 0, 1, 2, the reservation's, B/2, B and B + 1.
    fn probes(rng: &mut Rng, case: &RefundCase) -> Vec<(u64, u64)> {
        let rate = &case.rate;
        let (w, burst) = (rate.window_us(), u64::from(rate.burst()));
        let refill = burst * w / u64::from(rate.limit());
        let from = case.from();
        let boundary = window_start_us(w, from) + w;
        let leaves = case.committed_at + w;
        let mut instants = vec![
            from,
            from + 1,
            boundary - 1,
            boundary,
            boundary + w - 1,
            boundary + w,
            leaves - 1,
            leaves,
            leaves + 1,
        ];
        instants.extend((0..12).map(|_| from + rng.below(3 * w + refill + 1)));
        instants.retain(|&t| t >= from);
        instants
            .into_iter()
            .flat_map(|t| [0, 1, 2, case.hits, burst / 2, burst, burst + 1].map(|hits| (t, hits)))
            .collect()
    }

    /// For token_bucket, the tokens of the refunded and of the counterfactual counter at `now`:
    /// where they are within rounding of `hits` (or of a whole number), two float paths to the
    /// same amount may decide (or floor) apart.
    fn tokens(case: &RefundCase, now: u64) -> Option<[f64; 2]> {
        let rate = &case.rate;
        let tokens = |state: &Option<State>| {
            let state = match state {
                Some(State::TokenBucket(s)) => Some(s),
                _ => None,
            };
            token_bucket::tokens_at(rate, state, now)
        };
        (rate.algorithm() == Algorithm::TokenBucket)
            .then(|| [tokens(&case.refunded), tokens(&case.counterfactual)])
    }

    fn near(x: f64, y: f64) -> bool {
        (x - y).abs() < 1e-6
    }

    /// Whether a token_bucket probe is where rounding alone may change the admission.
    fn at_a_float_edge(case: &RefundCase, now: u64, hits: u64) -> bool {
        tokens(case, now).is_some_and(|both| both.iter().any(|&t| near(t, hits as f64)))
    }

    /// The refunded counter never admits a probe that the counterfactual denies.
    pub fn assert_no_more_permissive(rng: &mut Rng, case: &RefundCase) {
        for (now, hits) in probes(rng, case) {
            let refunded = evaluate(&case.rate, case.refunded.as_ref(), now, hits);
            let counterfactual = evaluate(&case.rate, case.counterfactual.as_ref(), now, hits);
            assert!(
                !refunded.admitted || counterfactual.admitted || at_a_float_edge(case, now, hits),
                "{hits} admitted at {now} after the refund only: {case:#?}"
            );
        }
    }

    /// The refunded counter decides every probe like the counterfactual (token_bucket: up to
    /// rounding, 1 in `remaining` and 1 µs in `reset_after_us`).
    pub fn assert_decides_alike(rng: &mut Rng, case: &RefundCase) {
        for (now, hits) in probes(rng, case) {
            let refunded = evaluate(&case.rate, case.refunded.as_ref(), now, hits);
            let counterfactual = evaluate(&case.rate, case.counterfactual.as_ref(), now, hits);
            let context = || format!("{hits} at {now}: {refunded:?} {counterfactual:?}, {case:#?}");
            if case.rate.algorithm() != Algorithm::TokenBucket {
                assert_eq!(refunded, counterfactual, "{}", context());
            } else if !at_a_float_edge(case, now, hits) {
                assert_eq!(refunded.admitted, counterfactual.admitted, "{}", context());
                let [a, b] = tokens(case, now).unwrap_or_default();
                assert!(near(a, b), "{}", context());
                let remaining = refunded.remaining.abs_diff(counterfactual.remaining);
                let reset = refunded
                    .reset_after_us
                    .abs_diff(counterfactual.reset_after_us);
                assert!(remaining <= 1 && reset <= 1, "{}", context());
            }
        }
    }

    /// Over random rates and cases of `algorithm`: a refund never makes the counter more
    /// permissive than never reserving, and decides exactly like that wherever the contract of
    /// [`refund`] says so (every case of [`Span::Instant`]).
    pub fn check_refunds(algorithm: Algorithm, seed: u64, span: Span) {
        let mut rng = Rng(seed);
        let (mut cases, mut exact, mut others) = (0, 0, 0);
        for _ in 0..600 {
            let rate = random_rate(&mut rng, algorithm);
            let Some(case) = refund_case(&mut rng, &rate, span) else {
                continue;
            };
            cases += 1;
            others += case.others;
            assert_no_more_permissive(&mut rng, &case);
            if case.exact() {
                exact += 1;
                assert_decides_alike(&mut rng, &case);
            }
        }
        assert!(cases > 250, "only {cases} reservations admitted");
        match span {
            Span::Instant => assert_eq!(exact, cases),
            Span::Random => assert!(exact > 50 && others > 200, "{exact} exact, {others} others"),
        }
    }
}

#[cfg(test)]
mod tests {
    //! Properties every algorithm must keep, checked over deterministic pseudo-random traces.

    use super::testkit::{random_hits, random_rate, random_step_us, Rng};
    use super::*;
    use crate::limiter::rate::{Unit, MICROS_PER_SECOND};

    const S: u64 = MICROS_PER_SECOND;
    const T0: u64 = 1_700_000_000 * S;

    /// Decides like a store: evaluate, and commit only when admitted with hits.
    fn decide(rate: &Rate, state: &mut Option<State>, now: u64, hits: u64) -> Verdict {
        let verdict = evaluate(rate, state.as_ref(), now, hits);
        if verdict.admitted && hits > 0 {
            *state = Some(commit(rate, state.take(), now, hits));
        }
        verdict
    }

    /// Runs a random trace against one counter; returns the admitted `(instant, hits)`.
    fn random_trace(rng: &mut Rng, rate: &Rate, steps: usize) -> Vec<(u64, u64)> {
        let mut state = None;
        let mut now = T0 + rng.below(rate.window_us());
        let mut admitted = Vec::new();
        let mut last: Option<Verdict> = None;
        for _ in 0..steps {
            // Often come back exactly when told to (±1 µs), as clients honouring Retry-After
            // do: that is where off-by-one errors at the boundaries show.
            now += match last {
                Some(v) if rng.below(3) == 0 => (v.reset_after_us + rng.below(3)).saturating_sub(1),
                _ => random_step_us(rng, rate),
            };
            let hits = random_hits(rng, rate);
            let before = state.clone();
            let v = decide(rate, &mut state, now, hits);
            last = Some(v);
            assert!(v.remaining <= rate.burst(), "{rate:?} {v:?}");
            if v.admitted {
                assert!(hits <= u64::from(rate.burst()), "{rate:?} admitted {hits}");
                if hits > 0 {
                    admitted.push((now, hits));
                }
            } else {
                assert_eq!(state, before, "a denied request changed the state");
            }
        }
        admitted
    }

    /// Admitted hits merged per instant (the trace's instants never decrease).
    fn per_instant(admitted: &[(u64, u64)]) -> Vec<(u64, u64)> {
        let mut merged: Vec<(u64, u64)> = Vec::new();
        for &(t, n) in admitted {
            match merged.last_mut() {
                Some((last, sum)) if *last == t => *sum += n,
                _ => merged.push((t, n)),
            }
        }
        merged
    }

    #[test]
    fn no_algorithm_ever_admits_more_than_its_capacity() {
        let mut rng = Rng(0x5EED);
        for algorithm in Algorithm::ALL {
            for _ in 0..150 {
                let rate = random_rate(&mut rng, algorithm);
                let events = per_instant(&random_trace(&mut rng, &rate, 300));
                assert!(!events.is_empty());
                assert!(events.windows(2).all(|pair| pair[0].0 < pair[1].0));
                let w = rate.window_us();
                let limit = u64::from(rate.limit());
                let burst = u64::from(rate.burst());
                // prefix[k] = hits admitted at the first k instants; sum(i..=j) over instants.
                let prefix: Vec<u64> = std::iter::once(0)
                    .chain(events.iter().scan(0, |sum, &(_, n)| {
                        *sum += n;
                        Some(*sum)
                    }))
                    .collect();
                let sum = |i: usize, j: usize| prefix[j + 1] - prefix[i];
                for (j, &(tj, _)) in events.iter().enumerate() {
                    // The sliding window (tj − W, tj] and the epoch-aligned window holding tj.
                    let sliding_from = events.partition_point(|&(t, _)| t + w <= tj);
                    let sliding = sum(sliding_from, j);
                    let start = window_start_us(w, tj);
                    let fixed_from = events.partition_point(|&(t, _)| t < start);
                    let fixed = sum(fixed_from, j);
                    match algorithm {
                        Algorithm::FixedWindow => assert!(fixed <= limit, "{rate:?}"),
                        Algorithm::SlidingWindowLog => assert!(sliding <= limit, "{rate:?}"),
                        Algorithm::SlidingWindowCounter => {
                            // The estimate bounds each epoch window by L, a sliding one by 2 L.
                            assert!(fixed <= limit, "{rate:?}");
                            assert!(sliding <= 2 * limit, "{rate:?}");
                            // And the estimate itself, recomputed from the history, stays ≤ L.
                            let previous_from = events.partition_point(|&(t, _)| t + w < start);
                            let previous = prefix[fixed_from] - prefix[previous_from];
                            let weight = 1.0 - (tj - start) as f64 / w as f64;
                            let est = previous as f64 * weight + fixed as f64;
                            assert!(est <= limit as f64 + 1e-9, "{rate:?} est {est} at {tj}");
                        }
                        Algorithm::TokenBucket | Algorithm::Gcra => {
                            assert!(sliding <= burst + limit, "{rate:?}")
                        }
                    }
                    // The exact bound of the rate-based algorithms over every span [ti, tj]:
                    // B plus what refills in between.
                    for (i, &(ti, _)) in events[..=j].iter().enumerate() {
                        let (sum, span) = (sum(i, j), tj - ti);
                        match algorithm {
                            Algorithm::Gcra => {
                                let t = rate.emission_interval_us();
                                assert!(sum * t <= burst * t + span, "{rate:?} {ti}..{tj}");
                            }
                            Algorithm::TokenBucket => {
                                let refill = span as f64 * limit as f64 / w as f64;
                                assert!(sum as f64 <= burst as f64 + refill + 1e-6, "{rate:?}");
                            }
                            _ => {}
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn from_idle_exactly_capacity_is_admitted_at_one_instant() {
        let mut rng = Rng(7);
        for algorithm in Algorithm::ALL {
            for _ in 0..100 {
                let rate = random_rate(&mut rng, algorithm);
                let now = T0 + rng.below(rate.window_us());
                let mut state = None;
                for _ in 0..rate.burst() {
                    assert!(decide(&rate, &mut state, now, 1).admitted, "{rate:?}");
                }
                let before = state.clone();
                let denied = decide(&rate, &mut state, now, 1);
                assert!(!denied.admitted, "{rate:?}");
                assert_eq!(denied.remaining, 0);
                assert!(denied.reset_after_us > 0);
                assert_eq!(state, before);
            }
        }
    }

    #[test]
    fn cumulative_hits_equal_sequential_decisions() {
        let mut rng = Rng(42);
        for algorithm in Algorithm::ALL {
            for _ in 0..200 {
                let rate = random_rate(&mut rng, algorithm);
                let mut state = None;
                let mut now = T0 + rng.below(rate.window_us());
                for _ in 0..rng.below(30) {
                    now += random_step_us(&mut rng, &rate);
                    let hits = random_hits(&mut rng, &rate);
                    decide(&rate, &mut state, now, hits);
                }
                now += random_step_us(&mut rng, &rate);
                let (a, b) = (random_hits(&mut rng, &rate), random_hits(&mut rng, &rate));
                let first = evaluate(&rate, state.as_ref(), now, a);
                if !first.admitted {
                    continue;
                }
                let total = a.saturating_add(b);
                let together = evaluate(&rate, state.as_ref(), now, total);
                let after_a = if a > 0 {
                    Some(commit(&rate, state.clone(), now, a))
                } else {
                    state.clone()
                };
                let second = evaluate(&rate, after_a.as_ref(), now, b);
                assert_eq!(together.admitted, second.admitted, "{rate:?} {a} {b}");
                if !together.admitted {
                    // A denied check reports the counter as the denied request leaves it: without
                    // the earlier hits (and its retry-after is for the whole cumulative amount).
                    continue;
                }
                match algorithm {
                    Algorithm::TokenBucket => {
                        // Tokens are floats: (x − a) − b and x − (a + b) may differ in the last bit.
                        assert!(together.remaining.abs_diff(second.remaining) <= 1);
                        assert!(together.reset_after_us.abs_diff(second.reset_after_us) <= 1);
                    }
                    _ => assert_eq!(together, second, "{rate:?} {state:?} {a} {b}"),
                }
                if b > 0 {
                    let once = commit(&rate, state.clone(), now, total);
                    let twice = commit(&rate, after_a, now, b);
                    match (&once, &twice) {
                        (State::TokenBucket(x), State::TokenBucket(y)) => {
                            assert_eq!(x.last_us, y.last_us);
                            assert!((x.tokens - y.tokens).abs() < 1e-9);
                        }
                        _ => assert_eq!(once, twice),
                    }
                }
            }
        }
    }

    #[test]
    fn an_expired_state_decides_like_an_absent_one() {
        let mut rng = Rng(99);
        for algorithm in Algorithm::ALL {
            for _ in 0..200 {
                let rate = random_rate(&mut rng, algorithm);
                let mut state = None;
                let mut now = T0 + rng.below(rate.window_us());
                for _ in 0..rng.range(1, 30) {
                    now += random_step_us(&mut rng, &rate);
                    decide(&rate, &mut state, now, 1);
                }
                let Some(state) = state else { continue };
                let expiry = expires_at_us(&rate, &state);
                assert!(
                    expiry > now,
                    "{rate:?} {state:?} expires at {expiry} <= {now}"
                );
                for later in [expiry, expiry + 1, expiry + rng.below(3 * rate.window_us())] {
                    if let State::TokenBucket(s) = &state {
                        // A float refill may stop a rounding error short of a full bucket.
                        let tokens = token_bucket::tokens_at(&rate, Some(s), later);
                        assert!(tokens >= f64::from(rate.burst()) - 1e-6, "{rate:?} {s:?}");
                        continue;
                    }
                    for hits in [0, 1, u64::from(rate.burst()), u64::MAX] {
                        assert_eq!(
                            evaluate(&rate, Some(&state), later, hits),
                            evaluate(&rate, None, later, hits),
                            "{rate:?} {state:?} at {later}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_state_of_another_algorithm_counts_as_absent() {
        let foreign = [
            State::FixedWindow(FixedWindowState {
                window_start_us: T0,
                count: 5,
            }),
            State::SlidingWindowLog(SlidingWindowLogState {
                entries: [(T0, 5)].into(),
            }),
            State::SlidingWindowCounter(SlidingWindowCounterState {
                window_start_us: T0,
                previous: 5,
                current: 5,
            }),
            State::TokenBucket(TokenBucketState {
                tokens: 0.0,
                last_us: T0,
            }),
            State::Gcra(GcraState { tat_us: T0 + S }),
        ];
        for algorithm in Algorithm::ALL {
            let rate = Rate::new(algorithm, 5, Unit::Second, 1, None).unwrap();
            for state in &foreign {
                let own = std::mem::discriminant(state)
                    == std::mem::discriminant(&commit(&rate, None, T0, 1));
                if own {
                    continue;
                }
                for hits in [0, 1, 5, 6] {
                    assert_eq!(
                        evaluate(&rate, Some(state), T0, hits),
                        evaluate(&rate, None, T0, hits)
                    );
                }
                assert_eq!(
                    commit(&rate, Some(state.clone()), T0, 2),
                    commit(&rate, None, T0, 2)
                );
            }
        }
    }

    #[test]
    fn hits_beyond_capacity_are_clamped_and_never_admitted() {
        let mut rng = Rng(3);
        for algorithm in Algorithm::ALL {
            for _ in 0..50 {
                let rate = random_rate(&mut rng, algorithm);
                assert_eq!(clamp_hits(&rate, u64::MAX), u64::from(rate.burst()) + 1);
                assert_eq!(clamp_hits(&rate, 1), 1);
                let mut state = None;
                let mut now = T0;
                for _ in 0..20 {
                    now += random_step_us(&mut rng, &rate);
                    for hits in [u64::from(rate.burst()) + 1, u64::MAX - 1, u64::MAX] {
                        assert!(!decide(&rate, &mut state, now, hits).admitted);
                    }
                    decide(&rate, &mut state, now, 1);
                }
            }
        }
    }
}
