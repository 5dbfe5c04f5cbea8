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
    (Grant { hits, after_us }, Some(charged))
}
