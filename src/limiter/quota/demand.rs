//! One Envoy's recent demand for one bucket, smoothed over its usage reports.
//!
//! Demand is what the Envoy's clients asked for: allowed + denied requests per second, so that an
//! Envoy throttled by its current share still shows how much more it wants.

use std::time::Duration;

/// The default half-life of a rising demand estimate: half an Envoy report period (Envoy 1.40
/// reports every 5 s), so a full report showing more demand weighs 3/4 and the history before it
/// 1/4.
pub const DEFAULT_HALF_LIFE: Duration = Duration::from_millis(2500);

/// A report's rate, `sample = (allowed + denied) / elapsed`, followed up slowly and down at once:
/// a sample above the estimate moves it by an exponentially weighted moving average weighted by
/// the time the report covers, `rate ← rate + α·(sample − rate)` with
/// `α = 1 − 2^(−elapsed / half_life)`; a sample at or below it becomes the estimate. The first
/// report with a positive `elapsed` sets the rate to its sample. A report covering no time
/// (Envoy's first report for a bucket carries `time_elapsed` 0) tells no rate and leaves the
/// estimate as it was.
///
/// Down at once because a share is only worth what its Envoy uses: an Envoy whose clients went
/// away hands its share to the others with its next report, instead of holding a decaying part of
/// it for several report periods while they are denied. Up smoothly because one busy report
/// should not take the others' shares; a rising Envoy meanwhile has the headroom that unclaimed
/// capacity and the floor give it.
///
/// Weighting by time rather than by report keeps a short report (Envoy truncates `time_elapsed`
/// to whole seconds; a bucket created mid-period reports 0-4 s) from counting as much as a full
/// one; the truncation itself overestimates such a report's rate (by up to 25 % for 4 s of a
/// 5 s period), which errs on the side of the Envoy that just started.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Demand {
    rate: Option<f64>,
}

impl Demand {
    /// No history: a newcomer.
    pub fn new() -> Demand {
        Demand::default()
    }

    /// Requests per second, or `None` while no report has covered any time.
    pub fn rate(&self) -> Option<f64> {
        self.rate
    }

    /// Folds in one report: `allowed` and `denied` requests over `elapsed`.
    pub fn observe(&mut self, allowed: u64, denied: u64, elapsed: Duration, half_life: Duration) {
        let seconds = elapsed.as_secs_f64();
        if seconds <= 0.0 {
            return;
        }
        let sample = (allowed as f64 + denied as f64) / seconds;
        self.rate = Some(match self.rate {
            None => sample,
            Some(rate) if sample <= rate => sample,
            Some(rate) => {
                let half_lives = if half_life.is_zero() {
                    f64::INFINITY
                } else {
                    seconds / half_life.as_secs_f64()
                };
                let alpha = 1.0 - (-half_lives).exp2();
                rate + alpha * (sample - rate)
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FIVE: Duration = Duration::from_secs(5);

    #[test]
    fn a_first_report_without_elapsed_time_leaves_a_newcomer() {
        let mut demand = Demand::new();
        demand.observe(1, 0, Duration::ZERO, FIVE);
        assert_eq!(demand.rate(), None);
        demand.observe(50, 0, FIVE, FIVE);
        assert_eq!(
            demand.rate(),
            Some(10.0),
            "the first timed report sets the rate"
        );
    }

    #[test]
    fn one_half_life_of_rising_reports_moves_half_way_up() {
        let mut demand = Demand::new();
        demand.observe(0, 0, FIVE, FIVE);
        demand.observe(100, 0, FIVE, FIVE);
        assert_eq!(demand.rate(), Some(10.0));
        demand.observe(100, 0, FIVE, FIVE);
        assert_eq!(demand.rate(), Some(15.0));
    }

    #[test]
    fn a_short_rising_report_weighs_less_than_a_full_one() {
        let mut short = Demand::new();
        short.observe(0, 0, FIVE, FIVE);
        short.observe(20, 0, Duration::from_secs(1), FIVE);
        let rate = short.rate().expect("a rate");
        assert!(rate > 0.0 && rate < 5.0, "{rate}");
    }

    #[test]
    fn a_falling_report_sets_the_rate_at_once() {
        let mut demand = Demand::new();
        demand.observe(1000, 0, FIVE, FIVE);
        demand.observe(50, 0, FIVE, FIVE);
        assert_eq!(demand.rate(), Some(10.0));
        demand.observe(0, 0, FIVE, FIVE);
        assert_eq!(demand.rate(), Some(0.0), "an idle Envoy claims nothing");
    }

    #[test]
    fn denied_requests_count_as_demand() {
        let mut demand = Demand::new();
        demand.observe(10, 40, FIVE, FIVE);
        assert_eq!(demand.rate(), Some(10.0));
    }

    #[test]
    fn a_zero_half_life_follows_the_last_report() {
        let mut demand = Demand::new();
        demand.observe(100, 0, FIVE, Duration::ZERO);
        demand.observe(5, 5, FIVE, Duration::ZERO);
        assert_eq!(demand.rate(), Some(2.0));
    }
}
