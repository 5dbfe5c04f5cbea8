//! What the leases of one replica did, counted for metrics.

use std::sync::atomic::{AtomicU64, Ordering};

/// Running totals since start.
#[derive(Debug, Default)]
pub struct LeaseStats {
    /// Leased checks decided from hits held here without waiting for the store.
    pub local: AtomicU64,
    /// Leased checks that waited for a refill first.
    pub waited: AtomicU64,
    /// Leased checks denied here because the store had said it could not grant yet.
    pub denied_locally: AtomicU64,
    /// Refill rounds (store calls of the lease path) and the leases they asked for.
    pub rounds: AtomicU64,
    pub asks: AtomicU64,
    /// Hits granted to this replica, spent by admitted requests, and dropped unspent when
    /// their lease ended.
    pub granted: AtomicU64,
    pub used: AtomicU64,
    pub expired: AtomicU64,
    /// Leased checks decided exactly because the table of leased counters was full.
    pub counters_refused: AtomicU64,
}

impl LeaseStats {
    pub(super) fn record_local(&self, waited: bool) {
        let counter = if waited { &self.waited } else { &self.local };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_denied_locally(&self) {
        self.denied_locally.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn record_round(&self, asks: usize) {
        self.rounds.fetch_add(1, Ordering::Relaxed);
        self.asks.fetch_add(asks as u64, Ordering::Relaxed);
    }

    pub(super) fn record_granted(&self, hits: u64) {
        self.granted.fetch_add(hits, Ordering::Relaxed);
    }

    pub(super) fn record_used(&self, hits: u64) {
        if hits > 0 {
            self.used.fetch_add(hits, Ordering::Relaxed);
        }
    }

    pub(super) fn record_expired(&self, hits: u64) {
        if hits > 0 {
            self.expired.fetch_add(hits, Ordering::Relaxed);
        }
    }

    pub(super) fn record_counter_refused(&self) {
        self.counters_refused.fetch_add(1, Ordering::Relaxed);
    }

    /// A reading of one total.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}
