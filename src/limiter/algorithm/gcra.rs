//! GCRA: one theoretical arrival time (TAT) per key; emission interval T = W / L (whole µs).

use super::Verdict;
use crate::limiter::rate::Rate;

/// Theoretical arrival time in Unix µs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcraState {
    pub tat_us: u64,
}

/// Admits when max(TAT, now) + n·T − now ≤ B·T.
pub fn evaluate(rate: &Rate, state: Option<&GcraState>, now_us: u64, hits: u64) -> Verdict {
    let interval = rate.emission_interval_us();
    let capacity = u64::from(rate.burst()) * interval;
    let base = state.map_or(now_us, |s| s.tat_us.max(now_us));
    let debt = base - now_us;
    if hits > u64::from(rate.burst()) {
        return Verdict {
            admitted: false,
            remaining: (capacity.saturating_sub(debt) / interval) as u32,
            reset_after_us: debt,
        };
    }
    let new_debt = debt + hits * interval;
    if new_debt <= capacity {
        Verdict {
            admitted: true,
            remaining: ((capacity - new_debt) / interval) as u32,
            reset_after_us: new_debt,
        }
    } else {
        Verdict {
            admitted: false,
            remaining: (capacity.saturating_sub(debt) / interval) as u32,
            reset_after_us: new_debt - capacity,
        }
    }
}

/// Moves TAT to max(TAT, now) + n·T.
pub fn commit(rate: &Rate, state: Option<GcraState>, now_us: u64, hits: u64) -> GcraState {
    let base = state.map_or(now_us, |s| s.tat_us.max(now_us));
    GcraState {
        tat_us: base + hits * rate.emission_interval_us(),
    }
}

/// Once now passes TAT the key is as good as new.
pub fn expires_at_us(_rate: &Rate, state: &GcraState) -> u64 {
    state.tat_us
}
