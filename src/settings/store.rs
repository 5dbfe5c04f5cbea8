//! The settings of `serve --help-all`'s "Store and Redis" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};
use crate::store::DenyCacheSettings;
use crate::store::RedisSettings;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &REDIS_URL,
    &REDIS_CLUSTER,
    &REDIS_SENTINEL,
    &REDIS_USER,
    &REDIS_PASSWORD,
    &REDIS_TLS,
    &REDIS_SENTINEL_USER,
    &REDIS_SENTINEL_PASSWORD,
    &REDIS_WAIT_REPLICAS,
    &REDIS_TIMEOUT,
    &REDIS_STARTUP_WAIT,
    &REDIS_STARTUP_INITIAL_INTERVAL,
    &REDIS_STARTUP_MAX_INTERVAL,
    &REDIS_POOL_SIZE,
    &REDIS_TLS_CA,
    &REDIS_TLS_SYSTEM_ROOTS,
    &REDIS_TLS_CLIENT_CERT,
    &REDIS_TLS_CLIENT_KEY,
    &ON_STORE_ERROR,
    &DENY_CACHE,
    &DENY_CACHE_SIZE,
];

pub const REDIS_URL: Setting = Setting {
    flag: "redis-url",
    variable: "RATELIMITD_REDIS_URL",
    group: Group::Store,
    essential: true,
    default: Value::Unset,
    drop_in_default: Some("unix:///var/run/nutcracker/ratelimit.sock"),
    upstream: Upstream::Derived(&[
        "REDIS_TYPE",
        "REDIS_SOCKET_TYPE",
        "REDIS_URL",
        "REDIS_AUTH",
        "REDIS_TLS",
        "REDIS_TLS_SKIP_HOSTNAME_VERIFICATION",
    ]),
    help: "Redis URL of a single server (`redis://[user:password@]host:port[/db]`, `rediss://` \
        for TLS). Without it (or --redis-cluster, --redis-sentinel), counters live in this process \
        only.",
};

pub const REDIS_CLUSTER: Setting = Setting {
    flag: "redis-cluster",
    variable: "RATELIMITD_REDIS_CLUSTER",
    group: Group::Store,
    essential: true,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_TYPE", "REDIS_URL"]),
    help: "Redis Cluster seed nodes (any of its nodes; the others are discovered).",
};

pub const REDIS_SENTINEL: Setting = Setting {
    flag: "redis-sentinel",
    variable: "RATELIMITD_REDIS_SENTINEL",
    group: Group::Store,
    essential: true,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_TYPE", "REDIS_URL"]),
    help: "Sentinels watching the Redis master named MASTER_NAME.",
};

pub const REDIS_USER: Setting = Setting {
    flag: "redis-user",
    variable: "RATELIMITD_REDIS_USER",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_AUTH"]),
    help: "ACL user of the cluster's or the Sentinel-managed servers (a --redis-url carries its \
        own).",
};

pub const REDIS_PASSWORD: Setting = Setting {
    flag: "redis-password",
    variable: "RATELIMITD_REDIS_PASSWORD",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_AUTH"]),
    help: "Password of the cluster's or the Sentinel-managed servers (a --redis-url carries its \
        own).",
};

pub const REDIS_TLS: Setting = Setting {
    flag: "redis-tls",
    variable: "RATELIMITD_REDIS_TLS",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_TLS", Convert::Bool),
    help: "TLS to the cluster's or the Sentinel setup's servers and sentinels (a --redis-url \
        says `rediss://`).",
};

pub const REDIS_SENTINEL_USER: Setting = Setting {
    flag: "redis-sentinel-user",
    variable: "RATELIMITD_REDIS_SENTINEL_USER",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_SENTINEL_AUTH"]),
    help: "ACL user of the sentinels themselves.",
};

pub const REDIS_SENTINEL_PASSWORD: Setting = Setting {
    flag: "redis-sentinel-password",
    variable: "RATELIMITD_REDIS_SENTINEL_PASSWORD",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_SENTINEL_AUTH"]),
    help: "Password of the sentinels themselves (their own requirepass).",
};

pub const REDIS_WAIT_REPLICAS: Setting = Setting {
    flag: "redis-wait-replicas",
    variable: "RATELIMITD_REDIS_WAIT_REPLICAS",
    group: Group::Store,
    essential: false,
    default: Value::Text("0"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Replicas that must acknowledge each Redis call's writes (WAIT) before its requests \
        are answered, so admitted hits survive a failover; a call they do not acknowledge within \
        --redis-timeout is a store failure. 0: do not wait.",
};

pub const REDIS_TIMEOUT: Setting = Setting {
    flag: "redis-timeout",
    variable: "RATELIMITD_REDIS_TIMEOUT",
    group: Group::Store,
    essential: false,
    default: Value::Text("100ms"),
    drop_in_default: Some("10s"),
    upstream: Upstream::Variable("REDIS_TIMEOUT", Convert::Duration),
    help: "Bound on every Redis call; a slower answer is a store failure (UNAVAILABLE).",
};

pub const REDIS_STARTUP_WAIT: Setting = Setting {
    flag: "redis-startup-wait",
    variable: "RATELIMITD_REDIS_STARTUP_WAIT",
    group: Group::Store,
    essential: false,
    default: Value::Text("0s"),
    drop_in_default: Some("forever"),
    upstream: Upstream::Derived(&["REDIS_STARTUP_MAX_ELAPSED_TIME"]),
    help: "How long startup keeps trying a Redis that cannot be reached (a duration, or \
        `forever`); 0: the first failure stops startup, so the orchestrator restarts the process \
        with its own backoff. envoyproxy/ratelimit's REDIS_STARTUP_MAX_ELAPSED_TIME (there 0 = \
        forever).",
};

pub const REDIS_STARTUP_INITIAL_INTERVAL: Setting = Setting {
    flag: "redis-startup-initial-interval",
    variable: "RATELIMITD_REDIS_STARTUP_INITIAL_INTERVAL",
    group: Group::Store,
    essential: false,
    default: Value::Text("1s"),
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_STARTUP_INITIAL_INTERVAL", Convert::Duration),
    help: "First wait between startup attempts; each next one is 1.5 times longer.",
};

pub const REDIS_STARTUP_MAX_INTERVAL: Setting = Setting {
    flag: "redis-startup-max-interval",
    variable: "RATELIMITD_REDIS_STARTUP_MAX_INTERVAL",
    group: Group::Store,
    essential: false,
    default: Value::Text("30s"),
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_STARTUP_MAX_INTERVAL", Convert::Duration),
    help: "Longest wait between startup attempts.",
};

pub const REDIS_POOL_SIZE: Setting = Setting {
    flag: "redis-pool-size",
    variable: "RATELIMITD_REDIS_POOL_SIZE",
    group: Group::Store,
    essential: false,
    default: Value::Of(|| RedisSettings::DEFAULT_POOL_SIZE.to_string()),
    drop_in_default: Some("10"),
    upstream: Upstream::Variable("REDIS_POOL_SIZE", Convert::Same),
    help: "Redis connections kept open (each one multiplexes concurrent requests).",
};

pub const REDIS_TLS_CA: Setting = Setting {
    flag: "redis-tls-ca",
    variable: "RATELIMITD_REDIS_TLS_CA",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_TLS_CACERT", Convert::Same),
    help: "PEM file of the certificate(s) TLS to Redis trusts instead of the system's \
        certificate store: a private CA, or the server's own self-signed certificate.",
};

pub const REDIS_TLS_SYSTEM_ROOTS: Setting = Setting {
    flag: "redis-tls-system-roots",
    variable: "RATELIMITD_REDIS_TLS_SYSTEM_ROOTS",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["REDIS_TLS_CACERT"]),
    help: "With --redis-tls-ca: trust the system's certificate store as well \
        (envoyproxy/ratelimit's REDIS_TLS_CACERT adds to it).",
};

pub const REDIS_TLS_CLIENT_CERT: Setting = Setting {
    flag: "redis-tls-client-cert",
    variable: "RATELIMITD_REDIS_TLS_CLIENT_CERT",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_TLS_CLIENT_CERT", Convert::Same),
    help: "PEM client certificate (chain) presented to Redis servers that ask for one (mutual \
        TLS: `tls-auth-clients`), with --redis-tls-client-key.",
};

pub const REDIS_TLS_CLIENT_KEY: Setting = Setting {
    flag: "redis-tls-client-key",
    variable: "RATELIMITD_REDIS_TLS_CLIENT_KEY",
    group: Group::Store,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("REDIS_TLS_CLIENT_KEY", Convert::Same),
    help: "PEM private key of --redis-tls-client-cert.",
};

pub const ON_STORE_ERROR: Setting = Setting {
    flag: "on-store-error",
    variable: "RATELIMITD_ON_STORE_ERROR",
    group: Group::Store,
    essential: false,
    default: Value::Text("unavailable"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "What to answer when the store fails or times out: unavailable (gRPC UNAVAILABLE, so \
        Envoy's failure_mode_deny decides), allow (OK) or deny (OVER_LIMIT).",
};

pub const DENY_CACHE: Setting = Setting {
    flag: "deny-cache",
    variable: "RATELIMITD_DENY_CACHE",
    group: Group::Store,
    essential: false,
    default: Value::Text("true"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Local deny cache in front of Redis: counters found exhausted are answered OVER_LIMIT \
        without a Redis round trip until they can admit again (`--deny-cache=false` or \
        `--no-deny-cache` turns it off). Unused with the in-memory store.",
};

pub const DENY_CACHE_SIZE: Setting = Setting {
    flag: "deny-cache-size",
    variable: "RATELIMITD_DENY_CACHE_SIZE",
    group: Group::Store,
    essential: false,
    default: Value::Of(|| (DenyCacheSettings::DEFAULT_MAX_ENTRIES as u32).to_string()),
    drop_in_default: None,
    upstream: Upstream::Derived(&["LOCAL_CACHE_SIZE_IN_BYTES"]),
    help: "Most counters the deny cache holds.",
};
