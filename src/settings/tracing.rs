//! The settings of `serve --help-all`'s "Tracing" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &TRACING,
    &TRACING_PROTOCOL,
    &TRACING_ENDPOINT,
    &TRACING_TIMEOUT,
    &TRACING_SAMPLING_RATIO,
    &TRACING_SERVICE_NAME,
    &TRACING_RESOURCE_ATTRIBUTES,
    &TRACING_DESCRIPTOR_VALUES,
    &TRACING_QUEUE_SIZE,
];

pub const TRACING: Setting = Setting {
    flag: "tracing",
    variable: "RATELIMITD_TRACING",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("TRACING_ENABLED", Convert::Bool),
    help: "Export a span for every ShouldRateLimit call (with child spans for the decision and \
        the store call) over OTLP.",
};

pub const TRACING_PROTOCOL: Setting = Setting {
    flag: "tracing-protocol",
    variable: "RATELIMITD_TRACING_PROTOCOL",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["TRACING_EXPORTER_PROTOCOL"]),
    help: "OTLP transport: grpc or http/protobuf. Default: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL, \
        then OTEL_EXPORTER_OTLP_PROTOCOL, then http/protobuf.",
};

pub const TRACING_ENDPOINT: Setting = Setting {
    flag: "tracing-endpoint",
    variable: "RATELIMITD_TRACING_ENDPOINT",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Full URL of the collector's trace endpoint (http/protobuf: nothing is appended, e.g. \
        http://collector:4318/v1/traces). Default: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, then \
        OTEL_EXPORTER_OTLP_ENDPOINT (+ /v1/traces for http/protobuf), then localhost on 4317 \
        (grpc) or 4318 (http/protobuf).",
};

pub const TRACING_TIMEOUT: Setting = Setting {
    flag: "tracing-timeout",
    variable: "RATELIMITD_TRACING_TIMEOUT",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Give up one export after this long. Default: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, then \
        OTEL_EXPORTER_OTLP_TIMEOUT (milliseconds), then 10s.",
};

pub const TRACING_SAMPLING_RATIO: Setting = Setting {
    flag: "tracing-sampling-ratio",
    variable: "RATELIMITD_TRACING_SAMPLING_RATIO",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("TRACING_SAMPLING_RATE", Convert::Same),
    help: "Share of calls traced, 0 to 1, parent-based: a call whose caller sampled its trace \
        is traced, one whose caller did not is not, and a call without a parent is traced with \
        this probability. Default: OTEL_TRACES_SAMPLER / OTEL_TRACES_SAMPLER_ARG, then 1.",
};

pub const TRACING_SERVICE_NAME: Setting = Setting {
    flag: "tracing-service-name",
    variable: "RATELIMITD_TRACING_SERVICE_NAME",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("TRACING_SERVICE_NAME", Convert::Same),
    help: "`service.name` of the spans. Default: OTEL_SERVICE_NAME, then service.name in \
        OTEL_RESOURCE_ATTRIBUTES, then ratelimitd.",
};

pub const TRACING_RESOURCE_ATTRIBUTES: Setting = Setting {
    flag: "tracing-resource-attribute",
    variable: "RATELIMITD_TRACING_RESOURCE_ATTRIBUTES",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Derived(&["TRACING_SERVICE_NAMESPACE", "TRACING_SERVICE_INSTANCE_ID"]),
    help: "Resource attributes KEY=VALUE (repeatable, or comma-separated), added to those of \
        OTEL_RESOURCE_ATTRIBUTES (these win on the same key).",
};

pub const TRACING_DESCRIPTOR_VALUES: Setting = Setting {
    flag: "tracing-descriptor-values",
    variable: "RATELIMITD_TRACING_DESCRIPTOR_VALUES",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Record each descriptor's entries, values included, on the call's span \
        (`ratelimit.descriptor_entries`). Values can be personal data (client addresses, API \
        keys): off by default, when only their count is recorded.",
};

pub const TRACING_QUEUE_SIZE: Setting = Setting {
    flag: "tracing-queue-size",
    variable: "RATELIMITD_TRACING_QUEUE_SIZE",
    group: Group::Tracing,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most finished spans waiting for export; beyond it new spans are dropped. Default: \
        OTEL_BSP_MAX_QUEUE_SIZE, then 2048.",
};
