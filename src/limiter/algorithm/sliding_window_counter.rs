//! Sliding window counter: counts of the previous and current epoch-aligned windows, weighted
//! as est = p·(1 − elapsed/W) + c.
//!
//! The estimate is an `f64`, computed with exactly the operations of the Lua script.

use super::{window_start_us, Verdict};
use crate::limiter::rate::Rate;

/// Counts of the window starting at `window_start_us` and of the one before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SlidingWindowCounterState {
    pub window_start_us: u64,
    pub previous: u64,
    pub current: u64,
}

/// (previous, current) counts as seen from the window starting at `window_start`.
fn counts(rate: &Rate, state: Option<&SlidingWindowCounterState>, window_start: u64) -> (u64, u64) {
    match state {
        Some(s) if s.window_start_us == window_start => (s.previous, s.current),
        Some(s) if s.window_start_us + rate.window_us() == window_start => (s.current, 0),
        _ => (0, 0),
    }
}

fn estimate(previous: u64, current: u64, elapsed_us: u64, window_us: u64) -> f64 {
    previous as f64 * (1.0 - elapsed_us as f64 / window_us as f64) + current as f64
}

/// µs from now until est + hits ≤ L, for hits ≤ L: first within this window (the previous
/// window's weight decays), else in the next one (this window becomes the previous one).
fn wait_until_admissible(rate: &Rate, previous: u64, current: u64, elapsed: u64, hits: u64) -> u64 {
    let window = rate.window_us();
    let limit = rate.limit() as f64;
    let wanted = hits as f64;
    let excess = estimate(previous, current, elapsed, window) + wanted - limit;
    if previous > 0 {
        let wait = (excess * window as f64 / previous as f64).ceil() as u64;
        if elapsed + wait < window {
            return wait;
        }
    }
    let to_next = window - elapsed;
    if current as f64 + wanted <= limit {
        return to_next;
    }
    let into_next =
        ((current as f64 + wanted - limit) * window as f64 / current as f64).ceil() as u64;
    to_next + into_next.min(window)
}

/// Admits when est + n ≤ L; remaining floor(L − est after); resets at the window end when
/// admitted, at the earliest admissible instant when denied.
pub fn evaluate(
    rate: &Rate,
    state: Option<&SlidingWindowCounterState>,
    now_us: u64,
    hits: u64,
) -> Verdict {
    let window = rate.window_us();
    let window_start = window_start_us(window, now_us);
    let elapsed = now_us - window_start;
    let (previous, current) = counts(rate, state, window_start);
    let limit = f64::from(rate.limit());
    let est = estimate(previous, current, elapsed, window);
    let window_end = window - elapsed;
    if est + hits as f64 <= limit {
        let after = estimate(previous, current + hits, elapsed, window);
        Verdict {
            admitted: true,
            remaining: (limit - after).floor().max(0.0) as u32,
            reset_after_us: window_end,
        }
    } else {
        let reset_after_us = if hits > u64::from(rate.limit()) {
            window_end
        } else {
            wait_until_admissible(rate, previous, current, elapsed, hits)
        };
        Verdict {
            admitted: false,
            remaining: (limit - est).floor().max(0.0) as u32,
            reset_after_us,
        }
    }
}

/// Rolls the windows forward to `now_us` and adds `hits` to the current one.
pub fn commit(
    rate: &Rate,
    state: Option<SlidingWindowCounterState>,
    now_us: u64,
    hits: u64,
) -> SlidingWindowCounterState {
    let window_start = window_start_us(rate.window_us(), now_us);
    let (previous, current) = counts(rate, state.as_ref(), window_start);
    SlidingWindowCounterState {
        window_start_us: window_start,
        previous,
        current: current + hits,
    }
}

/// The current count weighs on the estimate until the end of the next window.
pub fn expires_at_us(rate: &Rate, state: &SlidingWindowCounterState) -> u64 {
    state.window_start_us + 2 * rate.window_us()
}
