//! Fair shares: one global limit of L requests per second split among the Envoys reporting a
//! bucket, by their recent demand.
//!
//! The split is max-min fair (water-filling) over each Envoy's claim:
//!
//! - An Envoy's claim is its smoothed demand ([`super::demand::Demand`]); a newcomer, whose
//!   reports have not yet covered any time, claims an equal share L/n. Every claim is raised to
//!   the floor `floor_fraction × L/n`, so that an Envoy whose measured demand is small (it just
//!   arrived, or was idle) can still admit some requests before its next report shows more.
//! - When the claims add up to L or more, the water level λ is the largest value with
//!   Σ min(claimᵢ, λ) ≤ L: Envoys claiming less than λ get their claim, the others get λ each,
//!   and the shares add up to L.
//! - When the claims add up to less than L, each Envoy gets its claim plus an equal part of what
//!   is left, so the shares still add up to L (an Envoy whose demand grows has headroom before
//!   its next report).
//!
//! So one Envoy alone gets all of L; an Envoy going idle falls to the floor and its share goes to
//! the others; the shares never add up to more than L (floors included: with a floor fraction of
//! at most 1 they always fit, and the sum is scaled down should rounding push it over).

/// The default floor: a tenth of an equal share.
pub const DEFAULT_FLOOR_FRACTION: f64 = 0.1;

/// The shares of `limit_per_second` for Envoys whose demands (requests per second; `None` for a
/// newcomer) are `demands`, in the same order. `floor_fraction` is clamped to `0..=1`; negative
/// or non-finite demands count as 0, a non-finite or negative limit as 0.
pub fn fair_shares(
    limit_per_second: f64,
    demands: &[Option<f64>],
    floor_fraction: f64,
) -> Vec<f64> {
    let n = demands.len();
    let limit = if limit_per_second.is_finite() && limit_per_second > 0.0 {
        limit_per_second
    } else {
        0.0
    };
    if n == 0 || limit == 0.0 {
        return vec![0.0; n];
    }
    let equal = limit / n as f64;
    let fraction = if floor_fraction.is_nan() {
        0.0
    } else {
        floor_fraction.clamp(0.0, 1.0)
    };
    let floor = fraction * equal;
    let claims: Vec<f64> = demands
        .iter()
        .map(|demand| {
            let demand = match demand {
                None => equal,
                Some(rate) if rate.is_finite() && *rate > 0.0 => *rate,
                Some(rate) if *rate == f64::INFINITY => limit,
                Some(_) => 0.0,
            };
            demand.max(floor)
        })
        .collect();
    let total: f64 = claims.iter().sum();
    let mut shares = if total <= limit {
        let spare = (limit - total) / n as f64;
        claims.iter().map(|claim| claim + spare).collect()
    } else {
        water_fill(limit, &claims)
    };
    let sum: f64 = shares.iter().sum();
    if sum > limit {
        let scale = limit / sum * (1.0 - 1e-12);
        for share in &mut shares {
            *share *= scale;
        }
    }
    shares
}

/// Max-min fair allocation of `capacity` to `claims` whose sum exceeds it: the smallest claims
/// are met in full while they fit under an equal split of what remains; the rest share what
/// remains equally.
fn water_fill(capacity: f64, claims: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by(|a, b| claims[*a].total_cmp(&claims[*b]));
    let mut shares = vec![0.0; claims.len()];
    let mut remaining = capacity;
    let mut left = claims.len();
    let mut cut = claims.len();
    for (position, &index) in order.iter().enumerate() {
        let claim = claims[index];
        if claim > remaining / left as f64 {
            cut = position;
            break;
        }
        shares[index] = claim;
        remaining -= claim;
        left -= 1;
    }
    if left > 0 {
        let level = remaining.max(0.0) / left as f64;
        for &index in &order[cut..] {
            shares[index] = level;
        }
    }
    shares
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limiter::quota::demand::{Demand, DEFAULT_HALF_LIFE};
    use crate::limiter::quota::token_bucket::{token_bucket, DEFAULT_MAX_FILL_INTERVAL};

    const FLOOR: f64 = DEFAULT_FLOOR_FRACTION;

    #[track_caller]
    fn assert_close(got: &[f64], want: &[f64]) {
        assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
        for (g, w) in got.iter().zip(want) {
            assert!(
                (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                "{got:?} vs {want:?}"
            );
        }
    }

    #[test]
    fn one_envoy_alone_gets_all_of_the_limit() {
        for demand in [None, Some(0.0), Some(3.0), Some(100.0), Some(1e12)] {
            assert_close(&fair_shares(100.0, &[demand], FLOOR), &[100.0]);
        }
    }

    #[test]
    fn equal_demands_over_the_limit_split_it_equally() {
        assert_close(
            &fair_shares(100.0, &[Some(200.0), Some(200.0)], FLOOR),
            &[50.0, 50.0],
        );
    }

    #[test]
    fn small_demands_are_met_and_the_rest_is_split_max_min() {
        assert_close(
            &fair_shares(100.0, &[Some(10.0), Some(50.0), Some(200.0)], FLOOR),
            &[10.0, 45.0, 45.0],
        );
        assert_close(
            &fair_shares(90.0, &[Some(80.0), Some(20.0), Some(10.0)], FLOOR),
            &[60.0, 20.0, 10.0],
        );
    }

    #[test]
    fn demands_under_the_limit_are_met_and_the_spare_split_equally() {
        assert_close(
            &fair_shares(100.0, &[Some(10.0), Some(20.0)], FLOOR),
            &[45.0, 55.0],
        );
    }

    #[test]
    fn an_idle_envoy_keeps_the_floor_and_the_rest_goes_to_the_others() {
        assert_close(
            &fair_shares(100.0, &[Some(0.0), Some(1000.0)], FLOOR),
            &[5.0, 95.0],
        );
        assert_close(
            &fair_shares(100.0, &[Some(0.0), Some(0.0), Some(1000.0)], 0.3),
            &[10.0, 10.0, 80.0],
        );
    }

    #[test]
    fn a_newcomer_claims_an_equal_share() {
        assert_close(
            &fair_shares(100.0, &[None, Some(1000.0)], FLOOR),
            &[50.0, 50.0],
        );
        assert_close(
            &fair_shares(100.0, &[None, Some(10.0)], FLOOR),
            &[70.0, 30.0],
        );
    }

    #[test]
    fn a_zero_or_broken_limit_shares_nothing() {
        for limit in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(fair_shares(limit, &[Some(1.0), None], FLOOR), [0.0, 0.0]);
        }
        assert!(fair_shares(10.0, &[], FLOOR).is_empty());
    }

    #[test]
    fn an_envoy_going_idle_releases_its_share_with_its_next_report() {
        let period = Duration::from_secs(5);
        let limit = 100.0;
        let mut busy = Demand::new();
        let mut stopping = Demand::new();
        for _ in 0..3 {
            busy.observe(500, 500, period, DEFAULT_HALF_LIFE);
            stopping.observe(500, 500, period, DEFAULT_HALF_LIFE);
        }
        let shares = fair_shares(limit, &[busy.rate(), stopping.rate()], FLOOR);
        assert_close(&shares, &[50.0, 50.0]);
        let mut history = Vec::new();
        for _ in 0..6 {
            busy.observe(250, 750, period, DEFAULT_HALF_LIFE);
            stopping.observe(0, 0, period, DEFAULT_HALF_LIFE);
            history.push(fair_shares(limit, &[busy.rate(), stopping.rate()], FLOOR)[0]);
        }
        assert!(
            history.windows(2).all(|pair| pair[0] <= pair[1]),
            "the busy Envoy's share only grows: {history:?}"
        );
        assert_close(&history[..1], &[limit - 5.0]);
        assert!(
            history[5] <= limit - 5.0 + 1e-9,
            "the floor stays: {history:?}"
        );
    }

    /// A small deterministic generator (64-bit LCG, high bits out), so failures reproduce.
    struct Lcg(u64);

    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }

        fn below(&mut self, bound: u64) -> u64 {
            self.next() % bound
        }

        /// A value spread over many orders of magnitude: 10^-3 to 10^6.
        fn magnitude(&mut self) -> f64 {
            let exponent = self.below(10_000) as f64 / 10_000.0 * 9.0 - 3.0;
            10f64.powf(exponent)
        }
    }

    #[test]
    fn shares_never_add_up_to_more_than_the_limit() {
        let mut rng = Lcg(0x5eed);
        for case in 0..20_000 {
            let limit = rng.magnitude();
            let n = 1 + rng.below(if case % 10 == 0 { 500 } else { 20 }) as usize;
            let demands: Vec<Option<f64>> = (0..n)
                .map(|_| match rng.below(8) {
                    0 => None,
                    1 => Some(0.0),
                    2 => Some(limit * 100.0),
                    _ => Some(rng.magnitude()),
                })
                .collect();
            let fraction = [0.0, 0.1, 0.5, 1.0, 2.0][rng.below(5) as usize];
            let shares = fair_shares(limit, &demands, fraction);
            let sum: f64 = shares.iter().sum();
            let context =
                || format!("case {case}: L={limit} f={fraction} {demands:?} -> {shares:?}");
            assert!(sum <= limit, "sum {sum} > L: {}", context());
            assert!(shares.iter().all(|s| *s >= 0.0), "{}", context());
            let floor = fraction.min(1.0) * limit / n as f64;
            assert!(
                shares.iter().all(|s| *s >= floor * (1.0 - 1e-9)),
                "floor {floor}: {}",
                context()
            );
            if n == 1 {
                assert!((shares[0] - limit).abs() <= limit * 1e-9, "{}", context());
            }
            // Work-conserving: the whole limit is handed out.
            assert!(sum >= limit * (1.0 - 1e-9), "sum {sum}: {}", context());
            // Max-min: a larger claim never gets a smaller share.
            let claim = |d: &Option<f64>| d.unwrap_or(limit / n as f64).max(floor);
            let mut by_claim: Vec<usize> = (0..n).collect();
            by_claim.sort_by(|a, b| claim(&demands[*a]).total_cmp(&claim(&demands[*b])));
            assert!(
                by_claim
                    .windows(2)
                    .all(|pair| shares[pair[0]] <= shares[pair[1]] * (1.0 + 1e-9)),
                "{}",
                context()
            );
            // The token buckets built from the shares stay under the limit too.
            let rates: f64 = shares
                .iter()
                .filter_map(|share| token_bucket(*share, DEFAULT_MAX_FILL_INTERVAL))
                .map(|bucket| bucket.rate())
                .sum();
            assert!(rates <= limit, "token rates {rates}: {}", context());
        }
    }
}
