//! The settings of `serve --help-all`'s "Request limits" group.

use super::setting::{Group, Setting, Upstream, Value};
use crate::limiter::RequestBounds;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[&MAX_DESCRIPTORS, &MAX_DESCRIPTOR_ENTRIES, &MAX_ENTRY_BYTES];

pub const MAX_DESCRIPTORS: Setting = Setting {
    flag: "max-descriptors",
    variable: "RATELIMITD_MAX_DESCRIPTORS",
    group: Group::RequestBounds,
    essential: false,
    default: Value::Of(|| (RequestBounds::DEFAULT_MAX_DESCRIPTORS as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most descriptors in one request (at most 1024, the checks of one Redis call).",
};

pub const MAX_DESCRIPTOR_ENTRIES: Setting = Setting {
    flag: "max-descriptor-entries",
    variable: "RATELIMITD_MAX_DESCRIPTOR_ENTRIES",
    group: Group::RequestBounds,
    essential: false,
    default: Value::Of(|| (RequestBounds::DEFAULT_MAX_ENTRIES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most entries in one descriptor.",
};

pub const MAX_ENTRY_BYTES: Setting = Setting {
    flag: "max-entry-bytes",
    variable: "RATELIMITD_MAX_ENTRY_BYTES",
    group: Group::RequestBounds,
    essential: false,
    default: Value::Of(|| (RequestBounds::DEFAULT_MAX_ENTRY_BYTES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Longest key, and longest value, of a descriptor entry, in bytes.",
};
