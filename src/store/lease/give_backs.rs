//! The give-back task: every round, the unspent hits of the window algorithms' leases go back to
//! the store: every hit held on a counter that no request used for two lease periods, and for
//! sliding_window_counter those of leases that ended (its previous window still weighs), in one
//! store call per round (the Redis store sends one refund script call per node), so that what a
//! replica does not spend returns to the other replicas. token_bucket and gcra leases give
//! nothing back (see `algorithm::lease::can_give_back`); their unspent hits expire with the
//! lease. Correctness never depends on it: a give-back that fails leaves the hits charged, which
//! only denies more.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::MissedTickBehavior;

use super::ledger::Unspent;
use super::slot::{LeaseSlot, Shard};
use crate::limiter::algorithm::lease::can_give_back;
use crate::limiter::clock::Clock;
use crate::limiter::rate::Algorithm;
use crate::store::{LeaseReturn, Store};

/// Most give-backs in one store call; the rest go in the next call of the same round.
const MAX_CALL: usize = 1024;

/// How often a round runs: once per lease period, within these bounds.
const MIN_ROUND: Duration = Duration::from_millis(10);
const MAX_ROUND: Duration = Duration::from_secs(1);

pub(super) struct GiveBacks<S> {
    pub store: Arc<S>,
    pub clock: Arc<dyn Clock>,
    /// The leased counters; the task ends when the store that holds them is dropped.
    pub shards: Weak<[Shard]>,
    pub period: Duration,
}

impl<S: Store> GiveBacks<S> {
    pub async fn run(self) {
        let mut rounds = tokio::time::interval(self.period.clamp(MIN_ROUND, MAX_ROUND));
        rounds.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            rounds.tick().await;
            let Some(shards) = self.shards.upgrade() else {
                return;
            };
            let due = self.sweep(&shards, false);
            drop(shards);
            for call in due.chunks(MAX_CALL) {
                self.give_back(call).await;
            }
        }
    }

    /// Gives back every hit the window algorithms' leases hold, whatever their use: the replica
    /// stops deciding.
    pub async fn release(&self, shards: &[Shard]) {
        let due = self.sweep(shards, true);
        for call in due.chunks(MAX_CALL) {
            self.give_back(call).await;
        }
    }

    /// Takes what is due out of every ledger: what a round gives back, or when `leaving`, every
    /// hit that can be given back.
    fn sweep(&self, shards: &[Shard], leaving: bool) -> Vec<(Arc<LeaseSlot>, Unspent)> {
        let mut due = Vec::new();
        for shard in shards {
            for slot in shard.lock().values() {
                let algorithm = slot.rate.algorithm();
                let idle_after_us = match (can_give_back(algorithm), leaving) {
                    (false, _) => None,
                    (true, true) => Some(0),
                    (true, false) => Some(slot.policy.period_us.saturating_mul(2)),
                };
                let ended_are_given_back = algorithm == Algorithm::SlidingWindowCounter;
                let now = self.clock.now_us();
                let swept = slot
                    .ledger
                    .lock()
                    .sweep(now, idle_after_us, ended_are_given_back);
                slot.stats.record_expired(swept.expired);
                due.extend(swept.unspent.into_iter().map(|u| (Arc::clone(slot), u)));
            }
        }
        due
    }

    async fn give_back(&self, call: &[(Arc<LeaseSlot>, Unspent)]) {
        let returns: Vec<LeaseReturn> = call
            .iter()
            .map(|(slot, unspent)| LeaseReturn {
                key: slot.key.clone(),
                rate: slot.rate,
                hits: unspent.hits,
                granted_at_us: unspent.granted_at_us,
            })
            .collect();
        let result = self.store.give_back(&returns).await;
        for (slot, unspent) in call {
            match result {
                Ok(()) => slot.stats.record_returned(unspent.hits),
                Err(_) => slot.stats.record_expired(unspent.hits),
            }
        }
        if let Err(error) = result {
            tracing::warn!(%error, leases = call.len(), "unspent leased hits not given back; they stay spent until their lease would end");
        }
    }
}
