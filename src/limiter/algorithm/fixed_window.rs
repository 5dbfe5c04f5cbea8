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
    let admitted = count.saturating_add(hits) <= limit;
    let after = if admitted { count + hits } else { count };
    Verdict {
        admitted,
        remaining: limit.saturating_sub(after) as u32,
        reset_after_us: window_start + rate.window_us() - now_us,
        counted_when_vetoed: false,
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

/// Takes back `hits` committed at `committed_at_us` from the count of that instant's window; a
/// count of another window holds none of them, and a window that has ended counts nothing any
/// more (both left as they are). Exact: counts add up, so this is the count without the
/// reservation whatever else was committed. A count down to 0 is `None` (delete), like absent.
pub fn refund(
    rate: &Rate,
    state: Option<FixedWindowState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
) -> Option<FixedWindowState> {
    let state = state?;
    let window_start = window_start_us(rate.window_us(), committed_at_us);
    if hits == 0 || state.window_start_us != window_start || expires_at_us(rate, &state) <= now_us {
        return Some(state);
    }
    let count = state.count.saturating_sub(hits);
    (count > 0).then_some(FixedWindowState { count, ..state })
}

/// The count is worthless once its window ends.
pub fn expires_at_us(rate: &Rate, state: &FixedWindowState) -> u64 {
    state.window_start_us + rate.window_us()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::algorithm::window_start_us;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, multiplier: u32) -> Rate {
        Rate::new(Algorithm::FixedWindow, limit, unit, multiplier, None).unwrap()
    }

    #[test]
    fn admits_exactly_the_limit_and_resets_at_the_epoch_aligned_window_end() {
        let rate = rate(3, Unit::Minute, 1);
        let start = window_start_us(60 * S, T0);
        assert_eq!(start % (60 * S), 0);
        assert!(
            start < T0,
            "T0 is not minute-aligned, so the window started earlier"
        );
        let now = start + 17 * S + 123;
        let end = start + 60 * S;
        let mut state: Option<FixedWindowState> = None;
        for remaining in [2, 1, 0] {
            let v = decide(&rate, &mut state, now, 1);
            assert_eq!(
                v,
                Verdict {
                    admitted: true,
                    remaining,
                    reset_after_us: end - now,
                    counted_when_vetoed: false,
                }
            );
        }
        let denied = decide(&rate, &mut state, now, 1);
        assert_eq!(
            denied,
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: end - now,
                counted_when_vetoed: false,
            }
        );
        // Retry-after is exact: 1 µs before the boundary still denied, at the boundary admitted.
        let retry = now + denied.reset_after_us;
        assert_eq!(retry, end);
        assert!(!decide(&rate, &mut state, retry - 1, 1).admitted);
        let v = decide(&rate, &mut state, retry, 1);
        assert!(v.admitted);
        assert_eq!(v.remaining, 2);
        assert_eq!(v.reset_after_us, 60 * S);
        assert_eq!(
            state,
            Some(FixedWindowState {
                window_start_us: end,
                count: 1
            })
        );
    }

    #[test]
    fn unit_multiplier_windows_align_to_multiples_of_the_whole_window() {
        // 5 seconds: windows [0, 5 s), [5 s, 10 s), ... since the epoch.
        let rate = rate(2, Unit::Second, 5);
        assert_eq!(rate.window_us(), 5 * S);
        let now = 12 * S + 400_000; // inside [10 s, 15 s)
        let mut state: Option<FixedWindowState> = None;
        let v = decide(&rate, &mut state, now, 2);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_us, 15 * S - now);
        assert_eq!(state.unwrap().window_start_us, 10 * S);
        assert!(!decide(&rate, &mut state, 15 * S - 1, 1).admitted);
        assert!(decide(&rate, &mut state, 15 * S, 2).admitted);
        assert!(!decide(&rate, &mut state, 19 * S, 1).admitted);

        // 3 hours at a realistic time: the window start is a multiple of 3 h since the epoch.
        let rate = Rate::new(Algorithm::FixedWindow, 1, Unit::Hour, 3, None).unwrap();
        let w = 3 * 3_600 * S;
        let start = T0 - T0 % w;
        let mut state: Option<FixedWindowState> = None;
        let v = decide(&rate, &mut state, T0, 1);
        assert_eq!(v.reset_after_us, start + w - T0);
        let denied = decide(&rate, &mut state, T0 + 1, 1);
        assert!(!denied.admitted);
        assert_eq!(T0 + 1 + denied.reset_after_us, start + w);
        assert!(decide(&rate, &mut state, start + w, 1).admitted);
    }

    #[test]
    fn a_count_from_an_older_window_is_ignored() {
        let rate = rate(5, Unit::Second, 1);
        let old = FixedWindowState {
            window_start_us: T0 - 3 * S,
            count: 5,
        };
        let v = evaluate(&rate, Some(&old), T0, 5);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(
            commit(&rate, Some(old), T0, 5),
            FixedWindowState {
                window_start_us: T0,
                count: 5
            }
        );
    }

    #[test]
    fn multi_hit_requests_and_remaining() {
        let rate = rate(10, Unit::Second, 1);
        let mut state: Option<FixedWindowState> = None;
        assert_eq!(decide(&rate, &mut state, T0, 7).remaining, 3);
        let denied = decide(&rate, &mut state, T0, 4);
        assert!(!denied.admitted);
        assert_eq!(denied.remaining, 3);
        assert_eq!(state.unwrap().count, 7, "a denied request changes nothing");
        let v = decide(&rate, &mut state, T0, 3);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(2, Unit::Minute, 1);
        let mut state: Option<FixedWindowState> = None;
        let v = decide(&rate, &mut state, T0, 0);
        assert!(v.admitted);
        assert_eq!(v.remaining, 2);
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 2);
        let before = state;
        let v = decide(&rate, &mut state, T0, 0);
        assert!(v.admitted, "a full window still admits a check of 0");
        assert_eq!(v.remaining, 0);
        assert_eq!(state, before);
        // Only a state already over the limit (unreachable through commit) denies 0 hits.
        let over = FixedWindowState {
            window_start_us: window_start_us(rate.window_us(), T0),
            count: 3,
        };
        assert!(!evaluate(&rate, Some(&over), T0, 0).admitted);
    }

    #[test]
    fn huge_hits_are_denied_without_overflow() {
        let rate = rate(u32::MAX, Unit::Second, 1);
        let mut state: Option<FixedWindowState> = None;
        for hits in [u64::from(u32::MAX) + 1, u64::MAX - 1, u64::MAX] {
            let v = decide(&rate, &mut state, T0, hits);
            assert!(!v.admitted);
            assert_eq!(v.remaining, u32::MAX);
            assert_eq!(v.reset_after_us, S);
            // The per-algorithm function is also safe without the dispatcher's clamp.
            assert!(!evaluate(&rate, None, T0, hits).admitted);
        }
        assert_eq!(state, None);
        assert!(decide(&rate, &mut state, T0, u64::from(u32::MAX)).admitted);
        let v = decide(&rate, &mut state, T0, u64::MAX);
        assert!(!v.admitted);
        assert_eq!(v.remaining, 0);
        assert!(!evaluate(&rate, state.as_ref(), T0, u64::MAX).admitted);
    }

    #[test]
    fn expires_at_the_window_end_and_is_then_like_absent() {
        let rate = rate(4, Unit::Second, 1);
        let state = commit(&rate, None, T0 + 250_000, 3);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + S);
        assert_ne!(
            evaluate(&rate, Some(&state), expiry - 1, 1),
            evaluate(&rate, None, expiry - 1, 1)
        );
        for now in [expiry, expiry + 1, expiry + 10 * S] {
            assert_eq!(
                evaluate(&rate, Some(&state), now, 2),
                evaluate(&rate, None, now, 2)
            );
        }
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::FixedWindow, 0xF1ED_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::FixedWindow, 0xF1ED_0002, Span::Random);
    }

    #[test]
    fn a_refund_takes_the_hits_from_the_window_they_were_counted_in() {
        let rate = rate(10, Unit::Second, 1);
        let before = commit(&rate, None, T0 + 100, 3);
        let reserved = commit(&rate, Some(before), T0 + 200, 4);
        let later = commit(&rate, Some(reserved), T0 + 300, 2);
        assert_eq!(
            refund(&rate, Some(later), T0 + 200, T0 + 400, 4),
            Some(FixedWindowState {
                window_start_us: T0,
                count: 5
            })
        );
        // Down to 0: deleted.
        let alone = commit(&rate, None, T0 + 200, 4);
        assert_eq!(refund(&rate, Some(alone), T0 + 200, T0 + 400, 4), None);
        // The window has rolled: the hits no longer count.
        let next = commit(&rate, Some(reserved), T0 + S, 1);
        assert_eq!(refund(&rate, Some(next), T0 + 200, T0 + S, 4), Some(next));
        // The window has ended: worthless, left alone.
        assert_eq!(
            refund(&rate, Some(reserved), T0 + 200, T0 + S, 4),
            Some(reserved)
        );
        assert_eq!(refund(&rate, None, T0 + 200, T0 + 400, 4), None);
    }
}
