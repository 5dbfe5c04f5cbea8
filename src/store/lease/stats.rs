//! What the leases of one replica did, counted per rule for metrics.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::limiter::check::Check;

/// Rules counted apart at most; the checks of further rules count under [`OVERFLOW_RULE`]. A
/// configuration change leaves the rules it removed here (their totals stay valid), so the bound
/// is what keeps a replica's metrics finite over any number of reloads.
pub const MAX_RULES: usize = 5_000;

/// The `domain` and `rule` of the totals of rules beyond [`MAX_RULES`].
pub const OVERFLOW_RULE: &str = "_other";

/// The `rule` of leased checks that name no configured rule (stores driven directly, in tests).
pub const UNNAMED_RULE: &str = "(unnamed)";

/// One rule's running totals since start.
#[derive(Debug, Default)]
pub struct RuleLeaseStats {
    /// Leased checks decided from hits held here without waiting for the store.
    local: AtomicU64,
    /// Leased checks that waited for a refill first.
    waited: AtomicU64,
    /// Leased checks denied here because the store had said it could not grant yet.
    denied_locally: AtomicU64,
    /// Leased checks the store decided exactly: a limit too small to lease, a counter the store
    /// cannot lease, or one beyond the replica's most leased counters.
    exact: AtomicU64,
    /// Leases asked for.
    asks: AtomicU64,
    /// Hits granted to this replica, spent by admitted requests, given back to the store unspent,
    /// and dropped unspent when their lease ended without being given back.
    granted: AtomicU64,
    used: AtomicU64,
    returned: AtomicU64,
    expired: AtomicU64,
}

/// A reading of one rule's totals.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct RuleLeaseCounts {
    pub local: u64,
    pub waited: u64,
    pub denied_locally: u64,
    pub exact: u64,
    pub asks: u64,
    pub granted: u64,
    pub used: u64,
    pub returned: u64,
    pub expired: u64,
}

impl RuleLeaseStats {
    pub(super) fn record_local(&self, waited: bool) {
        let counter = if waited { &self.waited } else { &self.local };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_denied_locally(&self) {
        self.denied_locally.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_exact(&self) {
        self.exact.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_ask(&self) {
        self.asks.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_granted(&self, hits: u64) {
        add(&self.granted, hits);
    }

    pub(super) fn record_used(&self, hits: u64) {
        add(&self.used, hits);
    }

    pub(super) fn record_returned(&self, hits: u64) {
        add(&self.returned, hits);
    }

    pub(super) fn record_expired(&self, hits: u64) {
        add(&self.expired, hits);
    }

    /// The totals so far.
    pub fn read(&self) -> RuleLeaseCounts {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        RuleLeaseCounts {
            local: get(&self.local),
            waited: get(&self.waited),
            denied_locally: get(&self.denied_locally),
            exact: get(&self.exact),
            asks: get(&self.asks),
            granted: get(&self.granted),
            used: get(&self.used),
            returned: get(&self.returned),
            expired: get(&self.expired),
        }
    }
}

fn add(counter: &AtomicU64, hits: u64) {
    if hits > 0 {
        counter.fetch_add(hits, Ordering::Relaxed);
    }
}

/// A rule as `/metrics` labels it: its domain and its path (`ConfiguredLimit::path`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RuleLabel {
    pub domain: Arc<str>,
    pub rule: Arc<str>,
}

/// Rule path -> its domain and totals, at most [`MAX_RULES`].
type RulesByPath = HashMap<Arc<str>, (Arc<str>, Arc<RuleLeaseStats>)>;

/// The replica's lease totals: per rule, and the store calls, which serve many rules at once.
#[derive(Debug)]
pub struct LeaseStats {
    /// Refill rounds: store calls of the lease path.
    rounds: AtomicU64,
    /// Leased checks decided exactly because the table of leased counters was full.
    counters_refused: AtomicU64,
    rules: Mutex<RulesByPath>,
    overflow: Arc<RuleLeaseStats>,
}

impl Default for LeaseStats {
    fn default() -> LeaseStats {
        LeaseStats {
            rounds: AtomicU64::new(0),
            counters_refused: AtomicU64::new(0),
            rules: Mutex::new(HashMap::new()),
            overflow: Arc::default(),
        }
    }
}

impl LeaseStats {
    /// The totals of `check`'s rule, made on its first check.
    pub(super) fn rule(&self, check: &Check) -> Arc<RuleLeaseStats> {
        let path = check
            .rule
            .as_ref()
            .map_or(UNNAMED_RULE, |rule| rule.path.as_str());
        let mut rules = self.rules.lock();
        if let Some((_, stats)) = rules.get(path) {
            return Arc::clone(stats);
        }
        if rules.len() >= MAX_RULES {
            return Arc::clone(&self.overflow);
        }
        let stats = Arc::new(RuleLeaseStats::default());
        let domain = Arc::from(check.key.domain().as_str());
        rules.insert(Arc::from(path), (domain, Arc::clone(&stats)));
        stats
    }

    pub(super) fn record_round(&self) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_counter_refused(&self) {
        self.counters_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// Store calls that asked for leases.
    pub fn rounds(&self) -> u64 {
        self.rounds.load(Ordering::Relaxed)
    }

    /// Leased checks decided exactly because the replica held leases on its most counters.
    pub fn counters_refused(&self) -> u64 {
        self.counters_refused.load(Ordering::Relaxed)
    }

    /// Every rule's totals, in label order; those of rules beyond [`MAX_RULES`] last, under
    /// [`OVERFLOW_RULE`], once some were counted.
    pub fn by_rule(&self) -> Vec<(RuleLabel, RuleLeaseCounts)> {
        let mut rules: Vec<(RuleLabel, RuleLeaseCounts)> = self
            .rules
            .lock()
            .iter()
            .map(|(rule, (domain, stats))| {
                let label = RuleLabel {
                    domain: Arc::clone(domain),
                    rule: Arc::clone(rule),
                };
                (label, stats.read())
            })
            .collect();
        rules.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
        let overflow = self.overflow.read();
        if overflow != RuleLeaseCounts::default() {
            let label = RuleLabel {
                domain: Arc::from(OVERFLOW_RULE),
                rule: Arc::from(OVERFLOW_RULE),
            };
            rules.push((label, overflow));
        }
        rules
    }
}
