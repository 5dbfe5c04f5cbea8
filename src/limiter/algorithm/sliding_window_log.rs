//! Sliding window log: the timestamps of admitted hits in (now − W, now].
//!
//! Memory keeps one `(timestamp, hits)` entry per admitted request; Redis keeps one sorted-set
//! member per hit. Both count the same hits at every instant.
//!
//! [`SlidingWindowLogState`] with [`evaluate`], [`commit`] and [`refund`] is the reference: a
//! plain list, read in full by every decision (O(entries)). The memory store keeps the same log
//! as an [`IndexedLog`], which decides identically in O(log entries) per decision, so a full key
//! of a large limit (100 000 per hour) costs its clients no more than a small one.

use std::collections::VecDeque;

use super::Verdict;
use crate::limiter::rate::Rate;

/// Admitted requests, oldest first: `(timestamp µs, hits)`. Timestamps ascend (a commit at an
/// instant before the newest entry, after the clock stepped back, takes its place in order, as
/// a sorted set orders its members).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SlidingWindowLogState {
    pub entries: VecDeque<(u64, u64)>,
}

/// Whether an entry admitted at `ts` is inside (now − W, now], i.e. now − ts < W. Written without
/// `now − W`, which would saturate at 0 and drop an entry at ts = 0 while now < W.
fn is_live(window_us: u64, now_us: u64, ts: u64) -> bool {
    now_us.saturating_sub(ts) < window_us
}

/// µs from now until a live entry admitted at `ts` leaves the window: ts + W − now, without
/// overflowing for any `ts` (one after now is possible once the clock stepped back).
fn leaves_after(window_us: u64, now_us: u64, ts: u64) -> u64 {
    ts.saturating_sub(now_us)
        .saturating_add(window_us.saturating_sub(now_us.saturating_sub(ts)))
}

/// The entries still inside (now − W, now].
fn live<'a>(
    rate: &Rate,
    state: Option<&'a SlidingWindowLogState>,
    now_us: u64,
) -> impl Iterator<Item = (u64, u64)> + 'a {
    let window = rate.window_us();
    state
        .into_iter()
        .flat_map(|s| s.entries.iter().copied())
        .filter(move |&(ts, _)| is_live(window, now_us, ts))
}

/// µs from now until enough of the oldest hits leave the window that only `keep` remain.
fn wait_until_at_most(
    rate: &Rate,
    state: Option<&SlidingWindowLogState>,
    now_us: u64,
    count: u64,
    keep: u64,
) -> u64 {
    let mut left = count;
    for (ts, hits) in live(rate, state, now_us) {
        if left <= keep {
            break;
        }
        left = left.saturating_sub(hits);
        if left <= keep {
            return leaves_after(rate.window_us(), now_us, ts);
        }
    }
    0
}

/// Admits when count + n ≤ L; remaining L − count after; resets when the oldest entry leaves
/// (admitted) or when enough entries have left for n (denied).
pub fn evaluate(
    rate: &Rate,
    state: Option<&SlidingWindowLogState>,
    now_us: u64,
    hits: u64,
) -> Verdict {
    let limit = u64::from(rate.limit());
    let count = live(rate, state, now_us).fold(0u64, |sum, (_, hits)| sum.saturating_add(hits));
    if count.saturating_add(hits) <= limit {
        let oldest_leaves = match live(rate, state, now_us).next() {
            Some((ts, _)) => leaves_after(rate.window_us(), now_us, ts),
            None if hits > 0 => rate.window_us(),
            None => 0,
        };
        Verdict {
            admitted: true,
            remaining: (limit - count - hits) as u32,
            reset_after_us: oldest_leaves,
            counted_when_vetoed: false,
        }
    } else {
        let keep = limit.saturating_sub(hits);
        Verdict {
            admitted: false,
            remaining: limit.saturating_sub(count) as u32,
            reset_after_us: wait_until_at_most(rate, state, now_us, count, keep),
            counted_when_vetoed: false,
        }
    }
}

/// Drops the entries that left the window and records `hits` at `now_us`, in timestamp order.
pub fn commit(
    rate: &Rate,
    state: Option<SlidingWindowLogState>,
    now_us: u64,
    hits: u64,
) -> SlidingWindowLogState {
    let window = rate.window_us();
    let mut state = state.unwrap_or_default();
    while state
        .entries
        .front()
        .is_some_and(|&(ts, _)| !is_live(window, now_us, ts))
    {
        state.entries.pop_front();
    }
    let at = state.entries.partition_point(|&(ts, _)| ts < now_us);
    match state.entries.get_mut(at) {
        Some((ts, count)) if *ts == now_us => *count += hits,
        _ => state.entries.insert(at, (now_us, hits)),
    }
    state
}

/// Takes back `hits` recorded at `committed_at_us` (from the newest entries of that instant: the
/// script removes the last-numbered members of that timestamp), left as it is when none are, or
/// when they have already left the window. Exact: the hits of the other commits stay, each with
/// its own timestamp. `None` (delete) when no hit is left inside the window at now.
pub fn refund(
    rate: &Rate,
    state: Option<SlidingWindowLogState>,
    committed_at_us: u64,
    now_us: u64,
    hits: u64,
) -> Option<SlidingWindowLogState> {
    let mut state = state?;
    let window = rate.window_us();
    if hits == 0 || !is_live(window, now_us, committed_at_us) {
        return Some(state);
    }
    let mut left = hits;
    for (ts, count) in state.entries.iter_mut().rev() {
        if *ts == committed_at_us {
            let taken = (*count).min(left);
            *count -= taken;
            left -= taken;
            if left == 0 {
                break;
            }
        }
    }
    if left == hits {
        return Some(state);
    }
    state.entries.retain(|&(_, count)| count > 0);
    let newest = state.entries.iter().map(|&(ts, _)| ts).max()?;
    is_live(window, now_us, newest).then_some(state)
}

/// The log is empty once its newest entry leaves the window.
pub fn expires_at_us(rate: &Rate, state: &SlidingWindowLogState) -> u64 {
    state
        .entries
        .back()
        .map_or(0, |&(ts, _)| ts + rate.window_us())
}

/// The log as the memory store keeps it: the same entries as a [`SlidingWindowLogState`], and
/// the same decisions as [`evaluate`] and [`commit`] on it, at O(log n) per decision in the n
/// entries (amortized O(1) more per commit for the entries it drops) instead of O(n).
///
/// Each entry holds the running total of hits through it rather than its own hits, so the hits
/// of any run of entries are a difference of two totals. The live entries are a suffix
/// (timestamps ascend), found by binary search; the k-th oldest live hit, which the reset of a
/// verdict needs, is a binary search over the totals. Totals wrap modulo 2^64 and only their
/// differences are read: those are exact, because the hits held at once are far below 2^64 (a
/// commit first drops the departed entries, and an admission never takes the live hits past
/// the limit, a `u32`).
#[derive(Debug, Clone, Default)]
pub struct IndexedLog {
    /// `(timestamp µs, running total of hits through this entry)`, timestamps ascending.
    entries: VecDeque<(u64, u64)>,
    /// The running total before the first entry (what the dropped entries held).
    base: u64,
}

impl IndexedLog {
    /// Hits of the entries before index `at` (0 ≤ at ≤ len).
    fn hits_before(&self, at: usize) -> u64 {
        at.checked_sub(1)
            .and_then(|last| self.entries.get(last))
            .map_or(0, |&(_, total)| total.wrapping_sub(self.base))
    }

    /// Index of the oldest live entry (the number of departed ones still held).
    fn first_live(&self, window_us: u64, now_us: u64) -> usize {
        self.entries.partition_point(|&(ts, _)| {
            probe::read();
            !is_live(window_us, now_us, ts)
        })
    }

    /// Timestamp of the `k`-th oldest live hit (1 ≤ k ≤ the live hits), the live entries starting
    /// at index `first`.
    fn kth_live_hit(&self, first: usize, k: u64) -> Option<u64> {
        let target = self.hits_before(first).saturating_add(k);
        let at = self.entries.partition_point(|&(_, total)| {
            probe::read();
            total.wrapping_sub(self.base) < target
        });
        self.entries.get(at).map(|&(ts, _)| ts)
    }

    /// What [`evaluate`] answers for the same log: admits when count + n ≤ L, remaining L − count
    /// after, reset when the oldest live entry leaves (admitted) or when enough entries have
    /// left for n (denied). `hits` as [`super::evaluate`] passes them (clamped).
    pub fn evaluate(&self, rate: &Rate, now_us: u64, hits: u64) -> Verdict {
        let window = rate.window_us();
        let limit = u64::from(rate.limit());
        let first = self.first_live(window, now_us);
        let count = self
            .hits_before(self.entries.len())
            .wrapping_sub(self.hits_before(first));
        if count.saturating_add(hits) <= limit {
            let oldest_leaves = match self.entries.get(first) {
                Some(&(ts, _)) => leaves_after(window, now_us, ts),
                None if hits > 0 => window,
                None => 0,
            };
            Verdict {
                admitted: true,
                remaining: (limit - count - hits) as u32,
                reset_after_us: oldest_leaves,
                counted_when_vetoed: false,
            }
        } else {
            let keep = limit.saturating_sub(hits);
            // Only `keep` hits remain once the (count − keep)-th oldest has left.
            let reset_after_us = if count > keep {
                self.kth_live_hit(first, count - keep)
                    .map_or(window, |ts| leaves_after(window, now_us, ts))
            } else {
                0
            };
            Verdict {
                admitted: false,
                remaining: limit.saturating_sub(count) as u32,
                reset_after_us,
                counted_when_vetoed: false,
            }
        }
    }

    /// What [`commit`] makes of the same log, in place: drops the entries that left the window
    /// (each entry is dropped once, so amortized O(1)) and records `hits` at `now_us`. An instant
    /// before the newest entry (the clock stepped back) takes its place in order, which adds the
    /// hits to the totals of the entries after it: O(those entries), a few for a step back of a
    /// few milliseconds.
    pub fn commit(&mut self, rate: &Rate, now_us: u64, hits: u64) {
        let window = rate.window_us();
        while let Some(&(ts, total)) = self.entries.front() {
            probe::read();
            if is_live(window, now_us, ts) {
                break;
            }
            self.base = total;
            self.entries.pop_front();
        }
        let at = match self.entries.back() {
            None => 0,
            Some(&(newest, _)) if newest < now_us => self.entries.len(),
            Some(&(newest, _)) if newest == now_us => self.entries.len() - 1,
            Some(_) => self.entries.partition_point(|&(ts, _)| {
                probe::read();
                ts < now_us
            }),
        };
        if self.entries.get(at).is_none_or(|&(ts, _)| ts != now_us) {
            let before = self.hits_before(at).wrapping_add(self.base);
            self.entries.insert(at, (now_us, before));
        }
        for (_, total) in self.entries.range_mut(at..) {
            probe::read();
            *total = total.wrapping_add(hits);
        }
    }

    /// The log is empty once its newest entry leaves the window.
    pub fn expires_at_us(&self, rate: &Rate) -> u64 {
        self.entries
            .back()
            .map_or(0, |&(ts, _)| ts.saturating_add(rate.window_us()))
    }

    /// The entries as `(timestamp µs, hits)`, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut before = self.base;
        self.entries.iter().map(move |&(ts, total)| {
            probe::read();
            let hits = total.wrapping_sub(before);
            before = total;
            (ts, hits)
        })
    }

    /// The same log as a plain list.
    pub fn to_state(&self) -> SlidingWindowLogState {
        SlidingWindowLogState {
            entries: self.iter().collect(),
        }
    }
}

impl From<SlidingWindowLogState> for IndexedLog {
    /// Indexes a plain log; entries out of timestamp order are put in order first.
    fn from(state: SlidingWindowLogState) -> IndexedLog {
        let mut entries = Vec::from(state.entries);
        if !entries.is_sorted_by_key(|&(ts, _)| ts) {
            entries.sort_by_key(|&(ts, _)| ts);
        }
        let mut log = IndexedLog::default();
        let mut total = 0u64;
        for (ts, hits) in entries {
            total = total.wrapping_add(hits);
            match log.entries.back_mut() {
                Some((newest, last)) if *newest == ts => *last = total,
                _ => log.entries.push_back((ts, total)),
            }
        }
        log
    }
}

impl PartialEq for IndexedLog {
    /// Equal when they hold the same entries, whatever hits they dropped before.
    fn eq(&self, other: &IndexedLog) -> bool {
        self.entries.len() == other.entries.len() && self.iter().eq(other.iter())
    }
}

impl Eq for IndexedLog {}

/// Counts the entries an [`IndexedLog`] reads, so that tests can check that a decision's work
/// does not grow with the log. Compiled to nothing outside the crate's tests.
#[cfg(test)]
pub(crate) mod probe {
    use std::cell::Cell;

    thread_local! {
        static READS: Cell<u64> = const { Cell::new(0) };
    }

    pub fn read() {
        READS.with(|reads| reads.set(reads.get() + 1));
    }

    /// Entries read on this thread so far.
    pub fn reads() -> u64 {
        READS.with(Cell::get)
    }
}

#[cfg(not(test))]
mod probe {
    #[inline(always)]
    pub fn read() {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::algorithm::clamp_hits;
    use crate::limiter::algorithm::testkit::*;
    use crate::limiter::rate::{Algorithm, Unit};

    fn rate(limit: u32, unit: Unit, multiplier: u32) -> Rate {
        Rate::new(Algorithm::SlidingWindowLog, limit, unit, multiplier, None).unwrap()
    }

    #[test]
    fn hits_leave_exactly_one_window_after_they_were_admitted() {
        let rate = rate(3, Unit::Second, 10);
        let w = 10 * S;
        let mut state: Option<SlidingWindowLogState> = None;
        let first = decide(&rate, &mut state, T0, 1);
        assert_eq!(
            first,
            Verdict {
                admitted: true,
                remaining: 2,
                reset_after_us: w,
                counted_when_vetoed: false,
            }
        );
        let second = decide(&rate, &mut state, T0 + 2 * S, 1);
        assert_eq!(second.remaining, 1);
        assert_eq!(
            second.reset_after_us,
            8 * S,
            "the oldest entry leaves at T0 + W"
        );
        assert_eq!(decide(&rate, &mut state, T0 + 5 * S, 1).remaining, 0);

        let denied = decide(&rate, &mut state, T0 + 6 * S, 1);
        assert_eq!(
            denied,
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: 4 * S,
                counted_when_vetoed: false,
            }
        );
        // The window is (now − W, now]: the hit of T0 still counts at T0 + W − 1 µs, not at T0 + W.
        assert!(!decide(&rate, &mut state, T0 + w - 1, 1).admitted);
        let v = decide(&rate, &mut state, T0 + w, 1);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(
            v.reset_after_us,
            2 * S,
            "now the hit of T0 + 2 s is the oldest"
        );
        assert_eq!(
            state.unwrap().entries,
            VecDeque::from([(T0 + 2 * S, 1), (T0 + 5 * S, 1), (T0 + w, 1)])
        );
    }

    #[test]
    fn retry_after_waits_for_enough_entries_to_leave() {
        let rate = rate(5, Unit::Minute, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert!(decide(&rate, &mut state, T0, 2).admitted);
        assert!(decide(&rate, &mut state, T0 + S, 1).admitted);
        assert!(decide(&rate, &mut state, T0 + 2 * S, 2).admitted);
        let state = state.unwrap();
        let now = T0 + 3 * S;
        // n = 3 needs at most 2 left: the 2 of T0 leaving is not enough, the 1 of T0 + 1 s is.
        let v = evaluate(&rate, Some(&state), now, 3);
        assert_eq!(v.remaining, 0);
        assert_eq!(now + v.reset_after_us, T0 + S + 60 * S);
        assert_retry_exact(&rate, &state, now, 3);
        // n = 2 only needs the first entry gone; n = 5 needs every entry gone.
        let v = evaluate(&rate, Some(&state), now, 2);
        assert_eq!(now + v.reset_after_us, T0 + 60 * S);
        assert_retry_exact(&rate, &state, now, 2);
        let v = evaluate(&rate, Some(&state), now, 5);
        assert_eq!(now + v.reset_after_us, T0 + 2 * S + 60 * S);
        assert_retry_exact(&rate, &state, now, 5);
    }

    #[test]
    fn hits_beyond_the_limit_wait_for_an_empty_log_and_never_overflow() {
        let rate = rate(4, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        let v = decide(&rate, &mut state, T0, u64::MAX);
        assert_eq!(
            v,
            Verdict {
                admitted: false,
                remaining: 4,
                reset_after_us: 0,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 1);
        decide(&rate, &mut state, T0 + 300_000, 1);
        for hits in [5, u64::MAX - 1, u64::MAX] {
            let v = decide(&rate, &mut state, T0 + 500_000, hits);
            assert!(!v.admitted);
            assert_eq!(v.remaining, 2);
            assert_eq!(v.reset_after_us, 800_000, "until the newest entry leaves");
            assert!(!evaluate(&rate, state.as_ref(), T0 + 500_000, hits).admitted);
        }
        assert_eq!(state.unwrap().entries.len(), 2);
    }

    #[test]
    fn zero_hits_checks_without_consuming() {
        let rate = rate(2, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert_eq!(
            decide(&rate, &mut state, T0, 0),
            Verdict {
                admitted: true,
                remaining: 2,
                reset_after_us: 0,
                counted_when_vetoed: false,
            }
        );
        assert_eq!(state, None);
        decide(&rate, &mut state, T0, 2);
        let before = state.clone();
        let v = decide(&rate, &mut state, T0 + 100, 0);
        assert!(v.admitted);
        assert_eq!(v.remaining, 0);
        assert_eq!(v.reset_after_us, S - 100);
        assert_eq!(state, before);
    }

    #[test]
    fn a_denied_request_leaves_the_log_unchanged() {
        let rate = rate(2, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        decide(&rate, &mut state, T0, 1);
        decide(&rate, &mut state, T0 + 10, 1);
        let before = state.clone();
        for hits in [1, 2, 3] {
            assert!(!decide(&rate, &mut state, T0 + 20, hits).admitted);
        }
        assert_eq!(state, before);
    }

    #[test]
    fn commit_merges_same_instant_hits_and_drops_departed_entries() {
        let rate = rate(10, Unit::Second, 1);
        let state = commit(&rate, None, T0, 2);
        let state = commit(&rate, Some(state), T0, 3);
        assert_eq!(state.entries, VecDeque::from([(T0, 5)]));
        let state = commit(&rate, Some(state), T0 + 400_000, 1);
        let state = commit(&rate, Some(state), T0 + S, 1);
        assert_eq!(
            state.entries,
            VecDeque::from([(T0 + 400_000, 1), (T0 + S, 1)])
        );
    }

    #[test]
    fn hits_at_time_zero_count_while_now_is_less_than_a_window() {
        // (now − W, now] contains 0 while now < W; a saturating `now − W` used to drop it.
        let rate = rate(1, Unit::Second, 1);
        let mut state: Option<SlidingWindowLogState> = None;
        assert!(decide(&rate, &mut state, 0, 1).admitted);
        assert!(!decide(&rate, &mut state, 0, 1).admitted);
        let denied = decide(&rate, &mut state, S - 1, 1);
        assert!(!denied.admitted);
        assert_eq!(denied.reset_after_us, 1);
        assert!(decide(&rate, &mut state, S, 1).admitted);
    }

    #[test]
    fn expires_when_the_newest_entry_leaves_and_is_then_like_absent() {
        let rate = rate(3, Unit::Second, 1);
        let state = commit(&rate, None, T0, 1);
        let state = commit(&rate, Some(state), T0 + 700_000, 2);
        let expiry = expires_at_us(&rate, &state);
        assert_eq!(expiry, T0 + 700_000 + S);
        assert_ne!(
            evaluate(&rate, Some(&state), expiry - 1, 3),
            evaluate(&rate, None, expiry - 1, 3)
        );
        for now in [expiry, expiry + 1, expiry + 5 * S] {
            for hits in [0, 1, 3] {
                assert_eq!(
                    evaluate(&rate, Some(&state), now, hits),
                    evaluate(&rate, None, now, hits)
                );
            }
        }
    }

    #[test]
    fn a_refund_at_the_commit_instant_undoes_the_reservation() {
        check_refunds(Algorithm::SlidingWindowLog, 0x5106_0001, Span::Instant);
    }

    #[test]
    fn a_refund_never_admits_what_never_reserving_would_deny() {
        check_refunds(Algorithm::SlidingWindowLog, 0x5106_0002, Span::Random);
    }

    #[test]
    fn a_refund_removes_only_hits_of_the_reservation_instant() {
        let rate = rate(10, Unit::Second, 1);
        let state = commit(&rate, None, T0, 2);
        let state = commit(&rate, Some(state), T0 + 100, 1);
        let reserved = commit(&rate, Some(state), T0 + 100, 3);
        let later = commit(&rate, Some(reserved), T0 + 200, 1);
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 300, 3)
                .unwrap()
                .entries,
            VecDeque::from([(T0, 2), (T0 + 100, 1), (T0 + 200, 1)])
        );
        // Never more than were recorded at that instant.
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 300, 9)
                .unwrap()
                .entries,
            VecDeque::from([(T0, 2), (T0 + 200, 1)])
        );
        // Nothing at that instant, or already out of the window: left alone.
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 150, T0 + 300, 3),
            Some(later.clone())
        );
        assert_eq!(
            refund(&rate, Some(later.clone()), T0 + 100, T0 + 100 + S, 3),
            Some(later)
        );
        // Nothing left in the window: deleted.
        let alone = commit(&rate, None, T0, 2);
        assert_eq!(refund(&rate, Some(alone), T0, T0 + 10, 2), None);
        let with_old = commit(&rate, Some(commit(&rate, None, T0, 1)), T0 + S - 5, 2);
        assert_eq!(refund(&rate, Some(with_old), T0 + S - 5, T0 + S, 2), None);
    }

    /// Runs one random trace through the plain log and an indexed one: every verdict, the
    /// entries and the expiry must be the same. Time mostly moves on, sometimes steps back.
    fn indexed_trace(rng: &mut Rng, rate: &Rate, steps: usize) {
        let mut plain: Option<SlidingWindowLogState> = None;
        let mut indexed = IndexedLog::default();
        let mut now = T0 + rng.below(rate.window_us());
        for step in 0..steps {
            if rng.below(25) == 0 {
                now -= rng.range(1, rate.window_us() / 2);
            } else {
                now += random_step_us(rng, rate);
            }
            let hits = clamp_hits(rate, random_hits(rng, rate));
            let want = evaluate(rate, plain.as_ref(), now, hits);
            let context = format!("{rate:?} step {step} at {now}, {hits} hits: {plain:?}");
            assert_eq!(indexed.evaluate(rate, now, hits), want, "{context}");
            if want.admitted && hits > 0 {
                plain = Some(commit(rate, plain.take(), now, hits));
                indexed.commit(rate, now, hits);
            }
            let entries = plain.clone().unwrap_or_default().entries;
            assert!(indexed.iter().eq(entries.iter().copied()), "{context}");
            if let Some(plain) = &plain {
                assert_eq!(indexed.expires_at_us(rate), expires_at_us(rate, plain));
                assert_eq!(IndexedLog::from(plain.clone()), indexed);
            }
        }
    }

    #[test]
    fn the_indexed_log_decides_exactly_like_the_plain_one() {
        let mut rng = Rng(0x1DE7_0001);
        for _ in 0..300 {
            let rate = random_rate(&mut rng, Algorithm::SlidingWindowLog);
            indexed_trace(&mut rng, &rate, 200);
        }
    }

    #[test]
    fn the_indexed_log_keeps_large_logs_exact() {
        // Many entries, so that the binary searches run over more than a handful of them.
        let mut rng = Rng(0x1DE7_0002);
        for limit in [100, 1_000, 5_000] {
            let rate = rate(limit, Unit::Second, 1);
            indexed_trace(&mut rng, &rate, 20_000);
        }
    }

    #[test]
    fn the_indexed_log_survives_wrapping_totals() {
        let rate = rate(10, Unit::Second, 1);
        let mut indexed = IndexedLog {
            entries: VecDeque::new(),
            base: u64::MAX - 3,
        };
        let mut plain: Option<SlidingWindowLogState> = None;
        for i in 0..40 {
            let now = T0 + i * 150_000;
            let hits = 1 + i % 3;
            let want = evaluate(&rate, plain.as_ref(), now, hits);
            assert_eq!(indexed.evaluate(&rate, now, hits), want, "at {i}");
            if want.admitted {
                plain = Some(commit(&rate, plain.take(), now, hits));
                indexed.commit(&rate, now, hits);
            }
        }
        assert!(
            indexed.entries.iter().any(|&(_, total)| total < 1_000),
            "the totals wrapped"
        );
        assert_eq!(indexed.to_state(), plain.unwrap());
    }

    #[test]
    fn indexing_orders_and_merges_entries() {
        let plain = SlidingWindowLogState {
            entries: VecDeque::from([(T0 + 5, 1), (T0, 2), (T0 + 5, 3), (T0 + 9, 0)]),
        };
        assert_eq!(
            IndexedLog::from(plain).to_state().entries,
            VecDeque::from([(T0, 2), (T0 + 5, 4), (T0 + 9, 0)])
        );
    }

    /// A log of `limit` per hour, full: one hit per entry, spread evenly over the hour.
    fn full_log(limit: u32) -> (Rate, IndexedLog, u64, u64) {
        let rate = rate(limit, Unit::Hour, 1);
        let step = rate.window_us() / u64::from(limit);
        let mut log = IndexedLog::default();
        let mut now = T0;
        for _ in 0..limit {
            now += step;
            log.commit(&rate, now, 1);
        }
        (rate, log, now, step)
    }

    /// Entries read by `op`.
    fn reads(op: impl FnOnce()) -> u64 {
        let before = probe::reads();
        op();
        probe::reads() - before
    }

    #[test]
    fn a_decision_on_a_full_log_reads_logarithmically_many_entries() {
        for limit in [1_000u32, 100_000] {
            let (rate, mut log, last, step) = full_log(limit);
            assert_eq!(log.entries.len(), limit as usize);
            // A binary search over n entries reads about log2 n of them (a VecDeque's two halves
            // add one or two).
            let search = u64::from(limit.ilog2()) + 4;
            for hits in [1, 2, u64::from(limit) / 2, u64::from(limit)] {
                let mut verdict = None;
                let read = reads(|| verdict = Some(log.evaluate(&rate, last + 1, hits)));
                let verdict = verdict.unwrap();
                assert!(!verdict.admitted);
                let plain = evaluate(&rate, Some(&log.to_state()), last + 1, hits);
                assert_eq!(verdict, plain);
                assert!(
                    read <= 2 * search,
                    "{limit}: {hits} hits read {read} entries"
                );
            }
            // Traffic at the limit: each decision comes as the oldest hit leaves, is admitted,
            // drops that entry and appends one.
            let mut now = last;
            for _ in 0..1_000 {
                now += step;
                let read = reads(|| {
                    assert!(log.evaluate(&rate, now, 1).admitted);
                    log.commit(&rate, now, 1);
                });
                assert!(
                    read <= search + 3,
                    "{limit}: an admission read {read} entries"
                );
            }
            assert_eq!(log.entries.len(), limit as usize);
        }
    }
}
