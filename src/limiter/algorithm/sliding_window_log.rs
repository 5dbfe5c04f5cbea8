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

/// Whether an entry admitted at `ts` is inside (now − W, now], i.e. now − ts < W. Written without
/// `now − W`, which would saturate at 0 and drop an entry at ts = 0 while now < W.
fn is_live(window_us: u64, now_us: u64, ts: u64) -> bool {
    now_us.saturating_sub(ts) < window_us
}

/// The entries still inside (now − W, now].
fn live<'a>(
    rate: &Rate,
    state: Option<&'a SlidingWindowLogState>,
    now_us: u64,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let window = rate.window_us();
    state
        .into_iter()
        .flat_map(|s| s.entries.iter().copied())
        .filter(move |&(ts, _)| is_live(window, now_us, ts))
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
    let count = live(rate, state, now_us).fold(0u64, |sum, (_, hits)| sum.saturating_add(hits));
    if count.saturating_add(hits) <= limit {
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
        let keep = limit.saturating_sub(hits);
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
    let window = rate.window_us();
    let mut state = state.unwrap_or_default();
    while state
        .entries
        .front()
        .is_some_and(|&(ts, _)| !is_live(window, now_us, ts))
    {
        state.entries.pop_front();
    }
    match state.entries.back_mut() {
        Some((ts, count)) if *ts == now_us => *count += hits,
        _ => state.entries.push_back((now_us, hits)),
    }
    state
}

/// Takes back `hits` recorded at `committed_at_us` (from the newest entries of that instant: the
/// script removes the last-numbered members of that timestamp), left as it is when none are, or
/// when they have already left the window. Exact: the hits of the other commits stay, each with
/// its own timestamp. `None` (delete) when no hit is left inside the window at now.
pub fn refund(
    rate: &Rate,
    state: Option<SlidingWindowLogState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
) -> Option<SlidingWindowLogState> {
    let mut state = state?;
    let window = rate.window_us();
    if hits == 0 || !is_live(window, now_us, committed_at_us) {
        return Some(state);
    }
    let mut left = hits;
    for (ts, count) in state.entries.iter_mut().rev() {
        if *ts == committed_at_us {
            let taken = (*count).min(left);
            *count -= taken;
            left -= taken;
            if left == 0 {
                break;
            }
        }
    }
    if left == hits {
        return Some(state);
    }
    state.entries.retain(|&(_, count)| count > 0);
    let newest = state.entries.iter().map(|&(ts, _)| ts).max()?;
    is_live(window, now_us, newest).then_some(state)
}

/// The log is empty once its newest entry leaves the window.
pub fn expires_at_us(rate: &Rate, state: &SlidingWindowLogState) -> u64 {
    state
        .entries
        .back()
        .map_or(0, |&(ts, _)| ts + rate.window_us())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, multiplier: u32) -> Rate {
        Rate::new(Algorithm::SlidingWindowLog, limit, unit, multiplier, None).unwrap()
    }

    #[test]
    fn hits_leave_exactly_one_window_after_they_were_admitted() {
        let rate = rate(3, Unit::Second, 10);
        let w = 10 * S;
        let mut state: Option<SlidingWindowLogState> = None;
        let first = decide(&rate, &mut state, T0, 1);
        assert_eq!(
            first,
            Verdict {
                admitted: true,
                remaining: 2,
                reset_after_us: w
            }
        );
        let second = decide(&rate, &mut state, T0 + 2 * S, 1);
        assert_eq!(second.remaining, 1);
        assert_eq!(
            second.reset_after_us,
            8 * S,
            "the oldest entry leaves at T0 + W"
        );
        assert_eq!(decide(&rate, &mut state, T0 + 5 * S, 1).remaining, 0);

        let denied = decide(&rate, &mut state, T0 + 6 * S, 1);
        assert_eq!(
            denied,
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: 4 * S
            }
        );
        // The window is (now − W, now]: the hit of T0 still counts at T0 + W − 1 µs, not at T0 + W.
        assert!(!decide(&rate, &mut state, T0 + w - 1, 1).admitted);
        let v = decide(&rate, &mut state, T0 + w, 1);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(
            v.reset_after_us,
            2 * S,
            "now the hit of T0 + 2 s is the oldest"
        );
        assert_eq!(
            state.unwrap().entries,
            VecDeque::from([(T0 + 2 * S, 1), (T0 + 5 * S, 1), (T0 + w, 1)])
        );
    }

    #[test]
    fn retry_after_waits_for_enough_entries_to_leave() {
        let rate = rate(5, Unit::Minute, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert!(decide(&rate, &mut state, T0, 2).admitted);
        assert!(decide(&rate, &mut state, T0 + S, 1).admitted);
        assert!(decide(&rate, &mut state, T0 + 2 * S, 2).admitted);
        let state = state.unwrap();
        let now = T0 + 3 * S;
        // n = 3 needs at most 2 left: the 2 of T0 leaving is not enough, the 1 of T0 + 1 s is.
        let v = evaluate(&rate, Some(&state), now, 3);
        assert_eq!(v.remaining, 0);
        assert_eq!(now + v.reset_after_us, T0 + S + 60 * S);
        assert_retry_exact(&rate, &state, now, 3);
        // n = 2 only needs the first entry gone; n = 5 needs every entry gone.
        let v = evaluate(&rate, Some(&state), now, 2);
        assert_eq!(now + v.reset_after_us, T0 + 60 * S);
        assert_retry_exact(&rate, &state, now, 2);
        let v = evaluate(&rate, Some(&state), now, 5);
        assert_eq!(now + v.reset_after_us, T0 + 2 * S + 60 * S);
        assert_retry_exact(&rate, &state, now, 5);
    }

    #[test]
    fn hits_beyond_the_limit_wait_for_an_empty_log_and_never_overflow() {
        let rate = rate(4, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        let v = decide(&rate, &mut state, T0, u64::MAX);
        assert_eq!(
            v,
            Verdict {
                admitted: false,
                remaining: 4,
                reset_after_us: 0
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 1);
        decide(&rate, &mut state, T0 + 300_000, 1);
        for hits in [5, u64::MAX - 1, u64::MAX] {
            let v = decide(&rate, &mut state, T0 + 500_000, hits);
            assert!(!v.admitted);
            assert_eq!(v.remaining, 2);
            assert_eq!(v.reset_after_us, 800_000, "until the newest entry leaves");
            assert!(!evaluate(&rate, state.as_ref(), T0 + 500_000, hits).admitted);
        }
        assert_eq!(state.unwrap().entries.len(), 2);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(2, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert_eq!(
            decide(&rate, &mut state, T0, 0),
            Verdict {
                admitted: true,
                remaining: 2,
                reset_after_us: 0
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 2);
        let before = state.clone();
        let v = decide(&rate, &mut state, T0 + 100, 0);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_us, S - 100);
        assert_eq!(state, before);
    }

    #[test]
    fn a_denied_request_leaves_the_log_unchanged() {
        let rate = rate(2, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        decide(&rate, &mut state, T0, 1);
        decide(&rate, &mut state, T0 + 10, 1);
        let before = state.clone();
        for hits in [1, 2, 3] {
            assert!(!decide(&rate, &mut state, T0 + 20, hits).admitted);
        }
        assert_eq!(state, before);
    }

    #[test]
    fn commit_merges_same_instant_hits_and_drops_departed_entries() {
        let rate = rate(10, Unit::Second, 1);
        let state = commit(&rate, None, T0, 2);
        let state = commit(&rate, Some(state), T0, 3);
        assert_eq!(state.entries, VecDeque::from([(T0, 5)]));
        let state = commit(&rate, Some(state), T0 + 400_000, 1);
        let state = commit(&rate, Some(state), T0 + S, 1);
        assert_eq!(
            state.entries,
            VecDeque::from([(T0 + 400_000, 1), (T0 + S, 1)])
        );
    }

    #[test]
    fn hits_at_time_zero_count_while_now_is_less_than_a_window() {
        // (now − W, now] contains 0 while now < W; a saturating `now − W` used to drop it.
        let rate = rate(1, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert!(decide(&rate, &mut state, 0, 1).admitted);
        assert!(!decide(&rate, &mut state, 0, 1).admitted);
        let denied = decide(&rate, &mut state, S - 1, 1);
        assert!(!denied.admitted);
        assert_eq!(denied.reset_after_us, 1);
        assert!(decide(&rate, &mut state, S, 1).admitted);
    }

    #[test]
    fn expires_when_the_newest_entry_leaves_and_is_then_like_absent() {
        let rate = rate(3, Unit::Second, 1);
        let state = commit(&rate, None, T0, 1);
        let state = commit(&rate, Some(state), T0 + 700_000, 2);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + 700_000 + S);
        assert_ne!(
            evaluate(&rate, Some(&state), expiry - 1, 3),
            evaluate(&rate, None, expiry - 1, 3)
        );
        for now in [expiry, expiry + 1, expiry + 5 * S] {
            for hits in [0, 1, 3] {
                assert_eq!(
                    evaluate(&rate, Some(&state), now, hits),
                    evaluate(&rate, None, now, hits)
                );
            }
        }
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::SlidingWindowLog, 0x5106_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::SlidingWindowLog, 0x5106_0002, Span::Random);
    }

    #[test]
    fn a_refund_removes_only_hits_of_the_reservation_instant() {
        let rate = rate(10, Unit::Second, 1);
        let state = commit(&rate, None, T0, 2);
        let state = commit(&rate, Some(state), T0 + 100, 1);
        let reserved = commit(&rate, Some(state), T0 + 100, 3);
        let later = commit(&rate, Some(reserved), T0 + 200, 1);
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 300, 3)
                .unwrap()
                .entries,
            VecDeque::from([(T0, 2), (T0 + 100, 1), (T0 + 200, 1)])
        );
        // Never more than were recorded at that instant.
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 300, 9)
                .unwrap()
                .entries,
            VecDeque::from([(T0, 2), (T0 + 200, 1)])
        );
        // Nothing at that instant, or already out of the window: left alone.
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 150, T0 + 300, 3),
            Some(later.clone())
        );
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 100 + S, 3),
            Some(later)
        );
        // Nothing left in the window: deleted.
        let alone = commit(&rate, None, T0, 2);
        assert_eq!(refund(&rate, Some(alone), T0, T0 + 10, 2), None);
        let with_old = commit(&rate, Some(commit(&rate, None, T0, 1)), T0 + S - 5, 2);
        assert_eq!(refund(&rate, Some(with_old), T0 + S - 5, T0 + S, 2), None);
    }
}
