//! Where every RLQS stream's demand for a bucket lives, so that one limit is shared by all the
//! Envoys reporting the bucket: this process's memory for one replica ([`MemoryDemands`]), or
//! Redis for every replica that shares it ([`super::redis::RedisDemands`]), so that one limit is
//! shared by the Envoys of every replica.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// One stream's smoothed demand for a bucket: requests per second, `None` for a newcomer whose
/// reports have not covered any time yet.
pub type StreamDemand = Option<f64>;

/// The demands of every stream reporting a bucket, under a key naming the domain and bucket.
pub trait QuotaDemands: Send + Sync + 'static {
    /// Publishes `stream`'s demand for `bucket`, kept for `ttl` unless published again, and
    /// returns every live stream's demand for the bucket (this one's included), ordered by
    /// stream id.
    fn publish(
        &self,
        bucket: &str,
        stream: u64,
        demand: StreamDemand,
        ttl: Duration,
    ) -> impl Future<Output = Result<Vec<(u64, StreamDemand)>, String>> + Send;

    /// Every live stream's demand for `bucket`, ordered by stream id.
    fn read(
        &self,
        bucket: &str,
    ) -> impl Future<Output = Result<Vec<(u64, StreamDemand)>, String>> + Send;

    /// Forgets `stream`'s demand for `bucket` (it left or abandoned the bucket).
    fn remove(&self, bucket: &str, stream: u64) -> impl Future<Output = ()> + Send;
}

/// One bucket's streams: each one's demand and when it expires.
type BucketDemands = HashMap<u64, (StreamDemand, Instant)>;

/// The demands of the store the server runs on: Redis when it has one, else this process.
pub enum Demands {
    Memory(MemoryDemands),
    Redis(super::redis::RedisDemands),
}

impl QuotaDemands for Demands {
    async fn publish(
        &self,
        bucket: &str,
        stream: u64,
        demand: StreamDemand,
        ttl: Duration,
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        match self {
            Demands::Memory(memory) => memory.publish(bucket, stream, demand, ttl).await,
            Demands::Redis(redis) => redis.publish(bucket, stream, demand, ttl).await,
        }
    }

    async fn read(&self, bucket: &str) -> Result<Vec<(u64, StreamDemand)>, String> {
        match self {
            Demands::Memory(memory) => memory.read(bucket).await,
            Demands::Redis(redis) => redis.read(bucket).await,
        }
    }

    async fn remove(&self, bucket: &str, stream: u64) {
        match self {
            Demands::Memory(memory) => memory.remove(bucket, stream).await,
            Demands::Redis(redis) => redis.remove(bucket, stream).await,
        }
    }
}

/// The demands in this process: one replica's streams share its limits.
#[derive(Debug, Default)]
pub struct MemoryDemands {
    buckets: Mutex<HashMap<String, BucketDemands>>,
}

impl MemoryDemands {
    pub fn new() -> MemoryDemands {
        MemoryDemands::default()
    }

    fn live(streams: &mut BucketDemands) -> Vec<(u64, StreamDemand)> {
        let now = Instant::now();
        streams.retain(|_, (_, expires)| *expires > now);
        let mut live: Vec<(u64, StreamDemand)> = streams
            .iter()
            .map(|(stream, (demand, _))| (*stream, *demand))
            .collect();
        live.sort_unstable_by_key(|(stream, _)| *stream);
        live
    }
}

impl QuotaDemands for MemoryDemands {
    async fn publish(
        &self,
        bucket: &str,
        stream: u64,
        demand: StreamDemand,
        ttl: Duration,
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        let mut buckets = self.buckets.lock();
        let streams = buckets.entry(bucket.to_owned()).or_default();
        streams.insert(stream, (demand, Instant::now() + ttl));
        Ok(MemoryDemands::live(streams))
    }

    async fn read(&self, bucket: &str) -> Result<Vec<(u64, StreamDemand)>, String> {
        let mut buckets = self.buckets.lock();
        Ok(buckets
            .get_mut(bucket)
            .map(MemoryDemands::live)
            .unwrap_or_default())
    }

    async fn remove(&self, bucket: &str, stream: u64) {
        let mut buckets = self.buckets.lock();
        if let Some(streams) = buckets.get_mut(bucket) {
            streams.remove(&stream);
            if streams.is_empty() {
                buckets.remove(bucket);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn demands_are_shared_until_removed_or_expired() {
        let demands = MemoryDemands::new();
        let long = Duration::from_secs(60);
        assert_eq!(
            demands.publish("b", 2, Some(5.0), long).await,
            Ok(vec![(2, Some(5.0))])
        );
        assert_eq!(
            demands.publish("b", 1, None, long).await,
            Ok(vec![(1, None), (2, Some(5.0))])
        );
        demands.remove("b", 2).await;
        assert_eq!(demands.read("b").await, Ok(vec![(1, None)]));
        demands
            .publish("b", 3, Some(1.0), Duration::ZERO)
            .await
            .ok();
        assert_eq!(demands.read("b").await, Ok(vec![(1, None)]), "expired");
        assert_eq!(demands.read("other").await, Ok(vec![]));
    }
}
