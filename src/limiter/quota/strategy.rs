//! What a bucket's rule asks of the Envoys reporting it, before it is shared among them.

use std::time::Duration;

use crate::limiter::rate::MICROS_PER_SECOND;
use crate::limiter::rules::{ConfiguredLimit, LimitKind};

/// A blanket rule: every request of the bucket allowed, or every one denied.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlanketRule {
    /// Unmatched buckets default to this, as an unmatched RLS descriptor is allowed.
    #[default]
    AllowAll,
    DenyAll,
}

/// One global limit: `limit` requests per `window`, for the sum of every Envoy reporting the
/// bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaRate {
    pub limit: u32,
    pub window: Duration,
}

impl QuotaRate {
    /// The limit as requests per second (L/W), the currency of fair shares.
    pub fn per_second(&self) -> f64 {
        let window_us = self.window.as_micros() as f64;
        if window_us <= 0.0 {
            return 0.0;
        }
        f64::from(self.limit) * MICROS_PER_SECOND as f64 / window_us
    }
}

/// What a bucket gets: a blanket rule, or a share of a global limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaStrategy {
    Blanket(BlanketRule),
    Limited(QuotaRate),
}

impl QuotaStrategy {
    /// The strategy for a bucket whose rule is `limit` (`None`: no rule matched, `unmatched`
    /// applies).
    ///
    /// `unlimited: true` → ALLOW_ALL; `requests_per_unit: 0` → DENY_ALL; a rule that never
    /// denies (`shadow_mode` or `quota_mode` on its node) → ALLOW_ALL, as RLS never denies for
    /// it either. Otherwise the rule's `requests_per_unit` per `unit × unit_multiplier`, whatever
    /// its algorithm: Envoy enforces its share with its own token bucket.
    pub fn for_rule(limit: Option<&ConfiguredLimit>, unmatched: BlanketRule) -> QuotaStrategy {
        let Some(limit) = limit else {
            return QuotaStrategy::Blanket(unmatched);
        };
        if limit.shadow_mode || limit.quota_mode {
            return QuotaStrategy::Blanket(BlanketRule::AllowAll);
        }
        match &limit.kind {
            LimitKind::Unlimited => QuotaStrategy::Blanket(BlanketRule::AllowAll),
            LimitKind::Blocked { .. } => QuotaStrategy::Blanket(BlanketRule::DenyAll),
            LimitKind::Limited(rate) => QuotaStrategy::Limited(QuotaRate {
                limit: rate.requests_per_unit,
                window: Duration::from_micros(rate.rate.window_us()),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_domain;
    use crate::limiter::quota::bucket::BucketId;
    use crate::limiter::quota::rule::find_quota;

    /// The strategy for a one-key bucket `k=v` under a rule written as `node`'s YAML fields.
    fn strategy(node: &str, unmatched: BlanketRule) -> QuotaStrategy {
        let text = format!("domain: d\ndescriptors:\n  - key: k\n{node}");
        let rules = parse_domain(Path::new("quota.yaml"), &text).expect("valid rules");
        let bucket = BucketId::new([("k", "v")]).expect("a bucket");
        let found = find_quota(&rules, &bucket);
        QuotaStrategy::for_rule(found.map(|found| found.limit.as_ref()), unmatched)
    }

    #[test]
    fn zero_denies_unlimited_allows_and_a_rate_is_shared() {
        assert_eq!(
            strategy(
                "    rate_limit: {unit: hour, requests_per_unit: 0}\n",
                BlanketRule::AllowAll
            ),
            QuotaStrategy::Blanket(BlanketRule::DenyAll)
        );
        assert_eq!(
            strategy("    rate_limit: {unlimited: true}\n", BlanketRule::DenyAll),
            QuotaStrategy::Blanket(BlanketRule::AllowAll)
        );
        let limited = strategy(
            "    rate_limit: {unit: minute, requests_per_unit: 120, unit_multiplier: 2}\n",
            BlanketRule::AllowAll,
        );
        let QuotaStrategy::Limited(rate) = limited else {
            panic!("a limited rule: {limited:?}");
        };
        assert_eq!((rate.limit, rate.window), (120, Duration::from_secs(120)));
        assert_eq!(rate.per_second(), 1.0);
    }

    #[test]
    fn an_unmatched_bucket_gets_the_blanket_rule() {
        for blanket in [BlanketRule::AllowAll, BlanketRule::DenyAll] {
            assert_eq!(
                strategy(
                    "    value: other\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
                    blanket
                ),
                QuotaStrategy::Blanket(blanket)
            );
        }
        assert_eq!(BlanketRule::default(), BlanketRule::AllowAll);
    }

    #[test]
    fn a_rule_that_never_denies_allows_all() {
        for flag in ["shadow_mode", "quota_mode"] {
            assert_eq!(
                strategy(
                    &format!("    {flag}: true\n    rate_limit: {{unit: second, requests_per_unit: 1}}\n"),
                    BlanketRule::DenyAll
                ),
                QuotaStrategy::Blanket(BlanketRule::AllowAll),
                "{flag}"
            );
        }
    }
}
