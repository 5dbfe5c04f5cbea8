//! Redis Cluster: one script call per node per batch, all or nothing across nodes.
//!
//! - **Slot map.** Read with `CLUSTER SLOTS` at startup and again whenever a node says a key is
//!   not its own, answers `MOVED`, `READONLY` or `CLUSTERDOWN`, or a master stops answering the
//!   health probe (one refresh at a time; callers that waited for it reuse its result).
//! - **Grouping.** Every key has the hash tag of its counter (see
//!   [`crate::store::redis::scripts::keys`]), so load spreads over the slots. A batch's checks are grouped by the master owning their slots, and
//!   each node gets ONE script call carrying every request's checks on it (calls to different
//!   nodes in parallel). Redis refuses declared keys of several slots (`CROSSSLOT`) but lets a
//!   script without flags access every slot its node owns, so those calls pass their keys in ARGV
//!   (see `keys_and_arguments` in `lua/common.lua`).
//! - **All or nothing.** A request whose checks live on several nodes is decided on each; when any
//!   node denies it (or fails), what the others committed for it is refunded (see
//!   [`crate::limiter::algorithm::refund`]) before it is answered.
//! - **Retries** only for what provably did not run: a node that says a key is not its own, or
//!   that the cluster is down, says so while the script loads its keys, before it writes; `MOVED`,
//!   `ASK`, `TRYAGAIN`, `CLUSTERDOWN`, `READONLY` and `NOSCRIPT` come before a script runs.
//!   Timeouts and lost connections are never retried: the call may have committed.
//! - **Migrating slots.** A key of a slot being moved that already left the node is not its own
//!   there, though the slot map still says it is: such checks are sent once more with their keys
//!   declared (one call per slot), so the node answers `ASK` and the call follows it (`ASKING`).

pub(in crate::store::redis) mod lane;
pub(in crate::store::redis) mod route;
pub mod slots;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use futures::future::join_all;
use parking_lot::Mutex;
use tokio::time::{timeout_at, Instant};

use self::slots::SlotMap;
use crate::store::redis::scripts::script::CallCommand;
use crate::store::redis::server::client::server_client;
use crate::store::redis::server::connection::Manager;
use crate::store::redis::server::errors::command_error;
use crate::store::redis::server::pool::{PoolSettings, Shared};
use crate::store::redis::server::{Calling, Server};
use crate::store::redis::settings::topology::{HostPort, ServerAuth};
use crate::store::redis::tls::RedisTls;
use crate::store::StoreError;

/// The cluster as every thread of the store sees it: its slot map and a connection manager
/// (with its own reachability and backoff) and startup pool per node.
pub struct Cluster {
    seeds: Vec<HostPort>,
    auth: ServerAuth,
    /// The TLS of every node's connections, with `auth.tls`.
    tls: Option<Arc<RedisTls>>,
    settings: PoolSettings,
    connect_timeout: Duration,
    slots: ArcSwap<SlotMap>,
    servers: Mutex<HashMap<HostPort, Server>>,
    /// The runtime that drives the startup pools' connections.
    home: tokio::runtime::Handle,
    refreshing: tokio::sync::Mutex<()>,
    refreshes: AtomicU64,
    changes: AtomicU64,
    refunds_sent: AtomicU64,
    refunds_failed: AtomicU64,
}

impl Cluster {
    /// Reads the slot map from the first seed that answers, then connects to every master and
    /// loads the scripts there, so bad credentials or an unreachable master fail at startup.
    pub(in crate::store::redis) async fn connect(
        seeds: &[HostPort],
        auth: &ServerAuth,
        tls: Option<Arc<RedisTls>>,
        settings: &PoolSettings,
        connect_timeout: Duration,
    ) -> Result<Arc<Cluster>, StoreError> {
        let cluster = Arc::new(Cluster {
            seeds: seeds.to_vec(),
            auth: auth.clone(),
            tls,
            settings: settings.clone(),
            connect_timeout,
            slots: ArcSwap::default(),
            servers: Mutex::new(HashMap::new()),
            home: tokio::runtime::Handle::current(),
            refreshing: tokio::sync::Mutex::new(()),
            refreshes: AtomicU64::new(0),
            changes: AtomicU64::new(0),
            refunds_sent: AtomicU64::new(0),
            refunds_failed: AtomicU64::new(0),
        });
        let mut last_error = None;
        let mut map = None;
        for seed in seeds {
            match cluster.start_server(seed).await {
                Ok(server) => {
                    let deadline = Instant::now() + connect_timeout;
                    match read_slot_map(&server.startup, seed, deadline).await {
                        Ok(found) => {
                            map = Some(found);
                            break;
                        }
                        Err(error) => last_error = Some(error),
                    }
                }
                Err(error) => last_error = Some(error),
            }
        }
        let Some(map) = map else {
            return Err(last_error.unwrap_or_else(|| {
                StoreError::Unavailable("no redis cluster seed node given".into())
            }));
        };
        if map.masters().is_empty() {
            return Err(StoreError::Unavailable(
                "the redis cluster has no master owning slots (CLUSTER SLOTS is empty): is it \
                 set up (redis-cli --cluster create)?"
                    .into(),
            ));
        }
        if !map.covers_every_slot() {
            tracing::warn!("the redis cluster's masters do not cover every slot");
        }
        for master in map.masters() {
            cluster.start_server(master).await?;
        }
        tracing::info!(
            masters = map.masters().len(),
            "redis cluster slot map loaded"
        );
        cluster.slots.store(Arc::new(map));
        Ok(cluster)
    }

    /// Connects to `address` (first connection, scripts, version check) unless already done.
    async fn start_server(&self, address: &HostPort) -> Result<Server, StoreError> {
        if let Some(server) = self.servers.lock().get(address) {
            return Ok(server.clone());
        }
        let client = server_client(address, &self.auth)?;
        let manager = Manager::new(client, self.tls.clone(), self.connect_timeout);
        let server = Server::start(manager, &self.settings, self.connect_timeout)
            .await
            .map_err(|error| match error {
                StoreError::Unavailable(message) => {
                    StoreError::Unavailable(format!("redis cluster node {address}: {message}"))
                }
                other => other,
            })?;
        Ok(self
            .servers
            .lock()
            .entry(address.clone())
            .or_insert(server)
            .clone())
    }

    /// The node at `address`, known from the slot map; a node met for the first time (a promoted
    /// replica, a node added to the cluster) gets a manager and a startup pool that connects in
    /// the background, and establishes how it runs the scripts at its first call (see
    /// `server::calling`: a replica holds its master's Functions library, replicated).
    pub(in crate::store::redis) fn server(&self, address: &HostPort) -> Result<Server, StoreError> {
        if let Some(server) = self.servers.lock().get(address) {
            return Ok(server.clone());
        }
        let client = server_client(address, &self.auth)?;
        let manager = Manager::new(client, self.tls.clone(), self.connect_timeout)
            .driven_on(self.home.clone());
        let calling = Arc::<Calling>::default();
        let server = Server {
            startup: Arc::new(Shared::new(
                manager.clone(),
                &self.settings,
                calling.clone(),
                None,
            )),
            manager: manager.driven_by_caller(),
            calling,
        };
        Ok(self
            .servers
            .lock()
            .entry(address.clone())
            .or_insert(server)
            .clone())
    }

    /// The current slot map.
    pub fn slot_map(&self) -> Arc<SlotMap> {
        self.slots.load_full()
    }

    /// Reads the slot map again, from the known masters first and then the seeds, unless a
    /// refresh that started after `seen` (a [`Cluster::slot_map_refreshes`] reading) already
    /// finished; gives up at `deadline`, keeping the map it had.
    pub async fn refresh(&self, seen: u64, deadline: Instant) {
        let Ok(_guard) = timeout_at(deadline, self.refreshing.lock()).await else {
            return;
        };
        if self.refreshes.load(Ordering::Relaxed) != seen {
            return;
        }
        self.refreshes.fetch_add(1, Ordering::Relaxed);
        let current = self.slot_map();
        let candidates = current
            .masters()
            .iter()
            .chain(self.seeds.iter())
            .cloned()
            .collect::<Vec<_>>();
        // Ask every candidate at once and take the first complete answer: a dead master must not
        // cost a connection timeout before the next one is asked.
        let asks = candidates.iter().map(|candidate| async move {
            let server = self.server(candidate).ok()?;
            read_slot_map(&server.startup, candidate, deadline)
                .await
                .ok()
        });
        let answers = join_all(asks)
            .await
            .into_iter()
            .flatten()
            .collect::<Vec<_>>();
        let best = answers
            .iter()
            .find(|map| map.covers_every_slot())
            .or_else(|| answers.first());
        if let Some(map) = best {
            if *map != *current {
                tracing::info!(
                    masters = map.masters().len(),
                    covered = map.covers_every_slot(),
                    "redis cluster slot map changed"
                );
                self.changes.fetch_add(1, Ordering::Relaxed);
                self.slots.store(Arc::new(map.clone()));
            }
        }
    }

    /// How each node known so far runs the scripts (see `RedisStore::call_commands`).
    pub fn call_commands(&self) -> Vec<Option<CallCommand>> {
        self.servers
            .lock()
            .values()
            .map(|server| server.calling.get())
            .collect()
    }

    /// Slot map reads after the first.
    pub fn slot_map_refreshes(&self) -> u64 {
        self.refreshes.load(Ordering::Relaxed)
    }

    /// Times the slot map read differed from the one before.
    pub fn slot_map_changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Connections found dead, to every node.
    pub fn connections_lost(&self) -> u64 {
        self.servers
            .lock()
            .values()
            .map(|server| server.startup.reachability.connections_lost())
            .sum()
    }

    /// Refund calls sent (each gives back what concurrent requests may have seen as consumed).
    pub fn refunds_sent(&self) -> u64 {
        self.refunds_sent.load(Ordering::Relaxed)
    }

    /// Refund calls that failed, leaving a denied request's reservation on a node (stricter,
    /// never more permissive, until the counter's window or refill takes it back).
    pub fn refunds_failed(&self) -> u64 {
        self.refunds_failed.load(Ordering::Relaxed)
    }
}

/// `CLUSTER SLOTS` through `shared`, by `deadline`.
async fn read_slot_map(
    shared: &Shared,
    asked: &HostPort,
    deadline: Instant,
) -> Result<SlotMap, StoreError> {
    let mut lease = shared.lease(deadline).await?;
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("SLOTS");
    let reply = lease.query(&cmd).await?.map_err(|error| {
        if error.to_string().contains("cluster support disabled") {
            StoreError::Unavailable(format!(
                "{asked} is not a cluster node (cluster support disabled): use --redis-url for \
                 a single server"
            ))
        } else {
            command_error(error)
        }
    })?;
    SlotMap::from_cluster_slots(&reply, asked)
}
