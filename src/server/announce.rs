//! The lines that say the server is serving, and where.

use std::net::SocketAddr;

use super::http_ports::HttpPorts;
use super::listener::GrpcAddress;
use super::settings::DropIn;
use super::transport_bounds::ConnectionCaps;

/// Logs the listening addresses and the bounds in force at INFO, and in drop-in mode the
/// listeners and the differences at WARN (see [`DropIn`]).
pub fn serving(
    grpc: &GrpcAddress,
    rls: Option<SocketAddr>,
    http: &HttpPorts,
    caps: ConnectionCaps,
    open_files: u64,
    grpc_memory_budget: usize,
    drop_in: Option<&DropIn>,
) {
    let http_addr = http.http;
    match grpc {
        GrpcAddress::Tcp(grpc_addr) => tracing::info!(
            %grpc_addr,
            %http_addr,
            grpc_max_connections = caps.grpc,
            http_max_connections = caps.http,
            open_files,
            grpc_memory_budget,
            "serving"
        ),
        GrpcAddress::Unix(path) => tracing::info!(
            grpc_uds = %path.display(),
            %http_addr,
            grpc_max_connections = caps.grpc,
            http_max_connections = caps.http,
            open_files,
            grpc_memory_budget,
            "serving"
        ),
    }
    if let Some(rls_addr) = rls {
        tracing::info!(%rls_addr, "serving ShouldRateLimit and health Check on the RLS port");
    }
    for (port, addr) in &http.others {
        tracing::info!(port, %addr, "serving HTTP");
    }
    if let Some(drop_in) = drop_in {
        announce_drop_in(drop_in, grpc, http_addr, &http.others);
    }
}

/// Drop-in mode's startup lines at WARN (see [`DropIn`]): the listeners, worded as
/// envoyproxy/ratelimit words them, then what differs from it here.
fn announce_drop_in(
    drop_in: &DropIn,
    grpc: &GrpcAddress,
    http: SocketAddr,
    extra_ports: &[(&str, SocketAddr)],
) {
    tracing::warn!("Listening for HTTP on '{http}'");
    for (port, addr) in extra_ports {
        tracing::warn!("Listening for {port} on '{addr}'");
    }
    match grpc {
        GrpcAddress::Tcp(addr) => tracing::warn!("Listening for gRPC on '{addr}'"),
        GrpcAddress::Unix(path) => tracing::warn!("Listening for gRPC on '{}'", path.display()),
    }
    for difference in &drop_in.differences {
        tracing::warn!("differs from envoyproxy/ratelimit: {difference}");
    }
}
