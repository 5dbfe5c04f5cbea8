//! Fixed window: a count per epoch-aligned window [floor(now/W)·W, +W).

use super::{window_start_us, Verdict};
use crate::limiter::rate::Rate;

/// Hits admitted in the window starting at `window_start_us`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FixedWindowState {
    pub window_start_us: u64,
    pub count: u64,
}

fn current_count(state: Option<&FixedWindowState>, window_start: u64) -> u64 {
    match state {
        Some(s) if s.window_start_us == window_start => s.count,
        _ => 0,
    }
}

/// Admits when c + n ≤ L; remaining L − c after; resets at the window end either way.
pub fn evaluate(rate: &Rate, state: Option<&FixedWindowState>, now_us: u64, hits: u64) -> Verdict {
    let window_start = window_start_us(rate.window_us(), now_us);
    let count = current_count(state, window_start);
    let limit = u64::from(rate.limit());
    let admitted = count + hits <= limit;
    let after = if admitted { count + hits } else { count };
    Verdict {
        admitted,
        remaining: limit.saturating_sub(after) as u32,
        reset_after_us: window_start + rate.window_us() - now_us,
    }
}

/// Adds `hits` to the current window's count.
pub fn commit(
    rate: &Rate,
    state: Option<FixedWindowState>,
    now_us: u64,
    hits: u64,
) -> FixedWindowState {
    let window_start = window_start_us(rate.window_us(), now_us);
    FixedWindowState {
        window_start_us: window_start,
        count: current_count(state.as_ref(), window_start) + hits,
    }
}

/// The count is worthless once its window ends.
pub fn expires_at_us(rate: &Rate, state: &FixedWindowState) -> u64 {
    state.window_start_us + rate.window_us()
}
