//! What the store's calls go to, shared by every thread: one server (a single server, or the
//! master the sentinels name) or every master of a Redis Cluster, connected at startup as the
//! settings say; and where each thread's own calls go ([`Backend::route`]).

use std::sync::Arc;
use std::time::Duration;

use super::cluster::lane::ClusterLane;
use super::cluster::Cluster;
use super::route::Route;
use crate::store::redis::server::client::{client, uses_tls};
use crate::store::redis::server::connection::Manager;
use crate::store::redis::server::pool::PoolSettings;
use crate::store::redis::server::sentinel::MasterLocator;
use crate::store::redis::server::Server;
use crate::store::redis::settings::topology::Topology;
use crate::store::redis::settings::RedisSettings;
use crate::store::redis::tls::RedisTls;
use crate::store::StoreError;

/// What the store's calls go to.
#[derive(Clone)]
pub(in crate::store::redis) enum Backend {
    /// One master: a single server, or the one Sentinel names.
    Server(Box<Server>),
    /// Every master of a Redis Cluster.
    Cluster(Arc<Cluster>),
}

impl Backend {
    /// Opens a first connection to every master of `settings.topology` and loads the scripts
    /// there, retrying as `settings.startup` says, within `connect_timeout` per attempt; errors
    /// name the address. The TLS files are read once, before the first attempt. With Sentinel,
    /// also the locator that follows the master, to keep alive for the sentinels' announcements.
    /// `on_failure` hears of each failed attempt.
    pub(in crate::store::redis) async fn connect(
        settings: &RedisSettings,
        pool_settings: &PoolSettings,
        connect_timeout: Duration,
        on_failure: &(dyn Fn(&StoreError) + Sync),
    ) -> Result<(Backend, Option<Arc<MasterLocator>>), StoreError> {
        let address = settings.topology.address();
        let at_address = |error: StoreError| match error {
            StoreError::Timeout(limit) => StoreError::Unavailable(format!(
                "{address}: no answer within {}",
                humantime::format_duration(limit)
            )),
            other => other.at(&address),
        };
        let retry = settings.startup;
        let server_start = |manager: &Manager, pool_settings: &PoolSettings| {
            let (manager, pool_settings) = (manager.clone(), pool_settings.clone());
            async move { Server::start(manager, &pool_settings, connect_timeout).await }
        };
        let mut locator = None;
        let backend = match &settings.topology {
            Topology::Single { url } => {
                let client = client(url).map_err(at_address)?;
                let tls = RedisTls::when_used(uses_tls(&client), &settings.tls)?;
                let manager = Manager::new(client, tls, connect_timeout);
                let server = retry
                    .run_observed(
                        &address,
                        || server_start(&manager, pool_settings),
                        on_failure,
                    )
                    .await
                    .map_err(at_address)?;
                Backend::Server(Box::new(server))
            }
            Topology::Sentinel {
                master_name,
                sentinels,
                auth,
                sentinel_auth,
            } => {
                let tls = RedisTls::when_used(auth.tls, &settings.tls)?;
                let found = Arc::new(MasterLocator::new(
                    master_name,
                    sentinels,
                    auth,
                    sentinel_auth,
                    tls.as_deref(),
                )?);
                found.spawn_watch();
                let manager = Manager::sentinel(found.clone(), tls, connect_timeout);
                locator = Some(found);
                let server = retry
                    .run_observed(
                        &address,
                        || server_start(&manager, pool_settings),
                        on_failure,
                    )
                    .await
                    .map_err(at_address)?;
                Backend::Server(Box::new(server))
            }
            Topology::Cluster { seeds, auth } => {
                let tls = RedisTls::when_used(auth.tls, &settings.tls)?;
                Backend::Cluster(
                    retry
                        .run_observed(
                            &address,
                            || {
                                Cluster::connect(
                                    seeds,
                                    auth,
                                    tls.clone(),
                                    pool_settings,
                                    connect_timeout,
                                )
                            },
                            on_failure,
                        )
                        .await
                        .map_err(at_address)?,
                )
            }
        };
        Ok((backend, locator))
    }

    /// Where the calling thread's calls go: its own pool to the one server (one connection opened
    /// at once in the background, more on demand; until the first is open, calls borrow the
    /// startup pool's), or its own pools to each cluster node, opened as the slot map names them.
    pub(in crate::store::redis) fn route(&self, settings: &PoolSettings) -> Route {
        match self {
            Backend::Server(server) => Route::Server(server.thread_pool(settings)),
            Backend::Cluster(cluster) => {
                Route::Cluster(Arc::new(ClusterLane::new(cluster.clone(), settings)))
            }
        }
    }
}
