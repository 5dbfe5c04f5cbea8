//! One thread's view of the cluster: its pools to the nodes, and the health of the masters as
//! they see them. Its batches are decided by [`super::route`].

use std::collections::HashMap;
use std::sync::Arc;

use futures::future::join_all;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::Cluster;
use crate::store::redis::server::pool::{PoolSettings, Shared};
use crate::store::redis::settings::topology::HostPort;
use crate::store::StoreError;

/// One thread's view of the cluster: its own pool to each node (see `store::redis::local`).
pub(in crate::store::redis) struct ClusterLane {
    pub(super) cluster: Arc<Cluster>,
    pub(super) settings: PoolSettings,
    links: Mutex<HashMap<HostPort, Arc<Shared>>>,
}

impl ClusterLane {
    pub(in crate::store::redis) fn new(
        cluster: Arc<Cluster>,
        settings: &PoolSettings,
    ) -> ClusterLane {
        ClusterLane {
            cluster,
            settings: settings.clone(),
            links: Mutex::new(HashMap::new()),
        }
    }

    /// This thread's pool to the node at `address`.
    pub(super) fn link(&self, address: &HostPort) -> Result<Arc<Shared>, StoreError> {
        if let Some(link) = self.links.lock().get(address) {
            return Ok(link.clone());
        }
        let server = self.cluster.server(address)?;
        Ok(self
            .links
            .lock()
            .entry(address.clone())
            .or_insert_with(|| server.thread_pool(&self.settings))
            .clone())
    }

    /// Whether every slot has a master and every master answers `PING` by `deadline`. A master
    /// that does not answer has the slot map read again, so a failover is followed without
    /// waiting for a request to meet it.
    pub(in crate::store::redis) async fn is_healthy(&self, deadline: Instant) -> bool {
        let seen = self.cluster.slot_map_refreshes();
        let map = self.cluster.slot_map();
        let pings = map.masters().iter().map(|master| async move {
            match self.link(master) {
                Ok(link) => link.ping(deadline).await,
                Err(_) => false,
            }
        });
        let answered = join_all(pings).await.into_iter().all(|up| up);
        if answered && map.covers_every_slot() {
            return true;
        }
        let refresh_by = Instant::now() + self.settings.timeout;
        self.cluster.refresh(seen, refresh_by).await;
        false
    }
}
