//! The cluster's slot map: which master owns each of the 16 384 hash slots, as `CLUSTER SLOTS`
//! tells, and the slot of a key.

use redis::Value;

use crate::store::redis::settings::topology::HostPort;
use crate::store::StoreError;

/// Hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16_384;

/// The hash slot of `key`: CRC16 (XMODEM) of its hash tag (the part inside the first `{...}`
/// when not empty), else of the whole key, modulo 16 384, as Redis computes it.
pub fn slot_of(key: &[u8]) -> u16 {
    let hashed = match key.iter().position(|&b| b == b'{') {
        Some(open) => match key[open + 1..].iter().position(|&b| b == b'}') {
            Some(len) if len > 0 => &key[open + 1..open + 1 + len],
            _ => key,
        },
        None => key,
    };
    crc16::State::<crc16::XMODEM>::calculate(hashed) % SLOTS
}

/// A contiguous range of slots and the master that owns it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Range {
    first: u16,
    last: u16,
    master: usize,
}

/// Which master owns each slot. Slots no master owns (a cluster being set up, or a shard lost
/// with no replica to promote) have no master.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SlotMap {
    /// Sorted by `first`, not overlapping.
    ranges: Vec<Range>,
    masters: Vec<HostPort>,
}

impl SlotMap {
    /// The map of a `CLUSTER SLOTS` reply given by the node at `asked` (an entry with an empty
    /// host means that node's own host, as Redis answers when it does not know its address).
    pub fn from_cluster_slots(reply: &Value, asked: &HostPort) -> Result<SlotMap, StoreError> {
        let bad = |what: &str| StoreError::Protocol(format!("CLUSTER SLOTS: {what}"));
        let Value::Array(entries) = reply else {
            return Err(bad("not an array"));
        };
        let mut map = SlotMap::default();
        for entry in entries {
            let Value::Array(fields) = entry else {
                return Err(bad("an entry that is not an array"));
            };
            let (Some(Value::Int(first)), Some(Value::Int(last)), Some(Value::Array(master))) =
                (fields.first(), fields.get(1), fields.get(2))
            else {
                return Err(bad("an entry without start, end and master"));
            };
            let (Ok(first), Ok(last)) = (u16::try_from(*first), u16::try_from(*last)) else {
                return Err(bad("a slot out of range"));
            };
            if first > last || last >= SLOTS {
                return Err(bad("a slot out of range"));
            }
            let host = match master.first() {
                Some(Value::BulkString(host)) => String::from_utf8_lossy(host).into_owned(),
                Some(Value::SimpleString(host)) => host.clone(),
                _ => return Err(bad("a master without a host")),
            };
            let host = if host.is_empty() || host == "?" {
                asked.host.clone()
            } else {
                host
            };
            let Some(Value::Int(port)) = master.get(1) else {
                return Err(bad("a master without a port"));
            };
            let port = u16::try_from(*port).map_err(|_| bad("a port out of range"))?;
            map.add(first, last, HostPort { host, port });
        }
        map.ranges.sort_by_key(|range| range.first);
        if map
            .ranges
            .windows(2)
            .any(|pair| pair[1].first <= pair[0].last)
        {
            return Err(bad("overlapping slot ranges"));
        }
        Ok(map)
    }

    fn add(&mut self, first: u16, last: u16, master: HostPort) {
        let index = match self.masters.iter().position(|known| *known == master) {
            Some(index) => index,
            None => {
                self.masters.push(master);
                self.masters.len() - 1
            }
        };
        self.ranges.push(Range {
            first,
            last,
            master: index,
        });
    }

    /// The master owning `slot`, if any.
    pub fn master_of(&self, slot: u16) -> Option<&HostPort> {
        let at = self.ranges.partition_point(|range| range.last < slot);
        self.ranges
            .get(at)
            .filter(|range| range.first <= slot)
            .map(|range| &self.masters[range.master])
    }

    /// Every master that owns at least one slot.
    pub fn masters(&self) -> &[HostPort] {
        &self.masters
    }

    /// Whether every slot has a master.
    pub fn covers_every_slot(&self) -> bool {
        let mut next = 0u32;
        for range in &self.ranges {
            if u32::from(range.first) != next {
                return false;
            }
            next = u32::from(range.last) + 1;
        }
        next == u32::from(SLOTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(host: &str, port: i64) -> Value {
        Value::Array(vec![
            Value::BulkString(host.as_bytes().to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ])
    }

    fn entry(first: i64, last: i64, master: Value) -> Value {
        Value::Array(vec![Value::Int(first), Value::Int(last), master])
    }

    #[test]
    fn slots_are_those_redis_computes() {
        // `CLUSTER KEYSLOT` answers of a Redis 7.0 server.
        assert_eq!(slot_of(b"a"), 15_495);
        assert_eq!(slot_of(b"b"), 3_300);
        assert_eq!(slot_of(b"w"), 3_696);
        assert_eq!(slot_of(b"rl1:{b}:gcra:1:x"), 3_300);
        assert_eq!(slot_of(b"x{}y"), slot_of(b"x{}y"));
        assert_ne!(slot_of(b"{}a"), slot_of(b"a"));
        assert_eq!(slot_of(b"{a"), slot_of(b"{a"));
    }

    #[test]
    fn maps_slots_to_masters_and_tells_coverage() {
        let asked = HostPort::parse("10.0.0.9:7000").unwrap();
        let reply = Value::Array(vec![
            entry(5_461, 16_383, node("10.0.0.2", 7001)),
            entry(0, 5_460, node("", 7000)),
        ]);
        let map = SlotMap::from_cluster_slots(&reply, &asked).unwrap();
        assert_eq!(map.master_of(0).unwrap().to_string(), "10.0.0.9:7000");
        assert_eq!(map.master_of(5_460).unwrap().port, 7000);
        assert_eq!(map.master_of(5_461).unwrap().to_string(), "10.0.0.2:7001");
        assert_eq!(map.master_of(16_383).unwrap().port, 7001);
        assert_eq!(map.masters().len(), 2);
        assert!(map.covers_every_slot());

        let partial = Value::Array(vec![entry(0, 5_460, node("h", 1))]);
        let map = SlotMap::from_cluster_slots(&partial, &asked).unwrap();
        assert!(!map.covers_every_slot());
        assert!(map.master_of(9_000).is_none());

        for garbage in [
            Value::Okay,
            Value::Array(vec![entry(10, 5, node("h", 1))]),
            Value::Array(vec![entry(0, 16_384, node("h", 1))]),
            Value::Array(vec![entry(0, 10, node("h", 1)), entry(5, 20, node("h", 2))]),
            Value::Array(vec![Value::Array(vec![Value::Int(0), Value::Int(1)])]),
        ] {
            assert!(
                SlotMap::from_cluster_slots(&garbage, &asked).is_err(),
                "{garbage:?}"
            );
        }
    }
}
