//! A small xDS control plane for the tests: a tonic ADS server that serves a snapshot of
//! `RateLimitConfig` resources (state of the world), pushes every new snapshot to each
//! subscribed stream, and records every request (ACKs, NACKs, subscriptions) with the stream's
//! headers. It can stop (ending its streams) and start again on the same port, with or without
//! TLS (a client certificate required).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prost::Message;
use ratelimitd::proto::discovery::aggregated_discovery_service_server::{
    AggregatedDiscoveryService, AggregatedDiscoveryServiceServer,
};
use ratelimitd::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use ratelimitd::proto::rls_config::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use tokio::sync::{mpsc, watch, Notify};
use tokio_stream::wrappers::{ReceiverStream, TcpListenerStream};
use tokio_util::sync::CancellationToken;
use tonic::transport::{Certificate, Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status, Streaming};

pub const TYPE_URL: &str = "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// What the control plane serves.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub version: String,
    pub resources: Vec<RateLimitConfig>,
}

/// A request the control plane received, on which stream (counted from 1) and with which
/// headers.
#[derive(Clone, Debug)]
pub struct Received {
    pub stream: usize,
    pub headers: HashMap<String, String>,
    pub request: DiscoveryRequest,
}

impl Received {
    /// An ACK of `version`: that version, a nonce, no error.
    pub fn is_ack_of(&self, version: &str) -> bool {
        self.request.version_info == version
            && !self.request.response_nonce.is_empty()
            && self.request.error_detail.is_none()
    }

    /// The NACK's message, if it is one.
    pub fn nack_message(&self) -> Option<&str> {
        self.request
            .error_detail
            .as_ref()
            .map(|status| status.message.as_str())
    }
}

/// The server's TLS: its certificate and the CA its clients' certificates must chain to.
#[derive(Clone, Debug)]
pub struct ControlPlaneTls {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    pub client_ca: std::path::PathBuf,
}

struct Shared {
    snapshot: watch::Sender<Option<Snapshot>>,
    received: Mutex<Vec<Received>>,
    arrived: Notify,
    streams: AtomicUsize,
    nonces: AtomicU64,
}

pub struct ControlPlane {
    shared: Arc<Shared>,
    addr: SocketAddr,
    tls: Option<ControlPlaneTls>,
    running: Option<(CancellationToken, tokio::task::JoinHandle<()>)>,
}

impl ControlPlane {
    /// Starts serving on a free loopback port, with nothing to serve yet.
    pub async fn start(tls: Option<ControlPlaneTls>) -> ControlPlane {
        let shared = Arc::new(Shared {
            snapshot: watch::channel(None).0,
            received: Mutex::new(Vec::new()),
            arrived: Notify::new(),
            streams: AtomicUsize::new(0),
            nonces: AtomicU64::new(0),
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the control plane");
        let addr = listener.local_addr().expect("its address");
        let mut plane = ControlPlane {
            shared,
            addr,
            tls,
            running: None,
        };
        plane.serve(listener);
        plane
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    fn serve(&mut self, listener: tokio::net::TcpListener) {
        let stop = CancellationToken::new();
        let mut builder = Server::builder();
        if let Some(tls) = &self.tls {
            let identity = Identity::from_pem(
                std::fs::read(&tls.cert).expect("server cert"),
                std::fs::read(&tls.key).expect("server key"),
            );
            let config =
                ServerTlsConfig::new()
                    .identity(identity)
                    .client_ca_root(Certificate::from_pem(
                        std::fs::read(&tls.client_ca).expect("client CA"),
                    ));
            builder = builder.tls_config(config).expect("server TLS");
        }
        let service = AggregatedDiscoveryServiceServer::new(Ads {
            shared: self.shared.clone(),
            stop: stop.clone(),
        });
        let router = builder.add_service(service);
        let stopped = stop.clone();
        let task = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming_shutdown(
                    TcpListenerStream::new(listener),
                    stopped.cancelled_owned(),
                )
                .await;
        });
        self.running = Some((stop, task));
    }

    /// Serves `resources` as `version`, pushed to every subscribed stream.
    pub fn push(&self, version: &str, resources: Vec<RateLimitConfig>) {
        self.shared.snapshot.send_replace(Some(Snapshot {
            version: version.to_string(),
            resources,
        }));
    }

    /// Stops serving: open streams end with UNAVAILABLE, the port closes.
    pub async fn stop(&mut self) {
        if let Some((stop, task)) = self.running.take() {
            stop.cancel();
            let _ = tokio::time::timeout(Duration::from_secs(10), task).await;
        }
    }

    /// Serves again on the same port, with the snapshot it had.
    pub async fn restart(&mut self) {
        self.stop().await;
        let listener = tokio::net::TcpListener::bind(self.addr)
            .await
            .expect("bind the control plane's port again");
        self.serve(listener);
    }

    /// Every request received so far.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap().clone()
    }

    /// Waits (at most `timeout`) for a request that `matches`, already received or to come.
    pub async fn wait_for(
        &self,
        what: &str,
        timeout: Duration,
        matches: impl Fn(&Received) -> bool,
    ) -> Received {
        let deadline = Instant::now() + timeout;
        loop {
            let arrived = self.shared.arrived.notified();
            if let Some(found) = self.received().into_iter().find(|r| matches(r)) {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, arrived).await.is_err() {
                panic!(
                    "no {what} within {timeout:?}; received: {:#?}",
                    self.received()
                );
            }
        }
    }
}

struct Ads {
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Ads {
    fn response(shared: &Shared, snapshot: &Snapshot) -> DiscoveryResponse {
        DiscoveryResponse {
            version_info: snapshot.version.clone(),
            resources: snapshot
                .resources
                .iter()
                .map(|config| prost_types::Any {
                    type_url: TYPE_URL.to_string(),
                    value: config.encode_to_vec(),
                })
                .collect(),
            canary: false,
            type_url: TYPE_URL.to_string(),
            nonce: format!("n{}", shared.nonces.fetch_add(1, Ordering::Relaxed) + 1),
        }
    }
}

#[tonic::async_trait]
impl AggregatedDiscoveryService for Ads {
    type StreamAggregatedResourcesStream = ReceiverStream<Result<DiscoveryResponse, Status>>;

    async fn stream_aggregated_resources(
        &self,
        request: Request<Streaming<DiscoveryRequest>>,
    ) -> Result<Response<Self::StreamAggregatedResourcesStream>, Status> {
        let stream = self.shared.streams.fetch_add(1, Ordering::Relaxed) + 1;
        let headers: HashMap<String, String> = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_string())))
            .collect();
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(8);
        let shared = self.shared.clone();
        let stop = self.stop.clone();
        tokio::spawn(async move {
            let mut snapshots = shared.snapshot.subscribe();
            let mut subscribed = false;
            loop {
                tokio::select! {
                    _ = stop.cancelled() => {
                        let _ = tx.send(Err(Status::unavailable("control plane stopping"))).await;
                        return;
                    }
                    message = inbound.message() => {
                        let Ok(Some(request)) = message else { return };
                        shared.received.lock().unwrap().push(Received {
                            stream,
                            headers: headers.clone(),
                            request,
                        });
                        shared.arrived.notify_waiters();
                        if !subscribed {
                            subscribed = true;
                            let current = snapshots.borrow_and_update().clone();
                            if let Some(snapshot) = current {
                                let _ = tx.send(Ok(Ads::response(&shared, &snapshot))).await;
                            }
                        }
                    }
                    changed = snapshots.changed(), if subscribed => {
                        if changed.is_err() {
                            return;
                        }
                        let current = snapshots.borrow_and_update().clone();
                        if let Some(snapshot) = current {
                            let _ = tx.send(Ok(Ads::response(&shared, &snapshot))).await;
                        }
                    }
                }
            }
        });
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

/// A domain's resource: `name`, `domain`, and one key-only descriptor per `(key, per minute)`.
pub fn domain_config(name: &str, domain: &str, limits: &[(&str, u32)]) -> RateLimitConfig {
    RateLimitConfig {
        name: name.to_string(),
        domain: domain.to_string(),
        descriptors: limits
            .iter()
            .map(|(key, per_minute)| RateLimitDescriptor {
                key: key.to_string(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Minute as i32,
                    requests_per_unit: *per_minute,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            })
            .collect(),
    }
}
