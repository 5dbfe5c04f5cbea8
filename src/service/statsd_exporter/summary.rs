//! A summary's quantiles as client_golang computes them for statsd_exporter: over a sliding
//! window of `max_age`, kept as `age_buckets` streams that are reset in turn every
//! `max_age / age_buckets`, the quantiles read from the stream reset longest ago (so the window
//! covers between `(age_buckets - 1) / age_buckets` of `max_age` and all of it).
//!
//! The observations are the request times per whole millisecond ([`Metrics`]'s totals): a
//! stream's content is what the totals gained since its reset, so the window keeps one snapshot
//! of the totals per reset, taken by [`Window::rotate`] at each boundary. A quantile is read as
//! the targeted-quantile stream (beorn7/perks) reads an uncompressed stream: rank
//! `ceil(q n) + ceil(f / 2)`, `f` the smallest allowed error of all targets at that rank.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::service::metrics::Metrics;

/// Requests per whole millisecond, increasing.
pub type Times = Vec<(u64, u64)>;

/// The window of one summary.
#[derive(Debug)]
pub struct Window {
    start: Instant,
    stream: Duration,
    age_buckets: u32,
    /// The totals at each boundary `start + k × stream`, by `k`, the last `age_buckets` ones.
    snapshots: Mutex<VecDeque<(u64, Times)>>,
}

impl Window {
    /// A window of `max_age` in `age_buckets` steps, starting now (the totals are zero).
    pub fn new(max_age: Duration, age_buckets: u32) -> Window {
        let age_buckets = age_buckets.max(1);
        Window {
            start: Instant::now(),
            stream: (max_age / age_buckets).max(Duration::from_millis(1)),
            age_buckets,
            snapshots: Mutex::new(VecDeque::new()),
        }
    }

    /// How long between two rotations.
    pub fn step(&self) -> Duration {
        self.stream
    }

    fn boundary(&self, now: Instant) -> u64 {
        (now.duration_since(self.start).as_nanos() / self.stream.as_nanos().max(1)) as u64
    }

    /// Records the totals at the current boundary (call at each step).
    pub fn rotate(&self, metrics: &Metrics) {
        let k = self.boundary(Instant::now());
        let mut snapshots = self.snapshots.lock();
        if snapshots.back().is_some_and(|(last, _)| *last >= k) {
            return;
        }
        snapshots.push_back((k, totals(metrics)));
        while snapshots.len() > self.age_buckets as usize {
            snapshots.pop_front();
        }
    }

    /// The observations of the stream the quantiles are read from: the totals now, less those
    /// at its reset (the latest snapshot not after it; none before the first reset).
    pub fn observations(&self, now_totals: &Times) -> Times {
        let k = self.boundary(Instant::now());
        let head = k.saturating_sub(u64::from(self.age_buckets) - 1);
        if head == 0 {
            return now_totals.clone();
        }
        let snapshots = self.snapshots.lock();
        let Some((_, base)) = snapshots.iter().rev().find(|(at, _)| *at <= head) else {
            return now_totals.clone();
        };
        subtract(now_totals, base)
    }
}

/// The request times since start, per whole millisecond.
pub fn totals(metrics: &Metrics) -> Times {
    let mut times = Vec::new();
    metrics.response_time_totals(|ms, requests| times.push((ms, requests)));
    times
}

fn subtract(now: &Times, base: &Times) -> Times {
    let mut base = base.iter().peekable();
    let mut out = Vec::new();
    for (ms, count) in now {
        while base.peek().is_some_and(|(b, _)| b < ms) {
            base.next();
        }
        let before = match base.peek() {
            Some((b, c)) if b == ms => *c,
            _ => 0,
        };
        if *count > before {
            out.push((*ms, count - before));
        }
    }
    out
}

/// The value of each target quantile `(q, error)` among `observations` (each millisecond value
/// times `scale`), sorted by quantile; `NaN` when there is none.
pub fn quantiles(observations: &Times, targets: &[(f64, f64)], scale: f64) -> Vec<(f64, f64)> {
    let n: u64 = observations.iter().map(|(_, count)| count).sum();
    let mut targets = targets.to_vec();
    targets.sort_by(|a, b| a.0.total_cmp(&b.0));
    targets.dedup_by(|a, b| a.0 == b.0);
    let allowed = |rank: f64| {
        targets
            .iter()
            .map(|(q, epsilon)| {
                if q * n as f64 <= rank {
                    2.0 * epsilon * rank / q
                } else {
                    2.0 * epsilon * (n as f64 - rank) / (1.0 - q)
                }
            })
            .fold(f64::MAX, f64::min)
    };
    targets
        .iter()
        .map(|(q, _)| {
            if n == 0 {
                return (*q, f64::NAN);
            }
            let mut rank = (q * n as f64).ceil();
            rank += (allowed(rank) / 2.0).ceil();
            let rank = (rank.max(1.0) as u64).min(n);
            let mut seen = 0;
            let value = observations
                .iter()
                .find(|(_, count)| {
                    seen += count;
                    seen >= rank
                })
                .map_or(0, |(ms, _)| *ms);
            (*q, value as f64 * scale)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TARGETS: [(f64, f64); 3] = [(0.5, 0.05), (0.9, 0.01), (0.99, 0.001)];

    #[test]
    fn ranks_as_an_uncompressed_targeted_stream() {
        // 100 observations 1..=100 ms: the median is read at rank 50 + ceil(10 / 2) = 55.
        let times: Times = (1..=100).map(|ms| (ms, 1)).collect();
        let got = quantiles(&times, &TARGETS, 0.001);
        assert_eq!(got[0], (0.5, 0.055));
        assert_eq!(got[1], (0.9, 0.091));
        assert_eq!(got[2], (0.99, 0.1));
        let none = quantiles(&Vec::new(), &TARGETS, 1.0);
        assert!(none.iter().all(|(_, v)| v.is_nan()));
        assert_eq!(quantiles(&vec![(7, 1)], &TARGETS, 1.0)[0], (0.5, 7.0));
    }

    #[test]
    fn the_window_subtracts_the_totals_at_the_head_streams_reset() {
        assert_eq!(
            subtract(&vec![(1, 5), (2, 3), (4, 1)], &vec![(1, 2), (2, 3), (3, 9)]),
            vec![(1, 3), (4, 1)]
        );
        let window = Window::new(Duration::from_secs(600), 5);
        assert_eq!(window.step(), Duration::from_secs(120));
        let now = vec![(3, 2)];
        assert_eq!(
            window.observations(&now),
            now,
            "before the first reset: all"
        );
    }
}
