//! The settings of `serve --help-all`'s "Telemetry" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};
use crate::service::metrics::DEFAULT_MAX_RULE_SERIES;
use crate::service::metrics::DEFAULT_NEAR_LIMIT_RATIO;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &LOG_FORMAT,
    &LOG_LEVEL,
    &NEAR_LIMIT_RATIO,
    &METRICS_MAX_RULE_SERIES,
];

pub const LOG_FORMAT: Setting = Setting {
    flag: "log-format",
    variable: "RATELIMITD_LOG_FORMAT",
    group: Group::Telemetry,
    essential: true,
    default: Value::Text("text"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["LOG_FORMAT"]),
    help: "Log format.",
};

pub const LOG_LEVEL: Setting = Setting {
    flag: "log-level",
    variable: "RATELIMITD_LOG_LEVEL",
    group: Group::Telemetry,
    essential: true,
    default: Value::Text("info"),
    drop_in_default: Some("warn"),
    upstream: Upstream::Derived(&["LOG_LEVEL"]),
    help: "Log level of ratelimitd's own lines (`debug`: one line per decision), the libraries \
        staying at `info` (or quieter, with `warn` or `error`); logrus's names (`warning`, \
        `fatal`, `panic`) too. Or a tracing-subscriber filter of known targets (`debug,h2=trace`, \
        `info,ratelimitd::decisions=debug`); anything else is refused.",
};

pub const NEAR_LIMIT_RATIO: Setting = Setting {
    flag: "near-limit-ratio",
    variable: "RATELIMITD_NEAR_LIMIT_RATIO",
    group: Group::Telemetry,
    essential: false,
    default: Value::Of(|| DEFAULT_NEAR_LIMIT_RATIO.to_string()),
    drop_in_default: None,
    upstream: Upstream::Variable("NEAR_LIMIT_RATIO", Convert::Same),
    help: "Share of a limit's capacity above which admitted hits count as near the limit in the \
        `ratelimitd_near_limit_total` metric (envoyproxy/ratelimit's NEAR_LIMIT_RATIO).",
};

pub const METRICS_MAX_RULE_SERIES: Setting = Setting {
    flag: "metrics-max-rule-series",
    variable: "RATELIMITD_METRICS_MAX_RULE_SERIES",
    group: Group::Telemetry,
    essential: false,
    default: Value::Of(|| DEFAULT_MAX_RULE_SERIES.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most series of the per-rule families (`ratelimitd_total_hits_total` and the others) \
        on /metrics: those with hits first, the hits of any further one under \
        `domain=\"_other\",rule=\"_other\"`, rules still at zero beyond it not shown.",
};
