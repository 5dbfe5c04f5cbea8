//! One Space-Saving summary (Metwally, Agrawal, El Abbadi, 2005): the heaviest values of a
//! stream of weighted values in `k` counters, whatever the number of distinct values.
//!
//! Each tracked value has a `count` and an `error`: its true weight lies in
//! `[count - error, count]`, and `error` is at most the smallest count, itself at most
//! `total / k` (the counts always sum to `total`). A value not tracked weighs at most the
//! smallest count (0 while fewer than `k` values were seen), so a value above `total / k` is
//! always tracked. A new value takes the place of the smallest count (found by a scan of the
//! `k` counters).

use std::collections::HashMap;
use std::sync::Arc;

/// A value as `/top` can show it: its keyed hash, and its descriptor text when it was recorded
/// where values may be shown.
#[derive(Debug, PartialEq, Eq)]
pub struct Shown {
    pub hash: [u8; 16],
    pub label: Option<Box<str>>,
}

/// One tracked value.
#[derive(Debug, Clone)]
pub struct Counted {
    /// The value's identity within this process (a keyed hash of its descriptor).
    pub identity: u64,
    pub shown: Arc<Shown>,
    /// An upper bound of the value's weight since the summary was cleared.
    pub count: u64,
    /// How much of `count` may belong to values it replaced.
    pub error: u64,
}

/// At most `capacity` counters; see the module documentation for the bounds.
#[derive(Debug)]
pub struct SpaceSaving {
    capacity: usize,
    entries: Vec<Counted>,
    positions: HashMap<u64, usize>,
    total: u64,
}

impl SpaceSaving {
    /// A summary of `capacity` counters (at least one); nothing is allocated before the first
    /// value.
    pub fn new(capacity: usize) -> SpaceSaving {
        SpaceSaving {
            capacity: capacity.max(1),
            entries: Vec::new(),
            positions: HashMap::new(),
            total: 0,
        }
    }

    /// Adds `weight` to the value `identity`; `shown` is called only when the value is not
    /// tracked yet (the only case that allocates).
    pub fn record(&mut self, identity: u64, weight: u64, shown: impl FnOnce() -> Arc<Shown>) {
        self.total = self.total.saturating_add(weight);
        if let Some(&position) = self.positions.get(&identity) {
            let entry = &mut self.entries[position];
            entry.count = entry.count.saturating_add(weight);
            return;
        }
        if self.entries.len() < self.capacity {
            self.positions.insert(identity, self.entries.len());
            self.entries.push(Counted {
                identity,
                shown: shown(),
                count: weight,
                error: 0,
            });
            return;
        }
        let Some((position, smallest)) = self
            .entries
            .iter()
            .enumerate()
            .min_by_key(|(_, entry)| entry.count)
            .map(|(position, entry)| (position, entry.count))
        else {
            return;
        };
        self.positions.remove(&self.entries[position].identity);
        self.positions.insert(identity, position);
        self.entries[position] = Counted {
            identity,
            shown: shown(),
            count: smallest.saturating_add(weight),
            error: smallest,
        };
    }

    /// The most an untracked value can weigh: the smallest count once every counter is taken,
    /// else 0.
    pub fn floor(&self) -> u64 {
        if self.entries.len() < self.capacity {
            return 0;
        }
        self.entries
            .iter()
            .map(|entry| entry.count)
            .min()
            .unwrap_or(0)
    }

    /// The weight of every value recorded since the summary was cleared.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn entries(&self) -> &[Counted] {
        &self.entries
    }

    /// Forgets every value, keeping the memory for the next ones.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.positions.clear();
        self.total = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown() -> Arc<Shown> {
        Arc::new(Shown {
            hash: [0; 16],
            label: None,
        })
    }

    fn count_of(summary: &SpaceSaving, identity: u64) -> Option<&Counted> {
        summary.entries().iter().find(|e| e.identity == identity)
    }

    #[test]
    fn a_value_above_total_over_k_is_always_tracked_within_its_error() {
        let k = 10;
        let mut summary = SpaceSaving::new(k);
        let mut heavy = 0;
        // 10 000 distinct values once each, the heavy value every 5th record.
        for i in 0..50_000u64 {
            if i % 5 == 0 {
                summary.record(u64::MAX, 1, shown);
                heavy += 1;
            } else {
                summary.record(i, 1, shown);
            }
        }
        let entry = count_of(&summary, u64::MAX).expect("the heavy value is tracked");
        assert!(heavy > summary.total() / k as u64);
        assert!(entry.count >= heavy, "{entry:?} below its true {heavy}");
        assert!(entry.count - entry.error <= heavy, "{entry:?} vs {heavy}");
        assert!(entry.error <= summary.total() / k as u64, "{entry:?}");
        let top = summary.entries().iter().max_by_key(|e| e.count).unwrap();
        assert_eq!(top.identity, u64::MAX);
    }

    #[test]
    fn every_bound_holds_for_weighted_values() {
        let k = 8;
        let mut summary = SpaceSaving::new(k);
        let mut truth = HashMap::<u64, u64>::new();
        let mut state = 7u64;
        for _ in 0..20_000 {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let identity = (state >> 33) % 40;
            let weight = (state >> 20) % 4;
            summary.record(identity, weight, shown);
            *truth.entry(identity).or_default() += weight;
        }
        let sum: u64 = summary.entries().iter().map(|e| e.count).sum();
        assert_eq!(sum, summary.total());
        let floor = summary.floor();
        assert!(floor <= summary.total() / k as u64);
        for (identity, true_weight) in truth {
            match count_of(&summary, identity) {
                Some(entry) => {
                    assert!(entry.count >= true_weight && entry.count - entry.error <= true_weight);
                    assert!(entry.error <= floor);
                }
                None => assert!(true_weight <= floor, "{identity}: {true_weight} > {floor}"),
            }
        }
    }

    #[test]
    fn memory_stays_at_k_counters_whatever_the_distinct_values() {
        let mut summary = SpaceSaving::new(16);
        for i in 0..100_000u64 {
            summary.record(i, 1, shown);
        }
        assert_eq!(summary.entries().len(), 16);
        assert_eq!(summary.positions.len(), 16);
        assert!(summary.entries.capacity() <= 32);
        summary.clear();
        assert_eq!(
            (summary.entries().len(), summary.total(), summary.floor()),
            (0, 0, 0)
        );
    }

    #[test]
    fn a_tracked_value_is_counted_without_being_shown_again() {
        let mut summary = SpaceSaving::new(2);
        summary.record(1, 3, shown);
        summary.record(1, 2, || unreachable!("already tracked"));
        assert_eq!(
            count_of(&summary, 1).map(|e| (e.count, e.error)),
            Some((5, 0))
        );
    }
}
