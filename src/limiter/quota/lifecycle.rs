//! How long an assignment lives, and when a bucket is abandoned.
//!
//! An assignment lives a few report periods: long enough to outlast a late report or two, short
//! enough that Envoys that lose their ratelimitd fall back to their expired-assignment behaviour
//! soon, rather than keep a share computed for a set of Envoys that no longer holds.

use std::time::Duration;

/// Envoy 1.40 reports every bucket every 5 s, whatever its `reporting_interval` says.
pub const DEFAULT_REPORT_PERIOD: Duration = Duration::from_secs(5);

/// The default assignment lifetime, in report periods.
pub const DEFAULT_TTL_PERIODS: u32 = 3;

/// The default idle time after which a bucket is abandoned.
pub const DEFAULT_IDLE_ABANDON: Duration = Duration::from_secs(60);

/// The `assignment_time_to_live` to send: `periods` report periods (at least one, so an
/// assignment never expires before the next report can renew it).
pub fn assignment_ttl(report_period: Duration, periods: u32) -> Duration {
    report_period.saturating_mul(periods.max(1))
}

/// Whether a bucket whose reports last counted a request at `last_used` (or that was subscribed
/// then, if none has) is abandoned at `now`: when it has been idle for longer than `idle_limit`.
/// Envoy keeps reporting idle buckets (0 allowed, 0 denied), so idleness is measured by usage,
/// not by reports. A `now` before `last_used` (a clock step back) is not idle.
pub fn should_abandon(last_used: Duration, now: Duration, idle_limit: Duration) -> bool {
    now.checked_sub(last_used)
        .is_some_and(|idle| idle > idle_limit)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_ttl_is_a_whole_number_of_report_periods() {
        assert_eq!(
            assignment_ttl(DEFAULT_REPORT_PERIOD, DEFAULT_TTL_PERIODS),
            Duration::from_secs(15)
        );
        assert_eq!(
            assignment_ttl(DEFAULT_REPORT_PERIOD, 0),
            DEFAULT_REPORT_PERIOD
        );
        assert_eq!(assignment_ttl(Duration::MAX, 2), Duration::MAX);
    }

    #[test]
    fn a_bucket_is_abandoned_only_after_more_than_the_idle_limit() {
        let used = 100 * SECOND;
        let limit = 60 * SECOND;
        assert!(!should_abandon(used, used, limit));
        assert!(
            !should_abandon(used, used + limit, limit),
            "exactly the limit"
        );
        assert!(should_abandon(used, used + limit + SECOND, limit));
        assert!(
            !should_abandon(used, used - SECOND, limit),
            "clock stepped back"
        );
    }
}
