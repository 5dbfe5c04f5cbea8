//! Where every RLQS stream's demand for a bucket lives, so that one limit is shared by all the
//! Envoys reporting the bucket: nowhere but the registry's own streams for one replica
//! ([`MemoryDemands`]), or Redis for every replica that shares it
//! ([`super::redis::RedisDemands`]), so that one limit is shared by the Envoys of every replica.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::Connecting;

/// One stream's smoothed demand for a bucket: requests per second, `None` for a newcomer whose
/// reports have not covered any time yet.
pub type StreamDemand = Option<f64>;

/// The demands of every stream reporting a bucket, under a key naming the domain and bucket.
pub trait QuotaDemands: Send + Sync + 'static {
    /// Whether other processes' streams share these demands. When not, the caller's own
    /// streams are every stream there is, and it need not publish them.
    fn shared(&self) -> bool;

    /// Publishes the demands of all of this process's `streams` for `bucket`, in place of what
    /// it published before (a stream left out is forgotten; none: the process has left the
    /// bucket), kept for `ttl` unless published again, and returns every live stream's demand
    /// for the bucket (these included), ordered by stream id.
    ///
    /// One call per computation of the bucket's shares, whatever the number of streams, so that
    /// a store shared over the network costs one round trip per computation.
    fn publish(
        &self,
        bucket: &str,
        streams: &[(u64, StreamDemand)],
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<(u64, StreamDemand)>, String>> + Send;
}

/// The demands of the store the server runs on: Redis when it has one (once startup has
/// connected it: until then publishing fails, and shares come from this process's streams), else
/// this process.
pub enum Demands {
    Memory(MemoryDemands),
    Redis(Arc<Connecting<super::redis::RedisDemands>>),
}

impl QuotaDemands for Demands {
    fn shared(&self) -> bool {
        match self {
            Demands::Memory(memory) => memory.shared(),
            Demands::Redis(_) => true,
        }
    }

    async fn publish(
        &self,
        bucket: &str,
        streams: &[(u64, StreamDemand)],
        ttl: Duration,
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        match self {
            Demands::Memory(memory) => memory.publish(bucket, streams, ttl).await,
            Demands::Redis(redis) => match redis.get() {
                Some(redis) => redis.publish(bucket, streams, ttl).await,
                None => Err(redis.not_yet().to_string()),
            },
        }
    }
}

/// The demands of one replica without a shared store: its own streams are every stream, so
/// nothing is kept here ([`QuotaDemands::shared`] is false, and callers skip publishing).
#[derive(Debug, Default)]
pub struct MemoryDemands;

impl MemoryDemands {
    pub fn new() -> MemoryDemands {
        MemoryDemands
    }
}

impl QuotaDemands for MemoryDemands {
    fn shared(&self) -> bool {
        false
    }

    /// The given streams, ordered by stream id: no other process shares them.
    async fn publish(
        &self,
        _bucket: &str,
        streams: &[(u64, StreamDemand)],
        _ttl: Duration,
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        let mut all = streams.to_vec();
        all.sort_unstable_by_key(|(stream, _)| *stream);
        Ok(all)
    }
}
