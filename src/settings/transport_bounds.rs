//! The settings of `serve --help-all`'s "Limits" group.

use super::setting::{Group, Setting, Upstream, Value};
use crate::server::transport_bounds::TransportBounds;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &MAX_REQUEST_SIZE,
    &GRPC_MAX_CONCURRENT_STREAMS,
    &GRPC_STREAM_WINDOW,
    &GRPC_CONNECTION_WINDOW,
    &GRPC_MAX_BUFFERED_BYTES,
    &GRPC_MAX_STREAMING_CALLS,
    &GRPC_MAX_STREAMING_CALLS_PER_CONNECTION,
    &GRPC_READ_TIMEOUT,
    &GRPC_IDLE_TIMEOUT,
    &GRPC_MAX_CONNECTIONS,
    &HTTP_MAX_CONNECTIONS,
    &HTTP_HEADER_READ_TIMEOUT,
    &HTTP_CONNECTION_TIMEOUT,
    &FD_RESERVE,
    &GRPC_MEMORY_BUDGET,
];

pub const MAX_REQUEST_SIZE: Setting = Setting {
    flag: "max-request-size",
    variable: "RATELIMITD_MAX_REQUEST_SIZE",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("64KiB"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Largest request accepted: a gRPC message (RESOURCE_EXHAUSTED above) or a /json body \
        (413 above). Sizes take B, KiB, MiB, GiB.",
};

pub const GRPC_MAX_CONCURRENT_STREAMS: Setting = Setting {
    flag: "grpc-max-concurrent-streams",
    variable: "RATELIMITD_GRPC_MAX_CONCURRENT_STREAMS",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| TransportBounds::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Concurrent streams per gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).",
};

pub const GRPC_STREAM_WINDOW: Setting = Setting {
    flag: "grpc-stream-window",
    variable: "RATELIMITD_GRPC_STREAM_WINDOW",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("64KiB"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "HTTP/2 stream window: bytes a peer may send on one stream before the server reads \
        them.",
};

pub const GRPC_CONNECTION_WINDOW: Setting = Setting {
    flag: "grpc-connection-window",
    variable: "RATELIMITD_GRPC_CONNECTION_WINDOW",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("256KiB"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "HTTP/2 connection window, and the most bytes of partly received messages one \
        connection may hold (at least one message of --max-request-size).",
};

pub const GRPC_MAX_BUFFERED_BYTES: Setting = Setting {
    flag: "grpc-max-buffered-bytes",
    variable: "RATELIMITD_GRPC_MAX_BUFFERED_BYTES",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("64MiB"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most bytes of partly received gRPC messages all connections together may hold.",
};

pub const GRPC_MAX_STREAMING_CALLS: Setting = Setting {
    flag: "grpc-max-streaming-calls",
    variable: "RATELIMITD_GRPC_MAX_STREAMING_CALLS",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Concurrent long-lived gRPC calls (health Watch, reflection), all connections.",
};

pub const GRPC_MAX_STREAMING_CALLS_PER_CONNECTION: Setting = Setting {
    flag: "grpc-max-streaming-calls-per-connection",
    variable: "RATELIMITD_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| {
        TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION.to_string()
    }),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Concurrent long-lived gRPC calls on one connection.",
};

pub const GRPC_READ_TIMEOUT: Setting = Setting {
    flag: "grpc-read-timeout",
    variable: "RATELIMITD_GRPC_READ_TIMEOUT",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("10s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Time a call has to send its request and end its request stream (DEADLINE_EXCEEDED \
        after).",
};

pub const GRPC_IDLE_TIMEOUT: Setting = Setting {
    flag: "grpc-idle-timeout",
    variable: "RATELIMITD_GRPC_IDLE_TIMEOUT",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("5m"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "A gRPC connection without calls for this long is closed with GOAWAY (`0s`: never).",
};

pub const GRPC_MAX_CONNECTIONS: Setting = Setting {
    flag: "grpc-max-connections",
    variable: "RATELIMITD_GRPC_MAX_CONNECTIONS",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| TransportBounds::DEFAULT_GRPC_MAX_CONNECTIONS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most gRPC connections at once; lowered to fit the open-files limit. At the cap, the \
        connection idle the longest is closed to take a new one.",
};

pub const HTTP_MAX_CONNECTIONS: Setting = Setting {
    flag: "http-max-connections",
    variable: "RATELIMITD_HTTP_MAX_CONNECTIONS",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| TransportBounds::DEFAULT_HTTP_MAX_CONNECTIONS.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most HTTP-port connections at once; lowered to fit the open-files limit. At the cap, \
        the oldest is closed to take a new one.",
};

pub const HTTP_HEADER_READ_TIMEOUT: Setting = Setting {
    flag: "http-header-read-timeout",
    variable: "RATELIMITD_HTTP_HEADER_READ_TIMEOUT",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("5s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Time an HTTP client has to send a request's headers (the first and every next one).",
};

pub const HTTP_CONNECTION_TIMEOUT: Setting = Setting {
    flag: "http-connection-timeout",
    variable: "RATELIMITD_HTTP_CONNECTION_TIMEOUT",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Text("60s"),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Longest an HTTP connection stays open.",
};

pub const FD_RESERVE: Setting = Setting {
    flag: "fd-reserve",
    variable: "RATELIMITD_FD_RESERVE",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Of(|| TransportBounds::DEFAULT_FD_RESERVE.to_string()),
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Open files kept for anything but client connections (listeners, Redis, runtime).",
};

pub const GRPC_MEMORY_BUDGET: Setting = Setting {
    flag: "grpc-memory-budget",
    variable: "RATELIMITD_GRPC_MEMORY_BUDGET",
    group: Group::TransportBounds,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::None,
    help: "Most memory all gRPC calls together may hold: 6 KiB per open call plus its request \
        headers, plus the messages being received at the length their prefix declares. A call or \
        message past it is refused with RESOURCE_EXHAUSTED. Default: a quarter of the memory the \
        process may use (its cgroup's limit, else the machine's RAM), at least 32 MiB. Sizes take \
        B, KiB, MiB, GiB.",
};
