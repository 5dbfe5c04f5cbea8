//! A counter's state as an operator reads it (`GET /counters`): how much of its capacity is
//! used, what remains, and when it is full again, from the verdict a check of 0 hits gets.

use super::algorithm::Verdict;
use super::check::Check;
use super::consistency::Consistency;
use super::rate::Rate;

/// One counter's state at the instant the store read it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CounterState {
    /// The most requests the counter admits at once from idle: the burst (`requests_per_unit`
    /// for the window algorithms).
    pub capacity: u32,
    /// `capacity − remaining`: hits the counter still holds, hits granted to leases included.
    /// For sliding_window_counter the weighted estimate rounded up, for token_bucket and gcra
    /// the missing tokens rounded up.
    pub used: u32,
    /// Requests of one hit still admissible now (the `limit_remaining` of a check of 0 hits).
    pub remaining: u32,
    /// µs until the counter is fully replenished (0 for an idle counter).
    pub reset_after_us: u64,
}

impl CounterState {
    /// The state `verdict`, the answer to a check of 0 hits on a counter of `rate`, describes.
    pub fn of(rate: &Rate, verdict: &Verdict) -> CounterState {
        let capacity = rate.burst();
        let remaining = verdict.remaining.min(capacity);
        CounterState {
            capacity,
            used: capacity - remaining,
            remaining,
            reset_after_us: verdict.reset_after_us,
        }
    }
}

/// `checks` as reads: 0 hits (a check of 0 hits writes nothing in any store), shadow (it never
/// vetoes), exact (answered by the store, never from a lease in hand).
pub fn probes(checks: &[Check]) -> Vec<Check> {
    checks
        .iter()
        .map(|check| Check {
            key: check.key.clone(),
            rate: check.rate,
            hits: 0,
            shadow: true,
            consistency: Consistency::Exact,
            rule: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::{commit, evaluate};
    use crate::limiter::rate::{Algorithm, Unit};

    const T0: u64 = 1_700_000_000_000_000;

    #[test]
    fn used_and_remaining_add_up_to_the_capacity() {
        let rate = Rate::new(Algorithm::FixedWindow, 10, Unit::Minute, 1, None).unwrap();
        let state = commit(&rate, None, T0, 3);
        let read = CounterState::of(&rate, &evaluate(&rate, Some(&state), T0 + 5, 0));
        assert_eq!(read.capacity, 10);
        assert_eq!(read.used, 3);
        assert_eq!(read.remaining, 7);
        assert!(read.reset_after_us > 0);
        let idle = CounterState::of(&rate, &evaluate(&rate, None, T0, 0));
        assert_eq!((idle.used, idle.remaining), (0, 10));
    }

    #[test]
    fn a_token_bucket_counts_against_its_burst() {
        let rate = Rate::new(Algorithm::TokenBucket, 10, Unit::Second, 1, Some(4)).unwrap();
        let state = commit(&rate, None, T0, 4);
        let read = CounterState::of(&rate, &evaluate(&rate, Some(&state), T0, 0));
        assert_eq!((read.capacity, read.used, read.remaining), (4, 4, 0));
        assert_eq!(read.reset_after_us, 400_000);
    }

    #[test]
    fn probes_read_without_hits_and_never_veto() {
        let rate = Rate::new(Algorithm::Gcra, 5, Unit::Second, 1, None).unwrap();
        let check = Check {
            key: crate::limiter::counter_key::CounterKey::new("d", &[]),
            rate,
            hits: 7,
            shadow: false,
            consistency: Consistency::Leased,
            rule: None,
        };
        let probe = &probes(std::slice::from_ref(&check))[0];
        assert_eq!((probe.hits, probe.shadow), (0, true));
        assert_eq!(probe.consistency, Consistency::Exact);
        assert_eq!((&probe.key, probe.rate), (&check.key, check.rate));
    }
}
