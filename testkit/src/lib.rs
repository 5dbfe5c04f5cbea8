//! The parts the integration tests (tests/it) and the benchmark tools' tests run against: the
//! real `ratelimitd` binary, real redis-server processes (single, replicated, Cluster, Sentinel,
//! TLS) on free ports, Envoy, an xDS control plane, a headless Chromium, an OTLP collector, a
//! throwaway PKI, load generators, CPU pinning for the benchmarks, and the Markdown reader the
//! documentation tests share.
//!
//! Files the helpers read are found from the repository root ([`repo_root`]): the fixtures stay
//! in tests/fixtures, next to the tests that name them.

use std::path::{Path, PathBuf};

pub mod chromium;
pub mod control_plane;
pub mod cpu;
pub mod envoy;
pub mod fault_load;
pub mod grpc_transport;
pub mod hostile_config;
pub mod http_load;
pub mod in_process;
pub mod markdown;
pub mod ops_support;
pub mod otlp_collector;
pub mod pki;
pub mod ratelimitd;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
pub mod rlqs_client;
pub mod upstream_model;

/// The repository root: the service package's directory, of which this crate is a member.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("testkit lives in the repository root")
        .to_path_buf()
}

/// The gRPC core client script (Python grpcio) of the unix-socket client tests.
pub fn grpc_core_client_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/grpc_core_client.py")
}
