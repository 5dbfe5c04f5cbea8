//! RLQS demands in Redis, so that every ratelimitd replica on one Redis shares a bucket's limit
//! among the Envoys of all replicas (`lua/rlqs_demands.lua`).
//!
//! A bucket's demands are one hash, `[<prefix>]rlqs1:{<sha256>}`, where the SHA-256 of the bucket's
//! name (domain and bucket id, as the service names it) makes the key injective in practice,
//! bounded in length, and its own hash tag (one slot per bucket on a Redis Cluster). Each stream's
//! field expires on Redis's clock, so a replica that dies leaves its Envoys' demands behind for one
//! assignment lifetime at most.

use std::fmt::Write as _;
use std::time::Duration;

use redis::Value;
use sha2::{Digest, Sha256};

use super::scripts::side::SideScript;
use super::store::RedisStore;
use crate::store::{QuotaDemands, StreamDemand};

static DEMANDS: SideScript = SideScript::new(include_str!("../../../lua/rlqs_demands.lua"));

/// The demands of every replica's streams, in the store's Redis.
#[derive(Clone)]
pub struct RedisDemands {
    store: RedisStore,
}

impl RedisDemands {
    pub fn new(store: RedisStore) -> RedisDemands {
        RedisDemands { store }
    }

    /// The hash of `bucket`'s demands.
    pub fn key(&self, bucket: &str) -> String {
        let digest = Sha256::digest(bucket.as_bytes());
        let mut key = format!("{}rlqs1:{{", self.store.key_layout().prefix());
        for byte in digest {
            let _ = write!(key, "{byte:02x}");
        }
        key.push('}');
        key
    }

    async fn call(
        &self,
        bucket: &str,
        args: &[String],
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        let reply = self
            .store
            .run_side_script(&DEMANDS, &self.key(bucket), args)
            .await
            .map_err(|error| error.to_string())?;
        parse(reply)
    }
}

impl QuotaDemands for RedisDemands {
    fn shared(&self) -> bool {
        true
    }

    async fn publish(
        &self,
        bucket: &str,
        streams: &[(u64, StreamDemand)],
        ttl: Duration,
    ) -> Result<Vec<(u64, StreamDemand)>, String> {
        let mut args = Vec::with_capacity(1 + 2 * streams.len());
        args.push(ttl.as_millis().max(1).to_string());
        for (stream, demand) in streams {
            args.push(stream.to_string());
            args.push(demand.map(|rate| format!("{rate}")).unwrap_or_default());
        }
        self.call(bucket, &args).await
    }

    async fn remove(&self, bucket: &str, streams: &[u64]) {
        let mut args = Vec::with_capacity(1 + 2 * streams.len());
        args.push("0".to_owned());
        for stream in streams {
            args.push(stream.to_string());
            args.push("-".to_owned());
        }
        if let Err(error) = self.call(bucket, &args).await {
            tracing::debug!(%error, "RLQS demands not removed from Redis; they expire by themselves");
        }
    }
}

/// The script's reply: stream, demand pairs, sorted by stream.
fn parse(reply: Value) -> Result<Vec<(u64, StreamDemand)>, String> {
    let Value::Array(items) = reply else {
        return Err(format!("RLQS demands: unexpected reply {reply:?}"));
    };
    let text = |value: &Value| match value {
        Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Ok(text.clone()),
        other => Err(format!("RLQS demands: unexpected item {other:?}")),
    };
    let mut demands = Vec::with_capacity(items.len() / 2);
    for pair in items.chunks(2) {
        let [stream, demand] = pair else {
            return Err("RLQS demands: an odd reply".into());
        };
        let stream: u64 = text(stream)?
            .parse()
            .map_err(|_| "RLQS demands: a stream id that is not a number".to_owned())?;
        let demand = text(demand)?;
        let demand = if demand.is_empty() {
            None
        } else {
            Some(
                demand
                    .parse::<f64>()
                    .map_err(|_| format!("RLQS demands: `{demand}` is not a rate"))?,
            )
        };
        demands.push((stream, demand));
    }
    demands.sort_unstable_by_key(|(stream, _)| *stream);
    Ok(demands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_read_as_stream_demand_pairs() {
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let reply = Value::Array(vec![bulk("9"), bulk("2.5"), bulk("3"), bulk("")]);
        assert_eq!(parse(reply), Ok(vec![(3, None), (9, Some(2.5))]));
        assert_eq!(parse(Value::Array(vec![])), Ok(vec![]));
        assert!(parse(Value::Array(vec![bulk("x"), bulk("1")])).is_err());
        assert!(parse(Value::Array(vec![bulk("1")])).is_err());
        assert!(parse(Value::Int(1)).is_err());
    }
}
