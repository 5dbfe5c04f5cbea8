//! The settings of `serve --help-all`'s "Listeners" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &GRPC_ADDR,
    &RLS_ADDR,
    &HTTP_ADDR,
    &THREADS,
    &METRICS_ADDR,
    &METRICS_PATH,
    &DEBUG_ADDR,
    &ENVOYPROXY_METRICS_ADDR,
    &ENVOYPROXY_METRICS_PATH,
    &ENVOYPROXY_METRICS_MAPPER,
    &ENVOYPROXY_METRICS_RESPONSE_TIME_MS,
];

pub const GRPC_ADDR: Setting = Setting {
    flag: "grpc-addr",
    variable: "RATELIMITD_GRPC_ADDR",
    group: Group::Listeners,
    essential: true,
    default: Value::Text("0.0.0.0:8081"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["GRPC_HOST", "GRPC_PORT"]),
    help: "Address of the gRPC port (RLS, health, reflection).",
};

pub const RLS_ADDR: Setting = Setting {
    flag: "rls-addr",
    variable: "RATELIMITD_RLS_ADDR",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A port of its own for ShouldRateLimit and health Check only, served by ratelimitd's \
        own HTTP/2 server at fewer instructions per decision than the gRPC port; it shares the \
        gRPC port's TLS, caps and bounds. Other methods there answer UNIMPLEMENTED.",
};

pub const HTTP_ADDR: Setting = Setting {
    flag: "http-addr",
    variable: "RATELIMITD_HTTP_ADDR",
    group: Group::Listeners,
    essential: true,
    default: Value::Text("0.0.0.0:8080"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["HOST", "PORT"]),
    help: "Address of the HTTP port (/healthcheck, /metrics, /json, /rlconfig).",
};

pub const THREADS: Setting = Setting {
    flag: "threads",
    variable: "RATELIMITD_THREADS",
    group: Group::Listeners,
    essential: true,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Threads serving gRPC connections, each with its own single-threaded runtime \
        (connections are dealt out in turn). Default: the CPUs this process may run on.",
};

pub const METRICS_ADDR: Setting = Setting {
    flag: "metrics-addr",
    variable: "RATELIMITD_METRICS_ADDR",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A port of its own for the Prometheus metrics (at --metrics-path), as \
        envoyproxy/ratelimit's USE_PROMETHEUS opens one; /metrics on the HTTP port stays.",
};

pub const METRICS_PATH: Setting = Setting {
    flag: "metrics-path",
    variable: "RATELIMITD_METRICS_PATH",
    group: Group::Listeners,
    essential: false,
    default: Value::Text("/metrics"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Path of the Prometheus metrics on the --metrics-addr port.",
};

pub const DEBUG_ADDR: Setting = Setting {
    flag: "debug-addr",
    variable: "RATELIMITD_DEBUG_ADDR",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: Some("0.0.0.0:6070"),
    upstream: Upstream::Derived(&["DEBUG_HOST", "DEBUG_PORT"]),
    help: "A second port serving what the HTTP port serves (/rlconfig among it), where \
        envoyproxy/ratelimit's debug port (DEBUG_HOST/DEBUG_PORT) is expected.",
};

pub const ENVOYPROXY_METRICS_ADDR: Setting = Setting {
    flag: "envoyproxy-metrics-addr",
    variable: "RATELIMITD_ENVOYPROXY_METRICS_ADDR",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["USE_PROMETHEUS", "PROMETHEUS_ADDR"]),
    help: "A port serving envoyproxy/ratelimit's Prometheus metrics (at \
        --envoyproxy-metrics-path): its statsd stats named by statsd_exporter's mapping, as its \
        USE_PROMETHEUS serves them (ratelimit_service_rate_limit_total_hits{domain,key1}, ...). \
        ratelimitd's own metrics stay at /metrics on the HTTP port.",
};

pub const ENVOYPROXY_METRICS_PATH: Setting = Setting {
    flag: "envoyproxy-metrics-path",
    variable: "RATELIMITD_ENVOYPROXY_METRICS_PATH",
    group: Group::Listeners,
    essential: false,
    default: Value::Text("/metrics"),
    drop_in_default: None,
    upstream: Upstream::Variable("PROMETHEUS_PATH", Convert::Same),
    help: "Path of the metrics on the --envoyproxy-metrics-addr port.",
};

pub const ENVOYPROXY_METRICS_MAPPER: Setting = Setting {
    flag: "envoyproxy-metrics-mapper",
    variable: "RATELIMITD_ENVOYPROXY_METRICS_MAPPER",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("PROMETHEUS_MAPPER_YAML", Convert::Same),
    help: "A statsd_exporter mapping file naming the metrics of --envoyproxy-metrics-addr \
        (envoyproxy/ratelimit's PROMETHEUS_MAPPER_YAML). Default: envoyproxy/ratelimit's built-in \
        mapping.",
};

pub const ENVOYPROXY_METRICS_RESPONSE_TIME_MS: Setting = Setting {
    flag: "envoyproxy-metrics-response-time-ms",
    variable: "RATELIMITD_ENVOYPROXY_METRICS_RESPONSE_TIME_MS",
    group: Group::Listeners,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS", Convert::Bool),
    help: "The built-in mapping's request-time histogram in milliseconds rather than seconds \
        (envoyproxy/ratelimit's PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS; not with \
        --envoyproxy-metrics-mapper).",
};
