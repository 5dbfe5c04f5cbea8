//! What the RLQS caps refused, as `ratelimitd_rlqs_limited_total{limit}` counts it.

use std::sync::atomic::{AtomicU64, Ordering};

/// One RLQS cap that refused a stream or ended one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlqsBound {
    /// A stream refused at `--rlqs-max-streams`.
    Streams,
    /// A stream ended for reporting more than `--rlqs-max-buckets-per-stream` buckets.
    BucketsPerStream,
    /// A stream ended for reporting a bucket larger than `--rlqs-max-bucket-id-bytes`.
    BucketIdBytes,
    /// A stream refused, or ended by a bucket, at `--rlqs-memory-budget`.
    MemoryBudget,
    /// A stream refused at `--rlqs-max-streams-per-connection`.
    StreamsPerConnection,
    /// A stream ended for sending no report within `--rlqs-idle-timeout`.
    IdleStream,
}

impl RlqsBound {
    pub const ALL: [RlqsBound; 6] = [
        RlqsBound::Streams,
        RlqsBound::BucketsPerStream,
        RlqsBound::BucketIdBytes,
        RlqsBound::MemoryBudget,
        RlqsBound::StreamsPerConnection,
        RlqsBound::IdleStream,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            RlqsBound::Streams => "streams",
            RlqsBound::BucketsPerStream => "buckets_per_stream",
            RlqsBound::BucketIdBytes => "bucket_id_bytes",
            RlqsBound::MemoryBudget => "memory_budget",
            RlqsBound::StreamsPerConnection => "streams_per_connection",
            RlqsBound::IdleStream => "idle_streams",
        }
    }
}

/// How often each [`RlqsBound`] stepped in.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [AtomicU64; RlqsBound::ALL.len()],
}

impl Refusals {
    pub fn record(&self, bound: RlqsBound) {
        self.counts[bound as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every bound with its count, in [`RlqsBound::ALL`]'s order.
    pub fn counts(&self) -> Vec<(String, u64)> {
        RlqsBound::ALL
            .iter()
            .map(|bound| {
                let count = self.counts[*bound as usize].load(Ordering::Relaxed);
                (bound.label().to_owned(), count)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_bound_counts_under_its_own_label() {
        let refusals = Refusals::default();
        refusals.record(RlqsBound::BucketIdBytes);
        refusals.record(RlqsBound::BucketIdBytes);
        refusals.record(RlqsBound::Streams);
        let counts = refusals.counts();
        assert_eq!(counts.len(), RlqsBound::ALL.len());
        for (bound, (label, _)) in RlqsBound::ALL.iter().zip(&counts) {
            assert_eq!(bound.label(), label);
        }
        assert_eq!(counts[0].1, 1);
        assert_eq!(counts[1].1, 0);
        assert_eq!(counts[2].1, 2);
    }
}
