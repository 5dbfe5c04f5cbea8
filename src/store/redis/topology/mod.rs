//! The deployments the store calls besides a single server: a Redis Cluster ([`cluster`]).

pub mod cluster;
