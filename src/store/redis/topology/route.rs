//! Where a thread's dispatcher sends its batches: the one interface the batcher calls, whichever
//! deployment is behind it.

use std::sync::Arc;

use tokio::time::Instant;

use super::cluster::lane::ClusterLane;
use super::cluster::route::decide;
use super::pending::Pending;
use super::single::call_server;
use crate::store::redis::server::pool::Shared;

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
