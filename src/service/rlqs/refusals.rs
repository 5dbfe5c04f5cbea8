//! What the RLQS caps refused, as `ratelimitd_rlqs_limited_total{limit}` counts it.

use std::sync::atomic::{AtomicU64, Ordering};

/// One RLQS cap that refused a stream or ended one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RlqsLimit {
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

impl RlqsLimit {
    pub const ALL: [RlqsLimit; 6] = [
        RlqsLimit::Streams,
        RlqsLimit::BucketsPerStream,
        RlqsLimit::BucketIdBytes,
        RlqsLimit::MemoryBudget,
        RlqsLimit::StreamsPerConnection,
        RlqsLimit::IdleStream,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            RlqsLimit::Streams => "streams",
            RlqsLimit::BucketsPerStream => "buckets_per_stream",
            RlqsLimit::BucketIdBytes => "bucket_id_bytes",
            RlqsLimit::MemoryBudget => "memory_budget",
            RlqsLimit::StreamsPerConnection => "streams_per_connection",
            RlqsLimit::IdleStream => "idle_streams",
        }
    }
}

/// How often each [`RlqsLimit`] stepped in.
#[derive(Debug, Default)]
pub struct Refusals {
    counts: [AtomicU64; RlqsLimit::ALL.len()],
}

impl Refusals {
    pub fn record(&self, limit: RlqsLimit) {
        self.counts[limit as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// Every limit with its count, in [`RlqsLimit::ALL`]'s order.
    pub fn counts(&self) -> Vec<(String, u64)> {
        RlqsLimit::ALL
            .iter()
            .map(|limit| {
                let count = self.counts[*limit as usize].load(Ordering::Relaxed);
                (limit.label().to_owned(), count)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_limit_counts_under_its_own_label() {
        let refusals = Refusals::default();
        refusals.record(RlqsLimit::BucketIdBytes);
        refusals.record(RlqsLimit::BucketIdBytes);
        refusals.record(RlqsLimit::Streams);
        let counts = refusals.counts();
        assert_eq!(counts.len(), RlqsLimit::ALL.len());
        for (limit, (label, _)) in RlqsLimit::ALL.iter().zip(&counts) {
            assert_eq!(limit.label(), label);
        }
        assert_eq!(counts[0].1, 1);
        assert_eq!(counts[1].1, 0);
        assert_eq!(counts[2].1, 2);
    }
}
