//! Rate-limited warnings: a failure that repeats thousands of times a second (a store outage,
//! accept errors while out of descriptors) must not flood the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Lets one warning through per period (a second unless [`WarnThrottle::every`] says) and
/// counts the ones it holds back.
#[derive(Debug)]
pub struct WarnThrottle {
    origin: Instant,
    period_ms: u64,
    /// Milliseconds after `origin` of the last warning logged, plus one (0: none yet).
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for WarnThrottle {
    fn default() -> WarnThrottle {
        WarnThrottle::new()
    }
}

impl WarnThrottle {
    pub fn new() -> WarnThrottle {
        WarnThrottle::every(Duration::from_secs(1))
    }

    /// One warning per `period`.
    pub fn every(period: Duration) -> WarnThrottle {
        WarnThrottle {
            origin: Instant::now(),
            period_ms: period.as_millis().max(1) as u64,
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(number held back since the last one)` when this warning may be logged.
    pub fn admit(&self) -> Option<u64> {
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let last = self.last_ms.load(Ordering::Relaxed);
        if (last == 0 || now >= last + self.period_ms)
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_warning_per_second_with_the_count_held_back() {
        let throttle = WarnThrottle::new();
        assert_eq!(throttle.admit(), Some(0));
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.admit(), None);
        assert_eq!(throttle.suppressed.load(Ordering::Relaxed), 2);
    }
}
