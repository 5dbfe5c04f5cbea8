//! The settings of `serve --help-all`'s "Redis keys" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &KEY_FORMAT,
    &KEY_FORMAT_UNTIL,
    &REDIS_KEY_PREFIX,
    &EXPIRATION_JITTER_MAX_SECONDS,
    &STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT,
];

pub const KEY_FORMAT: Setting = Setting {
    flag: "key-format",
    variable: "RATELIMITD_KEY_FORMAT",
    group: Group::RedisKeys,
    essential: false,
    default: Value::Text("ratelimitd"),
    drop_in_default: Some("envoyproxy"),
    upstream: Upstream::Derived(&[]),
    help: "Key format of `fixed_window` counters in Redis: ratelimitd (its own injective keys, \
        decided all or nothing) or envoyproxy (exactly the keys, increments and expiry \
        envoyproxy/ratelimit writes, so both share one count; needs Redis). Other algorithms \
        always keep ratelimitd's keys.",
};

pub const KEY_FORMAT_UNTIL: Setting = Setting {
    flag: "key-format-until",
    variable: "RATELIMITD_KEY_FORMAT_UNTIL",
    group: Group::RedisKeys,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "With --key-format envoyproxy: the instant (RFC 3339, `2026-12-10T00:00:00Z`) from \
        which each fixed-window limit moves to ratelimitd's own keys, at its first window starting \
        then or later, so no count is reset or split: give every replica the same instant, in the \
        future, then drop both flags once the longest window has passed (docs/migration.md).",
};

pub const REDIS_KEY_PREFIX: Setting = Setting {
    flag: "redis-key-prefix",
    variable: "RATELIMITD_REDIS_KEY_PREFIX",
    group: Group::RedisKeys,
    essential: false,
    default: Value::Text(""),
    drop_in_default: None,
    upstream: Upstream::Variable("CACHE_KEY_PREFIX", Convert::Same),
    help: "Prepended to every Redis key ratelimitd writes, in both formats \
        (envoyproxy/ratelimit's CACHE_KEY_PREFIX); at most 128 bytes, without `{` or `}`.",
};

pub const EXPIRATION_JITTER_MAX_SECONDS: Setting = Setting {
    flag: "expiration-jitter-max-seconds",
    variable: "RATELIMITD_EXPIRATION_JITTER_MAX_SECONDS",
    group: Group::RedisKeys,
    essential: false,
    default: Value::Text("0"),
    drop_in_default: Some("300"),
    upstream: Upstream::Variable("EXPIRATION_JITTER_MAX_SECONDS", Convert::Same),
    help: "envoyproxy-format keys: each write sets the TTL to the window plus a random number \
        of seconds in [0, N) (envoyproxy/ratelimit's EXPIRATION_JITTER_MAX_SECONDS; 0: none).",
};

pub const STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT: Setting = Setting {
    flag: "stop-cache-key-increment-when-overlimit",
    variable: "RATELIMITD_STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT",
    group: Group::RedisKeys,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT", Convert::Bool),
    help: "envoyproxy-format keys: a denied request counts its hits only at the descriptors it \
        is over the limit of, instead of at every descriptor (envoyproxy/ratelimit's \
        STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT).",
};
