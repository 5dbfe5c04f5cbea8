//! The settings of `serve --help-all`'s "Leases for hot keys" group.

use super::setting::{Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[&CONSISTENCY, &LEASE_PERIOD];

pub const CONSISTENCY: Setting = Setting {
    flag: "consistency",
    variable: "RATELIMITD_CONSISTENCY",
    group: Group::Leases,
    essential: true,
    default: Value::Text("exact"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "The consistency of every counted rule whose rate_limit does not say `consistency:` \
        (how configurations from xDS or in envoyproxy/ratelimit's schema opt in). Under `leased`, \
        a sliding_window_log rule that does not say stays exact (not an error: a log cannot be \
        leased). The in-memory store decides every rule exactly.",
};

pub const LEASE_PERIOD: Setting = Setting {
    flag: "lease-period",
    variable: "RATELIMITD_LEASE_PERIOD",
    group: Group::Leases,
    essential: false,
    default: Value::Text("100ms"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "How long a replica holds a lease on a leased rule's counter (more than 0s, at most \
        10s): hits a replica reserved and did not use are kept from the other replicas for at most \
        this long, and a busy replica asks the store for a hot counter about once a period.",
};
