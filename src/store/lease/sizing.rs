//! How big a lease a replica asks for, and which counters are worth leasing at all.

use std::time::Duration;

use crate::limiter::algorithm::lease::LeaseTerms;
use crate::limiter::consistency::Consistency;
use crate::limiter::rate::{Algorithm, Rate};

/// The largest share of a counter's capacity (its burst) one lease may hold: what one replica
/// can strand in hits it reserved and never spends (it stopped, or its traffic moved), so the
/// others see at most this much less than the limit per replica holding a lease.
pub const MAX_LEASE_SHARE: u64 = 16;

/// Leases smaller than this are not worth a store call: a counter whose largest lease would be
/// smaller is decided exactly (small limits cost the store little, and exact mode admits them to
/// the last hit).
pub const MIN_LEASE: u64 = 4;

/// A token_bucket or gcra lease lasts at most this fraction of the time its burst takes to
/// refill: its hits are charged as if spent at the lease's end, which holds back at most one
/// period of refill while the counter is nearly full.
const PERIOD_SHARE_OF_FILL: u64 = 8;

/// Shortest lease period worth having: below it a counter is decided exactly.
const MIN_PERIOD_US: u64 = 1_000;

/// The lease parameters of one counter, from its rate and `--lease-period`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeasePolicy {
    /// How long a token_bucket or gcra lease lasts, and the horizon a lease is sized for.
    pub period_us: u64,
    /// The largest lease (hits).
    pub max_hits: u64,
    /// Whether a grant must be the whole lease asked for: token_bucket, gcra and
    /// sliding_window_counter free hits continuously (refill, or the previous window's weight
    /// decaying), so over its limit a counter would otherwise be asked again for every hit freed,
    /// by every replica; fixed_window frees none before its window ends and grants what is left.
    pub whole: bool,
}

impl LeasePolicy {
    /// The policy for `rate`, or `None` when its counters are decided exactly: an algorithm that
    /// cannot be leased, a burst too small for [`MIN_LEASE`], or a refill too fast for a period.
    pub fn for_rate(rate: &Rate, period: Duration) -> Option<LeasePolicy> {
        if !Consistency::can_lease(rate.algorithm()) {
            return None;
        }
        let max_hits = u64::from(rate.burst()) / MAX_LEASE_SHARE;
        if max_hits < MIN_LEASE {
            return None;
        }
        let configured = u64::try_from(period.as_micros()).unwrap_or(u64::MAX).max(1);
        let continuous = matches!(rate.algorithm(), Algorithm::TokenBucket | Algorithm::Gcra);
        let whole = rate.algorithm() != Algorithm::FixedWindow;
        let period_us = if continuous {
            let fill_us =
                u64::from(rate.burst()).saturating_mul(rate.window_us()) / u64::from(rate.limit());
            configured.min(fill_us / PERIOD_SHARE_OF_FILL)
        } else {
            configured
        };
        if period_us < MIN_PERIOD_US {
            return None;
        }
        Some(LeasePolicy {
            period_us,
            max_hits,
            whole,
        })
    }

    /// The terms to ask for, for a replica spending `per_period` hits per period (its estimate)
    /// and needing `needed` now: twice the estimate (so a refill asked at half a lease comes back
    /// before the rest is spent), at least `needed` and [`MIN_LEASE`], at most `max_hits`; the
    /// whole of it or nothing where [`LeasePolicy::whole`] says so.
    pub fn terms(&self, per_period: f64, needed: u64) -> LeaseTerms {
        let estimate = (per_period * 2.0).ceil();
        let estimate = if estimate.is_finite() && estimate > 0.0 {
            estimate as u64
        } else {
            0
        };
        let want = estimate.max(needed).max(MIN_LEASE).min(self.max_hits);
        let min = if self.whole { want } else { 1 };
        LeaseTerms {
            want,
            min,
            period_us: self.period_us,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::rate::Unit;

    fn rate(algorithm: Algorithm, limit: u32, burst: Option<u32>) -> Rate {
        Rate::new(algorithm, limit, Unit::Second, 1, burst).unwrap()
    }

    #[test]
    fn small_limits_and_logs_are_decided_exactly() {
        let period = Duration::from_millis(100);
        assert!(LeasePolicy::for_rate(&rate(Algorithm::FixedWindow, 63, None), period).is_none());
        assert!(LeasePolicy::for_rate(&rate(Algorithm::FixedWindow, 64, None), period).is_some());
        assert!(
            LeasePolicy::for_rate(&rate(Algorithm::SlidingWindowLog, 10_000, None), period)
                .is_none()
        );
    }

    #[test]
    fn continuous_algorithms_hold_a_lease_for_at_most_an_eighth_of_their_fill_time() {
        let period = Duration::from_millis(100);
        let long = LeasePolicy::for_rate(&rate(Algorithm::Gcra, 1_000, None), period).unwrap();
        assert_eq!(long.period_us, 100_000);
        let short = LeasePolicy::for_rate(&rate(Algorithm::Gcra, 1_000, Some(100)), period);
        assert_eq!(
            short.unwrap().period_us,
            12_500,
            "100 hits refill in 100 ms"
        );
        let fixed = LeasePolicy::for_rate(&rate(Algorithm::FixedWindow, 1_000, None), period);
        assert_eq!(fixed.unwrap().period_us, 100_000);
    }

    #[test]
    fn terms_follow_the_estimate_within_their_bounds() {
        let policy = LeasePolicy::for_rate(
            &rate(Algorithm::TokenBucket, 1_600, None),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(policy.max_hits, 100);
        let idle = policy.terms(0.0, 1);
        assert_eq!((idle.want, idle.min), (MIN_LEASE, MIN_LEASE));
        let busy = policy.terms(30.0, 1);
        assert_eq!((busy.want, busy.min), (60, 60));
        let flooded = policy.terms(1e9, 1);
        assert_eq!((flooded.want, flooded.min), (100, 100));
        let window = LeasePolicy::for_rate(
            &rate(Algorithm::FixedWindow, 1_600, None),
            Duration::from_millis(100),
        )
        .unwrap();
        assert_eq!(window.terms(1e9, 1).min, 1);
    }
}
