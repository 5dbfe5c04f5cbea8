//! One rule's summaries: per minute, a [`SpaceSaving`] of its hits and one of its denied hits,
//! in a ring of [`SLOTS`] minutes, merged over a window on demand.
//!
//! Merged over the slots of a window, a value's `count` is the sum of its counts in the slots
//! that track it plus the floor of each slot that does not; its `error` the sum of its errors
//! plus those same floors. Its true weight in the window lies in `[count - error, count]`, and
//! `error` is at most the window's total divided by `k` (each slot's floor is at most its total
//! divided by `k`).

use std::collections::HashMap;
use std::sync::Arc;

use super::space_saving::{Shown, SpaceSaving};

/// Minutes kept: the current one and the 15 before it, for a 15-minute window.
pub const SLOTS: usize = 16;

struct MinuteSlot {
    /// The minute the slot holds; `None` before its first record.
    minute: Option<u64>,
    hits: SpaceSaving,
    denied: SpaceSaving,
}

/// One rule's ring of minutes.
pub struct MinuteRing {
    slots: Vec<MinuteSlot>,
}

/// A value of a window's ranking.
#[derive(Debug, Clone)]
pub struct Ranked {
    pub shown: Arc<Shown>,
    pub count: u64,
    pub error: u64,
}

/// The heaviest values of one window, heaviest first, at most `k`.
#[derive(Debug, Default)]
pub struct Ranking {
    /// The weight of every value of the window.
    pub total: u64,
    pub values: Vec<Ranked>,
}

/// Which summary of a slot a ranking reads.
#[derive(Clone, Copy)]
pub enum Kind {
    Hits,
    Denied,
}

impl MinuteRing {
    /// `k` counters per summary; nothing allocated before the first record.
    pub fn new(k: usize) -> MinuteRing {
        MinuteRing {
            slots: (0..SLOTS)
                .map(|_| MinuteSlot {
                    minute: None,
                    hits: SpaceSaving::new(k),
                    denied: SpaceSaving::new(k),
                })
                .collect(),
        }
    }

    /// Records `hits` of the value `identity` in `minute`, in the denied summary too when
    /// `denied`. A slot last written more than [`SLOTS`] minutes ago is cleared first.
    pub fn record(
        &mut self,
        minute: u64,
        identity: u64,
        hits: u64,
        denied: bool,
        shown: impl Fn() -> Arc<Shown>,
    ) {
        let slot = &mut self.slots[(minute % SLOTS as u64) as usize];
        if slot.minute != Some(minute) {
            slot.minute = Some(minute);
            slot.hits.clear();
            slot.denied.clear();
        }
        let mut made: Option<Arc<Shown>> = None;
        let mut once = || made.get_or_insert_with(&shown).clone();
        slot.hits.record(identity, hits, &mut once);
        if denied {
            slot.denied.record(identity, hits, &mut once);
        }
    }

    /// The `k` heaviest values of `kind` over the `minutes` minutes before `now` and `now`
    /// itself (`minutes` below [`SLOTS`]).
    pub fn ranking(&self, now: u64, minutes: u64, kind: Kind, k: usize) -> Ranking {
        let first = now.saturating_sub(minutes);
        let summaries: Vec<&SpaceSaving> = self
            .slots
            .iter()
            .filter(|slot| slot.minute.is_some_and(|m| (first..=now).contains(&m)))
            .map(|slot| match kind {
                Kind::Hits => &slot.hits,
                Kind::Denied => &slot.denied,
            })
            .collect();
        let floors: u64 = summaries.iter().map(|s| s.floor()).sum();
        // identity -> (shown, counts, errors, floors of the slots that track it)
        let mut merged: HashMap<u64, (Arc<Shown>, u64, u64, u64)> = HashMap::new();
        for summary in &summaries {
            let floor = summary.floor();
            for entry in summary.entries() {
                let value = merged
                    .entry(entry.identity)
                    .or_insert_with(|| (entry.shown.clone(), 0, 0, 0));
                value.1 = value.1.saturating_add(entry.count);
                value.2 = value.2.saturating_add(entry.error);
                value.3 = value.3.saturating_add(floor);
            }
        }
        let mut values: Vec<Ranked> = merged
            .into_values()
            .map(|(shown, count, error, tracked_floors)| {
                let untracked = floors - tracked_floors;
                Ranked {
                    shown,
                    count: count.saturating_add(untracked),
                    error: error.saturating_add(untracked),
                }
            })
            .collect();
        values.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.error.cmp(&b.error))
                .then_with(|| a.shown.hash.cmp(&b.shown.hash))
        });
        values.truncate(k);
        Ranking {
            total: summaries.iter().map(|s| s.total()).sum(),
            values,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(n: u64) -> impl Fn() -> Arc<Shown> {
        move || {
            let mut hash = [0; 16];
            hash[..8].copy_from_slice(&n.to_be_bytes());
            Arc::new(Shown { hash, label: None })
        }
    }

    fn top(ranking: &Ranking) -> Option<(u64, u64, u64)> {
        ranking.values.first().map(|r| {
            let mut id = [0; 8];
            id.copy_from_slice(&r.shown.hash[..8]);
            (u64::from_be_bytes(id), r.count, r.error)
        })
    }

    #[test]
    fn windows_merge_their_minutes_within_the_stated_bound() {
        let k = 4;
        let mut ring = MinuteRing::new(k);
        let mut heavy = 0;
        for minute in 100..=110u64 {
            for i in 0..200u64 {
                let identity = if i % 3 == 0 {
                    7
                } else {
                    1000 + minute * 1000 + i
                };
                if identity == 7 && minute >= 106 {
                    heavy += 1;
                }
                ring.record(minute, identity, 1, i % 2 == 0, shown(identity));
            }
        }
        let five = ring.ranking(110, 4, Kind::Hits, k);
        assert_eq!(five.total, 5 * 200);
        let (identity, count, error) = top(&five).expect("a value");
        assert_eq!(identity, 7);
        assert!(
            count >= heavy && count - error <= heavy,
            "{count} {error} {heavy}"
        );
        assert!(error <= five.total / k as u64);
        assert!(five.values.len() <= k);
        let denied = ring.ranking(110, 4, Kind::Denied, k);
        assert_eq!(denied.total, 5 * 100);
        assert_eq!(top(&denied).map(|t| t.0), Some(7));
    }

    #[test]
    fn minutes_out_of_the_window_or_the_ring_are_not_counted() {
        let mut ring = MinuteRing::new(4);
        ring.record(10, 1, 5, true, shown(1));
        ring.record(12, 2, 3, false, shown(2));
        assert_eq!(ring.ranking(12, 0, Kind::Hits, 4).total, 3);
        assert_eq!(ring.ranking(12, 4, Kind::Hits, 4).total, 8);
        assert_eq!(ring.ranking(12, 4, Kind::Denied, 4).total, 5);
        assert_eq!(ring.ranking(26, 15, Kind::Hits, 4).total, 3);
        assert_eq!(ring.ranking(28, 15, Kind::Hits, 4).total, 0);
        // Minute 26 takes the slot of minute 10: the old minute is gone even from a long window.
        ring.record(26, 3, 1, false, shown(3));
        assert_eq!(ring.ranking(26, 15, Kind::Hits, 4).total, 4);
        assert_eq!(ring.ranking(26, 15, Kind::Denied, 4).total, 0);
    }
}
