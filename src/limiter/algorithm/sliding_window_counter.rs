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
        if wait < window - elapsed {
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
            counted_when_vetoed: false,
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
            counted_when_vetoed: false,
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

/// Takes back `hits` committed at `committed_at_us` from the count that holds that instant's
/// window: the current one while the stored window is that window, the previous one once it has
/// rolled over by one; any other window holds none of them (left as it is, as is a state already
/// worthless at now). Exact: counts add up, so this is the state without the reservation whatever
/// else was committed. `None` (delete) when what is left is worthless at now.
pub fn refund(
    rate: &Rate,
    state: Option<SlidingWindowCounterState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
) -> Option<SlidingWindowCounterState> {
    let state = state?;
    let window = rate.window_us();
    let window_start = window_start_us(window, committed_at_us);
    if hits == 0 || expires_at_us(rate, &state) <= now_us {
        return Some(state);
    }
    let mut refunded = state;
    if state.window_start_us == window_start {
        refunded.current = state.current.saturating_sub(hits);
    } else if state.window_start_us == window_start + window {
        refunded.previous = state.previous.saturating_sub(hits);
    }
    if refunded == state {
        return Some(state);
    }
    (expires_at_us(rate, &refunded) > now_us).then_some(refunded)
}

/// The current count weighs on the estimate until the end of the next window, the previous one
/// until the end of this window (a refund may leave a current count of 0, a commit never does).
pub fn expires_at_us(rate: &Rate, state: &SlidingWindowCounterState) -> u64 {
    if state.current > 0 {
        state.window_start_us + 2 * rate.window_us()
    } else if state.previous > 0 {
        state.window_start_us + rate.window_us()
    } else {
        state.window_start_us
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, multiplier: u32) -> Rate {
        Rate::new(
            Algorithm::SlidingWindowCounter,
            limit,
            unit,
            multiplier,
            None,
        )
        .unwrap()
    }

    #[test]
    fn weighted_estimate_across_the_boundary() {
        // L = 10 per 10 s; the previous window used all 10; at 50 % of the next window est = 5.
        let rate = rate(10, Unit::Second, 10);
        let w = 10 * S;
        assert_eq!(T0 % w, 0);
        let mut state: Option<SlidingWindowCounterState> = None;
        assert!(decide(&rate, &mut state, T0 + 3 * S, 10).admitted);
        assert!(!decide(&rate, &mut state, T0 + 9 * S, 1).admitted);
        let now = T0 + w + 5 * S;
        for remaining in [4, 3, 2, 1, 0] {
            assert_eq!(
                decide(&rate, &mut state, now, 1),
                Verdict {
                    admitted: true,
                    remaining,
                    reset_after_us: 5 * S,
                    counted_when_vetoed: false,
                }
            );
        }
        let state_now = state.unwrap();
        assert_eq!(
            state_now,
            SlidingWindowCounterState {
                window_start_us: T0 + w,
                previous: 10,
                current: 5
            }
        );
        let denied = decide(&rate, &mut state, now, 1);
        assert_eq!(
            denied,
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: S,
                counted_when_vetoed: false,
            }
        );
        // est falls by 1 per second: 9 at 60 %, so one more is admitted exactly then.
        assert!(!evaluate(&rate, Some(&state_now), now + S - 1, 1).admitted);
        assert!(evaluate(&rate, Some(&state_now), now + S, 1).admitted);
        assert_retry_within_1us(&rate, &state_now, now, 1);
        assert_retry_within_1us(&rate, &state_now, now, 3);
        assert_eq!(state, Some(state_now), "denied requests changed nothing");
    }

    #[test]
    fn retry_after_reaches_into_the_next_window() {
        let rate = rate(10, Unit::Second, 10);
        let w = 10 * S;
        // No previous window: a full current window only eases once it becomes the previous one.
        let mut state: Option<SlidingWindowCounterState> = None;
        assert!(decide(&rate, &mut state, T0 + 2 * S, 10).admitted);
        let full = state.unwrap();
        let now = T0 + 4 * S;
        let denied = evaluate(&rate, Some(&full), now, 1);
        assert_eq!(now + denied.reset_after_us, T0 + w + S);
        assert!(!evaluate(&rate, Some(&full), T0 + w + S - 1, 1).admitted);
        assert!(evaluate(&rate, Some(&full), T0 + w + S, 1).admitted);
        assert_retry_within_1us(&rate, &full, now, 1);
        assert_retry_within_1us(&rate, &full, now, 4);
        assert_retry_within_1us(&rate, &full, now, 10);

        // The previous window's decay is too slow for n = 2 inside this window.
        let late = SlidingWindowCounterState {
            window_start_us: T0,
            previous: 10,
            current: 9,
        };
        let now = T0 + 9 * S;
        let denied = evaluate(&rate, Some(&late), now, 2);
        assert!(!denied.admitted);
        assert!(
            denied.reset_after_us > S,
            "the admissible instant is in the next window"
        );
        assert_retry_within_1us(&rate, &late, now, 2);
        // n = 1 fits exactly at the boundary.
        let denied = evaluate(&rate, Some(&late), now, 1);
        assert_eq!(denied.reset_after_us, S);
        assert_retry_within_1us(&rate, &late, now, 1);
    }

    #[test]
    fn retry_after_over_many_states_is_within_1us() {
        let rate = rate(7, Unit::Minute, 1);
        let w = rate.window_us();
        let start = T0 - T0 % w;
        for previous in 0..=7 {
            for current in 0..=7 {
                for elapsed in [0, 1, w / 7, w / 3, w / 2, w - 1_000_003, w - 1] {
                    let state = SlidingWindowCounterState {
                        window_start_us: start,
                        previous,
                        current,
                    };
                    for hits in 1..=7 {
                        let now = start + elapsed;
                        if !evaluate(&rate, Some(&state), now, hits).admitted {
                            assert_retry_within_1us(&rate, &state, now, hits);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn remaining_is_the_floor_of_what_the_estimate_leaves() {
        let rate = rate(10, Unit::Second, 10);
        let state = SlidingWindowCounterState {
            window_start_us: T0,
            previous: 10,
            current: 0,
        };
        let now = T0 + 10 * S / 4; // est = 7.5
        let v = evaluate(&rate, Some(&state), now, 1);
        assert!(v.admitted);
        assert_eq!(v.remaining, 1, "floor(10 − 8.5)");
        assert_eq!(v.reset_after_us, 7_500_000, "window end");
        let v = evaluate(&rate, Some(&state), now, 3);
        assert!(!v.admitted);
        assert_eq!(v.remaining, 2, "floor(10 − 7.5)");
        let v = evaluate(&rate, Some(&state), now, 0);
        assert!(v.admitted);
        assert_eq!(v.remaining, 2);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(3, Unit::Second, 1);
        let mut state: Option<SlidingWindowCounterState> = None;
        assert_eq!(
            decide(&rate, &mut state, T0 + 200_000, 0),
            Verdict {
                admitted: true,
                remaining: 3,
                reset_after_us: 800_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0 + 200_000, 3);
        let before = state;
        assert!(decide(&rate, &mut state, T0 + 300_000, 0).admitted);
        assert_eq!(state, before);
    }

    #[test]
    fn huge_hits_are_denied_without_overflow() {
        let rate = rate(u32::MAX, Unit::Second, 1);
        let mut state: Option<SlidingWindowCounterState> = None;
        for hits in [u64::from(u32::MAX) + 1, u64::MAX] {
            let v = decide(&rate, &mut state, T0 + 100, hits);
            assert!(!v.admitted);
            assert_eq!(v.remaining, u32::MAX);
            assert_eq!(v.reset_after_us, S - 100);
            assert!(!evaluate(&rate, None, T0, hits).admitted);
        }
        assert_eq!(state, None);
        assert!(decide(&rate, &mut state, T0, u64::from(u32::MAX)).admitted);
        let v = decide(&rate, &mut state, T0 + S + S / 2, u64::MAX);
        assert!(!v.admitted);
        assert_eq!(v.remaining, u32::MAX / 2);
    }

    #[test]
    fn counts_roll_forward_and_older_windows_are_forgotten() {
        let rate = rate(5, Unit::Second, 1);
        let state = commit(&rate, None, T0 + 10, 4);
        let next = commit(&rate, Some(state), T0 + S + 10, 1);
        assert_eq!(
            next,
            SlidingWindowCounterState {
                window_start_us: T0 + S,
                previous: 4,
                current: 1
            }
        );
        let later = commit(&rate, Some(next), T0 + 3 * S, 2);
        assert_eq!(
            later,
            SlidingWindowCounterState {
                window_start_us: T0 + 3 * S,
                previous: 0,
                current: 2
            }
        );
    }

    #[test]
    fn expires_after_the_next_window_and_is_then_like_absent() {
        let rate = rate(4, Unit::Second, 1);
        let state = commit(&rate, None, T0 + 600_000, 4);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + 2 * S);
        assert_ne!(
            evaluate(&rate, Some(&state), expiry - 1, 4),
            evaluate(&rate, None, expiry - 1, 4)
        );
        for now in [expiry, expiry + 1, expiry + 7 * S] {
            for hits in [0, 1, 4, 5] {
                assert_eq!(
                    evaluate(&rate, Some(&state), now, hits),
                    evaluate(&rate, None, now, hits)
                );
            }
        }
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::SlidingWindowCounter, 0x5C0E_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::SlidingWindowCounter, 0x5C0E_0002, Span::Random);
    }

    #[test]
    fn a_refund_takes_the_hits_from_the_count_that_holds_their_window() {
        let rate = rate(10, Unit::Second, 1);
        let state = SlidingWindowCounterState {
            window_start_us: T0,
            previous: 3,
            current: 6,
        };
        let t0 = T0 + 500;
        // Still the same window: from the current count.
        assert_eq!(
            refund(&rate, Some(state), t0, t0 + 100, 4),
            Some(SlidingWindowCounterState {
                current: 2,
                ..state
            })
        );
        // Rolled over once: the reservation is in the previous count now.
        let rolled = commit(&rate, Some(state), T0 + S + 10, 1);
        assert_eq!(
            refund(&rate, Some(rolled), t0, T0 + S + 20, 4),
            Some(SlidingWindowCounterState {
                window_start_us: T0 + S,
                previous: 2,
                current: 1
            })
        );
        // Rolled over twice: the reservation weighs nothing any more.
        let gone = commit(&rate, Some(rolled), T0 + 2 * S, 1);
        assert_eq!(refund(&rate, Some(gone), t0, T0 + 2 * S, 4), Some(gone));
        // Both counts down to 0: deleted.
        let alone = commit(&rate, None, t0, 4);
        assert_eq!(refund(&rate, Some(alone), t0, t0 + 100, 4), None);
    }

    #[test]
    fn a_refund_that_empties_the_current_count_shortens_the_expiry() {
        let rate = rate(10, Unit::Second, 1);
        let state = SlidingWindowCounterState {
            window_start_us: T0,
            previous: 3,
            current: 4,
        };
        assert_eq!(expires_at_us(&rate, &state), T0 + 2 * S);
        let refunded = refund(&rate, Some(state), T0 + 10, T0 + 20, 4).unwrap();
        assert_eq!(refunded.current, 0);
        assert_eq!(expires_at_us(&rate, &refunded), T0 + S);
        for now in [T0 + S, T0 + S + 1, T0 + 3 * S] {
            for hits in [0, 1, 10, 11] {
                assert_eq!(
                    evaluate(&rate, Some(&refunded), now, hits),
                    evaluate(&rate, None, now, hits)
                );
            }
        }
        // Refunded in the next window: the reservation was all the stored window held, deleted.
        let late = SlidingWindowCounterState {
            window_start_us: T0 - S,
            previous: 0,
            current: 4,
        };
        assert_eq!(refund(&rate, Some(late), T0 - S + 10, T0 + 20, 4), None);
    }
}
