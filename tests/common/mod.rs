#![allow(dead_code)]

pub mod control_plane;
pub mod envoy;
pub mod fault_load;
pub mod grpc_transport;
pub mod hostile_config;
pub mod http_load;
pub mod otlp_collector;
pub mod pki;
pub mod ratelimitd;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod rlqs_client;
pub mod upstream_model;
