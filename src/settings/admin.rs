//! The settings of `serve --help-all`'s "Admin actions" group.

use super::setting::{Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[&ADMIN_TOKEN_FILE];

pub const ADMIN_TOKEN_FILE: Setting = Setting {
    flag: "admin-token-file",
    variable: "RATELIMITD_ADMIN_TOKEN_FILE",
    group: Group::Admin,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A file holding the bearer token POST /counters/reset requires (at least 16 visible \
        ASCII characters, surrounding whitespace ignored), read again when it changes. Without it, \
        counter resets are off (403).",
};
