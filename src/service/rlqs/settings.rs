//! What the RLQS service is told by its flags.

use std::time::Duration;

use crate::limiter::quota::{BlanketRule, DEFAULT_IDLE_ABANDON, DEFAULT_REPORT_PERIOD};

/// The RLQS service's parameters (docs/rlqs.md, "Parameters").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RlqsSettings {
    /// What a bucket no rule matches gets (`--rlqs-unmatched`); also every bucket of a domain no
    /// configuration defines.
    pub unmatched: BlanketRule,
    /// A bucket of a stream whose reports counted no request for longer than this is abandoned
    /// (`--rlqs-idle-timeout`).
    pub idle_timeout: Duration,
    /// Buckets one stream may subscribe (`--rlqs-max-buckets-per-stream`); a report beyond it ends
    /// the stream with RESOURCE_EXHAUSTED.
    pub max_buckets_per_stream: usize,
    /// Streams open at once (`--rlqs-max-streams`); one more is refused with RESOURCE_EXHAUSTED.
    pub max_streams: usize,
    /// Envoy's report period (5 s in Envoy 1.40, whatever its `reporting_interval` says): the
    /// assignment time to live is a few of them.
    pub report_period: Duration,
    /// The shortest time between two computations of one bucket's shares
    /// ([`super::REBALANCE_GAP`]; no flag).
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
}

impl Default for RlqsSettings {
    fn default() -> RlqsSettings {
        RlqsSettings {
            unmatched: BlanketRule::AllowAll,
            idle_timeout: DEFAULT_IDLE_ABANDON,
            max_buckets_per_stream: RlqsSettings::DEFAULT_MAX_BUCKETS_PER_STREAM,
            max_streams: RlqsSettings::DEFAULT_MAX_STREAMS,
            report_period: DEFAULT_REPORT_PERIOD,
            rebalance_gap: super::REBALANCE_GAP,
            never_deny: false,
        }
    }
}
