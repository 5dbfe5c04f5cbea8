//! The HTTP port's connections: HTTP/1.1 with a header read timeout, an overall connection
//! timeout, and a cap on open connections.
//!
//! At the cap, the oldest connection is closed to take the new one: a slow client (a slowloris
//! sending its headers a byte at a time) holds its place for at most the header read timeout,
//! and a flood of them cannot keep `/healthcheck` from being answered, since a probe's
//! connection, younger than the flood's, is served within milliseconds.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::Request;
use hyper_util::rt::{TokioIo, TokioTimer};
use parking_lot::Mutex;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::AbortHandle;

use super::accept::AcceptBackoff;
use crate::service::http::{respond, HttpState, PeerAddr};
use crate::service::transport_refusal::{Port, TransportRefusal};
use crate::service::Metrics;
use crate::store::Store;

/// After the connection timeout, how long a response being written may take before the
/// connection is closed anyway.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

/// The HTTP port's bounds.
#[derive(Debug, Clone, Copy)]
pub struct HttpBounds {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub connection_timeout: Duration,
}

/// Open connections: the tasks not told to close yet, by accept order (the first is the oldest),
/// and how many hold a socket (those being closed included).
#[derive(Default)]
struct Open {
    tasks: Mutex<BTreeMap<u64, AbortHandle>>,
    live: AtomicUsize,
}

/// Counts its connection in [`Open`] until the connection's task ends or is aborted.
struct Listed {
    open: Arc<Open>,
    id: u64,
}

impl Drop for Listed {
    fn drop(&mut self) {
        self.open.tasks.lock().remove(&self.id);
        self.open.live.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Open {
    /// Closes the oldest connections until there is room for one more under `cap`. An aborted
    /// task lets go of its socket when it next runs, so this yields until it has: the port never
    /// holds more than `cap` sockets, even under a flood of new connections.
    async fn make_room(&self, cap: usize, metrics: &Metrics) {
        while self.live.load(Ordering::Acquire) >= cap {
            let oldest = self.tasks.lock().pop_first();
            if let Some((_, task)) = oldest {
                task.abort();
                metrics.record_transport_refusal(TransportRefusal::HttpConnectionShed);
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Serves HTTP/1.1 on every listener, each with its own [`HttpState`] (the HTTP port, and the
/// metrics and debug ports when configured), until `shutdown` completes. The connection cap is
/// shared: together the ports hold at most `bounds.max_connections` connections.
pub async fn serve<S: Store>(
    listeners: Vec<(TcpListener, Arc<HttpState<S>>)>,
    bounds: HttpBounds,
    metrics: Arc<Metrics>,
    shutdown: impl Future<Output = ()>,
) {
    let open = Arc::new(Open::default());
    let gauge = open.clone();
    metrics.register_gauge(
        "ratelimitd_http_connections",
        "Open connections on the HTTP port (and the metrics and debug ports).",
        move || gauge.live.load(Ordering::Relaxed) as u64,
    );
    let next_id = Arc::new(AtomicU64::new(0));
    let ports = listeners.into_iter().map(|(listener, state)| {
        accept_loop(
            listener,
            state,
            bounds,
            metrics.clone(),
            open.clone(),
            next_id.clone(),
        )
    });
    tokio::select! {
        _ = shutdown => {}
        _ = futures::future::join_all(ports) => {}
    }
}

async fn accept_loop<S: Store>(
    listener: TcpListener,
    state: Arc<HttpState<S>>,
    bounds: HttpBounds,
    metrics: Arc<Metrics>,
    open: Arc<Open>,
    next_id: Arc<AtomicU64>,
) {
    let mut backoff = AcceptBackoff::new(Port::Http, metrics.clone());
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => {
                backoff.succeeded();
                stream
            }
            Err(error) => {
                backoff.failed(error).await;
                continue;
            }
        };
        open.make_room(bounds.max_connections, &metrics).await;
        let id = next_id.fetch_add(1, Ordering::Relaxed);
        open.live.fetch_add(1, Ordering::AcqRel);
        let listed = Listed {
            open: open.clone(),
            id,
        };
        let mut tasks = open.tasks.lock();
        let task = tokio::spawn(connection(
            stream,
            state.clone(),
            bounds,
            metrics.clone(),
            listed,
        ));
        tasks.insert(id, task.abort_handle());
    }
}

/// Serves one connection, for at most the connection timeout.
async fn connection<S: Store>(
    stream: TcpStream,
    state: Arc<HttpState<S>>,
    bounds: HttpBounds,
    metrics: Arc<Metrics>,
    _listed: Listed,
) {
    let peer = stream.peer_addr().ok().map(PeerAddr);
    let service = hyper::service::service_fn(move |mut request: Request<Incoming>| {
        let state = state.clone();
        if let Some(peer) = peer {
            request.extensions_mut().insert(peer);
        }
        async move { Ok::<_, Infallible>(respond(state, request).await) }
    });
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(bounds.header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    tokio::pin!(connection);
    let ended = tokio::select! {
        ended = connection.as_mut() => ended,
        _ = tokio::time::sleep(bounds.connection_timeout) => {
            metrics.record_transport_refusal(TransportRefusal::HttpConnectionTimeout);
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(CLOSE_GRACE, connection).await {
                Ok(ended) => ended,
                Err(_) => return,
            }
        }
    };
    if let Err(error) = ended {
        if error.is_timeout() {
            metrics.record_transport_refusal(TransportRefusal::HeaderReadTimeout);
        }
        tracing::debug!(%error, "http connection ended with an error");
    }
}
