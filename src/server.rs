//! Wiring: configuration -> store -> RLS edge -> tonic services (RLS, health, reflection) + HTTP.
//!
//! [`run`] takes already-bound listeners so tests can bind port 0 and read the real ports.

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tokio_util::sync::CancellationToken;

use crate::config::{self, ConfigErrors};
use crate::proto::rls::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::service::{http, Health, RateLimitEdge, ResponseHeaders};
use crate::store::{MemoryStore, RedisSettings, RedisStore, Store, StoreError};

/// How often the store's health is probed, and idle memory-store keys swept.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long in-flight calls may take to finish once shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// Everything `serve` needs besides the listeners.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Configuration files or directories.
    pub config_paths: Vec<PathBuf>,
    /// Redis to share counters with other instances; `None` keeps them in this process.
    pub redis: Option<RedisSettings>,
    /// Rate-limit headers added to every response (`response_headers_to_add`).
    pub response_headers: ResponseHeaders,
}

/// Why the server could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration:\n{0}")]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("gRPC server failed: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("gRPC reflection setup failed: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
}

/// Loads the configuration, builds the store and serves until `shutdown` completes. Then health
/// turns NOT_SERVING, listeners close, and in-flight calls finish before this returns.
pub async fn run(
    settings: Settings,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let rules = config::load(&settings.config_paths)?;
    let domains = rules.domains.len();
    let rules = Arc::new(ArcSwap::from_pointee(rules));
    let headers = settings.response_headers;
    match settings.redis {
        None => {
            let store = Arc::new(MemoryStore::new());
            store.spawn_sweeper(PROBE_INTERVAL);
            tracing::info!(domains, store = "memory", "configuration loaded");
            serve(rules, store, headers, grpc, http, shutdown).await
        }
        Some(redis) => {
            let store = Arc::new(RedisStore::connect(redis).await?);
            tracing::info!(domains, store = "redis", "configuration loaded");
            serve(rules, store, headers, grpc, http, shutdown).await
        }
    }
}

async fn serve<S: Store>(
    rules: Arc<ArcSwap<crate::limiter::Rules>>,
    store: Arc<S>,
    headers: ResponseHeaders,
    grpc: TcpListener,
    http: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Arc::new(Health::new(reporter).await);
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    let edge = RateLimitEdge::new(rules, store.clone()).with_response_headers(headers);

    let stopping = CancellationToken::new();
    tokio::spawn({
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    });
    health.set_serving(store.is_healthy().await).await;
    tokio::spawn(probe_store(store, health.clone(), stopping.clone()));

    let grpc_addr = grpc.local_addr()?;
    let http_addr = http.local_addr()?;
    let http_task = tokio::spawn(http::serve(
        http,
        health.clone(),
        stopping.clone().cancelled_owned(),
    ));
    tracing::info!(%grpc_addr, %http_addr, "serving");

    let drained = {
        let health = health.clone();
        let stopping = stopping.clone();
        async move {
            stopping.cancelled().await;
            tracing::info!("shutting down: health NOT_SERVING, draining in-flight calls");
            health.close().await;
        }
    };
    let grpc_server = tonic::transport::Server::builder()
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(RateLimitServiceServer::new(edge))
        .serve_with_incoming_shutdown(TcpListenerStream::new(grpc), drained);
    tokio::pin!(grpc_server);
    let result = tokio::select! {
        result = &mut grpc_server => result,
        _ = drain_deadline(&stopping) => {
            tracing::warn!(?DRAIN_TIMEOUT, "calls still open after the drain timeout (e.g. health Watch streams); closing them");
            Ok(())
        }
    };
    stopping.cancel();
    let _ = http_task.await;
    tracing::info!("stopped");
    result.map_err(ServerError::from)
}

/// Completes `DRAIN_TIMEOUT` after shutdown starts: long-lived streams (health `Watch`) and
/// unresponsive peers never finish by themselves and must not keep the process alive.
async fn drain_deadline(stopping: &CancellationToken) {
    stopping.cancelled().await;
    tokio::time::sleep(DRAIN_TIMEOUT).await;
}

/// Drives health from the store: NOT_SERVING while it cannot answer, SERVING when it is back.
async fn probe_store<S: Store>(store: Arc<S>, health: Arc<Health>, stopping: CancellationToken) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let healthy = store.is_healthy().await;
        if healthy != health.is_serving() {
            tracing::warn!(healthy, "store health changed");
        }
        health.set_serving(healthy).await;
    }
}
