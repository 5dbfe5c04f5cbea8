//! Time source for the in-process store. Redis takes its time from `TIME` inside the scripts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of the current Unix time in microseconds.
pub trait Clock: Send + Sync + 'static {
    fn now_us(&self) -> u64;
}

/// The process's wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl SystemClock {
    /// The Unix time in whole seconds (0 on a clock set before 1970): what the metrics and the
    /// status page show.
    pub fn now_secs() -> u64 {
        SystemClock.now_us() / 1_000_000
    }
}

impl Clock for SystemClock {
    fn now_us(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0)
    }
}

/// A clock that only moves when told to; for tests that need exact window boundaries.
#[derive(Debug, Default)]
pub struct ManualClock {
    now_us: AtomicU64,
}

impl ManualClock {
    pub fn new(now_us: u64) -> ManualClock {
        ManualClock {
            now_us: AtomicU64::new(now_us),
        }
    }

    pub fn set_us(&self, now_us: u64) {
        self.now_us.store(now_us, Ordering::SeqCst);
    }

    pub fn advance_us(&self, by_us: u64) {
        self.now_us.fetch_add(by_us, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_us(&self) -> u64 {
        self.now_us.load(Ordering::SeqCst)
    }
}

impl<C: Clock> Clock for std::sync::Arc<C> {
    fn now_us(&self) -> u64 {
        (**self).now_us()
    }
}

/// Microseconds since this clock was made, from the OS's monotonic clock: for instants that must
/// never move backwards or jump with the wall clock (how long a lease still lasts).
#[derive(Debug, Clone, Copy)]
pub struct MonotonicClock {
    origin: std::time::Instant,
}

impl MonotonicClock {
    pub fn new() -> MonotonicClock {
        MonotonicClock {
            origin: std::time::Instant::now(),
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
        self.origin.elapsed().as_micros() as u64
    }
}
