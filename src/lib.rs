//! ratelimitd: a gRPC rate-limit decision service, wire-compatible with envoyproxy/ratelimit.
//!
//! Layers, importing downwards only: [`server`] wires [`service`] (the gRPC/HTTP edge) to a
//! [`store`] and the [`config`]; [`limiter`] is the pure domain (matching and algorithm math);
//! [`otel`] exports the request spans as OpenTelemetry traces. [`regular_file`] is how every
//! layer reads a file it is given a path to.

pub mod cli;
pub mod config;
pub mod envoyproxy_env;
pub mod go_values;
pub mod limiter;
pub mod otel;
pub mod proto;
pub mod regular_file;
pub mod server;
pub mod service;
pub mod settings;
pub mod store;
