//! The memory budget of the RLQS state (`--rlqs-memory-budget`): what every stream, every
//! bucket and every stream's membership of a bucket hold, counted in bytes, so that the streams
//! together cannot make the process hold more whatever their number, the number of their
//! buckets or the size of the ids. A stream that does not fit is refused when it opens; a
//! report naming a bucket that does not fit ends its stream (the buckets before it applied).
//! What a stream held is given back when it ends or its buckets are abandoned.
//!
//! The costs are what the registry's structures take on a 64-bit build, rounded up: measured
//! with 1 000 streams × 100 shared buckets (523 B of VmRSS per stream bucket, docs/performance.md,
//! "RLQS streams and buckets") and streams of 10 000 buckets of their own.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::bucket_key::BucketKey;

/// What a stream holds besides its buckets: its entry, outbox, reader task and their maps'
/// first allocations (the call itself is charged to the gRPC memory budget).
pub const STREAM_COST: usize = 2 << 10;

/// What one stream's membership of a bucket holds: its demand, assignments and time in the
/// bucket's map, the bucket in the stream's set, and one pending action in its outbox.
pub const MEMBER_COST: usize = 400;

/// What a bucket holds besides its key's bytes and its members: its state in the registry's
/// map, the shared key's allocation and its place in the set of due buckets.
pub const BUCKET_COST: usize = 256;

/// What one entry of a bucket id holds besides its key and value bytes: the two strings.
const ENTRY_COST: usize = 48;

/// What `key` holds, its bucket's own cost included (not its members').
pub fn bucket_bytes(key: &BucketKey) -> usize {
    key.bucket
        .entries()
        .iter()
        .map(|(name, value)| ENTRY_COST + name.len() + value.len())
        .fold(BUCKET_COST + key.domain.len(), usize::saturating_add)
}

/// The budget and what is held against it.
#[derive(Debug)]
pub struct StateBudget {
    limit: usize,
    held: AtomicUsize,
}

/// The budget was spent: nothing was charged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spent;

impl StateBudget {
    pub fn new(limit: usize) -> StateBudget {
        StateBudget {
            limit,
            held: AtomicUsize::new(0),
        }
    }

    /// The budget, in bytes.
    pub fn limit(&self) -> usize {
        self.limit
    }

    /// Bytes held against it now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Relaxed)
    }

    /// Charges `bytes` more, or nothing when they do not fit.
    pub fn charge(&self, bytes: usize) -> Result<(), Spent> {
        let before = self.held.fetch_add(bytes, Ordering::AcqRel);
        if before.saturating_add(bytes) > self.limit {
            self.held.fetch_sub(bytes, Ordering::AcqRel);
            return Err(Spent);
        }
        Ok(())
    }

    /// Gives back `bytes` charged before.
    pub fn release(&self, bytes: usize) {
        self.held.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Why a stream or a bucket is refused when the budget is spent.
    pub fn refusal(&self) -> String {
        format!(
            "the server's RLQS streams hold their memory budget of {} bytes (--rlqs-memory-budget)",
            self.limit
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::quota::BucketId;

    #[test]
    fn charges_fit_the_limit_or_change_nothing() {
        let budget = StateBudget::new(1000);
        assert_eq!(budget.charge(600), Ok(()));
        assert_eq!(budget.charge(401), Err(Spent));
        assert_eq!(budget.held(), 600);
        assert_eq!(budget.charge(400), Ok(()));
        budget.release(1000);
        assert_eq!(budget.held(), 0);
        assert!(budget.refusal().contains("--rlqs-memory-budget"));
    }

    #[test]
    fn a_bucket_costs_its_bytes() {
        let key = |value: &str| BucketKey {
            domain: "edge".into(),
            bucket: BucketId::new([("name", value)]).expect("an id"),
        };
        assert_eq!(
            bucket_bytes(&key("a")),
            BUCKET_COST + 4 + ENTRY_COST + 4 + 1
        );
        assert_eq!(
            bucket_bytes(&key(&"x".repeat(30_000))) - bucket_bytes(&key("")),
            30_000
        );
    }
}
