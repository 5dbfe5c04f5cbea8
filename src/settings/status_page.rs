//! The settings of `serve --help-all`'s "Status page" group.

use super::setting::{Group, Setting, Upstream, Value};
use crate::service::status_page::StatusPageSettings;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[&STATUS_PAGE_SAMPLE_INTERVAL, &STATUS_PAGE_MAX_RULES];

pub const STATUS_PAGE_SAMPLE_INTERVAL: Setting = Setting {
    flag: "status-page-sample-interval",
    variable: "RATELIMITD_STATUS_PAGE_SAMPLE_INTERVAL",
    group: Group::StatusPage,
    essential: false,
    default: Value::Text("10s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "How often the status page samples the per-rule counters for its charts (1s to 10m); \
        it keeps 90 samples, 15 minutes at the default.",
};

pub const STATUS_PAGE_MAX_RULES: Setting = Setting {
    flag: "status-page-max-rules",
    variable: "RATELIMITD_STATUS_PAGE_MAX_RULES",
    group: Group::StatusPage,
    essential: false,
    default: Value::Of(|| (StatusPageSettings::DEFAULT_MAX_RULES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most rules, rule charts, top rules and RLQS buckets GET /status.json lists (1 to \
        1000).",
};
