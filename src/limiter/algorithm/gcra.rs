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
            counted_when_vetoed: false,
        };
    }
    let new_debt = debt + hits * interval;
    if new_debt <= capacity {
        Verdict {
            admitted: true,
            remaining: ((capacity - new_debt) / interval) as u32,
            reset_after_us: new_debt,
            counted_when_vetoed: false,
        }
    } else {
        Verdict {
            admitted: false,
            remaining: (capacity.saturating_sub(debt) / interval) as u32,
            reset_after_us: new_debt - capacity,
            counted_when_vetoed: false,
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

/// Takes back `hits` committed at t0 = `committed_at_us` on a counter whose debt (TAT − t0) was
/// `debt_before_us` just before the reservation: TAT − max(0, n·T − max(0, t1 − t0 − debt)) with
/// t1 = max(`now_us`, t0); `None` (delete) when that is at or before now, where it decides like an
/// absent counter. A TAT already at or before now is left as it is (worthless already).
///
/// Never more permissive. A commit of m at s maps a TAT X to max(X, s) + m·T, monotone in X. Let
/// C₀ = t0 + debt be the TAT right after the reservation had it never happened (a TAT before now
/// decides as now) and A₀ = C₀ + n·T the one with it, δ = n·T − max(0, t1 − C₀) the give-back. If
/// δ ≤ 0 nothing is refunded, and Aₖ ≥ Cₖ after every later commit by monotonicity. If δ > 0:
/// Aₖ ≥ A₀ = max(C₀, t1) + δ ≥ s + δ for every later commit at s ≤ t1, so max(Aₖ − δ, s) = Aₖ − δ
/// and, by induction from C₀ = A₀ − n·T ≤ A₀ − δ, Cₖ₊₁ = max(Cₖ, s) + m·T ≤ max(Aₖ − δ, s) + m·T ≤
/// Aₖ₊₁ − δ: the refunded TAT is at least the counterfactual one, and a later TAT never admits
/// more. Exact when nothing else committed and t1 = t0, or when the counter's debt outlasted the
/// round trip (C₀ ≥ t1: a later commit's max(X, s) then never differs with or without the
/// reservation); otherwise stricter by at most t1 − C₀ of emission, so a stream of refunds never
/// pushes the TAT past the latest refund's t1. A `debt_before_us` of 0 (unknown) is always safe.
pub fn refund(
    rate: &Rate,
    state: Option<GcraState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
    debt_before_us: u64,
) -> Option<GcraState> {
    let state = state?;
    let kept = now_us
        .saturating_sub(committed_at_us)
        .saturating_sub(debt_before_us);
    let give_back = hits
        .saturating_mul(rate.emission_interval_us())
        .saturating_sub(kept);
    if state.tat_us <= now_us || give_back == 0 {
        return Some(state);
    }
    let tat_us = state.tat_us.saturating_sub(give_back);
    (tat_us > now_us).then_some(GcraState { tat_us })
}

/// Once now passes TAT the key is as good as new.
pub fn expires_at_us(_rate: &Rate, state: &GcraState) -> u64 {
    state.tat_us
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, burst: Option<u32>) -> Rate {
        Rate::new(Algorithm::Gcra, limit, unit, 1, burst).unwrap()
    }

    #[test]
    fn exactly_burst_from_idle_with_burst_equal_to_limit() {
        let rate = rate(10, Unit::Second, None);
        let t = rate.emission_interval_us();
        assert_eq!(t, 100_000);
        let mut state: Option<GcraState> = None;
        for taken in 1..=10u64 {
            assert_eq!(
                decide(&rate, &mut state, T0, 1),
                Verdict {
                    admitted: true,
                    remaining: (10 - taken) as u32,
                    reset_after_us: taken * t,
                    counted_when_vetoed: false,
                }
            );
        }
        let full = state.unwrap();
        assert_eq!(full.tat_us, T0 + 10 * t);
        assert_eq!(
            decide(&rate, &mut state, T0, 1),
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: t,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, Some(full), "a denied request changes nothing");
        assert_retry_exact(&rate, &full, T0, 1);
        assert!(decide(&rate, &mut state, T0 + t, 1).admitted);
    }

    #[test]
    fn exactly_burst_from_idle_with_burst_different_from_limit() {
        for burst in [1, 3, 25, 1000] {
            let rate = rate(10, Unit::Second, Some(burst));
            let mut state: Option<GcraState> = None;
            for _ in 0..burst {
                assert!(decide(&rate, &mut state, T0, 1).admitted);
            }
            let denied = decide(&rate, &mut state, T0, 1);
            assert!(!denied.admitted, "burst {burst}");
            assert_eq!(denied.reset_after_us, 100_000);
            assert_retry_exact(&rate, &state.unwrap(), T0, 1);
            let mut state: Option<GcraState> = None;
            assert!(decide(&rate, &mut state, T0, u64::from(burst)).admitted);
            assert!(!decide(&rate, &mut state, T0, 1).admitted);
            let mut state: Option<GcraState> = None;
            assert!(!decide(&rate, &mut state, T0, u64::from(burst) + 1).admitted);
        }
    }

    #[test]
    fn emission_interval_rounds_up_and_burst_stays_exact() {
        // 3 per second: T = 333 334 µs (rounded up, never faster than the rate).
        let rate = rate(3, Unit::Second, None);
        let t = rate.emission_interval_us();
        assert_eq!(t, 333_334);
        let mut state: Option<GcraState> = None;
        for _ in 0..3 {
            assert!(decide(&rate, &mut state, T0, 1).admitted);
        }
        let denied = decide(&rate, &mut state, T0, 1);
        assert_eq!(
            denied,
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: t,
                counted_when_vetoed: false,
            }
        );
        assert_retry_exact(&rate, &state.unwrap(), T0, 1);
    }

    #[test]
    fn retry_after_is_exact_for_multi_hit_requests() {
        let rate = rate(10, Unit::Second, Some(5));
        let t = rate.emission_interval_us();
        let mut state: Option<GcraState> = None;
        assert!(decide(&rate, &mut state, T0, 5).admitted);
        let full = state.unwrap();
        for hits in 1..=5u64 {
            let denied = evaluate(&rate, Some(&full), T0, hits);
            assert_eq!(denied.reset_after_us, hits * t);
            assert_retry_exact(&rate, &full, T0, hits);
            assert_retry_exact(&rate, &full, T0 + 12_345, hits);
        }
    }

    #[test]
    fn remaining_and_reset_with_partial_debt() {
        let rate = rate(10, Unit::Second, None);
        let state = commit(&rate, None, T0, 10);
        let now = T0 + 150_000; // debt 850 000 of 1 000 000
        assert_eq!(
            evaluate(&rate, Some(&state), now, 0),
            Verdict {
                admitted: true,
                remaining: 1,
                reset_after_us: 850_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(
            evaluate(&rate, Some(&state), now, 1),
            Verdict {
                admitted: true,
                remaining: 0,
                reset_after_us: 950_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(
            evaluate(&rate, Some(&state), now, 2),
            Verdict {
                admitted: false,
                remaining: 1,
                reset_after_us: 50_000,
                counted_when_vetoed: false,
            }
        );
        assert_retry_exact(&rate, &state, now, 2);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(2, Unit::Second, None);
        let mut state: Option<GcraState> = None;
        assert_eq!(
            decide(&rate, &mut state, T0, 0),
            Verdict {
                admitted: true,
                remaining: 2,
                reset_after_us: 0,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 2);
        let before = state;
        let v = decide(&rate, &mut state, T0 + 1, 0);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_us, S - 1);
        assert_eq!(state, before);
    }

    #[test]
    fn huge_hits_are_denied_without_overflow() {
        let rate = rate(10, Unit::Second, Some(4));
        let mut state: Option<GcraState> = None;
        for hits in [5, u64::MAX] {
            assert_eq!(
                decide(&rate, &mut state, T0, hits),
                Verdict {
                    admitted: false,
                    remaining: 4,
                    reset_after_us: 0,
                    counted_when_vetoed: false,
                }
            );
            assert!(!evaluate(&rate, None, T0, hits).admitted);
        }
        assert!(decide(&rate, &mut state, T0, 3).admitted);
        assert_eq!(
            decide(&rate, &mut state, T0 + 50_000, u64::MAX),
            Verdict {
                admitted: false,
                remaining: 1,
                reset_after_us: 250_000,
                counted_when_vetoed: false,
            }
        );
        // The largest burst and limit a rate allows.
        let rate = Rate::new(Algorithm::Gcra, u32::MAX, Unit::Day, 1, Some(u32::MAX)).unwrap();
        let mut state: Option<GcraState> = None;
        assert!(decide(&rate, &mut state, T0, u64::from(u32::MAX)).admitted);
        assert!(!decide(&rate, &mut state, T0, u64::MAX).admitted);
        assert!(!decide(&rate, &mut state, T0, 1).admitted);
    }

    #[test]
    fn expires_at_tat_and_is_then_like_absent() {
        let rate = rate(10, Unit::Second, None);
        let state = commit(&rate, None, T0, 4);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + 400_000);
        assert_ne!(
            evaluate(&rate, Some(&state), expiry - 1, 10),
            evaluate(&rate, None, expiry - 1, 10)
        );
        for now in [expiry, expiry + 1, expiry + 3 * S] {
            for hits in [0, 1, 10, 11] {
                assert_eq!(
                    evaluate(&rate, Some(&state), now, hits),
                    evaluate(&rate, None, now, hits)
                );
            }
        }
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::Gcra, 0x6C7A_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::Gcra, 0x6C7A_0002, Span::Random);
    }

    #[test]
    fn a_refund_keeps_the_emission_of_the_round_trip() {
        let rate = rate(10, Unit::Second, None);
        let t = rate.emission_interval_us();
        let debt = GcraState { tat_us: T0 + 3 * t };
        let reserved = commit(&rate, Some(debt), T0, 4);
        assert_eq!(refund(&rate, Some(reserved), T0, T0, 4, 0), Some(debt));
        // 30 ms later the 4 hits give back 4·T − 30 ms: stricter than never reserving by 30 ms.
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 + 30_000, 4, 0),
            Some(GcraState {
                tat_us: debt.tat_us + 30_000
            })
        );
        // Once 4·T has passed there is nothing left to give back.
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 + 4 * t, 4, 0),
            Some(reserved)
        );
        // A clock behind the reservation's refunds everything.
        assert_eq!(refund(&rate, Some(reserved), T0, T0 - 5, 4, 0), Some(debt));
        // From idle, a refund one round trip later is a full bucket: the counter is deleted.
        let idle = commit(&rate, None, T0, 4);
        assert_eq!(refund(&rate, Some(idle), T0, T0 + 30_000, 4, 0), None);
        assert_eq!(refund(&rate, None, T0, T0 + 30_000, 4, 0), None);
    }

    #[test]
    fn a_commit_at_the_refund_instant_reaches_the_bound_exactly() {
        // Idle, 4 reserved at T0, 5 more admitted at T0 + 50 ms, refunded then: without the
        // reservation the 5 would have started from T0 + 50 ms, which is what the refund gives.
        let rate = rate(10, Unit::Second, None);
        let (t0, t1) = (T0, T0 + 50_000);
        let with = commit(&rate, Some(commit(&rate, None, t0, 4)), t1, 5);
        let without = commit(&rate, None, t1, 5);
        assert_eq!(refund(&rate, Some(with), t0, t1, 4, 0), Some(without));
    }

    #[test]
    fn a_debt_that_outlasts_the_round_trip_is_refunded_exactly() {
        // 3·T of debt before 4 hits reserved at T0; refunded 30 ms later, with 5 more admitted in
        // between: the same TAT as if only the 5 had come.
        let rate = rate(10, Unit::Second, None);
        let t = rate.emission_interval_us();
        let debt = GcraState { tat_us: T0 + 3 * t };
        let reserved = commit(&rate, Some(debt), T0, 4);
        let later = commit(&rate, Some(reserved), T0 + 20_000, 5);
        let without = commit(&rate, Some(debt), T0 + 20_000, 5);
        assert_eq!(
            refund(&rate, Some(later), T0, T0 + 30_000, 4, 3 * t),
            Some(without)
        );
        // Of a debt shorter than the round trip, only what the round trip outlasted is kept.
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 + 30_000, 4, 10_000),
            Some(GcraState {
                tat_us: debt.tat_us + 20_000
            })
        );
    }

    #[test]
    fn a_refund_leaves_a_worthless_tat_alone() {
        let rate = rate(10, Unit::Second, None);
        let old = GcraState { tat_us: T0 };
        assert_eq!(refund(&rate, Some(old), T0 - S, T0, 4, 0), Some(old));
        assert_eq!(refund(&rate, Some(old), T0 - S, T0 + 1, 4, 0), Some(old));
    }
}
