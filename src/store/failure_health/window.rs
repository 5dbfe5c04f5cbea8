//! Store calls and their failures over the last few seconds, counted without a lock.

use std::sync::atomic::{AtomicU64, Ordering};

/// Bits of a bucket's word holding its second (modulo 2^24: a bucket left alone for 194 days
/// could pass for current, which only means one stale second is counted once).
const SECOND_BITS: u32 = 24;
/// Bits of each of the two counts; a count saturates there (a million calls in one second).
const COUNT_BITS: u32 = 20;
const COUNT_MAX: u64 = (1 << COUNT_BITS) - 1;
const SECOND_MASK: u64 = (1 << SECOND_BITS) - 1;

/// Calls and failures per second for the last `seconds` seconds (the current one included), in a
/// ring of one-second buckets, each one atomic word: its second, its calls, its failures. A
/// bucket whose second has passed out of the window is reset by the first call that lands in it.
#[derive(Debug)]
pub struct FailureWindow {
    buckets: Box<[AtomicU64]>,
}

/// What a [`FailureWindow`] holds at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub calls: u64,
    pub failures: u64,
}

impl FailureWindow {
    /// A window over the last `seconds` seconds (at least one).
    pub fn new(seconds: u32) -> FailureWindow {
        FailureWindow {
            buckets: (0..seconds.max(1)).map(|_| AtomicU64::new(0)).collect(),
        }
    }

    /// Counts one call that ended in second `now` (any monotonic count of seconds), failed or not.
    pub fn record(&self, now: u64, failed: bool) {
        let bucket = &self.buckets[(now % self.buckets.len() as u64) as usize];
        let second = now & SECOND_MASK;
        let mut word = bucket.load(Ordering::Relaxed);
        loop {
            let (mut calls, mut failures) = if unpack_second(word) == second {
                (unpack_calls(word), unpack_failures(word))
            } else {
                (0, 0)
            };
            calls = (calls + 1).min(COUNT_MAX);
            if failed {
                failures = (failures + 1).min(COUNT_MAX);
            }
            let next = pack(second, calls, failures);
            match bucket.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return,
                Err(current) => word = current,
            }
        }
    }

    /// The calls and failures of the seconds `now - seconds + 1 ..= now`.
    pub fn tally(&self, now: u64) -> Tally {
        let span = self.buckets.len() as u64;
        let mut tally = Tally::default();
        for age in 0..span.min(now + 1) {
            let second = (now - age) & SECOND_MASK;
            let bucket = &self.buckets[((now - age) % span) as usize];
            let word = bucket.load(Ordering::Relaxed);
            if unpack_second(word) == second {
                tally.calls += unpack_calls(word);
                tally.failures += unpack_failures(word);
            }
        }
        tally
    }
}

fn pack(second: u64, calls: u64, failures: u64) -> u64 {
    (second << (2 * COUNT_BITS)) | (calls << COUNT_BITS) | failures
}

fn unpack_second(word: u64) -> u64 {
    word >> (2 * COUNT_BITS)
}

fn unpack_calls(word: u64) -> u64 {
    (word >> COUNT_BITS) & COUNT_MAX
}

fn unpack_failures(word: u64) -> u64 {
    word & COUNT_MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(calls: u64, failures: u64) -> Tally {
        Tally { calls, failures }
    }

    #[test]
    fn calls_count_for_the_window_then_age_out() {
        let window = FailureWindow::new(3);
        window.record(100, false);
        window.record(100, true);
        window.record(101, true);
        assert_eq!(window.tally(101), tally(3, 2));
        assert_eq!(window.tally(102), tally(3, 2));
        assert_eq!(window.tally(103), tally(1, 1), "second 100 left the window");
        assert_eq!(window.tally(104), tally(0, 0));
        window.record(104, false);
        assert_eq!(
            window.tally(104),
            tally(1, 0),
            "a reused bucket starts empty"
        );
    }

    #[test]
    fn a_bucket_from_a_lap_ago_is_not_counted() {
        let window = FailureWindow::new(2);
        window.record(10, true);
        assert_eq!(window.tally(12), tally(0, 0), "same bucket, older second");
        assert_eq!(window.tally(0), tally(0, 0));
        window.record(0, false);
        assert_eq!(window.tally(0), tally(1, 0));
    }

    #[test]
    fn counts_saturate_instead_of_spilling_into_the_second() {
        let window = FailureWindow::new(1);
        window.buckets[0].store(pack(5, COUNT_MAX, COUNT_MAX), Ordering::Relaxed);
        window.record(5, true);
        assert_eq!(window.tally(5), tally(COUNT_MAX, COUNT_MAX));
    }

    #[test]
    fn concurrent_calls_are_all_counted() {
        let window = std::sync::Arc::new(FailureWindow::new(4));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let window = window.clone();
                std::thread::spawn(move || {
                    for n in 0..10_000 {
                        window.record(7, (n + i) % 4 == 0);
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        assert_eq!(window.tally(7), tally(40_000, 10_000));
    }
}
