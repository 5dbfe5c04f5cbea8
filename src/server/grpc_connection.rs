//! Serving gRPC connections with hyper's HTTP/2 server directly (rather than through tonic's
//! `Server`), so that each connection can be closed on its own: with GOAWAY when it has been idle
//! too long or is shed to make room, and for good [`SHED_GRACE`] later.
//!
//! Every connection advertises the stream limit and flow-control windows of the [`Limits`]: a
//! peer may send at most a stream window per stream and a connection window in all before the
//! server reads, and what the server reads is checked message by message ([`CallGate`]).

use std::sync::Arc;
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;

use super::call_gate::{CallGate, GateLimits};
use super::connections::{Registered, SHED_GRACE};
use super::lanes::Accepted;
use super::limits::Limits;
use super::request_body::BodyLimits;
use crate::service::limited::Limited;

/// HTTP/2 PINGs to idle clients, so a vanished peer does not hold a connection forever.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// What every gRPC connection of the process is served with.
pub struct GrpcTransport {
    routes: Routes,
    http2: http2::Builder<TokioExecutor>,
    gate: Arc<GateLimits>,
    idle_timeout: Option<Duration>,
}

impl GrpcTransport {
    pub fn new(routes: Routes, limits: &Limits) -> GrpcTransport {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(limits.grpc_max_concurrent_streams)
            .initial_stream_window_size(limits.grpc_stream_window)
            .initial_connection_window_size(limits.grpc_connection_window)
            .adaptive_window(false)
            .keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        // One message of the largest size always fits both budgets, or it could never arrive.
        let largest = limits.max_request_size.saturating_add(5);
        let per_connection = (limits.grpc_connection_window as usize).max(largest);
        let gate = GateLimits {
            body: BodyLimits {
                max_message: limits.max_request_size,
                per_connection,
                global: limits.grpc_max_buffered_bytes.max(per_connection),
                read_timeout: limits.grpc_read_timeout,
            },
            max_concurrent_streams: limits.grpc_max_concurrent_streams,
            max_streaming_calls: limits.grpc_max_streaming_calls,
            max_streaming_calls_per_connection: limits.grpc_max_streaming_calls_per_connection,
        };
        GrpcTransport {
            routes: routes.prepare(),
            http2,
            gate: Arc::new(gate),
            idle_timeout: limits.grpc_idle_timeout.filter(|t| !t.is_zero()),
        }
    }

    /// Serves the connections one lane is dealt until its queue closes or `closing` is
    /// cancelled; then every connection is sent GOAWAY and this waits for them to end (dropping
    /// the returned future closes those still open).
    pub async fn serve_lane(
        self: Arc<GrpcTransport>,
        mut queue: mpsc::UnboundedReceiver<Accepted>,
        closing: CancellationToken,
    ) {
        let mut connections = JoinSet::new();
        loop {
            tokio::select! {
                _ = closing.cancelled() => break,
                accepted = queue.recv() => {
                    let Some(accepted) = accepted else { break };
                    match TcpStream::from_std(accepted.stream) {
                        Ok(stream) => {
                            connections.spawn(self.clone().serve(stream, accepted.registered, closing.clone()));
                        }
                        Err(error) => tracing::warn!(%error, "cannot take over a connection"),
                    }
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(queue);
        while connections.join_next().await.is_some() {}
    }

    /// Serves one connection until it ends: closed by the peer, or sent GOAWAY because the server
    /// is closing, it was shed, or it was idle for the idle timeout. A connection sent GOAWAY
    /// for the last two reasons is closed [`SHED_GRACE`] later whatever its streams do; one that
    /// never opened a call is closed at once.
    async fn serve(
        self: Arc<GrpcTransport>,
        stream: TcpStream,
        registered: Registered,
        closing: CancellationToken,
    ) {
        let gate = CallGate::new(self.routes.clone(), registered.handle(), self.gate.clone());
        let connection = self.http2.serve_connection(TokioIo::new(stream), gate);
        tokio::pin!(connection);
        let mut closing_down = false;
        let mut close_at: Option<Instant> = None;
        let idle_timeout = self.idle_timeout;
        loop {
            tokio::select! {
                ended = connection.as_mut() => {
                    if let Err(error) = ended {
                        tracing::debug!(%error, "gRPC connection ended with an error");
                    }
                    return;
                }
                _ = closing.cancelled(), if !closing_down => {
                    closing_down = true;
                    connection.as_mut().graceful_shutdown();
                }
                _ = registered.shed(), if !closing_down => {
                    if !registered.used() {
                        return;
                    }
                    closing_down = true;
                    close_at = Some(Instant::now() + SHED_GRACE);
                    connection.as_mut().graceful_shutdown();
                }
                _ = idle(&registered, idle_timeout), if !closing_down => {
                    registered.handle().metrics().record_limited(Limited::IdleTimeout);
                    if !registered.used() {
                        return;
                    }
                    closing_down = true;
                    close_at = Some(Instant::now() + SHED_GRACE);
                    connection.as_mut().graceful_shutdown();
                }
                _ = until(close_at) => return,
            }
        }
    }
}

/// Completes once `registered` has been idle for `timeout`; never when there is no timeout.
async fn idle(registered: &Registered, timeout: Option<Duration>) {
    match timeout {
        Some(timeout) => registered.idle_for(timeout).await,
        None => std::future::pending().await,
    }
}

/// Completes at `at`; never when there is none.
async fn until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
