//! Where a thread's dispatcher sends its batches: the one interface the batcher calls, whichever
//! deployment is behind it.

use std::sync::Arc;

use tokio::time::Instant;

use super::cluster::lane::ClusterLane;
use super::cluster::route::{decide, give_back};
use super::pending::Pending;
use super::single::call_server;
use crate::store::redis::scripts::refund::{refund_command, Refund, REFUND};
use crate::store::redis::scripts::request::KeyPlacement;
use crate::store::redis::server::pool::Shared;
use crate::store::StoreError;

/// Where a dispatcher's calls go.
pub(in crate::store::redis) enum Route {
    /// One server: each batch is one script call.
    Server(Arc<Shared>),
    /// A Redis Cluster: each batch is one script call per node it touches (see [`super::cluster`]).
    Cluster(Arc<ClusterLane>),
}

impl Route {
    /// Whether the servers this route calls answer (see `RedisStore::is_healthy`).
    pub(in crate::store::redis) async fn is_healthy(&self, deadline: Instant) -> bool {
        match self {
            Route::Server(shared) => shared.ping(deadline).await,
            Route::Cluster(lane) => lane.is_healthy(deadline).await,
        }
    }

    /// The refund script call(s) giving back `refunds` of leases (see `Store::give_back`), at
    /// `pinned` µs instead of the server's clock when set (tests).
    pub(in crate::store::redis) async fn give_back(
        &self,
        refunds: Vec<Refund>,
        pinned: Option<u64>,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        if refunds.is_empty() {
            return Ok(());
        }
        match self {
            Route::Server(shared) => {
                let command = |by| refund_command(&refunds, pinned, KeyPlacement::Declared, by);
                shared
                    .evaluate(&REFUND, command, deadline)
                    .await
                    .map(|_| ())
            }
            Route::Cluster(lane) => give_back(lane, refunds, pinned, deadline).await,
        }
    }

    /// The script call(s) deciding `batch`, answering every request of it; the batch back,
    /// emptied, when the call kept it.
    pub(in crate::store::redis) async fn call(&self, batch: Vec<Pending>) -> Option<Vec<Pending>> {
        match self {
            Route::Server(shared) => Some(call_server(shared, batch).await),
            Route::Cluster(lane) => {
                decide(lane, batch).await;
                None
            }
        }
    }
}
