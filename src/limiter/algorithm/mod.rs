//! The five algorithms as pure functions of (state, rate, now, hits).
//!
//! Each algorithm splits a decision in two steps so a store can decide a whole request all or
//! nothing: [`evaluate`] says whether `hits` would be admitted on top of the stored state, and
//! [`commit`] returns the state after admitting them. A store evaluates every descriptor of a
//! request first and commits only when all admit. When several descriptors of one request share a
//! counter, the store evaluates each with the hits of the earlier ones added (`hits` is cumulative)
//! and commits the total once; for every algorithm that equals deciding them one after the other.
//!
//! The Lua scripts in `lua/` implement the same math operation for operation; the differential
//! test replays random traces through both and demands identical answers.

pub mod fixed_window;
pub mod gcra;
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
