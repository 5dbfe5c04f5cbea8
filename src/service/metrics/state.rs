//! What the metrics record: the counters decisions, requests and the transport add to, kept
//! apart from the families that show them, so that [`super::Metrics`]' methods and every family
//! group read the same state.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use prometheus::Registry;

use crate::limiter::{ConfiguredLimit, LimitKind};
use crate::service::top_values::{RuleTop, TopValues};
use crate::service::transport_refusal::{Port, TransportRefusal};

/// Most distinct `descriptor` label values kept per `detailed_metric` rule.
pub const DETAILED_METRIC_CAP: usize = 1000;

/// Response times are kept per whole millisecond up to this; longer ones count as this.
pub const RESPONSE_TIME_MAX_MS: u64 = 10_000;

/// Upper bounds of the latency histogram buckets, in µs.
pub(super) const LATENCY_BUCKETS_US: [u64; 14] = [
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000,
];

/// How a `POST /counters/reset` ended, for `ratelimitd_counter_resets_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterReset {
    /// The counters were reset.
    Reset,
    /// Refused before the selector was read: resets are off, no token or a wrong one.
    Refused,
    /// A malformed selector or a domain not configured.
    Invalid,
    /// The store failed.
    Failed,
}

impl CounterReset {
    pub(super) const ALL: [CounterReset; 4] = [
        CounterReset::Reset,
        CounterReset::Refused,
        CounterReset::Invalid,
        CounterReset::Failed,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            CounterReset::Reset => "reset",
            CounterReset::Refused => "refused",
            CounterReset::Invalid => "invalid",
            CounterReset::Failed => "failed",
        }
    }
}

/// How a request ended, for `ratelimitd_requests_total{result}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestResult {
    Ok,
    OverLimit,
    InvalidArgument,
    Unavailable,
}

impl RequestResult {
    pub(super) const ALL: [RequestResult; 4] = [
        RequestResult::Ok,
        RequestResult::OverLimit,
        RequestResult::InvalidArgument,
        RequestResult::Unavailable,
    ];

    pub(super) fn label(self) -> &'static str {
        match self {
            RequestResult::Ok => "ok",
            RequestResult::OverLimit => "over_limit",
            RequestResult::InvalidArgument => "invalid_argument",
            RequestResult::Unavailable => "unavailable",
        }
    }
}

pub(super) const STORE_ERROR_KINDS: [&str; 3] = ["timeout", "unavailable", "protocol"];

/// The five rule counters, and what the upstream-stats reader took of them so far.
#[derive(Debug, Default)]
pub(super) struct Counters {
    pub(super) total: AtomicU64,
    pub(super) within: AtomicU64,
    pub(super) near: AtomicU64,
    pub(super) over: AtomicU64,
    pub(super) shadow: AtomicU64,
    /// The values [`Counters::take`] last read; only the one upstream-stats reader moves them.
    pub(super) taken: [AtomicU64; 5],
}

impl Counters {
    pub(super) fn add(counter: &AtomicU64, n: u64) {
        if n > 0 {
            counter.fetch_add(n, Ordering::Relaxed);
        }
    }

    /// total, within, near, over, shadow.
    pub(super) fn read(&self) -> [u64; 5] {
        [
            self.total.load(Ordering::Relaxed),
            self.within.load(Ordering::Relaxed),
            self.near.load(Ordering::Relaxed),
            self.over.load(Ordering::Relaxed),
            self.shadow.load(Ordering::Relaxed),
        ]
    }

    /// What each counter gained since the previous call.
    pub(super) fn take(&self) -> [u64; 5] {
        let now = self.read();
        std::array::from_fn(|i| {
            now[i].saturating_sub(self.taken[i].swap(now[i], Ordering::Relaxed))
        })
    }
}

/// A counter and what the upstream-stats reader took of it so far.
#[derive(Debug, Default)]
pub(super) struct Latched {
    pub(super) value: AtomicU64,
    pub(super) taken: Taken,
}

/// The value a cumulative count had when the upstream-stats reader last read it.
#[derive(Debug, Default)]
pub(super) struct Taken(pub(super) AtomicU64);

impl Taken {
    /// What `now` gained since the previous call.
    pub(super) fn delta(&self, now: u64) -> u64 {
        now.saturating_sub(self.0.swap(now, Ordering::Relaxed))
    }
}

/// Counters per label, at most [`DETAILED_METRIC_CAP`] labels; further labels share `overflow`.
#[derive(Debug, Default)]
pub(super) struct CappedSeries {
    pub(super) by_label: RwLock<HashMap<String, Arc<Counters>>>,
    pub(super) overflow: Arc<Counters>,
    pub(super) overflow_used: AtomicBool,
}

impl CappedSeries {
    pub(super) fn counters(&self, label: String) -> Arc<Counters> {
        if let Some(counters) = self.by_label.read().get(&label) {
            return counters.clone();
        }
        let mut by_label = self.by_label.write();
        if let Some(counters) = by_label.get(&label) {
            return counters.clone();
        }
        if by_label.len() < DETAILED_METRIC_CAP {
            let counters = Arc::new(Counters::default());
            by_label.insert(label, counters.clone());
            return counters;
        }
        self.overflow_used.store(true, Ordering::Relaxed);
        self.overflow.clone()
    }
}

#[derive(Debug, Default)]
pub(super) struct RuleStats {
    /// Hits counted without a descriptor label (rules without `detailed_metric`).
    pub(super) plain: Counters,
    pub(super) plain_used: AtomicBool,
    /// `detailed_metric` rules: per descriptor label.
    pub(super) detailed: CappedSeries,
    /// Hits of descriptors with a client override, per `domain.key_value` suffix (see
    /// [`override_label`]); `/metrics` adds them to the rule's plain or detailed series.
    pub(super) overridden: CappedSeries,
    /// The rule has `detailed_metric: true`, as last configured.
    pub(super) is_detailed: AtomicBool,
    /// The rule is `unlimited: true`, as last configured (envoyproxy/ratelimit counts nothing
    /// for those, so they are left out of its stats).
    pub(super) is_unlimited: AtomicBool,
    /// `/top`'s summaries, from the rule's first hit; `None` when it came beyond
    /// `--top-max-rules`.
    pub(super) top: OnceLock<Option<RuleTop>>,
}

impl RuleStats {
    pub(super) fn configure(&self, limit: &ConfiguredLimit) {
        self.is_detailed
            .store(limit.detailed_metric, Ordering::Relaxed);
        self.is_unlimited
            .store(limit.kind == LimitKind::Unlimited, Ordering::Relaxed);
    }
}

/// The counters one descriptor's hits go to.
pub(super) enum Slot<'a> {
    Plain(&'a Counters),
    Labelled(Arc<Counters>),
}

impl std::ops::Deref for Slot<'_> {
    type Target = Counters;

    fn deref(&self) -> &Counters {
        match self {
            Slot::Plain(counters) => counters,
            Slot::Labelled(counters) => counters,
        }
    }
}

/// envoyproxy/ratelimit's counters as it names and counts them: what its stats are made of.
/// Either what they gained since the previous [`Metrics::take_upstream_deltas`] (the statsd
/// sink's deltas) or their totals since start ([`Metrics::upstream_totals`], the
/// envoyproxy-format Prometheus families).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct UpstreamCounts {
    /// Per stat key (`domain.key_value.key2`, unsanitized), the hits of total_hits,
    /// within_limit, near_limit, over_limit and shadow_mode. Only keys with some;
    /// unlimited rules are left out (envoyproxy/ratelimit counts nothing for them). A detailed
    /// rule's descriptors beyond the cap count under `<rule path>._other`, overridden ones
    /// under `<domain>._other`.
    pub rules: Vec<(String, [u64; 5])>,
    /// Per unknown domain (cut at [`DETAILED_LABEL_MAX_BYTES`]; beyond [`UNKNOWN_DOMAIN_CAP`]
    /// domains, `_other`): descriptors of the requests that named it.
    pub domains_not_found: Vec<(String, u64)>,
    /// Configurations loaded: the one at startup (counted at the first call) and every reload.
    pub config_load_success: u64,
    /// Reloads rejected.
    pub config_load_error: u64,
    /// Requests whose store call failed.
    pub store_errors: u64,
    /// Requests answered INVALID_ARGUMENT.
    pub invalid_requests: u64,
    /// Requests global shadow mode answered OK although a descriptor was over its limit.
    pub global_shadow_mode: u64,
    /// Requests decided (every result).
    pub requests: u64,
}

/// What the scalar upstream counters were when last taken.
#[derive(Debug, Default)]
pub(super) struct UpstreamTaken {
    pub(super) config_load_success: Taken,
    pub(super) config_load_error: Taken,
    pub(super) store_errors: Taken,
    pub(super) invalid_requests: Taken,
    pub(super) global_shadow_mode: Taken,
    pub(super) requests: Taken,
}

/// Requests per whole millisecond they took since start (index `RESPONSE_TIME_MAX_MS`: that or
/// more), and what the statsd reader took of them.
#[derive(Debug)]
pub(super) struct ResponseTimes {
    pub(super) counts: Box<[AtomicU64]>,
    pub(super) taken: Box<[AtomicU64]>,
}

impl ResponseTimes {
    pub(super) fn new() -> ResponseTimes {
        let zeros = || {
            (0..=RESPONSE_TIME_MAX_MS)
                .map(|_| AtomicU64::new(0))
                .collect()
        };
        ResponseTimes {
            counts: zeros(),
            taken: zeros(),
        }
    }
}

#[derive(Debug)]
pub(super) struct Histogram {
    pub(super) buckets: [AtomicU64; LATENCY_BUCKETS_US.len()],
    pub(super) count: AtomicU64,
    pub(super) sum_ns: AtomicU64,
}

impl Histogram {
    pub(super) fn new() -> Histogram {
        Histogram {
            buckets: std::array::from_fn(|_| AtomicU64::new(0)),
            count: AtomicU64::new(0),
            sum_ns: AtomicU64::new(0),
        }
    }

    pub(super) fn observe(&self, elapsed: Duration) {
        let us = elapsed.as_micros() as u64;
        if let Some(i) = LATENCY_BUCKETS_US.iter().position(|&bound| us <= bound) {
            self.buckets[i].fetch_add(1, Ordering::Relaxed);
        }
        self.count.fetch_add(1, Ordering::Relaxed);
        self.sum_ns
            .fetch_add(elapsed.as_nanos() as u64, Ordering::Relaxed);
    }
}

/// Domain -> rule path -> counters; the names are shared with the snapshots `/metrics` takes.
pub(super) type RulesByDomain = HashMap<Arc<str>, HashMap<Arc<str>, Arc<RuleStats>>>;

/// Every metric of the process. Cheap to share (`Arc<Metrics>`); recording is lock-free except
/// for the first hit of a rule and detailed-metric lookups.
pub struct Metrics {
    pub(super) near_limit_ratio: f64,
    /// Most series of the per-rule families `/metrics` shows (see [`rule_series`]).
    pub(super) max_rule_series: usize,
    /// domain -> rule path -> counters.
    pub(super) rules: RwLock<RulesByDomain>,
    pub(super) latency: Histogram,
    pub(super) requests: [AtomicU64; 4],
    /// Requests refused by each of [`RequestBound::ALL`].
    pub(super) request_bounds: [AtomicU64; 3],
    pub(super) store_errors: [AtomicU64; 3],
    pub(super) policy: Mutex<&'static str>,
    pub(super) policy_answers: AtomicU64,
    /// `POST /counters/reset` calls by [`CounterReset::ALL`].
    pub(super) counter_resets: [AtomicU64; 4],
    pub(super) reloads_ok: AtomicU64,
    pub(super) reloads_failed: AtomicU64,
    pub(super) last_reload_ok: AtomicBool,
    pub(super) last_success_unix: AtomicU64,
    pub(super) transport_refusals: [AtomicU64; TransportRefusal::ALL.len()],
    pub(super) accept_errors: [AtomicU64; Port::ALL.len()],
    /// Every family group's collector: this module's own (registered at the first render, see
    /// [`Metrics::render`]) and those of the components that register theirs.
    pub(super) registry: Registry,
    pub(super) own_families: OnceLock<()>,
    /// Unknown domain -> descriptors asked for in it, at most [`UNKNOWN_DOMAIN_CAP`] domains.
    pub(super) domains_not_found: RwLock<HashMap<String, Arc<Latched>>>,
    pub(super) domains_not_found_overflow: Latched,
    pub(super) global_shadow_mode: AtomicU64,
    /// Requests per whole millisecond they took, kept only once
    /// [`Metrics::keep_response_times`] asked for them.
    pub(super) response_ms: OnceLock<ResponseTimes>,
    pub(super) upstream_taken: UpstreamTaken,
    /// `/top`: the values hit and denied the most, per rule.
    pub(super) top: TopValues,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("near_limit_ratio", &self.near_limit_ratio)
            .finish_non_exhaustive()
    }
}
