//! In-process store: counters in 64 sharded hash maps, each request decided under the locks of
//! the shards it touches.
//!
//! A request locks its shards in ascending order (so two requests can never wait on each other
//! in a cycle), reads the clock, evaluates every check, commits only when every enforced check
//! admits, and unlocks. Nothing awaits while a lock is held, so the futures complete at once.
//! Reading the clock under the locks makes the commits of one counter happen in clock order.
//!
//! Counters are keyed by a 128-bit keyed hash of their identity and hold a compact state (see
//! [`slot`]); an entry costs 48 bytes, ≈ 56–112 bytes per counter with the table's slack. Idle
//! counters expire (`algorithm::expires_at_us`): an expired entry is treated as absent and
//! removed when a request touches it, by [`MemoryStore::sweep_expired`], or by the background
//! task of [`MemoryStore::spawn_sweeper`].

mod slot;
#[cfg(test)]
mod tests;

use std::collections::hash_map::{Entry, RandomState};
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};

use self::slot::{counter_id, counter_id_of, CounterId, IdHasher, Slot};
use super::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};
use crate::limiter::algorithm::{self, lease, Verdict};
use crate::limiter::clock::{Clock, SystemClock};
use crate::limiter::consistency::Consistency;
use crate::limiter::rate::Rate;

const SHARD_BITS: u32 = 6;
const SHARDS: usize = 1 << SHARD_BITS;

type Map = HashMap<CounterId, Slot, BuildHasherDefault<IdHasher>>;

/// One shard, on its own cache lines so that neighbouring locks do not false-share.
#[repr(align(128))]
#[derive(Default)]
struct Shard(Mutex<Map>);

/// The embedded store: exact, all or nothing, for one process.
pub struct MemoryStore {
    shards: Box<[Shard]>,
    clock: Arc<dyn Clock>,
    /// Secret key of the counter-identity hash, fresh per store.
    keys: RandomState,
}

impl MemoryStore {
    /// A store on the process's wall clock.
    pub fn new() -> MemoryStore {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// A store on `clock` (a `ManualClock` in tests).
    pub fn with_clock(clock: Arc<dyn Clock>) -> MemoryStore {
        MemoryStore {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            clock,
            keys: RandomState::new(),
        }
    }

    /// Decides `checks` at once (what [`Store::decide`] returns), following the trait's contract:
    /// checks sharing a counter are evaluated with the hits of the earlier admitted ones added
    /// and committed once with their total; nothing is written unless every non-shadow check
    /// admits, and a counter whose admitted total is 0 is not written at all.
    pub fn decide_now(&self, checks: &[Check]) -> Vec<Verdict> {
        if checks.is_empty() {
            return Vec::new();
        }
        let Counters {
            mut groups,
            group_of,
        } = Counters::of(&self.keys, checks);

        let mut shard_indices: Vec<usize> = groups.iter().map(|g| g.shard).collect();
        shard_indices.sort_unstable();
        shard_indices.dedup();
        let mut maps: Vec<MutexGuard<'_, Map>> = shard_indices
            .iter()
            .map(|&index| self.shards[index].0.lock())
            .collect();
        let locked = |shard: usize| shard_indices.binary_search(&shard).unwrap_or(0);
        let now = self.clock.now_us();

        // Expired entries are absent: drop the ones this request touches.
        for group in &groups {
            if let Entry::Occupied(entry) = maps[locked(group.shard)].entry(group.id) {
                if entry.get().is_expired(now) {
                    entry.remove();
                }
            }
        }

        let mut every_enforced_admits = true;
        let verdicts = checks
            .iter()
            .zip(&group_of)
            .map(|(check, &g)| {
                let group = &mut groups[g];
                let hits = group.admitted_hits.saturating_add(check.hits);
                let verdict = match maps[locked(group.shard)].get(&group.id) {
                    Some(slot) => slot.state.evaluate(&check.rate, now, hits),
                    None => algorithm::evaluate(&check.rate, None, now, hits),
                };
                if verdict.admitted {
                    group.admitted_hits = hits;
                    group.commit_rate = Some(&check.rate);
                } else if !check.shadow {
                    every_enforced_admits = false;
                }
                verdict
            })
            .collect();

        if every_enforced_admits {
            for group in &groups {
                let (hits, Some(rate)) = (group.admitted_hits, group.commit_rate) else {
                    continue;
                };
                if hits == 0 {
                    continue;
                }
                match maps[locked(group.shard)].entry(group.id) {
                    Entry::Occupied(mut entry) => entry.get_mut().commit(rate, now, hits),
                    Entry::Vacant(entry) => {
                        entry.insert(Slot::new(rate, algorithm::commit(rate, None, now, hits)));
                    }
                }
            }
        }
        drop(maps);
        verdicts
    }

    /// Grants each of `asks` at once (what [`Store::lease`] answers), each under its shard's lock.
    pub fn lease_now(&self, asks: &[LeaseAsk]) -> Vec<LeaseAnswer> {
        asks.iter()
            .map(|ask| {
                if !Consistency::can_lease(ask.rate.algorithm()) {
                    return Ok(None);
                }
                let id = counter_id_of(&self.keys, &ask.key, &ask.rate);
                let shard = (id.high >> (64 - SHARD_BITS)) as usize;
                let mut map = self.shards[shard].0.lock();
                let now = self.clock.now_us();
                if let Entry::Occupied(entry) = map.entry(id) {
                    if entry.get().is_expired(now) {
                        entry.remove();
                    }
                }
                let state = map.get(&id).map(|slot| slot.state.view().into_owned());
                let (grant, charged) = lease::grant(&ask.rate, state.as_ref(), now, ask.terms);
                if let Some(charged) = charged {
                    map.insert(id, Slot::new(&ask.rate, charged));
                }
                Ok(Some(grant))
            })
            .collect()
    }

    /// Gives back each of `returns` at once (what [`Store::give_back`] does), each under its
    /// shard's lock.
    pub fn give_back_now(&self, returns: &[LeaseReturn]) {
        for given in returns {
            if given.hits == 0 || !lease::can_give_back(given.rate.algorithm()) {
                continue;
            }
            let id = counter_id_of(&self.keys, &given.key, &given.rate);
            let shard = (id.high >> (64 - SHARD_BITS)) as usize;
            let mut map = self.shards[shard].0.lock();
            let now = self.clock.now_us();
            let Entry::Occupied(mut entry) = map.entry(id) else {
                continue;
            };
            if entry.get().is_expired(now) {
                entry.remove();
                continue;
            }
            let state = entry.get().state.view().into_owned();
            let rate = &given.rate;
            match lease::give_back(rate, Some(state), now, given.hits, given.granted_at_us) {
                Some(state) => *entry.get_mut() = Slot::new(rate, state),
                None => {
                    entry.remove();
                }
            }
        }
    }

    /// What each of `checks` would get with 0 hits (what [`Store::peek`] answers): a decision
    /// of 0 hits writes nothing, and checks sharing a counter add up to 0 hits too.
    pub fn peek_now(&self, checks: &[Check]) -> Vec<Verdict> {
        self.decide_now(&crate::limiter::counter_state::probes(checks))
    }

    /// Removes the counter of each of `checks` (what [`Store::reset`] does); whether each held
    /// a live state.
    pub fn reset_now(&self, checks: &[Check]) -> Vec<bool> {
        checks
            .iter()
            .map(|check| {
                let id = counter_id(&self.keys, check);
                let shard = (id.high >> (64 - SHARD_BITS)) as usize;
                let mut map = self.shards[shard].0.lock();
                let now = self.clock.now_us();
                map.remove(&id).is_some_and(|slot| !slot.is_expired(now))
            })
            .collect()
    }

    /// Removes every expired counter; returns how many.
    pub fn sweep_expired(&self) -> usize {
        (0..SHARDS).map(|index| self.sweep_shard(index)).sum()
    }

    fn sweep_shard(&self, index: usize) -> usize {
        let Some(shard) = self.shards.get(index) else {
            return 0;
        };
        let mut map = shard.0.lock();
        let now = self.clock.now_us();
        let before = map.len();
        map.retain(|_, slot| !slot.is_expired(now));
        // Give memory back after a peak, keeping room to grow again without rehashing at once.
        if map.capacity() > 1024 && map.len() < map.capacity() / 4 {
            let keep = map.len() * 2;
            map.shrink_to(keep);
        }
        before - map.len()
    }

    /// Counters held, including expired ones not yet removed.
    pub fn len(&self) -> usize {
        self.shards.iter().map(|shard| shard.0.lock().len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.shards.iter().all(|shard| shard.0.lock().is_empty())
    }

    /// Runs [`MemoryStore::sweep_expired`] every `every` (at least 1 ms) on the current tokio
    /// runtime, one shard at a time with a yield in between. The task holds only a weak
    /// reference and ends once the store is dropped. Outside a runtime nothing is spawned and
    /// `None` is returned.
    pub fn spawn_sweeper(self: &Arc<Self>, every: Duration) -> Option<tokio::task::JoinHandle<()>> {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("no tokio runtime: the memory store's sweeper is not running");
            return None;
        };
        let store = Arc::downgrade(self);
        let every = every.max(Duration::from_millis(1));
        Some(runtime.spawn(async move {
            let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let mut removed = 0;
                for index in 0..SHARDS {
                    let Some(live) = store.upgrade() else {
                        return;
                    };
                    removed += live.sweep_shard(index);
                    drop(live);
                    tokio::task::yield_now().await;
                }
                if removed > 0 {
                    tracing::debug!(removed, "memory store swept expired counters");
                }
            }
        }))
    }
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("shards", &SHARDS)
            .finish_non_exhaustive()
    }
}

impl Store for MemoryStore {
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        Ok(self.decide_now(checks))
    }

    async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
        Ok(self.lease_now(asks))
    }

    async fn give_back(&self, returns: &[LeaseReturn]) -> Result<(), StoreError> {
        self.give_back_now(returns);
        Ok(())
    }

    async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        Ok(self.peek_now(checks))
    }

    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        Ok(self.reset_now(checks))
    }

    fn is_healthy(&self) -> impl Future<Output = bool> + Send {
        std::future::ready(true)
    }
}

/// The distinct counters of a request, in order of first appearance.
struct Counters<'c> {
    groups: Vec<Group<'c>>,
    /// For each check, the index of its counter in `groups`.
    group_of: Vec<usize>,
}

/// One distinct counter of a request and what its checks admitted so far.
struct Group<'c> {
    id: CounterId,
    shard: usize,
    /// Hits of the admitted checks so far (the cumulative hits the next check adds to).
    admitted_hits: u64,
    /// The rate of the last admitted check: the one whose evaluation admitted the total.
    commit_rate: Option<&'c Rate>,
}

/// Requests up to this many checks find duplicate counters by a linear scan.
const LINEAR_GROUPING: usize = 8;

impl<'c> Counters<'c> {
    fn of(keys: &RandomState, checks: &'c [Check]) -> Counters<'c> {
        let mut groups: Vec<Group<'c>> = Vec::with_capacity(checks.len());
        let mut index: HashMap<CounterId, usize, BuildHasherDefault<IdHasher>> = HashMap::default();
        let group_of = checks
            .iter()
            .map(|check| {
                let id = counter_id(keys, check);
                let found = if checks.len() <= LINEAR_GROUPING {
                    groups.iter().position(|g| g.id == id)
                } else {
                    index.get(&id).copied()
                };
                found.unwrap_or_else(|| {
                    groups.push(Group {
                        id,
                        shard: (id.high >> (64 - SHARD_BITS)) as usize,
                        admitted_hits: 0,
                        commit_rate: None,
                    });
                    if checks.len() > LINEAR_GROUPING {
                        index.insert(id, groups.len() - 1);
                    }
                    groups.len() - 1
                })
            })
            .collect();
        Counters { groups, group_of }
    }
}
