//! Serving gRPC connections with hyper's HTTP/2 server directly (rather than through tonic's
//! `Server`), so that each connection can be closed on its own: with GOAWAY when it has been idle
//! too long, is shed to make room or reached its maximum age, and for good [`SHED_GRACE`] (or
//! the age grace) later.
//!
//! Every connection advertises the stream limit and flow-control windows of the [`TransportBounds`]: a
//! peer may send at most a stream window per stream and a connection window in all before the
//! server reads, and what the server reads is checked message by message ([`CallGate`]). With
//! TLS, the handshake runs on the connection's lane, within [`TLS_HANDSHAKE_TIMEOUT`].

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper::server::conn::http2;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::server::HealthService;

use super::call_gate::{CallGate, GateBounds};
use super::connection_age::ConnectionAge;
use super::connections::{BufferPool, Registered, SHED_GRACE};
use super::lanes::Accepted;
use super::listener::AcceptedStream;
use super::request_body::BodyBounds;
use super::rls_port::{self, RlsService};
use super::tls::ServerTls;
use super::transport_bounds::TransportBounds;
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::service::throttle::WarnThrottle;
use crate::service::transport_refusal::TransportRefusal;

/// HTTP/2 PINGs to idle clients, so a vanished peer does not hold a connection forever.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Time a client has to complete its TLS handshake; a connection that has not by then is closed.
pub const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the gRPC connections are served with besides the [`TransportBounds`]: TLS and their age limit.
#[derive(Clone, Default)]
pub struct TransportOptions {
    pub tls: Option<Arc<ServerTls>>,
    pub connection_age: Option<ConnectionAge>,
}

/// What every gRPC connection of the process is served with.
pub struct GrpcTransport {
    routes: Routes,
    rls: Arc<dyn RateLimitService>,
    http2: http2::Builder<TokioExecutor>,
    gate: Arc<GateBounds>,
    /// The RLS port's connections (`--rls-addr`).
    rls_port: Arc<RlsService>,
    idle_timeout: Option<Duration>,
    options: TransportOptions,
    handshake_failures: AtomicU64,
    handshake_warnings: WarnThrottle,
    aged: AtomicU64,
}

impl GrpcTransport {
    /// `max_report` is the largest RLQS usage report accepted
    /// ([`crate::service::rlqs::RlqsSettings::max_report_bytes`]).
    pub fn new(
        routes: Routes,
        rls: Arc<dyn RateLimitService>,
        health: Arc<HealthService>,
        bounds: &TransportBounds,
        max_report: usize,
        options: TransportOptions,
    ) -> GrpcTransport {
        let mut http2 = http2::Builder::new(TokioExecutor::new());
        http2
            .timer(TokioTimer::new())
            .max_concurrent_streams(bounds.grpc_max_concurrent_streams)
            .initial_stream_window_size(bounds.grpc_stream_window)
            .initial_connection_window_size(bounds.grpc_connection_window)
            .adaptive_window(false)
            .keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        // One message of the largest size always fits both budgets, or it could never arrive.
        let largest = bounds.max_request_size.saturating_add(5);
        let per_connection = (bounds.grpc_connection_window as usize).max(largest);
        let body = BodyBounds {
            max_message: bounds.max_request_size,
            max_message_flags: "--max-request-size",
            pool: BufferPool::Requests,
            per_connection,
            global: bounds.grpc_max_buffered_bytes.max(per_connection),
            read_timeout: bounds.grpc_read_timeout,
        };
        let report_per_connection = per_connection.max(max_report.saturating_add(5));
        let gate = GateBounds {
            body,
            report_body: BodyBounds {
                max_message: max_report,
                max_message_flags: "--rlqs-max-buckets-per-stream × --rlqs-max-bucket-id-bytes",
                pool: BufferPool::Reports,
                per_connection: report_per_connection,
                global: body.global.max(report_per_connection),
                ..body
            },
            max_concurrent_streams: bounds.grpc_max_concurrent_streams,
            max_streaming_calls: bounds.grpc_max_streaming_calls,
            max_streaming_calls_per_connection: bounds.grpc_max_streaming_calls_per_connection,
        };
        let rls_port = Arc::new(RlsService {
            rls: rls.clone(),
            health,
            limits: rls_port::h2::Limits {
                max_concurrent_streams: bounds.grpc_max_concurrent_streams,
                stream_window: bounds.grpc_stream_window,
                connection_window: u32::try_from(per_connection).unwrap_or(u32::MAX >> 1),
                max_body: largest,
                max_header_list: rls_port::head::MAX_HEADER_LIST,
            },
            body,
        });
        GrpcTransport {
            routes: routes.prepare(),
            rls,
            http2,
            gate: Arc::new(gate),
            rls_port,
            idle_timeout: bounds.grpc_idle_timeout.filter(|t| !t.is_zero()),
            options,
            handshake_failures: AtomicU64::new(0),
            handshake_warnings: WarnThrottle::new(),
            aged: AtomicU64::new(0),
        }
    }

    /// TLS handshakes that failed or timed out (plaintext clients, refused client certificates).
    pub fn tls_handshake_failures(&self) -> u64 {
        self.handshake_failures.load(Ordering::Relaxed)
    }

    /// Connections sent GOAWAY for reaching their maximum age.
    pub fn aged_connections(&self) -> u64 {
        self.aged.load(Ordering::Relaxed)
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
                    connections.spawn(self.clone().take_over(accepted, closing.clone()));
                }
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
            }
        }
        drop(queue);
        while connections.join_next().await.is_some() {}
    }

    /// Registers an accepted connection with this lane's reactor and serves it.
    async fn take_over(self: Arc<GrpcTransport>, accepted: Accepted, closing: CancellationToken) {
        let Accepted {
            stream,
            registered,
            rls_port,
        } = accepted;
        let taken = match stream {
            AcceptedStream::Tcp(stream) => match TcpStream::from_std(stream) {
                Ok(stream) => return self.secure(stream, registered, rls_port, closing).await,
                Err(error) => error,
            },
            AcceptedStream::Unix(stream) => match UnixStream::from_std(stream) {
                Ok(stream) => return self.secure(stream, registered, rls_port, closing).await,
                Err(error) => error,
            },
        };
        tracing::warn!(error = %taken, "cannot take over a connection");
    }

    /// Completes the TLS handshake when the port speaks TLS, then serves the connection. A
    /// handshake that fails or takes longer than [`TLS_HANDSHAKE_TIMEOUT`] closes it, and so does
    /// shedding or shutdown while it is under way.
    async fn secure<I>(
        self: Arc<GrpcTransport>,
        io: I,
        registered: Registered,
        rls_port: bool,
        closing: CancellationToken,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let Some(tls) = self.options.tls.clone() else {
            return self.connect(io, registered, rls_port, closing).await;
        };
        let handshake = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, tls.acceptor().accept(io));
        let failure = tokio::select! {
            done = handshake => match done {
                Ok(Ok(stream)) => return self.connect(stream, registered, rls_port, closing).await,
                Ok(Err(error)) => handshake_error(&error),
                Err(_) => format!("not completed within {TLS_HANDSHAKE_TIMEOUT:?}"),
            },
            _ = registered.shed() => return,
            _ = closing.cancelled() => return,
        };
        self.handshake_failures.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.handshake_warnings.admit() {
            tracing::warn!(error = %failure, suppressed, "gRPC TLS handshake failed");
        }
    }

    /// Serves one connection with hyper's HTTP/2 server and tonic's routes behind the call
    /// gate, or (`rls_port`) with the RLS port's own.
    async fn connect<I>(
        self: Arc<GrpcTransport>,
        io: I,
        registered: Registered,
        rls_port: bool,
        closing: CancellationToken,
    ) where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if rls_port {
            let go_away = CancellationToken::new();
            let served = self
                .rls_port
                .clone()
                .serve(io, registered.handle(), go_away.clone());
            let connection = OwnConnection {
                served: Box::pin(served),
                go_away,
            };
            return self.serve(connection, registered, closing).await;
        }
        let gate = CallGate::new(
            self.routes.clone(),
            self.rls.clone(),
            registered.handle(),
            self.gate.clone(),
        );
        let connection = HyperConnection(Box::pin(
            self.http2.serve_connection(TokioIo::new(io), gate),
        ));
        self.serve(connection, registered, closing).await
    }

    /// Serves one connection until it ends: closed by the peer, or sent GOAWAY because the server
    /// is closing, it was shed, it was idle for the idle timeout, or it reached its maximum age.
    /// A connection shed or idle is closed [`SHED_GRACE`] after its GOAWAY whatever its streams
    /// do (one that never opened a call at once); one that reached its age is closed when its
    /// calls have ended or the age grace has passed.
    async fn serve(
        self: Arc<GrpcTransport>,
        mut connection: impl Served,
        registered: Registered,
        closing: CancellationToken,
    ) {
        let mut closing_down = false;
        let mut close_at: Option<Instant> = None;
        let idle_timeout = self.idle_timeout;
        let age = self.options.connection_age;
        let old_at = age.and_then(|age| Instant::now().checked_add(age.jittered()));
        loop {
            tokio::select! {
                () = &mut connection => return,
                _ = closing.cancelled(), if !closing_down => {
                    closing_down = true;
                    connection.go_away();
                }
                _ = registered.shed(), if !closing_down => {
                    if !registered.used() {
                        return;
                    }
                    closing_down = true;
                    close_at = Some(Instant::now() + SHED_GRACE);
                    connection.go_away();
                }
                _ = idle(&registered, idle_timeout), if !closing_down => {
                    registered.handle().metrics().record_transport_refusal(TransportRefusal::IdleTimeout);
                    if !registered.used() {
                        return;
                    }
                    closing_down = true;
                    close_at = Some(Instant::now() + SHED_GRACE);
                    connection.go_away();
                }
                _ = until(old_at), if !closing_down => {
                    self.aged.fetch_add(1, Ordering::Relaxed);
                    closing_down = true;
                    close_at = age
                        .and_then(|age| age.grace)
                        .and_then(|grace| Instant::now().checked_add(grace));
                    connection.go_away();
                }
                _ = until(close_at) => return,
            }
        }
    }
}

/// A connection being served, which can be asked to go away: it sends GOAWAY, answers the calls
/// it has, and completes.
trait Served: Future<Output = ()> + Unpin {
    fn go_away(&mut self);
}

/// A connection served by hyper's HTTP/2 server.
struct HyperConnection<I>(Pin<Box<http2::Connection<TokioIo<I>, CallGate, TokioExecutor>>>);

impl<I> Future for HyperConnection<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx).map(|ended| {
            if let Err(error) = ended {
                tracing::debug!(%error, "gRPC connection ended with an error");
            }
        })
    }
}

impl<I> Served for HyperConnection<I>
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    fn go_away(&mut self) {
        self.0.as_mut().graceful_shutdown();
    }
}

/// A connection served by the RLS port's own HTTP/2 server.
struct OwnConnection {
    served: Pin<Box<dyn Future<Output = ()> + Send>>,
    go_away: CancellationToken,
}

impl Future for OwnConnection {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.served.as_mut().poll(cx)
    }
}

impl Served for OwnConnection {
    fn go_away(&mut self) {
        self.go_away.cancel();
    }
}

/// What went wrong in a handshake, saying so plainly when the peer did not speak TLS at all.
fn handshake_error(error: &std::io::Error) -> String {
    let not_tls = error
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|inner| {
            matches!(
                inner,
                rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType)
            )
        });
    if not_tls {
        format!("{error} (not TLS: a plaintext client?)")
    } else {
        error.to_string()
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
