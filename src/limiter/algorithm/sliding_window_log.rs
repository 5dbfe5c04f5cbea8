//! Sliding window log: the timestamps of admitted hits in (now − W, now].
//!
//! Memory keeps one `(timestamp, hits)` entry per admitted request; Redis keeps one sorted-set
//! member per hit. Both count the same hits at every instant.

use std::collections::VecDeque;

use super::Verdict;
use crate::limiter::rate::Rate;

/// Admitted requests, oldest first: `(timestamp µs, hits)`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowLogState {
    pub entries: VecDeque<(u64, u64)>,
}

/// The entries still inside (now − W, now].
fn live<'a>(
    rate: &Rate,
    state: Option<&'a SlidingWindowLogState>,
    now_us: u64,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let horizon = now_us.saturating_sub(rate.window_us());
    state
        .into_iter()
        .flat_map(|s| s.entries.iter().copied())
        .filter(move |&(ts, _)| ts > horizon)
}

/// µs from now until enough of the oldest hits leave the window that only `keep` remain.
fn wait_until_at_most(
    rate: &Rate,
    state: Option<&SlidingWindowLogState>,
    now_us: u64,
    count: u64,
    keep: u64,
) -> u64 {
    let mut left = count;
    for (ts, hits) in live(rate, state, now_us) {
        if left <= keep {
            break;
        }
        left = left.saturating_sub(hits);
        if left <= keep {
            return ts + rate.window_us() - now_us;
        }
    }
    0
}

/// Admits when count + n ≤ L; remaining L − count after; resets when the oldest entry leaves
/// (admitted) or when enough entries have left for n (denied).
pub fn evaluate(
    rate: &Rate,
    state: Option<&SlidingWindowLogState>,
    now_us: u64,
    hits: u64,
) -> Verdict {
    let limit = u64::from(rate.limit());
    let count: u64 = live(rate, state, now_us).map(|(_, hits)| hits).sum();
    if count + hits <= limit {
        let oldest_leaves = match live(rate, state, now_us).next() {
            Some((ts, _)) => ts + rate.window_us() - now_us,
            None if hits > 0 => rate.window_us(),
            None => 0,
        };
        Verdict {
            admitted: true,
            remaining: (limit - count - hits) as u32,
            reset_after_us: oldest_leaves,
        }
    } else {
        let keep = if hits > limit { 0 } else { limit - hits };
        Verdict {
            admitted: false,
            remaining: limit.saturating_sub(count) as u32,
            reset_after_us: wait_until_at_most(rate, state, now_us, count, keep),
        }
    }
}

/// Drops the entries that left the window and records `hits` at `now_us`.
pub fn commit(
    rate: &Rate,
    state: Option<SlidingWindowLogState>,
    now_us: u64,
    hits: u64,
) -> SlidingWindowLogState {
    let horizon = now_us.saturating_sub(rate.window_us());
    let mut state = state.unwrap_or_default();
    while state.entries.front().is_some_and(|&(ts, _)| ts <= horizon) {
        state.entries.pop_front();
    }
    match state.entries.back_mut() {
        Some((ts, count)) if *ts == now_us => *count += hits,
        _ => state.entries.push_back((now_us, hits)),
    }
    state
}

/// The log is empty once its newest entry leaves the window.
pub fn expires_at_us(rate: &Rate, state: &SlidingWindowLogState) -> u64 {
    state
        .entries
        .back()
        .map_or(0, |&(ts, _)| ts + rate.window_us())
}
