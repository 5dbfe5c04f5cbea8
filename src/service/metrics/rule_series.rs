//! The bound on the per-rule series of `/metrics` (`--metrics-max-rule-series`).
//!
//! A configuration of 100,000 rules would otherwise put 500,000 samples, about 33 MB, on every
//! scrape. At most `cap` label sets (domain, rule, and for `detailed_metric` rules the
//! descriptor) are shown: those with hits first, then those still at zero, each in label order.
//! The hits of label sets with hits beyond the cap add up in one series labelled
//! `domain="_other",rule="_other"`; label sets at zero beyond the room left are not shown, which
//! loses no count. Which label sets have a series of their own is decided at each scrape: once
//! more than `cap` of them have hits, a configuration change can move one in or out of `_other`
//! (Prometheus may then read a counter reset).

use std::sync::Arc;

use super::overflow_label::OVERFLOW_LABEL;

/// The labels of one series of the per-rule families: domain, rule path, descriptor.
pub(super) type Labels = (Arc<str>, Arc<str>, Option<String>);

/// The values of one series: total hits, within, near, over, shadow.
pub(super) type Values = [u64; 5];

/// The series `/metrics` shows, and how many were left out.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Shown {
    /// In label order, `_other` last when some hits were folded into it.
    pub series: Vec<(Labels, Values)>,
    /// Label sets without a series of their own (folded into `_other`, or at zero and left out).
    pub hidden: usize,
}

/// The series of `all` (sorted by label) shown within `cap`.
pub(super) fn within_cap(
    all: impl ExactSizeIterator<Item = (Labels, Values)>,
    cap: usize,
) -> Shown {
    let total = all.len();
    if total <= cap {
        return Shown {
            series: all.collect(),
            hidden: 0,
        };
    }
    let all: Vec<(Labels, Values)> = all.collect();
    let with_hits = all.iter().filter(|(_, values)| has_hits(values)).count();
    let mut room_with_hits = with_hits.min(cap);
    let mut room_at_zero = cap - room_with_hits;
    let mut other: Option<Values> = None;
    let mut series = Vec::with_capacity(cap + 1);
    for (labels, values) in all {
        if has_hits(&values) {
            if room_with_hits > 0 {
                room_with_hits -= 1;
                series.push((labels, values));
            } else {
                let sum = other.get_or_insert_with(Values::default);
                for (sum, value) in sum.iter_mut().zip(values) {
                    *sum += value;
                }
            }
        } else if room_at_zero > 0 {
            room_at_zero -= 1;
            series.push((labels, values));
        }
    }
    let hidden = total - series.len();
    if let Some(values) = other {
        series.push((
            (Arc::from(OVERFLOW_LABEL), Arc::from(OVERFLOW_LABEL), None),
            values,
        ));
    }
    Shown { series, hidden }
}

fn has_hits(values: &Values) -> bool {
    values.iter().any(|value| *value > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn series(rule: &str, hits: u64) -> (Labels, Values) {
        (
            (Arc::from("d"), Arc::from(rule), None),
            [hits, hits, 0, 0, 0],
        )
    }

    fn rules(shown: &Shown) -> Vec<(&str, u64)> {
        shown
            .series
            .iter()
            .map(|((_, rule, _), values)| (&**rule, values[0]))
            .collect()
    }

    #[test]
    fn within_the_cap_every_series_shows() {
        let all = vec![series("a", 0), series("b", 3)];
        let shown = within_cap(all.into_iter(), 2);
        assert_eq!(rules(&shown), [("a", 0), ("b", 3)]);
        assert_eq!(shown.hidden, 0);
    }

    #[test]
    fn series_with_hits_come_first_and_the_rest_of_the_hits_add_up_under_other() {
        let all = vec![
            series("a", 0),
            series("b", 1),
            series("c", 0),
            series("d", 2),
            series("e", 4),
        ];
        let shown = within_cap(all.clone().into_iter(), 3);
        assert_eq!(rules(&shown), [("b", 1), ("d", 2), ("e", 4)]);
        assert_eq!(shown.hidden, 2);
        let shown = within_cap(all.clone().into_iter(), 4);
        assert_eq!(rules(&shown), [("a", 0), ("b", 1), ("d", 2), ("e", 4)]);
        let shown = within_cap(all.into_iter(), 2);
        assert_eq!(rules(&shown), [("b", 1), ("d", 2), ("_other", 4)]);
        assert_eq!(shown.hidden, 3);
        assert_eq!(
            shown.series[2],
            (
                (Arc::from("_other"), Arc::from("_other"), None),
                [4, 4, 0, 0, 0]
            )
        );
    }
}
