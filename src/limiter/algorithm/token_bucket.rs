//! Token bucket: capacity B, refilled at L tokens per window W, continuously.
//!
//! Tokens are an `f64` because refill is fractional. Every operation is one IEEE operation that the
//! Lua script performs identically, so both stores agree to the bit. From idle the bucket holds
//! exactly B and admitting subtracts whole numbers, so exactly B requests pass at once.

use super::Verdict;
use crate::limiter::rate::Rate;

/// Tokens left at `last_us`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucketState {
    pub tokens: f64,
    pub last_us: u64,
}

/// Tokens available at `now_us`: min(B, tokens + elapsed·L/W); a full bucket when absent.
pub fn tokens_at(rate: &Rate, state: Option<&TokenBucketState>, now_us: u64) -> f64 {
    let capacity = f64::from(rate.burst());
    match state {
        None => capacity,
        Some(s) => {
            let elapsed = now_us.saturating_sub(s.last_us) as f64;
            let refilled = s.tokens + elapsed * f64::from(rate.limit()) / rate.window_us() as f64;
            refilled.min(capacity)
        }
    }
}

/// µs to refill `missing` tokens, rounded up.
fn refill_time_us(rate: &Rate, missing: f64) -> u64 {
    if missing <= 0.0 {
        return 0;
    }
    (missing * rate.window_us() as f64 / f64::from(rate.limit())).ceil() as u64
}

/// Admits when tokens ≥ n; remaining floor(tokens after); resets when full / when n tokens exist.
pub fn evaluate(rate: &Rate, state: Option<&TokenBucketState>, now_us: u64, hits: u64) -> Verdict {
    let capacity = f64::from(rate.burst());
    let tokens = tokens_at(rate, state, now_us);
    let wanted = hits as f64;
    if hits <= u64::from(rate.burst()) && tokens >= wanted {
        let after = tokens - wanted;
        Verdict {
            admitted: true,
            remaining: after.floor() as u32,
            reset_after_us: refill_time_us(rate, capacity - after),
        }
    } else {
        let missing = if hits > u64::from(rate.burst()) {
            capacity - tokens
        } else {
            wanted - tokens
        };
        Verdict {
            admitted: false,
            remaining: tokens.floor() as u32,
            reset_after_us: refill_time_us(rate, missing),
        }
    }
}

/// Refills to `now_us` and takes `hits` tokens.
pub fn commit(
    rate: &Rate,
    state: Option<TokenBucketState>,
    now_us: u64,
    hits: u64,
) -> TokenBucketState {
    let tokens = tokens_at(rate, state.as_ref(), now_us);
    TokenBucketState {
        tokens: tokens - hits as f64,
        last_us: now_us,
    }
}

/// A full bucket is the same as an absent one.
pub fn expires_at_us(rate: &Rate, state: &TokenBucketState) -> u64 {
    state.last_us + refill_time_us(rate, f64::from(rate.burst()) - state.tokens)
}
