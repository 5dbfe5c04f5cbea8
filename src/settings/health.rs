//! The settings of `serve --help-all`'s "Health" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};
use crate::store::FailureHealthSettings;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &HEALTH_FOLLOWS_STORE,
    &HEALTH_FAILURE_WINDOW,
    &HEALTH_FAILURE_MIN_CALLS,
    &HEALTH_FAILURE_RATIO,
];

pub const HEALTH_FOLLOWS_STORE: Setting = Setting {
    flag: "health-follows-store",
    variable: "RATELIMITD_HEALTH_FOLLOWS_STORE",
    group: Group::Health,
    essential: false,
    default: Value::Text("true"),
    drop_in_default: Some("false"),
    upstream: Upstream::Variable("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", Convert::Bool),
    help: "Whether health follows the store at all: NOT_SERVING while Redis does not answer its \
        probe (PING) or while most calls fail (`--health-failure-*`). With `false`, health says \
        only whether the process serves, whatever Redis does (envoyproxy/ratelimit's default, \
        REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false), so a liveness probe never restarts pods \
        during a Redis outage; calls still fail as `--on-store-error` says.",
};

pub const HEALTH_FAILURE_WINDOW: Setting = Setting {
    flag: "health-failure-window",
    variable: "RATELIMITD_HEALTH_FAILURE_WINDOW",
    group: Group::Health,
    essential: false,
    default: Value::Text("10s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "How far back store calls are counted for health, in whole seconds (`0s` turns the \
        rule off: health then follows only the store's probe, Redis PING).",
};

pub const HEALTH_FAILURE_MIN_CALLS: Setting = Setting {
    flag: "health-failure-min-calls",
    variable: "RATELIMITD_HEALTH_FAILURE_MIN_CALLS",
    group: Group::Health,
    essential: false,
    default: Value::Of(|| FailureHealthSettings::DEFAULT_MIN_CALLS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Fewest store calls in the window for their failures to turn health NOT_SERVING.",
};

pub const HEALTH_FAILURE_RATIO: Setting = Setting {
    flag: "health-failure-ratio",
    variable: "RATELIMITD_HEALTH_FAILURE_RATIO",
    group: Group::Health,
    essential: false,
    default: Value::Of(|| FailureHealthSettings::DEFAULT_MAX_FAILURE_RATIO.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Share of failed store calls in the window (errors, timeouts, lost connections; not \
        denials) at or above which health is NOT_SERVING.",
};
