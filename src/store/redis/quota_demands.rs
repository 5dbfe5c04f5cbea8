//! RLQS demands in Redis, so that every ratelimitd replica on one Redis shares a bucket's limit
//! among the Envoys of all replicas (`lua/rlqs_demands.lua`).
//!
//! A bucket's demands are one hash, `[<prefix>]rlqs2:{<sha256>}`, where the SHA-256 of the bucket's
//! name (domain and bucket id, as the service names it) makes the key injective in practice,
//! bounded in length, and its own hash tag (one slot per bucket on a Redis Cluster). Each replica
//! writes the demands of all its streams of the bucket as one field, packed, so the script's work
//! grows with the replicas rather than with the Envoys. A field expires on Redis's clock, so a
//! replica that dies leaves its Envoys' demands behind for one assignment lifetime at most.

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
    /// This process's field in each bucket's hash: random, so replicas do not meet.
    replica: String,
}

impl RedisDemands {
    pub fn new(store: RedisStore) -> RedisDemands {
        use std::hash::BuildHasher;
        let random = std::collections::hash_map::RandomState::new().hash_one(std::process::id());
        RedisDemands {
            store,
            replica: format!("{random:016x}"),
        }
    }

    /// The hash of `bucket`'s demands.
    pub fn key(&self, bucket: &str) -> String {
        let digest = Sha256::digest(bucket.as_bytes());
        let mut key = format!("{}rlqs2:{{", self.store.key_layout().prefix());
        for byte in digest {
            let _ = write!(key, "{byte:02x}");
        }
        key.push('}');
        key
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
        let args = [
            self.replica.clone(),
            ttl.as_millis().max(1).to_string(),
            pack(streams),
        ];
        let reply = self
            .store
            .run_side_script(&DEMANDS, &self.key(bucket), &args)
            .await
            .map_err(|error| error.to_string())?;
        parse(reply)
    }
}

/// `streams` as the script keeps them: `<stream>=<demand>;...`, a newcomer's demand empty.
fn pack(streams: &[(u64, StreamDemand)]) -> String {
    let mut packed = String::with_capacity(streams.len() * 24);
    for (stream, demand) in streams {
        let _ = write!(packed, "{stream}=");
        if let Some(rate) = demand {
            let _ = write!(packed, "{rate}");
        }
        packed.push(';');
    }
    packed
}

/// The script's reply: each live replica's packed demands, unpacked and sorted by stream.
fn parse(reply: Value) -> Result<Vec<(u64, StreamDemand)>, String> {
    let Value::Array(items) = reply else {
        return Err(format!("RLQS demands: unexpected reply {reply:?}"));
    };
    let mut demands = Vec::new();
    for item in items {
        let packed = match &item {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes),
            other => return Err(format!("RLQS demands: unexpected item {other:?}")),
        };
        for entry in packed.split(';').filter(|entry| !entry.is_empty()) {
            let Some((stream, demand)) = entry.split_once('=') else {
                return Err(format!("RLQS demands: `{entry}` is not stream=demand"));
            };
            let stream: u64 = stream
                .parse()
                .map_err(|_| format!("RLQS demands: `{stream}` is not a stream id"))?;
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
    }
    demands.sort_unstable_by_key(|(stream, _)| *stream);
    Ok(demands)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demands_pack_and_replies_unpack_as_stream_demand_pairs() {
        assert_eq!(pack(&[(9, Some(2.5)), (3, None)]), "9=2.5;3=;");
        assert_eq!(pack(&[]), "");
        let bulk = |text: &str| Value::BulkString(text.as_bytes().to_vec());
        let reply = Value::Array(vec![bulk("9=2.5;3=;"), bulk("7=0.1;")]);
        assert_eq!(
            parse(reply),
            Ok(vec![(3, None), (7, Some(0.1)), (9, Some(2.5))])
        );
        assert_eq!(parse(Value::Array(vec![])), Ok(vec![]));
        assert!(parse(Value::Array(vec![bulk("x=1;")])).is_err());
        assert!(parse(Value::Array(vec![bulk("1")])).is_err());
        assert!(parse(Value::Array(vec![bulk("1=fast;")])).is_err());
        assert!(parse(Value::Int(1)).is_err());
    }
}
