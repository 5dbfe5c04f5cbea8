//! What the status page's sampler reads of the metrics (`super::super::status_page`): per rule,
//! its hits and over-limit hits so far, every descriptor label and client override of the rule
//! added up; and the process's request, latency and reload totals. Read off the request path:
//! the counters are the ones decisions already add to.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{Counters, Metrics, RequestResult};

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

impl Metrics {
    /// Every rule with counters, in no particular order, its labels added up. Takes the rule
    /// map's read lock while it copies the counts out.
    pub fn rule_totals(&self) -> Vec<RuleTotals> {
        let mut totals = Vec::new();
        for (domain, rules) in self.rules.read().iter() {
            for (path, stats) in rules {
                let mut sum = [0u64; 5];
                let mut add = |counters: &Counters| {
                    for (sum, value) in sum.iter_mut().zip(counters.read()) {
                        *sum = sum.saturating_add(value);
                    }
                };
                add(&stats.plain);
                for series in [&stats.detailed, &stats.overridden] {
                    for counters in series.by_label.read().values() {
                        add(counters);
                    }
                    add(&series.overflow);
                }
                totals.push(RuleTotals {
                    domain: domain.clone(),
                    rule: path.clone(),
                    hits: sum[0],
                    over_limit: sum[3],
                });
            }
        }
        totals
    }

    /// The process's totals since start.
    pub fn process_totals(&self) -> ProcessTotals {
        let requests = |result: RequestResult| {
            let index = RequestResult::ALL
                .iter()
                .position(|r| *r == result)
                .unwrap_or(0);
            self.requests[index].load(Ordering::Relaxed)
        };
        ProcessTotals {
            requests: self
                .requests
                .iter()
                .map(|counter| counter.load(Ordering::Relaxed))
                .sum(),
            over_limit: requests(RequestResult::OverLimit),
            latency_sum_ns: self.latency.sum_ns.load(Ordering::Relaxed),
            reloads_ok: self.reloads_ok.load(Ordering::Relaxed),
            reloads_failed: self.reloads_failed.load(Ordering::Relaxed),
            last_reload_ok: self.last_reload_ok.load(Ordering::Relaxed),
            last_load_unix: self.last_success_unix.load(Ordering::Relaxed),
        }
    }

    /// Whether `/top` tracks any rule (`--top-max-rules` above 0).
    pub fn top_enabled(&self) -> bool {
        self.top.max_rules() > 0
    }
}
