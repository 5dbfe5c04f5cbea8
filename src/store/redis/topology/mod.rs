//! The deployments behind the store: what its calls go to ([`backend`]: one server, the master
//! the sentinels name, or a Redis Cluster, [`cluster`]), and the one interface a thread's batch
//! dispatcher calls ([`route`]) with the requests it queued ([`pending`]), decided on one server
//! by one call ([`single`]) or on a cluster node by node.

pub(super) mod backend;
pub mod cluster;
pub(super) mod pending;
pub(super) mod route;
mod single;
