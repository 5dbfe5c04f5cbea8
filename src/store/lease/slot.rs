//! One leased counter: its identity, its rate and policy, and the ledger of the hits this
//! replica holds for it.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::ledger::Ledger;
use super::sizing::LeasePolicy;
use super::stats::RuleLeaseStats;
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::Rate;

/// One leased counter of this replica.
pub(super) struct LeaseSlot {
    pub(super) key: CounterKey,
    pub(super) rate: Rate,
    pub(super) policy: LeasePolicy,
    /// The totals of the rule whose check made the slot.
    pub(super) stats: Arc<RuleLeaseStats>,
    pub(super) ledger: Mutex<Ledger>,
    /// Woken when a refill of this counter was answered.
    pub(super) refilled: Notify,
}

/// Leased counters by a keyed hash of their identity.
pub(super) type Shard = Mutex<HashMap<u64, Arc<LeaseSlot>>>;
