//! The settings of `serve --help-all`'s "Top limited values" group.

use super::setting::{Group, Setting, Upstream, Value};
use crate::service::top_values::TopSettings;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &TOP_VALUES,
    &TOP_MAX_RULES,
    &TOP_SHOW_VALUES,
    &TOP_HASH_KEY_FILE,
];

pub const TOP_VALUES: Setting = Setting {
    flag: "top-values",
    variable: "RATELIMITD_TOP_VALUES",
    group: Group::TopValues,
    essential: false,
    default: Value::Of(|| (TopSettings::DEFAULT_VALUES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Values GET /top keeps per rule, minute and ranking (hits, denied), and shows per \
        ranking: the k of its Space-Saving summaries; a count is off by at most the window's total \
        / k.",
};

pub const TOP_MAX_RULES: Setting = Setting {
    flag: "top-max-rules",
    variable: "RATELIMITD_TOP_MAX_RULES",
    group: Group::TopValues,
    essential: false,
    default: Value::Of(|| (TopSettings::DEFAULT_MAX_RULES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most rules GET /top tracks (0, the default: none, /top is off); rules first hit \
        beyond it are not tracked, and counted as `untracked_rules`.",
};

pub const TOP_SHOW_VALUES: Setting = Setting {
    flag: "top-show-values",
    variable: "RATELIMITD_TOP_SHOW_VALUES",
    group: Group::TopValues,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Show the descriptor values of every rule on GET /top (they can be personal data); \
        without it only rules with `detailed_metric` show them, the others only a keyed hash.",
};

pub const TOP_HASH_KEY_FILE: Setting = Setting {
    flag: "top-hash-key-file",
    variable: "RATELIMITD_TOP_HASH_KEY_FILE",
    group: Group::TopValues,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A file holding the key of GET /top's hashes (at least 16 bytes, surrounding \
        whitespace ignored): replicas given the same key hash a value alike. Without it, a random \
        key per process.",
};
