//! `rls-ceiling`: the transport ceiling for benchmarks. A default-configured tonic server that
//! answers every `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` with a constant
//! OK: `overall_code` OK and one OK status per request descriptor, nothing decided, nothing
//! stored. Whatever ratelimitd spends beyond this server's CPU per request is the decision.
//!
//! ```text
//! rls-ceiling [--grpc-addr 127.0.0.1:0]
//! ```
//! Prints `rls-ceiling serving grpc_addr=IP:PORT` on stdout once listening; stops on SIGTERM or
//! SIGINT. Bench-only: no health, no reflection, no logging.

use std::net::SocketAddr;
use std::process::ExitCode;

use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use ratelimitd::proto::rls::rate_limit_service_server::{RateLimitService, RateLimitServiceServer};
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use tokio::net::TcpListener;
use tonic::transport::server::TcpIncoming;
use tonic::{Request, Response, Status};

struct ConstantOk;

#[tonic::async_trait]
impl RateLimitService for ConstantOk {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        let descriptors = request.get_ref().descriptors.len();
        let ok = DescriptorStatus {
            code: Code::Ok as i32,
            ..DescriptorStatus::default()
        };
        Ok(Response::new(RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![ok; descriptors],
            ..RateLimitResponse::default()
        }))
    }
}

fn usage() -> ExitCode {
    eprintln!("usage: rls-ceiling [--grpc-addr IP:PORT]   (default 127.0.0.1:0)");
    ExitCode::FAILURE
}

fn main() -> ExitCode {
    let mut addr: SocketAddr = ([127, 0, 0, 1], 0).into();
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let value = match arg.as_str() {
            "--grpc-addr" => args.next(),
            other => other.strip_prefix("--grpc-addr=").map(str::to_owned),
        };
        match value.map(|v| v.parse()) {
            Some(Ok(parsed)) => addr = parsed,
            _ => return usage(),
        }
    }
    // Default runtime, default server: this is the reference a tuned service must beat.
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("rls-ceiling: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result: Result<(), Box<dyn std::error::Error>> = runtime.block_on(async move {
        let listener = TcpListener::bind(addr).await?;
        println!("rls-ceiling serving grpc_addr={}", listener.local_addr()?);
        // What `Server::serve(addr)` does: accepted sockets get TCP_NODELAY (tonic's default).
        // (`serve_with_incoming` with a bare `TcpListenerStream` would leave Nagle on.)
        let incoming = TcpIncoming::from(listener).with_nodelay(Some(true));
        tonic::transport::Server::builder()
            .add_service(RateLimitServiceServer::new(ConstantOk))
            .serve_with_incoming_shutdown(incoming, shutdown())
            .await?;
        Ok(())
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("rls-ceiling: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn shutdown() {
    let mut terminate =
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
                return;
            }
        };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = terminate.recv() => {}
    }
}
