//! The gRPC port: its routes (RLS, RLQS, health, reflection), its connections' transport and
//! bounds, and the lanes that serve them.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic::service::Routes;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::HealthService;

use super::accept::AcceptBackoff;
use super::connections::Registry;
use super::error::ServerError;
use super::grpc_connection::{GrpcTransport, TransportOptions};
use super::grpc_options::GrpcOptions;
use super::lanes;
use super::listener::GrpcListener;
use super::memory_budget::MemoryBudget;
use super::memory_release;
use super::quotas::Quotas;
use super::tasks::Tasks;
use super::tls::{ServerTls, TlsError, TLS_RELOAD_INTERVAL};
use super::transport_bounds::TransportBounds;
use crate::proto::rls::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::service::transport_refusal::Port;
use crate::service::{Metrics, RateLimitEdge};
use crate::store::Store;

/// How long in-flight calls may take to finish once shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// The gRPC port's TLS (its files loaded) and connection age.
pub fn transport_options(grpc: &GrpcOptions) -> Result<TransportOptions, TlsError> {
    Ok(TransportOptions {
        tls: grpc
            .tls
            .clone()
            .map(ServerTls::load)
            .transpose()?
            .map(Arc::new),
        connection_age: grpc.connection_age,
    })
}

/// What the gRPC port serves with, ready for its listener.
pub struct GrpcPort {
    transport: Arc<GrpcTransport>,
    registry: Arc<Registry>,
    lanes: usize,
    metrics: Arc<Metrics>,
}

impl GrpcPort {
    /// The routes and the transport of the gRPC port, at most `max_connections` connections
    /// and `memory_budget` bytes of calls (with the RLQS streams' state, the bytes given back
    /// to the operating system after a peak), `lanes` serving threads; its families registered
    /// on `metrics`, the TLS files watched.
    #[allow(clippy::too_many_arguments)]
    pub fn start<S: Store>(
        health: HealthServer<HealthService>,
        health_check: Arc<HealthService>,
        edge: Arc<RateLimitEdge<S>>,
        quotas: &Quotas,
        options: TransportOptions,
        bounds: &TransportBounds,
        limits: Capacity,
        metrics: Arc<Metrics>,
        tasks: &mut Tasks,
    ) -> Result<GrpcPort, ServerError> {
        let budget = MemoryBudget::new(limits.memory_budget);
        let held = {
            let (budget, quotas) = (budget.clone(), quotas.registry().clone());
            move || {
                let quotas = quotas.budget().held();
                (
                    budget.take_peak().saturating_add(quotas),
                    budget.held().saturating_add(quotas),
                )
            }
        };
        tasks.spawn(memory_release::watch(held, tasks.stopping()));
        let registry = Registry::new(limits.max_connections, budget, metrics.clone());
        register_transport_gauges(&metrics, &registry);
        let rls = RateLimitServiceServer::from_arc(edge.clone())
            .max_decoding_message_size(bounds.max_request_size);
        let (quota_service, max_report) = quotas.service();
        let routes = Routes::new(health)
            .add_service(reflection().build_v1()?)
            .add_service(reflection().build_v1alpha()?)
            .add_service(rls)
            .add_service(quota_service);
        if let Some(tls) = options.tls.clone() {
            tasks.spawn(super::tls::watch(
                tls,
                TLS_RELOAD_INTERVAL,
                tasks.stopping(),
            ));
        }
        log_transport(&options);
        let transport = Arc::new(GrpcTransport::new(
            routes,
            edge,
            health_check,
            bounds,
            max_report,
            options.clone(),
        ));
        register_connection_counters(&metrics, &transport, &options);
        Ok(GrpcPort {
            transport,
            registry,
            lanes: limits.lanes,
            metrics,
        })
    }

    /// Serves `listener` (and the RLS port's `rls_listener`) until `stopping`; then stops accepting, lets calls finish once health
    /// has `closed` (at most [`DRAIN_TIMEOUT`]) and returns when every lane has.
    pub async fn serve(
        self,
        listener: GrpcListener,
        rls_listener: Option<tokio::net::TcpListener>,
        closed: CancellationToken,
        stopping: CancellationToken,
    ) -> Result<(), ServerError> {
        let GrpcPort {
            transport,
            registry,
            lanes,
            metrics,
        } = self;
        let lane = {
            let stopping = stopping.clone();
            move |connections: lanes::Connections| {
                let served = transport.clone().serve_lane(connections, closed.clone());
                let stopping = stopping.clone();
                async move {
                    tokio::select! {
                        () = served => {}
                        _ = drain_deadline(&stopping) => {
                            tracing::warn!(?DRAIN_TIMEOUT, "calls still open after the drain timeout (e.g. health Watch streams); closing them");
                        }
                    }
                }
            }
        };
        let backoff = AcceptBackoff::new(Port::Grpc, metrics);
        lanes::start(lanes, lane)?
            .accept(listener, rls_listener, registry, backoff, stopping)
            .await?;
        Ok(())
    }
}

/// How much the gRPC port may take on.
#[derive(Debug, Clone, Copy)]
pub struct Capacity {
    pub max_connections: usize,
    pub memory_budget: usize,
    pub lanes: usize,
}

/// gRPC reflection over the project's protos and health's.
fn reflection() -> tonic_reflection::server::Builder<'static> {
    tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
}

/// Says what the gRPC port speaks (TLS, client certificates) and how long its connections live.
fn log_transport(transport: &TransportOptions) {
    if let Some(tls) = &transport.tls {
        let settings = tls.settings();
        let client_auth = settings.client_auth.as_ref();
        tracing::info!(
            cert = %settings.cert.display(),
            key = %settings.key.display(),
            client_ca = client_auth.map(|auth| auth.ca.display().to_string()),
            client_san = client_auth.and_then(|auth| auth.san.clone()),
            reload_interval = ?TLS_RELOAD_INTERVAL,
            "gRPC port speaks TLS"
        );
    }
    if let Some(age) = transport.connection_age {
        let grace = age.grace.map_or_else(
            || "none (calls run to their end)".to_owned(),
            |grace| humantime::format_duration(grace).to_string(),
        );
        tracing::info!(
            max_connection_age = %humantime::format_duration(age.max_age),
            max_connection_age_grace = %grace,
            "gRPC connections get GOAWAY at their maximum age (±10 %)"
        );
    }
}

/// Counters of aged connections, and of TLS handshakes and reloads (with TLS only).
fn register_connection_counters(
    metrics: &Metrics,
    transport: &Arc<GrpcTransport>,
    options: &TransportOptions,
) {
    let aged = transport.clone();
    metrics.register_counter(
        "ratelimitd_grpc_connections_aged_total",
        "gRPC connections sent GOAWAY for reaching --grpc-max-connection-age.",
        move || aged.aged_connections(),
    );
    let Some(tls) = &options.tls else { return };
    let failures = transport.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_handshake_failures_total",
        "gRPC TLS handshakes that failed or timed out (plaintext clients, refused client certificates).",
        move || failures.tls_handshake_failures(),
    );
    let reloads = tls.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_reloads_total",
        "Times changed gRPC TLS files were put in use.",
        move || reloads.reloads(),
    );
    let rejected = tls.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_reloads_rejected_total",
        "Times changed gRPC TLS files could not be used (the certificate in use stayed).",
        move || rejected.rejected(),
    );
}

/// Gauges of what the gRPC connections hold, read when scraped.
fn register_transport_gauges(metrics: &Metrics, registry: &Arc<Registry>) {
    let accepted = registry.clone();
    metrics.register_counter(
        "ratelimitd_grpc_connections_accepted_total",
        "gRPC connections accepted (and not refused at the connection cap).",
        move || accepted.admitted(),
    );
    let open = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_connections",
        "Open gRPC connections (those being closed to make room included).",
        move || open.open_connections() as u64,
    );
    let streaming = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_streaming_calls",
        "Open long-lived gRPC calls (health Watch, reflection), all connections.",
        move || streaming.streaming_calls() as u64,
    );
    let buffered = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_buffered_request_bytes",
        "Bytes of partly received gRPC request messages (at the length their prefix declares), all connections.",
        move || buffered.buffered() as u64,
    );
    let limit = registry.budget().limit() as u64;
    metrics.register_gauge(
        "ratelimitd_grpc_memory_budget_bytes",
        "The memory budget of all gRPC calls together (--grpc-memory-budget).",
        move || limit,
    );
    let held = registry.budget().clone();
    metrics.register_gauge(
        "ratelimitd_grpc_memory_held_bytes",
        "Bytes held against the memory budget: open calls, their request heads and messages being received.",
        move || held.held() as u64,
    );
    let calls = registry.budget().clone();
    metrics.register_gauge(
        "ratelimitd_grpc_open_calls",
        "Open gRPC calls (streams served), all connections.",
        move || calls.calls() as u64,
    );
}

/// Completes `DRAIN_TIMEOUT` after shutdown starts: long-lived streams (health `Watch`) and
/// unresponsive peers never finish by themselves and must not keep the process alive.
async fn drain_deadline(stopping: &CancellationToken) {
    stopping.cancelled().await;
    tokio::time::sleep(DRAIN_TIMEOUT).await;
}
