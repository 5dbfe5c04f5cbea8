//! What the status page's sampler reads of the metrics ([`Metrics::rule_totals`](super::Metrics::rule_totals), [`Metrics::process_totals`](super::Metrics::process_totals)) (`super::super::status_page`): per rule,
//! its hits and over-limit hits so far, every descriptor label and client override of the rule
//! added up; and the process's request, latency and reload totals. Read off the request path:
//! the counters are the ones decisions already add to.

use std::sync::Arc;

/// A rule's hits and over-limit hits (shadow- and quota-mode ones included) since it was
/// configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleTotals {
    pub domain: Arc<str>,
    pub rule: Arc<str>,
    pub hits: u64,
    pub over_limit: u64,
}

/// The process's totals since start.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcessTotals {
    /// Rate-limit requests decided (every result).
    pub requests: u64,
    /// Of them, answered OVER_LIMIT.
    pub over_limit: u64,
    /// Sum of the time requests took to decide, in ns.
    pub latency_sum_ns: u64,
    /// Configuration reloads that succeeded and that were rejected.
    pub reloads_ok: u64,
    pub reloads_failed: u64,
    /// Whether the last reload succeeded (or none was tried).
    pub last_reload_ok: bool,
    /// Unix time of the last configuration load that succeeded.
    pub last_load_unix: u64,
}
