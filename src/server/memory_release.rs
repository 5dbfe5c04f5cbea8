//! Giving freed memory back to the operating system after a burst.
//!
//! glibc's malloc keeps what the process frees in its arenas (the main one and one per thread
//! that allocated concurrently) and returns to the kernel only the free space at the top of each
//! heap. After a burst of calls (many connections each holding many half-sent calls) or a large
//! configuration parse, the freed chunks lie between live ones, so the pages stay resident:
//! 100 000 held calls left about 1 GiB resident after every connection had closed.
//! `malloc_trim(0)` walks every arena and returns each whole free page (`MADV_DONTNEED`), which
//! takes that back to a few MiB above the idle footprint.
//!
//! It runs when there is something to give back, not on a timer that costs when idle: once the
//! bytes held against the memory budgets (the gRPC calls' and the RLQS streams' state) have
//! fallen [`RELEASE_STEP`] below their highest point since the last release (a peak between two
//! looks included) and stopped falling, or are back to nothing after such a burst; and after
//! every configuration load (applied or rejected), from files or over xDS.

use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// How far the budget's held bytes must fall from their high-water mark before freed memory is
/// given back.
pub const RELEASE_STEP: usize = 16 << 20;

/// How often the budget is looked at.
const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// Returns the allocator's free pages to the operating system (glibc's `malloc_trim`; nothing
/// with other C libraries). Takes each arena's lock in turn: a few milliseconds after a large
/// burst, during which allocating threads of that arena wait.
pub fn give_back() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim has no preconditions; it only reorganizes the allocator's free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Watches the bytes `held` against the memory budgets (the gRPC calls' and the RLQS state's)
/// until `stopping`, and gives freed memory back after each burst (see the module docs).
pub async fn watch(held: impl Fn() -> (usize, usize), stopping: CancellationToken) {
    let mut ticks = tokio::time::interval(CHECK_INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut bursts = Bursts::default();
    let mut again = false;
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let (peak, now) = held();
        let ended = bursts.observe(peak, now);
        if ended || again {
            let _ = tokio::task::spawn_blocking(give_back).await;
        }
        // The charges go back when a call ends, its connection's buffers when the connection's
        // task does, which may be after this look: give back once more at the next.
        again = ended;
    }
}

/// When a burst is over: the held bytes fell [`RELEASE_STEP`] below their high-water mark and
/// did not fall further since the last look; or they are back to nothing after at least
/// [`RELEASE_STEP`] was held since they last were (a release in the middle of a burst lowers the
/// high-water mark, and the rest of the fall may be shorter than the step).
#[derive(Debug, Default)]
struct Bursts {
    high_water: usize,
    last: usize,
    /// The most held since the bytes were last back to nothing and given back.
    peak_since_idle: usize,
}

impl Bursts {
    /// Takes in the most bytes held since the last look and those held now; true when freed
    /// memory should be given back.
    fn observe(&mut self, peak: usize, held: usize) -> bool {
        let settled = held >= self.last;
        self.last = held;
        self.high_water = self.high_water.max(peak);
        self.peak_since_idle = self.peak_since_idle.max(peak);
        if !settled {
            return false;
        }
        let fell = self.high_water - held >= RELEASE_STEP;
        let idle_again = held == 0 && self.peak_since_idle >= RELEASE_STEP;
        if fell || idle_again {
            self.high_water = held;
            if held == 0 {
                self.peak_since_idle = 0;
            }
            return true;
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_given_back_once_a_burst_has_ended() {
        let mut bursts = Bursts::default();
        let step = RELEASE_STEP;
        assert!(!bursts.observe(0, 0));
        assert!(!bursts.observe(3 * step, 3 * step));
        // Still falling: calls are still closing.
        assert!(!bursts.observe(step, step));
        assert!(bursts.observe(step, step));
        // Given back once; a small dip after that is not a burst.
        assert!(!bursts.observe(step / 2, step / 2));
        assert!(!bursts.observe(step / 2, step / 2));
        assert!(!bursts.observe(2 * step, 2 * step));
        assert!(!bursts.observe(0, 0));
        assert!(bursts.observe(0, 0));
    }

    #[test]
    fn a_burst_given_back_halfway_is_given_back_again_once_it_is_over() {
        let mut bursts = Bursts::default();
        let step = RELEASE_STEP;
        assert!(!bursts.observe(2 * step, 2 * step));
        assert!(!bursts.observe(step / 2, step / 2));
        assert!(bursts.observe(step / 2, step / 2), "halfway down");
        assert!(!bursts.observe(0, 0));
        assert!(
            bursts.observe(0, 0),
            "over: less than a step since, but back to nothing"
        );
        assert!(!bursts.observe(0, 0));
        assert!(!bursts.observe(step / 4, step / 4));
        assert!(!bursts.observe(0, 0));
        assert!(!bursts.observe(0, 0), "a small burst is not worth it");
    }

    #[test]
    fn a_burst_between_two_looks_is_given_back() {
        let mut bursts = Bursts::default();
        assert!(!bursts.observe(0, 0));
        assert!(bursts.observe(2 * RELEASE_STEP, 0));
        assert!(!bursts.observe(0, 0));
    }

    #[test]
    fn giving_back_is_harmless_at_any_time() {
        let held: Vec<Vec<u8>> = (0..1000).map(|i| vec![1; 64 + i]).collect();
        give_back();
        assert_eq!(held[999].len(), 1063);
    }
}
