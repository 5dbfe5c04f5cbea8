//! The label value under which what a cap leaves out is counted.

/// The label value of the hits beyond a cap: the `descriptor` label beyond
/// [`super::DETAILED_METRIC_CAP`], the `domain` of unknown domains beyond
/// [`super::UNKNOWN_DOMAIN_CAP`], the `rule` series beyond `--metrics-max-rule-series`.
pub const OVERFLOW_LABEL: &str = "_other";
