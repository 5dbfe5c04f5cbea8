//! Leased consistency: a [`Store`] decorator that decides the checks of leased rules from hits
//! reserved in the store beforehand (leases), and every other check in the store.
//!
//! A replica asks the store for a lease of a leased counter (see `limiter::algorithm::lease`):
//! the store charges the hits when it grants them, so whatever the replicas do with their leases
//! they never admit more than the exact algorithm would (docs/leases.md has the proofs). A
//! request whose leased checks all find hits here is decided without a store call. Leases are
//! asked for ahead of running out (below half of the last one), by one task that sends every
//! counter due in one round, one script call per store node; a request waits for the store only
//! when its counter holds too few hits and the refill is not back yet. When the store grants
//! nothing, the counter's requests are denied here until the store said it could grant again.
//!
//! Hits a replica does not spend go back to the store (see [`give_backs`]): those of leases that
//! ended, and all those of a counter no request used for two lease periods.
//!
//! All or nothing still holds: the hits a request took here are put back when another of its
//! checks (leased or exact) denies it. Counters of small limits, of algorithms that cannot be
//! leased, and beyond [`LeaseSettings::max_counters`] are decided exactly.

mod give_backs;
mod ledger;
mod refill;
mod sizing;
mod slot;
mod stats;

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{mpsc, Notify};

use self::give_backs::GiveBacks;
use self::ledger::{Ledger, Take, Taken};
use self::refill::Refills;
pub use self::sizing::{LeasePolicy, MAX_LEASE_SHARE, MIN_LEASE};
use self::slot::{LeaseSlot, Shard};
pub use self::stats::{LeaseStats, RuleLabel, RuleLeaseCounts, RuleLeaseStats};
use super::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};
use crate::limiter::algorithm::Verdict;
use crate::limiter::clock::{Clock, MonotonicClock};
use crate::limiter::consistency::Consistency;

/// How leases are taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseSettings {
    /// `--lease-period`: how long a token_bucket or gcra lease lasts, and the span of traffic a
    /// lease is sized for.
    pub period: Duration,
    /// How long a request may wait for a refill (the store's own timeout).
    pub wait: Duration,
    /// Most counters held at once; requests on further counters are decided exactly.
    pub max_counters: usize,
}

impl LeaseSettings {
    /// Counters held by default: hot keys are few, and each costs a few hundred bytes.
    pub const DEFAULT_MAX_COUNTERS: usize = 65_536;
}

const SHARDS: usize = 16;

/// The [`Store`] that decides leased checks locally; see the module documentation.
pub struct LeasedStore<S> {
    inner: Arc<S>,
    settings: LeaseSettings,
    clock: Arc<dyn Clock>,
    shards: Arc<[Shard]>,
    hasher: RandomState,
    refills: mpsc::UnboundedSender<Arc<LeaseSlot>>,
    stats: Arc<LeaseStats>,
}

impl<S: Store> LeasedStore<S> {
    /// Wraps `inner`, starting the refill task on the current tokio runtime (it ends when the
    /// store is dropped).
    pub fn start(inner: Arc<S>, settings: LeaseSettings) -> LeasedStore<S> {
        LeasedStore::start_with_clock(inner, settings, Arc::new(MonotonicClock::new()))
    }

    /// [`LeasedStore::start`] on `clock` (a `ManualClock` in tests), which must be monotonic.
    pub fn start_with_clock(
        inner: Arc<S>,
        settings: LeaseSettings,
        clock: Arc<dyn Clock>,
    ) -> LeasedStore<S> {
        let stats = Arc::new(LeaseStats::default());
        let (refills, queue) = mpsc::unbounded_channel();
        let task = Refills {
            store: Arc::clone(&inner),
            clock: Arc::clone(&clock),
            stats: Arc::clone(&stats),
        };
        tokio::spawn(task.run(queue));
        let shards: Arc<[Shard]> = (0..SHARDS).map(|_| Mutex::default()).collect();
        let give_backs = GiveBacks {
            store: Arc::clone(&inner),
            clock: Arc::clone(&clock),
            shards: Arc::downgrade(&shards),
            period: settings.period,
        };
        tokio::spawn(give_backs.run());
        LeasedStore {
            inner,
            settings,
            clock,
            shards,
            hasher: RandomState::new(),
            refills,
            stats,
        }
    }

    /// What the leases did so far (for metrics).
    pub fn stats(&self) -> Arc<LeaseStats> {
        Arc::clone(&self.stats)
    }

    /// The store the exact checks and the leases go to.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// The hash a slot of `check`'s counter is held under.
    fn slot_hash(&self, check: &Check) -> u64 {
        self.hasher.hash_one((
            check.key.as_str(),
            check.rate.algorithm(),
            check.rate.window_us(),
        ))
    }

    /// Drops the slots of `checks`' counters with the leases they hold, whose unspent hits are
    /// then neither spent here nor given back (their counters were reset in the store).
    fn drop_slots(&self, checks: &[Check]) {
        for check in checks {
            let hash = self.slot_hash(check);
            let mut shard = self.shards[(hash % SHARDS as u64) as usize].lock();
            if shard
                .get(&hash)
                .is_some_and(|slot| slot.key == check.key && slot.rate == check.rate)
            {
                shard.remove(&hash);
            }
        }
    }

    /// The slot of `check`'s counter, made on first use; `None` when it is decided exactly.
    fn slot(&self, check: &Check) -> Option<Arc<LeaseSlot>> {
        let hash = self.slot_hash(check);
        let mut shard = self.shards[(hash % SHARDS as u64) as usize].lock();
        if let Some(slot) = shard.get(&hash) {
            if slot.key == check.key && slot.rate == check.rate {
                return (!slot.ledger.lock().unleasable).then(|| Arc::clone(slot));
            }
        }
        let policy = LeasePolicy::for_rate(&check.rate, self.settings.period)?;
        let per_shard = self.settings.max_counters.div_ceil(SHARDS);
        if !shard.contains_key(&hash) && shard.len() >= per_shard {
            let now = self.clock.now_us();
            let idle_for = 10 * policy.period_us.max(100_000);
            shard.retain(|_, slot| {
                let ledger = slot.ledger.lock();
                !(ledger.is_idle(now) && ledger.last_used_us + idle_for <= now)
            });
            if shard.len() >= per_shard {
                self.stats.record_counter_refused();
                return None;
            }
        }
        let slot = Arc::new(LeaseSlot {
            key: check.key.clone(),
            rate: check.rate,
            policy,
            stats: self.stats.rule(check),
            ledger: Mutex::default(),
            refilled: Notify::new(),
        });
        shard.insert(hash, Arc::clone(&slot));
        Some(slot)
    }

    /// Queues a refill of `slot` unless one is under way; call with its ledger locked.
    fn refill(&self, slot: &Arc<LeaseSlot>, ledger: &mut Ledger) {
        ledger.refilling = true;
        if self.refills.send(Arc::clone(slot)).is_err() {
            ledger.refilling = false;
        }
    }

    /// Takes `check.hits` from its counter's leases, waiting for a refill when too few are held.
    /// `Ok(None)`: the store cannot lease this counter; decide it exactly.
    async fn take(
        &self,
        slot: &Arc<LeaseSlot>,
        check: &Check,
    ) -> Result<Option<(Verdict, Taken)>, StoreError> {
        let deadline = tokio::time::Instant::now() + self.settings.wait;
        let hits = check.hits;
        if hits > u64::from(check.rate.burst()) {
            let verdict = denied(check.rate.window_us());
            return Ok(Some((verdict, Vec::new())));
        }
        let mut waited = false;
        loop {
            let notified = slot.refilled.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let mut ledger = slot.ledger.lock();
                if ledger.unleasable {
                    return Ok(None);
                }
                let now = self.clock.now_us();
                match ledger.take(now, hits) {
                    Take::Taken {
                        taken,
                        remaining,
                        reset_after_us,
                    } => {
                        if ledger.wants_refill(now) {
                            self.refill(slot, &mut ledger);
                        }
                        slot.stats.record_local(waited);
                        let verdict = Verdict {
                            admitted: true,
                            remaining: u32::try_from(remaining).unwrap_or(u32::MAX),
                            reset_after_us,
                            counted_when_vetoed: false,
                        };
                        return Ok(Some((verdict, taken)));
                    }
                    Take::Denied { retry_after_us } => {
                        slot.stats.record_denied_locally();
                        return Ok(Some((denied(retry_after_us), Vec::new())));
                    }
                    Take::Wait => {
                        // The refill this request waited for failed and left nothing.
                        if waited {
                            if let Some(error) = ledger.failure.take() {
                                return Err(error);
                            }
                        }
                        if !ledger.refilling {
                            ledger.failure = None;
                            ledger.needed = ledger.needed.max(hits);
                            self.refill(slot, &mut ledger);
                        }
                    }
                }
            }
            waited = true;
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return Err(StoreError::Timeout(self.settings.wait));
            }
        }
    }
}

/// A leased check denied here: nothing left and the store said it cannot grant before
/// `retry_after_us`.
fn denied(retry_after_us: u64) -> Verdict {
    Verdict {
        admitted: false,
        remaining: 0,
        reset_after_us: retry_after_us,
        counted_when_vetoed: false,
    }
}

impl<S: Store> Store for LeasedStore<S> {
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        if checks
            .iter()
            .all(|check| check.consistency == Consistency::Exact)
        {
            return self.inner.decide(checks).await;
        }
        let mut verdicts: Vec<Option<Verdict>> = vec![None; checks.len()];
        let mut held: Vec<(Arc<LeaseSlot>, Taken)> = Vec::new();
        let mut exact: Vec<usize> = Vec::new();
        let mut vetoed = false;
        for (index, check) in checks.iter().enumerate() {
            let slot = match check.consistency {
                Consistency::Leased => self.slot(check),
                Consistency::Exact => None,
            };
            let Some(slot) = slot else {
                if check.consistency == Consistency::Leased {
                    self.stats.rule(check).record_exact();
                }
                exact.push(index);
                continue;
            };
            match self.take(&slot, check).await {
                Ok(Some((verdict, taken))) => {
                    if !verdict.admitted && !check.shadow {
                        vetoed = true;
                    }
                    verdicts[index] = Some(verdict);
                    held.push((slot, taken));
                }
                Ok(None) => {
                    slot.stats.record_exact();
                    exact.push(index);
                }
                Err(error) => {
                    give_back(&held);
                    return Err(error);
                }
            }
        }
        if !exact.is_empty() {
            let sent: Vec<Check> = exact
                .iter()
                .map(|&index| {
                    let mut check = checks[index].clone();
                    if vetoed {
                        check.hits = 0;
                    }
                    check
                })
                .collect();
            let decided = match self.inner.decide(&sent).await {
                Ok(decided) => decided,
                Err(error) => {
                    give_back(&held);
                    return Err(error);
                }
            };
            for (&index, verdict) in exact.iter().zip(decided) {
                if !verdict.admitted && !checks[index].shadow {
                    vetoed = true;
                }
                verdicts[index] = Some(verdict);
            }
        }
        if vetoed {
            give_back(&held);
        } else {
            for (slot, taken) in &held {
                slot.stats.record_used(taken.iter().map(|t| t.1).sum());
            }
        }
        verdicts
            .into_iter()
            .map(|verdict| {
                verdict.ok_or_else(|| StoreError::Protocol("a check without its verdict".into()))
            })
            .collect()
    }

    fn lease(
        &self,
        asks: &[LeaseAsk],
    ) -> impl std::future::Future<Output = Result<Vec<LeaseAnswer>, StoreError>> + Send {
        self.inner.lease(asks)
    }

    fn give_back(
        &self,
        returns: &[LeaseReturn],
    ) -> impl std::future::Future<Output = Result<(), StoreError>> + Send {
        self.inner.give_back(returns)
    }

    /// The store's state, which counts the hits granted to leases (this replica's and the
    /// others') as used.
    fn peek(
        &self,
        checks: &[Check],
    ) -> impl std::future::Future<Output = Result<Vec<Verdict>, StoreError>> + Send {
        self.inner.peek(checks)
    }

    /// The store's state, and this replica's leases of the reset counters, dropped before and
    /// after the store call (a request meanwhile may have made a slot again) without giving
    /// anything back. Other replicas' leases stay spendable until they end, and what they give
    /// back afterwards is taken from the fresh counter (docs/operations/http-endpoints.md,
    /// "/counters/reset").
    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        self.drop_slots(checks);
        let result = self.inner.reset(checks).await;
        self.drop_slots(checks);
        result
    }

    /// Gives back every unspent hit of the window algorithms' leases, one store call per
    /// [`LeaseSettings::wait`] at most, so that a replica stopping in a rolling deploy strands
    /// nothing until its windows end. token_bucket and gcra leases end within a period anyway.
    async fn release(&self) {
        let give_backs = GiveBacks {
            store: Arc::clone(&self.inner),
            clock: Arc::clone(&self.clock),
            shards: Arc::downgrade(&self.shards),
            period: self.settings.period,
        };
        let bound = self.settings.wait.saturating_mul(2);
        if tokio::time::timeout(bound, give_backs.release(&self.shards))
            .await
            .is_err()
        {
            tracing::warn!(
                ?bound,
                "unspent leased hits not all given back before stopping"
            );
        }
    }

    fn is_healthy(&self) -> impl std::future::Future<Output = bool> + Send {
        self.inner.is_healthy()
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

/// Puts back what a denied request took.
fn give_back(held: &[(Arc<LeaseSlot>, Taken)]) {
    for (slot, taken) in held {
        if !taken.is_empty() {
            slot.ledger.lock().give_back(taken);
        }
    }
}
