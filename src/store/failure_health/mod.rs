//! Health from the store's recent failures: a [`Store`] decorator that counts how the requests
//! it passes on end, and reports the store unhealthy while too many of the last ones failed.
//!
//! A probe of the store (Redis `PING`) says whether it answers, not whether it can decide: a
//! Redis out of memory (`maxmemory` reached with `noeviction`) answers `PING` and refuses every
//! script call with `OOM`, and a replica behind such a store would stay SERVING while answering
//! every request UNAVAILABLE. So besides the inner store's own health, this looks at the
//! requests that reached the store in the last [`FailureHealthSettings::window`]: when at least
//! [`FailureHealthSettings::min_calls`] ended there and at least
//! [`FailureHealthSettings::max_failure_ratio`] of them failed, the store is unhealthy.
//!
//! - A failure is any [`StoreError`]: an error answer (OOM, a script error), a timeout, a lost or
//!   refused connection. A denial is an answer, not a failure; a request with no check to decide
//!   is not counted, nor one made while startup still connects the store.
//! - Recovery: as calls succeed the share falls below the threshold and the store is healthy
//!   again. When the replica is taken out of rotation and calls stop, the failures age out of
//!   the window, and with fewer than `min_calls` calls there is nothing to judge: the store is
//!   healthy again after at most one window, and traffic that comes back tries it.
//! - It is the same for every Redis topology: it looks at answers, not at servers.

mod window;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use self::window::{FailureWindow, Tally};

use super::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};
use crate::limiter::algorithm::Verdict;

/// When failed store calls make the store unhealthy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FailureHealthSettings {
    /// How far back calls are counted, in whole seconds (rounded up); zero turns the rule off.
    pub window: Duration,
    /// Fewest calls in the window for their failures to count (at least one).
    pub min_calls: u64,
    /// Share of failed calls, in (0, 1], at or above which the store is unhealthy.
    pub max_failure_ratio: f64,
}

impl FailureHealthSettings {
    pub const DEFAULT_WINDOW: Duration = Duration::from_secs(10);
    pub const DEFAULT_MIN_CALLS: u64 = 20;
    pub const DEFAULT_MAX_FAILURE_RATIO: f64 = 0.5;
    /// Longest window accepted.
    pub const MAX_WINDOW: Duration = Duration::from_secs(3600);

    /// The rule off: health follows the inner store's own probe only.
    pub fn off() -> FailureHealthSettings {
        FailureHealthSettings {
            window: Duration::ZERO,
            ..FailureHealthSettings::default()
        }
    }

    /// Whether the rule is in force.
    pub fn is_on(&self) -> bool {
        !self.window.is_zero()
    }

    /// The window in whole seconds, rounded up.
    fn window_seconds(&self) -> u32 {
        let window = self.window.min(FailureHealthSettings::MAX_WINDOW);
        (window.as_secs() + u64::from(window.subsec_nanos() > 0)) as u32
    }

    /// Whether `tally` breaks the rule.
    pub fn is_failing(&self, tally: Tally) -> bool {
        self.is_on()
            && tally.calls >= self.min_calls.max(1)
            && tally.failures as f64 >= self.max_failure_ratio * tally.calls as f64
    }
}

impl Default for FailureHealthSettings {
    /// Unhealthy when half or more of at least 20 calls in the last 10 s failed.
    fn default() -> FailureHealthSettings {
        FailureHealthSettings {
            window: FailureHealthSettings::DEFAULT_WINDOW,
            min_calls: FailureHealthSettings::DEFAULT_MIN_CALLS,
            max_failure_ratio: FailureHealthSettings::DEFAULT_MAX_FAILURE_RATIO,
        }
    }
}

/// The store `inner`, unhealthy also while its recent calls break [`FailureHealthSettings`].
pub struct FailureHealth<S> {
    inner: Arc<S>,
    settings: FailureHealthSettings,
    window: FailureWindow,
    origin: Instant,
    failing: AtomicBool,
    trips: AtomicU64,
}

impl<S> FailureHealth<S> {
    pub fn new(inner: Arc<S>, settings: FailureHealthSettings) -> FailureHealth<S> {
        FailureHealth {
            inner,
            window: FailureWindow::new(settings.window_seconds()),
            settings,
            origin: Instant::now(),
            failing: AtomicBool::new(false),
            trips: AtomicU64::new(0),
        }
    }

    /// The calls and failures in the window now (zero when the rule is off).
    pub fn tally(&self) -> Tally {
        if !self.settings.is_on() {
            return Tally::default();
        }
        self.window.tally(self.second())
    }

    /// Times the rule has made the store unhealthy.
    pub fn trips(&self) -> u64 {
        self.trips.load(Ordering::Relaxed)
    }

    fn second(&self) -> u64 {
        self.origin.elapsed().as_secs()
    }

    /// Whether the recent calls break the rule; logs when that changes.
    fn check_failures(&self) -> bool {
        let tally = self.tally();
        let failing = self.settings.is_failing(tally);
        if self.failing.swap(failing, Ordering::Relaxed) != failing {
            let window = self.settings.window;
            if failing {
                self.trips.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(
                    calls = tally.calls,
                    failures = tally.failures,
                    ?window,
                    "store calls failing: health NOT_SERVING until the share of failures falls below {}",
                    self.settings.max_failure_ratio
                );
            } else {
                tracing::warn!(
                    calls = tally.calls,
                    failures = tally.failures,
                    ?window,
                    "store calls no longer failing"
                );
            }
        }
        failing
    }
}

impl<S: Store> Store for FailureHealth<S> {
    /// Calls made while the inner store is not connected yet are not counted: health is
    /// NOT_SERVING then anyway, and their failures must not hold it there once it is connected.
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        let connected = self.inner.is_connected();
        let result = self.inner.decide(checks).await;
        if self.settings.is_on() && !checks.is_empty() && connected {
            self.window.record(self.second(), result.is_err());
        }
        result
    }

    async fn give_back(&self, returns: &[LeaseReturn]) -> Result<(), StoreError> {
        self.inner.give_back(returns).await
    }

    fn release(&self) -> impl std::future::Future<Output = ()> + Send {
        self.inner.release()
    }

    /// Not counted: operator reads and resets are no decisions, and their failures say what
    /// the probe already says.
    async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        self.inner.peek(checks).await
    }

    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        self.inner.reset(checks).await
    }

    /// Counted like decisions: a lease call that fails is a store call that failed.
    async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
        let connected = self.inner.is_connected();
        let result = self.inner.lease(asks).await;
        if self.settings.is_on() && !asks.is_empty() && connected {
            self.window.record(self.second(), result.is_err());
        }
        result
    }

    /// The inner store's health, and the rule on its recent calls.
    async fn is_healthy(&self) -> bool {
        let answers = self.inner.is_healthy().await;
        let failing = self.check_failures();
        answers && !failing
    }

    fn is_connected(&self) -> bool {
        self.inner.is_connected()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(min_calls: u64, ratio: f64) -> FailureHealthSettings {
        FailureHealthSettings {
            window: Duration::from_secs(10),
            min_calls,
            max_failure_ratio: ratio,
        }
    }

    fn tally(calls: u64, failures: u64) -> Tally {
        Tally { calls, failures }
    }

    #[test]
    fn failing_needs_enough_calls_and_a_share_at_the_threshold() {
        let rule = settings(20, 0.5);
        assert!(!rule.is_failing(tally(19, 19)), "too few calls to judge");
        assert!(rule.is_failing(tally(20, 10)), "exactly half");
        assert!(!rule.is_failing(tally(20, 9)));
        assert!(rule.is_failing(tally(1000, 1000)));
        assert!(!rule.is_failing(tally(0, 0)));
        assert!(
            !settings(0, 0.5).is_failing(tally(0, 0)),
            "no call, no failure"
        );
        assert!(!FailureHealthSettings::off().is_failing(tally(1000, 1000)));
    }

    #[test]
    fn the_window_is_whole_seconds_rounded_up() {
        let mut rule = settings(1, 1.0);
        rule.window = Duration::from_millis(1500);
        assert_eq!(rule.window_seconds(), 2);
        rule.window = Duration::from_secs(86_400);
        assert_eq!(rule.window_seconds(), 3600);
    }

    /// A store whose answers fail while `failing` is set.
    struct Flaky {
        failing: AtomicBool,
    }

    impl Store for Flaky {
        async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
            Ok(asks.iter().map(|_| Ok(None)).collect())
        }

        async fn give_back(&self, _: &[LeaseReturn]) -> Result<(), StoreError> {
            Ok(())
        }

        async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
            self.decide(checks).await
        }

        async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
            Ok(vec![false; checks.len()])
        }

        async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
            if self.failing.load(Ordering::Relaxed) {
                Err(StoreError::Protocol("OOM command not allowed".into()))
            } else {
                Ok(checks
                    .iter()
                    .map(|_| Verdict {
                        admitted: true,
                        remaining: 1,
                        reset_after_us: 0,
                        counted_when_vetoed: false,
                    })
                    .collect())
            }
        }

        async fn is_healthy(&self) -> bool {
            true
        }
    }

    fn check() -> Check {
        use crate::limiter::counter_key::CounterKey;
        use crate::limiter::rate::{Algorithm, Rate, Unit};
        Check {
            key: CounterKey::new("d", &[]),
            rate: Rate::new(Algorithm::FixedWindow, 2, Unit::Second, 1, None).unwrap(),
            hits: 1,
            shadow: false,
            consistency: crate::limiter::Consistency::Exact,
            rule: None,
        }
    }

    #[tokio::test]
    async fn failures_turn_the_store_unhealthy_and_successes_back() {
        let inner = Arc::new(Flaky {
            failing: AtomicBool::new(true),
        });
        let store = FailureHealth::new(inner.clone(), settings(4, 0.5));
        let checks = [check()];
        for _ in 0..3 {
            assert!(store.decide(&checks).await.is_err());
        }
        assert!(store.is_healthy().await, "three calls are too few");
        assert!(
            store.decide(&[]).await.is_err(),
            "not counted: nothing to decide"
        );
        assert!(store.is_healthy().await);
        assert!(store.decide(&checks).await.is_err());
        assert!(!store.is_healthy().await);
        assert_eq!((store.tally(), store.trips()), (tally(4, 4), 1));
        inner.failing.store(false, Ordering::Relaxed);
        for _ in 0..4 {
            assert!(store.decide(&checks).await.is_ok());
        }
        assert!(
            !store.is_healthy().await,
            "4 of 8 failed: still at the threshold"
        );
        assert!(store.decide(&checks).await.is_ok());
        assert!(store.is_healthy().await);
        assert_eq!(store.trips(), 1);
    }

    #[tokio::test]
    async fn off_counts_nothing() {
        let inner = Arc::new(Flaky {
            failing: AtomicBool::new(true),
        });
        let store = FailureHealth::new(inner, FailureHealthSettings::off());
        for _ in 0..100 {
            assert!(store.decide(&[check()]).await.is_err());
        }
        assert!(store.is_healthy().await);
        assert_eq!(store.tally(), Tally::default());
    }
}
