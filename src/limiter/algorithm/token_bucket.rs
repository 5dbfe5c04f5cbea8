//! Token bucket: capacity B, refilled at L tokens per window W, continuously.
//!
//! Tokens are an `f64` because refill is fractional. Every operation is one IEEE operation that the
//! Lua script performs identically, so both stores agree to the bit. From idle the bucket holds
//! exactly B and admitting subtracts whole numbers, so exactly B requests pass at once.

use super::Verdict;
use crate::limiter::rate::Rate;

/// Tokens left at `last_us`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TokenBucketState {
    pub tokens: f64,
    pub last_us: u64,
}

/// Tokens available at `now_us`: min(B, tokens + elapsed·L/W); a full bucket when absent.
pub fn tokens_at(rate: &Rate, state: Option<&TokenBucketState>, now_us: u64) -> f64 {
    let capacity = f64::from(rate.burst());
    match state {
        None => capacity,
        Some(s) => {
            let elapsed = now_us.saturating_sub(s.last_us) as f64;
            let refilled = s.tokens + elapsed * f64::from(rate.limit()) / rate.window_us() as f64;
            refilled.min(capacity)
        }
    }
}

/// µs to refill `missing` tokens, rounded up.
fn refill_time_us(rate: &Rate, missing: f64) -> u64 {
    if missing <= 0.0 {
        return 0;
    }
    (missing * rate.window_us() as f64 / f64::from(rate.limit())).ceil() as u64
}

/// Admits when tokens ≥ n; remaining floor(tokens after); resets when full / when n tokens exist.
pub fn evaluate(rate: &Rate, state: Option<&TokenBucketState>, now_us: u64, hits: u64) -> Verdict {
    let capacity = f64::from(rate.burst());
    let tokens = tokens_at(rate, state, now_us);
    let wanted = hits as f64;
    if hits <= u64::from(rate.burst()) && tokens >= wanted {
        let after = tokens - wanted;
        Verdict {
            admitted: true,
            remaining: after.floor() as u32,
            reset_after_us: refill_time_us(rate, capacity - after),
            counted_when_vetoed: false,
        }
    } else {
        let missing = if hits > u64::from(rate.burst()) {
            capacity - tokens
        } else {
            wanted - tokens
        };
        Verdict {
            admitted: false,
            remaining: tokens.floor() as u32,
            reset_after_us: refill_time_us(rate, missing),
            counted_when_vetoed: false,
        }
    }
}

/// Refills to `now_us` and takes `hits` tokens.
pub fn commit(
    rate: &Rate,
    state: Option<TokenBucketState>,
    now_us: u64,
    hits: u64,
) -> TokenBucketState {
    let tokens = tokens_at(rate, state.as_ref(), now_us);
    TokenBucketState {
        tokens: tokens - hits as f64,
        last_us: now_us,
    }
}

/// Charges a lease of `hits` granted at `now_us` and lasting `period_us`: the GCRA lease charge
/// (see `algorithm::lease`) on the bucket's deficit. With F the instant the bucket is full again,
/// F := max(F, now + period) + n·W/L, which at `now` is min(tokens, B − period·L/W) − n tokens (the
/// bucket may go below zero: a debt the refill pays first). Call only when `evaluate` admits `hits`
/// at `now_us`. The f64 operations are those of the script, in the same order.
pub fn lease(
    rate: &Rate,
    state: Option<&TokenBucketState>,
    now_us: u64,
    hits: u64,
    period_us: u64,
) -> TokenBucketState {
    let tokens = tokens_at(rate, state, now_us);
    let ceiling = f64::from(rate.burst())
        - period_us as f64 * f64::from(rate.limit()) / rate.window_us() as f64;
    TokenBucketState {
        tokens: tokens.min(ceiling) - hits as f64,
        last_us: now_us,
    }
}

/// Takes back `hits` committed at t0 = `committed_at_us` on a bucket that was `debt_before_us`
/// from full just before the reservation: refills to t1 = max(`now_us`, t0) as [`evaluate`] does,
/// then adds n − max(0, t1 − t0 − debt)·L/W tokens when that is positive; `None` (delete) when the
/// bucket is then full. A bucket already full at now is left as it is.
///
/// Never more permissive: this is [`super::gcra::refund`] on the bucket's deficit. Let F be the
/// instant the bucket is full again (tokens = B − (F − t)·L/W before it): a commit of m at s maps F
/// to max(F, s) + m·W/L, the GCRA step with T = W/L, and adding k tokens at t1 moves F back by
/// k·W/L, so the refund is TAT − max(0, n·T − max(0, t1 − t0 − debt)) on F, with the same proof
/// (a debt taken from the reservation's verdict is rounded down, see
/// [`super::debt_before_us`], which only keeps more). The f64
/// operations are those of the script, in the same order (identical results); against the exact
/// counterfactual they err by rounding only (an ulp of B per operation).
pub fn refund(
    rate: &Rate,
    state: Option<TokenBucketState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
    debt_before_us: u64,
) -> Option<TokenBucketState> {
    let state = state?;
    if expires_at_us(rate, &state) <= now_us {
        return Some(state);
    }
    let at = now_us.max(committed_at_us);
    let kept = (at - committed_at_us).saturating_sub(debt_before_us) as f64;
    let give_back = hits as f64 - kept * f64::from(rate.limit()) / rate.window_us() as f64;
    if give_back <= 0.0 {
        return Some(state);
    }
    let tokens = tokens_at(rate, Some(&state), at) + give_back;
    if tokens >= f64::from(rate.burst()) {
        return None;
    }
    Some(TokenBucketState {
        tokens,
        last_us: state.last_us.max(at),
    })
}

/// A full bucket is the same as an absent one. Saturates: refilling a large burst at a slow rate
/// can take longer than `u64::MAX` µs (`refill_time_us` then saturates too).
pub fn expires_at_us(rate: &Rate, state: &TokenBucketState) -> u64 {
    state
        .last_us
        .saturating_add(refill_time_us(rate, f64::from(rate.burst()) - state.tokens))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, burst: Option<u32>) -> Rate {
        Rate::new(Algorithm::TokenBucket, limit, unit, 1, burst).unwrap()
    }

    #[test]
    fn exactly_burst_from_idle_with_burst_equal_to_limit() {
        let rate = rate(10, Unit::Second, None);
        let mut state: Option<TokenBucketState> = None;
        for taken in 1..=10u64 {
            assert_eq!(
                decide(&rate, &mut state, T0, 1),
                Verdict {
                    admitted: true,
                    remaining: (10 - taken) as u32,
                    reset_after_us: taken * 100_000,
                    counted_when_vetoed: false,
                }
            );
        }
        let before = state;
        assert_eq!(
            decide(&rate, &mut state, T0, 1),
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: 100_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, before, "a denied request changes nothing");
        // One token every 100 ms, exactly.
        assert!(!decide(&rate, &mut state, T0 + 99_999, 1).admitted);
        assert!(decide(&rate, &mut state, T0 + 100_000, 1).admitted);
        assert!(!decide(&rate, &mut state, T0 + 100_000, 1).admitted);
    }

    #[test]
    fn exactly_burst_from_idle_with_burst_different_from_limit() {
        for burst in [1, 3, 25, 1000] {
            let rate = rate(10, Unit::Second, Some(burst));
            let mut state: Option<TokenBucketState> = None;
            for _ in 0..burst {
                assert!(decide(&rate, &mut state, T0, 1).admitted);
            }
            let denied = decide(&rate, &mut state, T0, 1);
            assert!(!denied.admitted, "burst {burst}");
            assert_eq!(denied.reset_after_us, 100_000);
            // All at once as one request, too.
            let mut state: Option<TokenBucketState> = None;
            assert!(decide(&rate, &mut state, T0, u64::from(burst)).admitted);
            assert!(!decide(&rate, &mut state, T0, 1).admitted);
            let mut state: Option<TokenBucketState> = None;
            assert!(!decide(&rate, &mut state, T0, u64::from(burst) + 1).admitted);
        }
    }

    #[test]
    fn retry_after_is_exact_for_whole_token_intervals() {
        let rate = rate(10, Unit::Second, Some(5));
        let mut state: Option<TokenBucketState> = None;
        assert!(decide(&rate, &mut state, T0, 5).admitted);
        let empty = state.unwrap();
        for hits in 1..=5u64 {
            let denied = evaluate(&rate, Some(&empty), T0, hits);
            assert!(!denied.admitted);
            assert_eq!(denied.reset_after_us, hits * 100_000);
            let at = T0 + denied.reset_after_us;
            assert!(!evaluate(&rate, Some(&empty), at - 1, hits).admitted);
            assert!(evaluate(&rate, Some(&empty), at, hits).admitted);
        }
    }

    #[test]
    fn retry_after_with_fractional_refill_is_within_1us() {
        // 7 per minute: a token every 8 571 428.57 µs.
        let rate = rate(7, Unit::Minute, Some(3));
        let mut state: Option<TokenBucketState> = None;
        let mut now = T0;
        let mut checked = 0;
        for step in 0..200u64 {
            now += (step * 7_919_993) % 9_000_001;
            let hits = 1 + step % 3;
            let wrapped = state;
            let v = decide(&rate, &mut state, now, hits);
            if !v.admitted {
                assert_retry_within_1us(&rate, wrapped.as_ref().unwrap(), now, hits);
                checked += 1;
            }
        }
        assert!(checked > 20, "only {checked} denials");
    }

    #[test]
    fn remaining_is_the_floor_of_tokens_and_refill_stops_at_burst() {
        let rate = rate(10, Unit::Second, None);
        let empty = commit(&rate, None, T0, 10);
        let now = T0 + 250_000; // 2.5 tokens
        assert_eq!(
            evaluate(&rate, Some(&empty), now, 1),
            Verdict {
                admitted: true,
                remaining: 1,
                reset_after_us: 850_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(
            evaluate(&rate, Some(&empty), now, 3),
            Verdict {
                admitted: false,
                remaining: 2,
                reset_after_us: 50_000,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(tokens_at(&rate, Some(&empty), T0 + 100 * S), 10.0);
        let v = evaluate(&rate, Some(&empty), T0 + 100 * S, 10);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(2, Unit::Second, None);
        let mut state: Option<TokenBucketState> = None;
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
        assert!(v.admitted, "an empty bucket still admits a check of 0");
        assert_eq!(v.remaining, 0);
        assert_eq!(state, before);
    }

    #[test]
    fn huge_hits_are_denied_without_overflow_and_wait_for_a_full_bucket() {
        let rate = rate(10, Unit::Second, Some(4));
        let mut state: Option<TokenBucketState> = None;
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
        let v = decide(&rate, &mut state, T0, u64::MAX);
        assert_eq!(
            v,
            Verdict {
                admitted: false,
                remaining: 1,
                reset_after_us: 300_000,
                counted_when_vetoed: false,
            }
        );
    }

    #[test]
    fn expiry_is_when_the_bucket_is_full_again() {
        let rate = rate(10, Unit::Second, None);
        let state = commit(&rate, None, T0, 8);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + 800_000);
        assert!(tokens_at(&rate, Some(&state), expiry - 1) < 10.0);
        for now in [expiry, expiry + 1, expiry + 9 * S] {
            assert_eq!(tokens_at(&rate, Some(&state), now), 10.0);
            assert_eq!(
                evaluate(&rate, Some(&state), now, 3),
                evaluate(&rate, None, now, 3)
            );
        }
    }

    #[test]
    fn a_burst_that_would_take_over_100_years_to_refill_is_rejected() {
        // 1 per 100 years with a burst of 2: refilling takes 200 years, beyond the exact range.
        assert!(matches!(
            Rate::new(Algorithm::TokenBucket, 1, Unit::Year, 100, Some(2)),
            Err(crate::limiter::rate::RateError::BurstTooLong { burst: 2, .. })
        ));
        let widest = Rate::new(Algorithm::TokenBucket, 1, Unit::Year, 100, Some(1)).unwrap();
        let state = commit(&widest, None, T0, 1);
        assert_eq!(expires_at_us(&widest, &state), T0 + widest.window_us());
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::TokenBucket, 0x70CE_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::TokenBucket, 0x70CE_0002, Span::Random);
    }

    #[test]
    fn a_refund_gives_back_the_hits_less_the_refill_of_the_round_trip() {
        let rate = rate(10, Unit::Second, None);
        let partial = TokenBucketState {
            tokens: 6.0,
            last_us: T0,
        };
        let reserved = commit(&rate, Some(partial), T0, 4);
        assert_eq!(reserved.tokens, 2.0);
        assert_eq!(refund(&rate, Some(reserved), T0, T0, 4, 0), Some(partial));
        // 50 ms later: 0.5 tokens refilled, 3.5 given back, 6.0 at T0 + 50 ms (6.5 without).
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 + 50_000, 4, 0),
            Some(TokenBucketState {
                tokens: 6.0,
                last_us: T0 + 50_000
            })
        );
        // Once 4 tokens' refill has passed there is nothing left to give back.
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 + 400_000, 4, 0),
            Some(reserved)
        );
        // A clock behind the reservation's refunds everything, at the reservation's instant.
        assert_eq!(
            refund(&rate, Some(reserved), T0, T0 - 5, 4, 0),
            Some(partial)
        );
        // A full bucket is deleted, as absent.
        let idle = commit(&rate, None, T0, 4);
        assert_eq!(refund(&rate, Some(idle), T0, T0, 4, 0), None);
        assert_eq!(refund(&rate, Some(idle), T0, T0 + 100_000, 4, 0), None);
        assert_eq!(refund(&rate, None, T0, T0, 4, 0), None);
    }

    #[test]
    fn a_refund_leaves_a_full_bucket_alone() {
        let rate = rate(10, Unit::Second, None);
        let refilled = TokenBucketState {
            tokens: 9.0,
            last_us: T0,
        };
        let later = T0 + 100_000;
        assert_eq!(
            refund(&rate, Some(refilled), T0, later, 1, 0),
            Some(refilled)
        );
    }
}
