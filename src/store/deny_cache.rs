//! Local deny cache: a [`Store`] decorator that answers requests for counters known to be
//! exhausted without a round trip to the store underneath (Redis).
//!
//! # What is remembered
//!
//! When the store denies a non-shadow check whose counter was asked for exactly **one** hit (the
//! check's hits plus those of the earlier checks of the same request on the same counter), its
//! verdict's `reset_after_us` is, by each algorithm's definition, the time after which one hit
//! fits again. Until then no request with hits ≥ 1 can be admitted on that counter under that
//! rate: the state only changes through admissions, which only consume more. So the cache records
//! `(counter key, rate) -> denied until T`.
//!
//! # Why it never denies what the store would admit
//!
//! - T is measured from the instant the call to the store **started** (before the store read its
//!   own clock, e.g. Redis's `TIME`), so T is never later than the store's own instant; and a
//!   safety margin (1 ms plus 0.1 % of the wait, for clock-rate drift between hosts and 1 µs
//!   rounding of the float algorithms) is subtracted.
//! - A request is answered locally only when **every** check of it is a non-shadow check of
//!   exactly one hit whose `(key, rate)` has a live entry. Then the store would deny every check
//!   too (a denied check adds nothing for the next ones on its counter), and the local answer is
//!   the store's answer: every status OVER_LIMIT, nothing remaining, nothing consumed, and the
//!   same time until one hit fits (measured from when the store was asked, so at most the
//!   store's round trip shorter). A request that asks for more hits, or also carries other
//!   descriptors, goes to the store, whose answers the cache cannot know.
//! - Requests with hits 0 and shadow checks never use it.
//! - The cache is cleared on configuration reload, on any store error, when the store reports
//!   itself unhealthy, and when the store's *epoch* changes (for Redis: the script reloads plus
//!   the connections found dead, and on a cluster the slot map changes and the refunds sent); a
//!   call during which the epoch changed teaches it nothing. Refunds break the rule above (they
//!   give back what other requests saw as consumed: a concurrent request may be denied by a
//!   reservation that is refunded a moment later), hence the epoch. A Redis restart kills every connection, and the server's health
//!   probe, every second, meets one of them even when every request is answered here; it then
//!   reconnects at once, so a quick restart may show only in the epoch. After Redis loses its
//!   counters (restart without persistence, failover to a lagging replica), stale entries may
//!   thus deny for up to about one probe interval; a `FLUSHALL` is not noticed at
//!   all (entries then live until their T, at most one window).
//!
//! Known limit: two rates sharing one token-bucket counter (per-request overrides of a
//! token_bucket rule with another rate) refill it differently; an admission under the faster rate
//! can make the slower one admit before its T.
//!
//! # Memory
//!
//! At most `max_entries` entries (16 shards): expired entries are dropped when met and swept when
//! a shard is full; when a shard is still full of live entries, new ones are not recorded.
use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;

use super::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};
use crate::limiter::algorithm::Verdict;
use crate::limiter::clock::Clock;
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::Rate;

const SHARDS: usize = 16;

/// A shard that is full is swept at most this often (µs), so a cache full of live entries does
/// not scan itself on every denied request.
const SWEEP_EVERY_US: u64 = 100_000;

/// The process's monotonic clock in µs (from an arbitrary origin): what the cache measures
/// waits with. Wall-clock jumps do not move it.
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: Instant,
}

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> MonotonicClock {
        MonotonicClock::new()
    }
}

impl Clock for MonotonicClock {
    fn now_us(&self) -> u64 {
        // Offset by one second so that "0" never means "now".
        self.origin.elapsed().as_micros() as u64 + 1_000_000
    }
}

/// Tuning of the cache.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DenyCacheSettings {
    /// Most entries held at once.
    pub max_entries: usize,
    /// Fixed part of the safety margin subtracted from every deadline (µs).
    pub margin_us: u64,
    /// Proportional part of the margin: this share of the wait is subtracted too.
    pub margin_ratio: f64,
}

impl DenyCacheSettings {
    pub const DEFAULT_MAX_ENTRIES: usize = 100_000;
}

impl Default for DenyCacheSettings {
    fn default() -> DenyCacheSettings {
        DenyCacheSettings {
            max_entries: DenyCacheSettings::DEFAULT_MAX_ENTRIES,
            margin_us: 1_000,
            margin_ratio: 0.001,
        }
    }
}

/// One exhausted counter.
#[derive(Debug, Clone, Copy)]
struct Denied {
    /// Local instant (µs) until which requests are answered locally (margin subtracted).
    until_us: u64,
    /// Local instant at which one hit fits again as the store computed it (no margin): the
    /// reported `duration_until_reset`.
    reset_at_us: u64,
}

#[derive(Default)]
struct Shard {
    entries: HashMap<(CounterKey, Rate), Denied>,
    next_sweep_us: u64,
}

/// Counters for metrics.
#[derive(Debug, Default)]
struct Stats {
    hits: AtomicU64,
    inserts: AtomicU64,
    refused: AtomicU64,
}

/// The decorator. See the module documentation.
pub struct DenyCache<S> {
    inner: Arc<S>,
    settings: DenyCacheSettings,
    clock: Arc<dyn Clock>,
    shards: Box<[Mutex<Shard>]>,
    hasher: RandomState,
    stats: Stats,
    epoch: Option<Box<dyn Fn() -> u64 + Send + Sync>>,
    seen_epoch: AtomicU64,
}

impl<S> DenyCache<S> {
    /// A cache in front of `inner`, on the process's monotonic clock.
    pub fn new(inner: Arc<S>, settings: DenyCacheSettings) -> DenyCache<S> {
        DenyCache::with_clock(inner, settings, Arc::new(MonotonicClock::new()))
    }

    /// A cache on `clock` (tests share a `ManualClock` with a memory store).
    pub fn with_clock(
        inner: Arc<S>,
        settings: DenyCacheSettings,
        clock: Arc<dyn Clock>,
    ) -> DenyCache<S> {
        DenyCache {
            inner,
            settings,
            clock,
            shards: (0..SHARDS).map(|_| Mutex::new(Shard::default())).collect(),
            hasher: RandomState::new(),
            stats: Stats::default(),
            epoch: None,
            seen_epoch: AtomicU64::new(0),
        }
    }

    /// Clears the cache whenever `epoch()` changes (checked on every call): for Redis,
    /// [`RedisStore::epoch`](crate::store::RedisStore::epoch), which grows when Redis restarted
    /// or flushed its scripts.
    pub fn with_epoch(mut self, epoch: impl Fn() -> u64 + Send + Sync + 'static) -> DenyCache<S> {
        self.seen_epoch.store(epoch(), Ordering::Relaxed);
        self.epoch = Some(Box::new(epoch));
        self
    }

    /// The decorated store.
    pub fn inner(&self) -> &Arc<S> {
        &self.inner
    }

    /// Requests answered from the cache, without a store round trip.
    pub fn hits(&self) -> u64 {
        self.stats.hits.load(Ordering::Relaxed)
    }

    /// Entries recorded so far.
    pub fn inserts(&self) -> u64 {
        self.stats.inserts.load(Ordering::Relaxed)
    }

    /// Entries not recorded because the cache was full.
    pub fn refused(&self) -> u64 {
        self.stats.refused.load(Ordering::Relaxed)
    }

    /// Entries held (expired ones not yet dropped included).
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().entries.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets everything (configuration reload, store trouble).
    pub fn clear(&self) {
        for shard in self.shards.iter() {
            let mut shard = shard.lock();
            shard.entries.clear();
            shard.entries.shrink_to(1024);
        }
    }

    /// Forgets the denials of the counters of `checks` (their counters were reset).
    fn forget(&self, checks: &[Check]) {
        for check in checks {
            self.shard_of_parts(&check.key, &check.rate)
                .lock()
                .entries
                .remove(&(check.key.clone(), check.rate));
        }
    }

    fn shard_of(&self, key: &(CounterKey, Rate)) -> &Mutex<Shard> {
        self.shard_of_parts(&key.0, &key.1)
    }

    /// [`DenyCache::shard_of`] without building the key: a tuple of references hashes as the
    /// tuple of values.
    fn shard_of_parts(&self, key: &CounterKey, rate: &Rate) -> &Mutex<Shard> {
        &self.shards[(self.hasher.hash_one((key, rate)) as usize) % SHARDS]
    }

    /// Clears the cache when the store's epoch changed since the last reading; returns the
    /// epoch read (0 without one).
    fn check_epoch(&self) -> u64 {
        let Some(epoch) = &self.epoch else {
            return 0;
        };
        let now = epoch();
        if self.seen_epoch.swap(now, Ordering::Relaxed) != now {
            tracing::debug!("store epoch changed: deny cache cleared");
            self.clear();
        }
        now
    }

    /// The local answer when every check is covered by a live entry. A check whose shard holds
    /// no entry is a miss found without copying its key or allocating (the common case: every
    /// request while nothing is denied).
    fn answer(&self, checks: &[Check], now: u64) -> Option<Vec<Verdict>> {
        if checks.is_empty() || checks.iter().any(|c| c.shadow || c.hits != 1) {
            return None;
        }
        let mut verdicts = Vec::new();
        for check in checks {
            let mut shard = self.shard_of_parts(&check.key, &check.rate).lock();
            if shard.entries.is_empty() {
                return None;
            }
            let key = (check.key.clone(), check.rate);
            let denied = match shard.entries.get(&key) {
                Some(denied) if denied.until_us > now => *denied,
                Some(_) => {
                    shard.entries.remove(&key);
                    return None;
                }
                None => return None,
            };
            verdicts.push(Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: denied.reset_at_us.saturating_sub(now),
                counted_when_vetoed: false,
            });
        }
        Some(verdicts)
    }

    /// Records the counters the store just found exhausted for one hit.
    fn learn(&self, checks: &[Check], verdicts: &[Verdict], sent_us: u64) {
        for (index, (check, verdict)) in checks.iter().zip(verdicts).enumerate() {
            if verdict.admitted || check.shadow || check.hits != 1 {
                continue;
            }
            // Hits evaluated for this check: its own plus the earlier ones on its counter.
            let earlier_on_counter = checks[..index].iter().any(|other| {
                other.hits > 0
                    && other.key == check.key
                    && other.rate.algorithm() == check.rate.algorithm()
                    && other.rate.window_us() == check.rate.window_us()
            });
            if earlier_on_counter {
                continue;
            }
            let wait = verdict.reset_after_us;
            let margin = self
                .settings
                .margin_us
                .saturating_add((wait as f64 * self.settings.margin_ratio) as u64);
            if wait <= margin {
                continue;
            }
            let denied = Denied {
                until_us: sent_us.saturating_add(wait - margin),
                reset_at_us: sent_us.saturating_add(wait),
            };
            self.insert((check.key.clone(), check.rate), denied);
        }
    }

    fn insert(&self, key: (CounterKey, Rate), denied: Denied) {
        let per_shard = self.settings.max_entries.div_ceil(SHARDS);
        let mut shard = self.shard_of(&key).lock();
        if !shard.entries.contains_key(&key) && shard.entries.len() >= per_shard {
            let now = self.clock.now_us();
            if now >= shard.next_sweep_us {
                shard.entries.retain(|_, d| d.until_us > now);
                shard.next_sweep_us = now + SWEEP_EVERY_US;
            }
            if shard.entries.len() >= per_shard {
                self.stats.refused.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
        shard.entries.insert(key, denied);
        self.stats.inserts.fetch_add(1, Ordering::Relaxed);
    }
}

impl<S: Store> Store for DenyCache<S> {
    /// Leases go to the store: a denial this cache remembers is about requests, not grants.
    async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
        self.inner.lease(asks).await
    }

    async fn give_back(&self, returns: &[LeaseReturn]) -> Result<(), StoreError> {
        self.inner.give_back(returns).await
    }

    fn release(&self) -> impl std::future::Future<Output = ()> + Send {
        self.inner.release()
    }

    /// Always the store's state: a remembered denial says nothing about a counter's count.
    async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        self.inner.peek(checks).await
    }

    /// Also forgets the reset counters' denials here, before and after the store call: a
    /// request deciding meanwhile may have learned one from the old state.
    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        self.forget(checks);
        let result = self.inner.reset(checks).await;
        self.forget(checks);
        result
    }

    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        if self.settings.max_entries == 0 {
            return self.inner.decide(checks).await;
        }
        let epoch_before = self.check_epoch();
        let sent = self.clock.now_us();
        if let Some(verdicts) = self.answer(checks, sent) {
            self.stats.hits.fetch_add(1, Ordering::Relaxed);
            return Ok(verdicts);
        }
        match self.inner.decide(checks).await {
            Ok(verdicts) => {
                // A store restart noticed during this very call must not leave stale entries, and
                // a denial seen while the epoch moved may be gone already (a refund on a Redis
                // Cluster gives back what concurrent requests saw as taken): not learned.
                if self.check_epoch() == epoch_before {
                    self.learn(checks, &verdicts, sent);
                }
                Ok(verdicts)
            }
            Err(error) => {
                self.clear();
                Err(error)
            }
        }
    }

    /// The inner store's health; an unhealthy store also clears the cache (it may come back
    /// without its counters).
    async fn is_healthy(&self) -> bool {
        let healthy = self.inner.is_healthy().await;
        if !healthy {
            self.clear();
        }
        healthy
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::clock::ManualClock;
    use crate::limiter::rate::{Algorithm, Unit};
    use crate::limiter::request::Entry;
    use crate::store::MemoryStore;

    const T0: u64 = 1_700_000_000_000_000;

    fn check(value: &str, hits: u64, shadow: bool) -> Check {
        Check {
            key: CounterKey::new(
                "d",
                &[Entry {
                    key: "k".into(),
                    value: value.into(),
                }],
            ),
            rate: Rate::new(Algorithm::FixedWindow, 2, Unit::Second, 1, None).unwrap(),
            hits,
            shadow,
            consistency: crate::limiter::Consistency::Exact,
            rule: None,
        }
    }

    fn setup(settings: DenyCacheSettings) -> (Arc<ManualClock>, DenyCache<MemoryStore>) {
        let clock = Arc::new(ManualClock::new(T0));
        let store = Arc::new(MemoryStore::with_clock(clock.clone()));
        (clock.clone(), DenyCache::with_clock(store, settings, clock))
    }

    #[tokio::test]
    async fn a_denied_single_hit_is_remembered_until_the_window_ends() {
        let (clock, cache) = setup(DenyCacheSettings::default());
        for _ in 0..2 {
            assert!(cache.decide(&[check("a", 1, false)]).await.unwrap()[0].admitted);
        }
        let denied = cache.decide(&[check("a", 1, false)]).await.unwrap();
        assert!(!denied[0].admitted);
        assert_eq!(cache.len(), 1);
        assert_eq!(cache.hits(), 0);
        let local = cache.decide(&[check("a", 1, false)]).await.unwrap();
        assert!(!local[0].admitted);
        assert_eq!(cache.hits(), 1);
        // More than one hit goes to the store (its retry time differs).
        assert!(!cache.decide(&[check("a", 3, false)]).await.unwrap()[0].admitted);
        assert_eq!(cache.hits(), 1);
        // Hits 0 and shadow checks go to the store.
        assert!(cache.decide(&[check("a", 0, false)]).await.unwrap()[0].admitted);
        cache.decide(&[check("a", 1, true)]).await.unwrap();
        assert_eq!(cache.hits(), 1);
        // A request with another, uncovered descriptor goes to the store.
        cache
            .decide(&[check("a", 1, false), check("b", 1, false)])
            .await
            .unwrap();
        assert_eq!(cache.hits(), 1);
        clock.advance_us(1_000_000);
        assert!(cache.decide(&[check("a", 1, false)]).await.unwrap()[0].admitted);
        assert_eq!(cache.hits(), 1);
    }

    #[tokio::test]
    async fn a_reset_counter_is_forgotten_and_admits_again_while_others_stay_remembered() {
        let (_, cache) = setup(DenyCacheSettings::default());
        for value in ["a", "b"] {
            for _ in 0..3 {
                cache.decide(&[check(value, 1, false)]).await.unwrap();
            }
        }
        assert_eq!(cache.len(), 2);
        let read = cache.peek(&[check("a", 1, false)]).await.unwrap();
        assert_eq!(read[0].remaining, 0, "a read is the store's state");
        assert_eq!(cache.hits(), 0, "a read never answers from the cache");
        let held = cache.reset(&[check("a", 1, false)]).await.unwrap();
        assert_eq!(held, vec![true]);
        assert_eq!(cache.len(), 1);
        assert!(cache.decide(&[check("a", 1, false)]).await.unwrap()[0].admitted);
        assert!(!cache.decide(&[check("b", 1, false)]).await.unwrap()[0].admitted);
        assert_eq!(cache.hits(), 1, "b's denial is still remembered");
    }

    #[test]
    fn a_key_and_its_parts_pick_the_same_shard() {
        let (_, cache) = setup(DenyCacheSettings::default());
        let mut shards = std::collections::HashSet::new();
        for value in 0..200 {
            let check = check(&value.to_string(), 1, false);
            let by_key = cache.shard_of(&(check.key.clone(), check.rate));
            let by_parts = cache.shard_of_parts(&check.key, &check.rate);
            assert!(std::ptr::eq(by_key, by_parts), "{value}");
            shards.insert(by_key as *const _ as usize);
        }
        assert!(shards.len() > SHARDS / 2, "keys spread over the shards");
    }

    #[tokio::test]
    async fn denials_for_more_than_one_hit_are_not_remembered() {
        let (_, cache) = setup(DenyCacheSettings::default());
        assert!(!cache.decide(&[check("a", 3, false)]).await.unwrap()[0].admitted);
        assert!(cache.is_empty());
        cache.decide(&[check("a", 2, false)]).await.unwrap();
        // Cumulative: the second check on the counter was asked for 2 + 1 hits.
        let v = cache
            .decide(&[check("a", 0, false), check("a", 1, false)])
            .await
            .unwrap();
        assert!(!v[1].admitted);
        assert_eq!(cache.len(), 1, "0 + 1 is one hit: remembered");
        cache.clear();
        cache.decide(&[check("c", 1, false)]).await.unwrap();
        let v = cache
            .decide(&[check("c", 1, false), check("c", 1, false)])
            .await
            .unwrap();
        assert!(v[0].admitted && !v[1].admitted, "{v:?}");
        assert!(cache.is_empty(), "1 + 1 hits: not remembered");
    }

    #[tokio::test]
    async fn the_cache_is_bounded() {
        let settings = DenyCacheSettings {
            max_entries: 16,
            ..DenyCacheSettings::default()
        };
        let (_, cache) = setup(settings);
        for i in 0..200 {
            let value = format!("v{i}");
            cache.decide(&[check(&value, 2, false)]).await.unwrap();
            cache.decide(&[check(&value, 1, false)]).await.unwrap();
        }
        assert!(cache.len() <= 16, "{}", cache.len());
        assert!(cache.refused() > 0);
    }
}
