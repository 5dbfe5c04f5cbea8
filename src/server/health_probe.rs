//! gRPC health and `/healthcheck`, driven by the store's probe and the configuration, and closed
//! first when shutdown starts.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tonic_health::pb::health_server::HealthServer;
use tonic_health::server::{HealthReporter, HealthService};

use super::config_feed::ConfigFeed;
use super::tasks::Tasks;
use crate::service::Health;
use crate::store::Store;

/// How often the store's health is probed.
pub const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// The health switch, its gRPC service, and the token cancelled once health has turned
/// NOT_SERVING for good at shutdown (the lanes start draining then, not before).
pub struct HealthComponent {
    pub health: Arc<Health>,
    pub service: HealthServer<HealthService>,
    /// The same service without tonic's server around it, for the RLS port's `Check`.
    pub check: Arc<HealthService>,
    pub closed: CancellationToken,
}

impl HealthComponent {
    /// Health set from `store` (as [`StoreHealth`] says) and `gate` now, then probed every
    /// [`PROBE_INTERVAL`] until shutdown, when it closes.
    pub async fn start<S: Store>(
        store: Arc<S>,
        store_health: StoreHealth,
        gate: ConfigGate,
        tasks: &mut Tasks,
    ) -> HealthComponent {
        let reporter = HealthReporter::new();
        let check = Arc::new(HealthService::from_health_reporter(reporter.clone()));
        let service = HealthServer::new(HealthService::from_health_reporter(reporter.clone()));
        let health = Arc::new(Health::new(reporter).await);
        health
            .set_serving(store_health.healthy(&*store).await && gate.open())
            .await;
        let stopping = tasks.stopping();
        tasks.spawn(probe_store(
            store,
            store_health,
            gate,
            health.clone(),
            stopping.clone(),
        ));
        let closed = CancellationToken::new();
        tasks.spawn({
            let (health, closed) = (health.clone(), closed.clone());
            async move {
                stopping.cancelled().await;
                tracing::info!("shutting down: health NOT_SERVING, draining in-flight calls");
                health.close().await;
                closed.cancel();
            }
        });
        HealthComponent {
            health,
            service,
            check,
            closed,
        }
    }
}

/// Whether the configuration lets health be SERVING: always, unless health waits for a
/// configuration to have loaded ([`InitialConfig::healthy_only_when_loaded`](super::InitialConfig::healthy_only_when_loaded)).
pub struct ConfigGate {
    pub config: ConfigFeed,
    pub required: bool,
}

impl ConfigGate {
    pub fn open(&self) -> bool {
        !self.required || self.config.has_loaded()
    }
}

/// Whether the store's state counts for health (`--health-follows-store`).
#[derive(Clone, Copy)]
pub struct StoreHealth {
    pub followed: bool,
}

impl StoreHealth {
    /// The store's health as health sees it: unhealthy while startup still waits for it (see
    /// [`Connecting`](crate::store::Connecting)); then always healthy when not followed, and then the store is not even
    /// asked.
    pub async fn healthy<S: Store>(self, store: &S) -> bool {
        store.is_connected() && (!self.followed || store.is_healthy().await)
    }
}

/// Drives health from the store (NOT_SERVING while it cannot answer, SERVING when it is back)
/// and from the configuration's [`ConfigGate`].
async fn probe_store<S: Store>(
    store: Arc<S>,
    store_health: StoreHealth,
    config: ConfigGate,
    health: Arc<Health>,
    stopping: CancellationToken,
) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let store_healthy = store_health.healthy(&*store).await;
        let healthy = store_healthy && config.open();
        if healthy != health.is_serving() {
            tracing::warn!(
                healthy,
                store_healthy,
                config_loaded = config.open(),
                "health changed"
            );
        }
        health.set_serving(healthy).await;
    }
}
