//! The settings of `serve --help-all`'s "Statsd" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &STATSD_ADDR,
    &STATSD_FLUSH_INTERVAL,
    &STATSD_EXTRA_TAGS,
    &STATSD_FORMAT,
    &STATSD_MOGRIFIERS,
];

pub const STATSD_ADDR: Setting = Setting {
    flag: "statsd-addr",
    variable: "RATELIMITD_STATSD_ADDR",
    group: Group::Statsd,
    essential: false,
    default: Value::Unset,
    drop_in_default: Some("localhost:8125"),
    upstream: Upstream::Derived(&["USE_STATSD", "USE_DOG_STATSD", "STATSD_HOST", "STATSD_PORT"]),
    help: "Send envoyproxy/ratelimit's statsd stats over UDP to HOST:PORT (HOST may be a name, \
        looked up at start and again after a failure). Without it, no statsd.",
};

pub const STATSD_FLUSH_INTERVAL: Setting = Setting {
    flag: "statsd-flush-interval",
    variable: "RATELIMITD_STATSD_FLUSH_INTERVAL",
    group: Group::Statsd,
    essential: false,
    default: Value::Text("10s"),
    drop_in_default: None,
    upstream: Upstream::Variable("STATS_FLUSH_INTERVAL", Convert::Duration),
    help: "How often to send the stats (envoyproxy/ratelimit's STATS_FLUSH_INTERVAL).",
};

pub const STATSD_EXTRA_TAGS: Setting = Setting {
    flag: "statsd-extra-tags",
    variable: "RATELIMITD_STATSD_EXTRA_TAGS",
    group: Group::Statsd,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("EXTRA_TAGS", Convert::Same),
    help: "Tags added to every stat, as envoyproxy/ratelimit's EXTRA_TAGS (written into the \
        stat names as `.__K=V`, as its statsd library does; DogStatsD tags with --statsd-format \
        dogstatsd). Also in the stat names of --envoyproxy-metrics-addr.",
};

pub const STATSD_FORMAT: Setting = Setting {
    flag: "statsd-format",
    variable: "RATELIMITD_STATSD_FORMAT",
    group: Group::Statsd,
    essential: false,
    default: Value::Text("statsd"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["USE_DOG_STATSD"]),
    help: "`statsd` (plain, as lyft/gostats) or `dogstatsd` (DogStatsD tags instead of tags in \
        the names, as envoyproxy/ratelimit's USE_DOG_STATSD).",
};

pub const STATSD_MOGRIFIERS: Setting = Setting {
    flag: "statsd-mogrifiers",
    variable: "RATELIMITD_STATSD_MOGRIFIERS",
    group: Group::Statsd,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("USE_DOG_STATSD_MOGRIFIERS", Convert::Same),
    help: "DogStatsD mogrifiers, applied in this order (envoyproxy/ratelimit's \
        USE_DOG_STATSD_MOGRIFIERS): each NAME is defined by the variables \
        DOG_STATSD_MOGRIFIER_<NAME>_PATTERN, _NAME and _TAGS.",
};
