//! The status page's ring buffer: the last [`SAMPLES`] samples of the per-rule counters and of
//! the process's totals, taken by the sampler every `--status-page-sample-interval` (15 minutes
//! at the default 10 s). Each sample keeps what a counter gained since the previous one, so the
//! decision path gains nothing: the counters are those `/metrics` shows.
//!
//! Bounded: at most `max_rules` rules are kept (the rule-series cap of `/metrics`,
//! `--metrics-max-rule-series`), each `2 × SAMPLES × 4` bytes of counts (720 bytes) and its last
//! totals, so about 0.8 KB per rule, 4 MB at the default cap of 5000. A rule enters at its
//! first sample with hits while there is room, the busiest first (rules never hit take nothing),
//! and leaves when it leaves the configuration; rules with hits that found no room are counted
//! as untracked. A rule's first sample holds its hits so far.

use std::collections::HashMap;
use std::sync::Arc;

use crate::service::metrics::{ProcessTotals, RuleTotals};

/// Samples kept: 15 minutes at the default interval of 10 s.
pub const SAMPLES: usize = 90;

/// Counts of one series, one per sample slot.
type Slots = Box<[u32; SAMPLES]>;

fn slots() -> Slots {
    Box::new([0; SAMPLES])
}

fn gained(now: u64, before: u64) -> u32 {
    u32::try_from(now.saturating_sub(before)).unwrap_or(u32::MAX)
}

/// What the sampler saw of the store at one sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StoreProbe {
    /// Still connecting at startup.
    Connecting,
    /// Healthy, answering its health check in this many µs.
    Healthy { micros: u32 },
    /// Its health check failed or did not answer within the sample interval.
    Unhealthy,
}

/// A rule's labels: domain and path.
type RuleKey = (Arc<str>, Arc<str>);

struct RuleHistory {
    last: [u64; 2],
    hits: Slots,
    over_limit: Slots,
}

/// One rule's chart: per sample, hits and over-limit hits, oldest first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSeries {
    pub domain: Arc<str>,
    pub rule: Arc<str>,
    pub hits: Vec<u32>,
    pub over_limit: Vec<u32>,
}

/// The process's charts, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessSeries {
    /// Unix time of each sample, in seconds.
    pub times: Vec<u64>,
    pub requests: Vec<u32>,
    pub over_limit: Vec<u32>,
    /// Mean time to decide a request over the sample, µs (0 without requests).
    pub mean_latency_us: Vec<u32>,
    /// The store's health check time, µs; `None` when it was not healthy.
    pub store_latency_us: Vec<Option<u32>>,
}

/// The ring buffer of samples (see the module's documentation).
pub struct History {
    max_rules: usize,
    /// Slot of the newest sample.
    head: usize,
    /// Samples taken, at most [`SAMPLES`].
    len: usize,
    times: Box<[u64; SAMPLES]>,
    requests: Slots,
    over_limit: Slots,
    mean_latency_us: Slots,
    store: Box<[StoreProbe; SAMPLES]>,
    last_process: ProcessTotals,
    rules: HashMap<RuleKey, RuleHistory>,
    untracked: usize,
}

impl History {
    /// Keeps at most `max_rules` rules (at least one).
    pub fn new(max_rules: usize) -> History {
        History {
            max_rules: max_rules.max(1),
            head: SAMPLES - 1,
            len: 0,
            times: Box::new([0; SAMPLES]),
            requests: slots(),
            over_limit: slots(),
            mean_latency_us: slots(),
            store: Box::new([StoreProbe::Connecting; SAMPLES]),
            last_process: ProcessTotals::default(),
            rules: HashMap::new(),
            untracked: 0,
        }
    }

    /// Adds a sample taken at `unix` seconds: the totals now, and the store's probe.
    pub fn record(
        &mut self,
        unix: u64,
        rules: Vec<RuleTotals>,
        process: ProcessTotals,
        store: StoreProbe,
    ) {
        self.head = (self.head + 1) % SAMPLES;
        self.len = (self.len + 1).min(SAMPLES);
        let slot = self.head;
        self.times[slot] = unix;
        let requests = gained(process.requests, self.last_process.requests);
        self.requests[slot] = requests;
        self.over_limit[slot] = gained(process.over_limit, self.last_process.over_limit);
        let latency_ns = process
            .latency_sum_ns
            .saturating_sub(self.last_process.latency_sum_ns);
        self.mean_latency_us[slot] = match requests {
            0 => 0,
            n => u32::try_from(latency_ns / 1000 / u64::from(n)).unwrap_or(u32::MAX),
        };
        self.store[slot] = store;
        self.last_process = process;

        let mut seen = HashMap::with_capacity(self.rules.len());
        let mut new = Vec::new();
        for totals in rules {
            let key = (totals.domain, totals.rule);
            let now = [totals.hits, totals.over_limit];
            if let Some(mut history) = self.rules.remove(&key) {
                history.hits[slot] = gained(now[0], history.last[0]);
                history.over_limit[slot] = gained(now[1], history.last[1]);
                history.last = now;
                seen.insert(key, history);
            } else if now[0] > 0 {
                new.push((key, now));
            }
        }
        new.sort_by(|a, b| b.1[0].cmp(&a.1[0]).then_with(|| a.0.cmp(&b.0)));
        let room = self.max_rules.saturating_sub(seen.len());
        let untracked = new.len().saturating_sub(room);
        for (key, now) in new.into_iter().take(room) {
            let mut history = RuleHistory {
                last: now,
                hits: slots(),
                over_limit: slots(),
            };
            history.hits[slot] = gained(now[0], 0);
            history.over_limit[slot] = gained(now[1], 0);
            seen.insert(key, history);
        }
        self.rules = seen;
        self.untracked = untracked;
    }

    /// Slot indexes of the samples taken, oldest first.
    fn order(&self) -> impl Iterator<Item = usize> + '_ {
        let oldest = (self.head + 1 + SAMPLES - self.len) % SAMPLES;
        (0..self.len).map(move |i| (oldest + i) % SAMPLES)
    }

    fn series(&self, slots: &[u32; SAMPLES]) -> Vec<u32> {
        self.order().map(|i| slots[i]).collect()
    }

    /// The process's series.
    pub fn process(&self) -> ProcessSeries {
        ProcessSeries {
            times: self.order().map(|i| self.times[i]).collect(),
            requests: self.series(&self.requests),
            over_limit: self.series(&self.over_limit),
            mean_latency_us: self.series(&self.mean_latency_us),
            store_latency_us: self
                .order()
                .map(|i| match self.store[i] {
                    StoreProbe::Healthy { micros } => Some(micros),
                    _ => None,
                })
                .collect(),
        }
    }

    /// The store's probe at the newest sample; `None` before the first.
    pub fn store_now(&self) -> Option<StoreProbe> {
        (self.len > 0).then(|| self.store[self.head])
    }

    /// The `max` rules with the most hits over the samples kept (ties in label order).
    pub fn busiest_rules(&self, max: usize) -> Vec<RuleSeries> {
        let mut ranked: Vec<(u64, &RuleKey, &RuleHistory)> = self
            .rules
            .iter()
            .map(|(key, history)| {
                let hits = self.order().map(|i| u64::from(history.hits[i])).sum();
                (hits, key, history)
            })
            .collect();
        ranked.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1)));
        ranked
            .into_iter()
            .take(max)
            .map(|(_, (domain, rule), history)| RuleSeries {
                domain: domain.clone(),
                rule: rule.clone(),
                hits: self.series(&history.hits),
                over_limit: self.series(&history.over_limit),
            })
            .collect()
    }

    /// Rules kept, and rules with hits left out for want of room at the newest sample.
    pub fn rule_counts(&self) -> (usize, usize) {
        (self.rules.len(), self.untracked)
    }

    /// Most rules kept.
    pub fn max_rules(&self) -> usize {
        self.max_rules
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn totals(rule: &str, hits: u64, over_limit: u64) -> RuleTotals {
        RuleTotals {
            domain: Arc::from("d"),
            rule: Arc::from(rule),
            hits,
            over_limit,
        }
    }

    fn process(requests: u64) -> ProcessTotals {
        ProcessTotals {
            requests,
            latency_sum_ns: requests * 2000,
            ..ProcessTotals::default()
        }
    }

    #[test]
    fn samples_keep_what_each_counter_gained_oldest_first_and_the_last_samples_only() {
        let mut history = History::new(10);
        let probe = StoreProbe::Healthy { micros: 7 };
        for n in 1..=(SAMPLES as u64 + 5) {
            history.record(n, vec![totals("a", n * 3, n)], process(n * 3), probe);
        }
        let process = history.process();
        assert_eq!(process.times.len(), SAMPLES);
        assert_eq!(process.times[0], 6);
        assert_eq!(process.times[SAMPLES - 1], SAMPLES as u64 + 5);
        assert!(process.requests.iter().all(|r| *r == 3), "{process:?}");
        assert!(process.mean_latency_us.iter().all(|us| *us == 2));
        assert!(process.store_latency_us.iter().all(|us| *us == Some(7)));
        let rules = history.busiest_rules(5);
        assert_eq!(rules.len(), 1);
        assert!(rules[0].hits.iter().all(|h| *h == 3));
        assert!(rules[0].over_limit.iter().all(|o| *o == 1));
    }

    #[test]
    fn rules_enter_with_hits_within_the_cap_and_leave_with_the_configuration() {
        let mut history = History::new(2);
        let probe = StoreProbe::Unhealthy;
        history.record(
            1,
            vec![totals("idle", 0, 0), totals("a", 5, 1), totals("b", 9, 0)],
            process(0),
            probe,
        );
        assert_eq!(history.rule_counts(), (2, 0));
        history.record(
            2,
            vec![totals("a", 6, 1), totals("b", 9, 0), totals("c", 4, 0)],
            process(0),
            probe,
        );
        assert_eq!(history.rule_counts(), (2, 1), "no room for c");
        let rules = history.busiest_rules(5);
        let names: Vec<&str> = rules.iter().map(|r| &*r.rule).collect();
        assert_eq!(names, ["b", "a"]);
        assert_eq!(rules[1].hits, [5, 1]);
        history.record(
            3,
            vec![totals("b", 9, 0), totals("c", 8, 0)],
            process(0),
            probe,
        );
        let names: Vec<String> = history
            .busiest_rules(5)
            .iter()
            .map(|r| r.rule.to_string())
            .collect();
        assert_eq!(
            names,
            ["b", "c"],
            "a left the configuration, c took its room"
        );
        assert_eq!(history.busiest_rules(1).len(), 1);
        assert_eq!(history.store_now(), Some(StoreProbe::Unhealthy));
    }

    #[test]
    fn a_counter_that_starts_again_gains_nothing_rather_than_wrapping() {
        let mut history = History::new(2);
        let probe = StoreProbe::Connecting;
        history.record(1, vec![totals("a", 50, 0)], process(50), probe);
        history.record(2, vec![totals("a", 3, 0)], process(60), probe);
        assert_eq!(history.busiest_rules(1)[0].hits, [50, 0]);
    }
}
