//! What the RLQS service is told by its flags.

use std::time::Duration;

use crate::limiter::quota::{BlanketRule, DEFAULT_IDLE_ABANDON, DEFAULT_REPORT_PERIOD};

/// The shortest time between two computations of one bucket's shares (the default of
/// [`RlqsSettings::rebalance_gap`]; for buckets of more than 100 streams it grows with their
/// number, up to 1 s): reports and streams coming and going in between are folded into the next
/// one, which the registry runs when no report does. A tenth of a second keeps a newcomer's first
/// assignment and a departure's release prompt (Envoy reports every 5 s), while a bucket that
/// 1 000 Envoys report costs 1 000 demands once a second, not a million.
pub const REBALANCE_GAP: Duration = Duration::from_millis(100);

/// The RLQS service's parameters (docs/rlqs.md, "Parameters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RlqsSettings {
    /// What a bucket no rule matches gets (`--rlqs-unmatched`); also every bucket of a domain no
    /// configuration defines.
    pub unmatched: BlanketRule,
    /// A bucket of a stream whose reports counted no request for longer than this is abandoned,
    /// and a stream that sends no report for this long and a report period is ended
    /// (`--rlqs-idle-timeout`).
    pub idle_timeout: Duration,
    /// Buckets one stream may subscribe (`--rlqs-max-buckets-per-stream`); a report beyond it ends
    /// the stream with RESOURCE_EXHAUSTED.
    pub max_buckets_per_stream: usize,
    /// Streams open at once (`--rlqs-max-streams`); one more is refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// Streams open at once on one connection (`--rlqs-max-streams-per-connection`); one more
    /// is refused with RESOURCE_EXHAUSTED.
    pub max_streams_per_connection: usize,
    /// Largest bucket, in bytes: its id as the wire encodes it plus its report's domain
    /// (`--rlqs-max-bucket-id-bytes`); a report naming a larger one ends the stream with
    /// INVALID_ARGUMENT before any of it is applied.
    pub max_bucket_id_bytes: usize,
    /// Bytes the streams' state may hold in all (`--rlqs-memory-budget`,
    /// [`super::budget::StateBudget`]): one stream more is refused, a bucket more ends its
    /// stream, with RESOURCE_EXHAUSTED.
    pub memory_budget: usize,
    /// Envoy's report period (5 s in Envoy 1.40, whatever its `reporting_interval` says): the
    /// assignment time to live is a few of them.
    pub report_period: Duration,
    /// The shortest time between two computations of one bucket's shares
    /// ([`REBALANCE_GAP`]; no flag).
    pub rebalance_gap: Duration,
    /// Global shadow or quota mode (`--shadow-mode`, `--quota-mode`): no limit denies, so every
    /// bucket gets ALLOW_ALL, as every RLS answer is OK; reports are still counted.
    pub never_deny: bool,
}

impl RlqsSettings {
    /// The default of `--rlqs-max-buckets-per-stream`.
    pub const DEFAULT_MAX_BUCKETS_PER_STREAM: usize = 10_000;
    /// The default of `--rlqs-max-streams`.
    pub const DEFAULT_MAX_STREAMS: usize = 10_000;
    /// The default of `--rlqs-max-streams-per-connection`: an Envoy opens one stream per
    /// `rate_limit_quota` filter configuration.
    pub const DEFAULT_MAX_STREAMS_PER_CONNECTION: usize = 16;
    /// The default of `--rlqs-max-bucket-id-bytes`: a few keys with values the length of a
    /// long URL path.
    pub const DEFAULT_MAX_BUCKET_ID_BYTES: usize = 1 << 10;
    /// `--rlqs-memory-budget` when the command line does not size it from the process's
    /// memory.
    pub const DEFAULT_MEMORY_BUDGET: usize = 1 << 30;

    /// The largest usage report accepted (a gRPC message of the RLQS method), derived from the
    /// caps rather than set on its own: a report of `max_buckets_per_stream` buckets, each of
    /// `max_bucket_id_bytes` with the most its other fields take, and its domain, fits, so that
    /// an Envoy reporting every bucket it may hold is never refused by the message's size
    /// (Envoy sends all its buckets in one report). At most what a gRPC length prefix can
    /// declare.
    pub fn max_report_bytes(&self) -> usize {
        let per_usage = self.max_bucket_id_bytes.saturating_add(USAGE_FIELDS_BYTES);
        let cap = self
            .max_buckets_per_stream
            .saturating_mul(per_usage)
            .saturating_add(self.max_bucket_id_bytes)
            .saturating_add(FIELD_HEADER_BYTES);
        cap.min(u32::MAX as usize)
    }
}

/// Most bytes a field's tag and length take in a report: a one-byte tag and a length of at most
/// four varint bytes (256 MiB).
const FIELD_HEADER_BYTES: usize = 5;

/// Most bytes one `BucketQuotaUsage` takes besides its bucket id's own encoding: its header and
/// its bucket id's in the report, `time_elapsed` (a header, seconds and nanos of ten varint
/// bytes each with their tags) and the two counts (ten varint bytes with a tag each).
const USAGE_FIELDS_BYTES: usize = 2 * FIELD_HEADER_BYTES + (2 + 2 * 11) + 2 * 11;

impl Default for RlqsSettings {
    fn default() -> RlqsSettings {
        RlqsSettings {
            unmatched: BlanketRule::AllowAll,
            idle_timeout: DEFAULT_IDLE_ABANDON,
            max_buckets_per_stream: RlqsSettings::DEFAULT_MAX_BUCKETS_PER_STREAM,
            max_streams: RlqsSettings::DEFAULT_MAX_STREAMS,
            max_streams_per_connection: RlqsSettings::DEFAULT_MAX_STREAMS_PER_CONNECTION,
            max_bucket_id_bytes: RlqsSettings::DEFAULT_MAX_BUCKET_ID_BYTES,
            memory_budget: RlqsSettings::DEFAULT_MEMORY_BUDGET,
            report_period: DEFAULT_REPORT_PERIOD,
            rebalance_gap: REBALANCE_GAP,
            never_deny: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::rlqs::rate_limit_quota_usage_reports::BucketQuotaUsage;
    use crate::proto::rlqs::{BucketId, RateLimitQuotaUsageReports};

    /// The largest report of `buckets` buckets of `id_bytes` each as the cap counts them: the
    /// shortest domain, and every other field at its longest.
    fn largest_report(buckets: usize, id_bytes: usize) -> RateLimitQuotaUsageReports {
        let domain = "d".to_owned();
        let domain_bytes = domain.len();
        let usage = |i: usize| {
            let mut id = BucketId {
                bucket: [("k".to_owned(), format!("{i:08}"))].into_iter().collect(),
            };
            // Longer values take longer length prefixes: pad, then trim what the prefixes took.
            let mut pad = id_bytes - domain_bytes - id.encoded_len();
            loop {
                id.bucket
                    .insert("k".to_owned(), format!("{i:08}{}", "v".repeat(pad)));
                match (domain_bytes + id.encoded_len()).checked_sub(id_bytes) {
                    Some(0) => break,
                    Some(over) => pad -= over,
                    None => pad += 1,
                }
            }
            BucketQuotaUsage {
                bucket_id: Some(id),
                time_elapsed: Some(prost_types::Duration {
                    seconds: i64::MIN,
                    nanos: i32::MIN,
                }),
                num_requests_allowed: u64::MAX,
                num_requests_denied: u64::MAX,
            }
        };
        RateLimitQuotaUsageReports {
            domain,
            bucket_quota_usages: (0..buckets).map(usage).collect(),
        }
    }

    #[test]
    fn the_largest_report_of_the_caps_fits_the_report_cap() {
        for (buckets, id_bytes) in [(1, 64), (100, 1024), (3, 60_000), (10_000, 1024)] {
            let settings = RlqsSettings {
                max_buckets_per_stream: buckets,
                max_bucket_id_bytes: id_bytes,
                ..RlqsSettings::default()
            };
            let largest = largest_report(buckets, id_bytes).encoded_len();
            let cap = settings.max_report_bytes();
            assert!(largest <= cap, "{buckets} x {id_bytes}: {largest} > {cap}");
            assert!(
                cap - largest <= buckets * 16 + id_bytes + 64,
                "{buckets} x {id_bytes}: {cap} leaves too much over {largest}"
            );
        }
    }

    #[test]
    fn the_default_report_cap_holds_every_bucket_and_stays_within_a_length_prefix() {
        let cap = RlqsSettings::default().max_report_bytes();
        assert_eq!(cap, 10_801_029, "as docs/operations/hardening.md says");
        let huge = RlqsSettings {
            max_buckets_per_stream: usize::MAX,
            ..RlqsSettings::default()
        };
        assert_eq!(huge.max_report_bytes(), u32::MAX as usize);
    }
}
