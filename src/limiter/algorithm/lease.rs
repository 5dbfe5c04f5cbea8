//! Leases: hits of one counter reserved at once, charged to the counter when granted, and spent
//! later by the replica that holds them (see docs/leases.md for the guarantees and their proofs).
//!
//! A lease granted at `now` may be spent at any instant of [now, now + valid_for]. The window
//! algorithms end it with the window it was granted in: charging its hits at `now` is then exact
//! for any later use in the same window (fixed_window counts per window; sliding_window_counter's
//! weight of the previous window only decays). token_bucket and gcra refill continuously, so hits
//! spent later than they were charged could meet the refill of that delay on top of the burst;
//! their lease lasts `period_us` and is charged as if spent at its end: a GCRA commit at
//! now + period (TAT := max(TAT, now + period) + n·T), the same on the bucket's deficit. The
//! grant itself is still checked at `now`: n ≤ what the exact algorithm admits at once.

use super::{evaluate, gcra, token_bucket, window_start_us, State, Verdict};
use crate::limiter::consistency::Consistency;
use crate::limiter::rate::{Algorithm, Rate};

/// What a replica asks of one counter: up to `want` hits, none unless at least `min` can be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseTerms {
    /// Hits wanted (clamped to the burst: no more can ever be granted at once).
    pub want: u64,
    /// Grant nothing unless this many can be granted (at least 1, at most `want`): a lease too
    /// small to be worth its call is not taken, and the answer says when `min` will be there.
    pub min: u64,
    /// How long a token_bucket or gcra lease lasts (µs, at least 1); the window algorithms' last
    /// until their window ends.
    pub period_us: u64,
}

/// The store's answer to one [`LeaseTerms`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// Hits granted, now charged to the counter (0: none).
    pub hits: u64,
    /// When hits were granted, µs from the grant until the lease ends; when none were, µs until
    /// `min` hits could be granted.
    pub after_us: u64,
    /// The store's clock (µs) when it granted: the instant a [`give_back`] of these hits names.
    pub granted_at_us: u64,
}

/// Grants a lease on `state` at `now_us`: the hits granted and how long they last (or when to ask
/// again), with the counter's state after charging them (`None`: unchanged). A counter whose
/// algorithm cannot be leased grants nothing and says to ask again after its window.
pub fn grant(
    rate: &Rate,
    state: Option<&State>,
    now_us: u64,
    terms: LeaseTerms,
) -> (Grant, Option<State>) {
    let algorithm = rate.algorithm();
    if !Consistency::can_lease(algorithm) {
        let none = Grant {
            hits: 0,
            after_us: rate.window_us(),
            granted_at_us: now_us,
        };
        return (none, None);
    }
    let burst = u64::from(rate.burst());
    let want = terms.want.min(burst);
    let min = terms.min.clamp(1, want.max(1));
    let available = u64::from(evaluate(rate, state, now_us, 0).remaining);
    let hits = want.min(available);
    if hits == 0 || hits < min {
        let Verdict { reset_after_us, .. } = evaluate(rate, state, now_us, min);
        let none = Grant {
            hits: 0,
            after_us: reset_after_us.max(1),
            granted_at_us: now_us,
        };
        return (none, None);
    }
    let period_us = terms.period_us.max(1);
    let (after_us, charged) = match algorithm {
        Algorithm::Gcra => {
            let state = state.and_then(|s| match s {
                State::Gcra(s) => Some(*s),
                _ => None,
            });
            let charged = gcra::commit(rate, state, now_us + period_us, hits);
            (period_us, State::Gcra(charged))
        }
        Algorithm::TokenBucket => {
            let state = state.and_then(|s| match s {
                State::TokenBucket(s) => Some(s),
                _ => None,
            });
            let charged = token_bucket::lease(rate, state, now_us, hits, period_us);
            (period_us, State::TokenBucket(charged))
        }
        _ => {
            let window_end = window_start_us(rate.window_us(), now_us) + rate.window_us();
            let charged = super::commit(rate, state.cloned(), now_us, hits);
            (window_end - now_us, charged)
        }
    };
    let grant = Grant {
        hits,
        after_us,
        granted_at_us: now_us,
    };
    (grant, Some(charged))
}

/// Whether unspent hits of a lease on `algorithm` can be given back (see [`give_back`]): the
/// window algorithms' only. token_bucket and gcra charge a lease as spent at its end, g + P; a
/// lease another replica takes at g' < t charges g' + P, which may lie beyond the instant t of a
/// give-back, and where it moved TAT forward (TAT := max(TAT, g' + P) + k·T), hits taken back at
/// t would let the counter admit what it would deny had they never been leased. Their leases end
/// after one period, and what is left of them stays spent.
pub fn can_give_back(algorithm: Algorithm) -> bool {
    matches!(
        algorithm,
        Algorithm::FixedWindow | Algorithm::SlidingWindowCounter
    )
}

/// The state after `hits` of a lease granted at `granted_at_us` are given back unspent at
/// `now_us`: a [`super::refund`] of them, committed at the grant. Never more permissive than had
/// those hits never been leased: a window algorithm's lease is a commit at its grant, and every
/// other commit (a request, another replica's lease) is made at its own instant, by `now_us`, so
/// this is the refund's own contract. Hits given back by a replica are hits it did not admit and
/// will not. An algorithm that cannot give back (see [`can_give_back`]) keeps its state.
pub fn give_back(
    rate: &Rate,
    state: Option<State>,
    now_us: u64,
    hits: u64,
    granted_at_us: u64,
) -> Option<State> {
    if !can_give_back(rate.algorithm()) {
        return state;
    }
    super::refund(rate, state, granted_at_us, now_us, hits, 0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::{random_rate, random_step_us, Rng};
    use crate::limiter::algorithm::{commit, evaluate};

    /// What a lease of `hits` at `now_us` charges (as [`grant`] does, without its checks).
    fn charge(rate: &Rate, state: Option<State>, now_us: u64, hits: u64, period_us: u64) -> State {
        match (rate.algorithm(), state) {
            (Algorithm::Gcra, Some(State::Gcra(s))) => {
                State::Gcra(gcra::commit(rate, Some(s), now_us + period_us, hits))
            }
            (Algorithm::Gcra, _) => State::Gcra(gcra::commit(rate, None, now_us + period_us, hits)),
            (Algorithm::TokenBucket, state) => {
                let state = state.and_then(|s| match s {
                    State::TokenBucket(s) => Some(s),
                    _ => None,
                });
                State::TokenBucket(token_bucket::lease(
                    rate,
                    state.as_ref(),
                    now_us,
                    hits,
                    period_us,
                ))
            }
            (_, state) => commit(rate, state, now_us, hits),
        }
    }

    /// A lease of n hits at g of which s are spent and n − s given back at t1, with other
    /// commits between, against a lease of s alone with the same other commits: the counter
    /// after the give-back never admits what the counterfactual denies, and decides exactly like
    /// it when nothing else happened before the lease ended (fixed_window). token_bucket and
    /// gcra give nothing back.
    fn check_give_backs(algorithm: Algorithm, seed: u64) {
        let mut rng = Rng(seed);
        let mut cases = 0;
        for _ in 0..2_000 {
            let rate = random_rate(&mut rng, algorithm);
            let mut now = 1_000_000_000 + rng.below(rate.window_us());
            let mut before: Option<State> = None;
            for _ in 0..rng.below(4) {
                now += random_step_us(&mut rng, &rate);
                let hits = rng.range(1, u64::from(rate.burst()));
                if evaluate(&rate, before.as_ref(), now, hits).admitted {
                    before = Some(commit(&rate, before, now, hits));
                }
            }
            let period_us = rng.range(1, rate.window_us());
            let terms = LeaseTerms {
                want: rng.range(1, u64::from(rate.burst())),
                min: 1,
                period_us,
            };
            let granted_at = now;
            let (granted, Some(leased)) = grant(&rate, before.as_ref(), granted_at, terms) else {
                continue;
            };
            cases += 1;
            let spent = rng.range(0, granted.hits);
            let mut leased = Some(leased);
            let mut counterfactual = Some(charge(&rate, before, granted_at, spent, period_us));
            let others = rng.below(3);
            for _ in 0..others {
                now += random_step_us(&mut rng, &rate);
                let hits = rng.range(1, u64::from(rate.burst()));
                leased = Some(commit(&rate, leased, now, hits));
                counterfactual = Some(commit(&rate, counterfactual, now, hits));
            }
            now += random_step_us(&mut rng, &rate);
            let unspent = granted.hits - spent;
            let given = give_back(&rate, leased.clone(), now, unspent, granted_at);
            if !can_give_back(algorithm) {
                assert_eq!(given, leased, "{rate:?}: nothing given back");
                continue;
            }
            let ended = granted_at + granted.after_us <= now;
            let exact = others == 0 && !ended && algorithm == Algorithm::FixedWindow;
            for _ in 0..20 {
                let at = now + random_step_us(&mut rng, &rate);
                let hits = rng.range(1, u64::from(rate.burst()));
                let after = evaluate(&rate, given.as_ref(), at, hits);
                let reference = evaluate(&rate, counterfactual.as_ref(), at, hits);
                let context = || {
                    format!(
                        "{rate:?}: lease {granted:?} at {granted_at}, {spent} spent, \
                         {others} others, given back at {now}; {hits} at {at}: \
                         {after:?} vs {reference:?}"
                    )
                };
                if exact {
                    assert_eq!(after, reference, "{}", context());
                } else if algorithm == Algorithm::TokenBucket {
                    let after = evaluate(&rate, given.as_ref(), at, 0).remaining;
                    let reference = evaluate(&rate, counterfactual.as_ref(), at, 0).remaining;
                    assert!(after <= reference + 1, "{}", context());
                } else {
                    assert!(!after.admitted || reference.admitted, "{}", context());
                }
            }
        }
        assert!(cases > 500, "{cases} leases granted");
    }

    #[test]
    fn giving_back_is_never_more_permissive_than_leasing_only_what_was_spent() {
        for algorithm in [
            Algorithm::FixedWindow,
            Algorithm::SlidingWindowCounter,
            Algorithm::TokenBucket,
            Algorithm::Gcra,
        ] {
            for seed in 0..5 {
                check_give_backs(algorithm, seed);
            }
        }
    }
}
