//! The per-rule families (hits, within, near, over, shadow per domain and rule, and per
//! descriptor for `detailed_metric` rules) and how many label sets they leave out, from one
//! snapshot of the rule counters taken at each scrape.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use super::overflow_label::OVERFLOW_LABEL;
use super::rule_series::{self, Labels, Values};
use super::state::Metrics;

const DETAILED_LABELS: &[&str] = &["domain", "rule", "descriptor"];

/// The five counters of each shown series, in the order of [`Values`].
const COUNTERS: [(&str, &str); 5] = [
    (
        "ratelimitd_total_hits_total",
        "Hits of descriptors that matched the rule.",
    ),
    (
        "ratelimitd_within_limit_total",
        "Hits answered OK (near-limit hits included).",
    ),
    (
        "ratelimitd_near_limit_total",
        "Admitted hits that left less than (1 - near_limit_ratio) of the limit's capacity.",
    ),
    (
        "ratelimitd_over_limit_total",
        "Hits over the limit (shadow- and quota-mode ones included).",
    ),
    (
        "ratelimitd_shadow_mode_total",
        "Hits over a shadow-mode limit (answered OK).",
    ),
];

const HIDDEN: Spec<'static> = Spec::gauge(
    "ratelimitd_rule_series_hidden",
    "Label sets of the per-rule families without a series of their own (beyond --metrics-max-rule-series): hits under rule=\"_other\", rules at zero not shown.",
    &[],
);

/// The collector of the per-rule families of `metrics`.
pub(super) fn group(metrics: Weak<Metrics>) -> prometheus::Result<FamilyGroup> {
    let mut specs: Vec<Spec<'static>> = COUNTERS
        .iter()
        .map(|(name, help)| Spec::counter(name, help, DETAILED_LABELS))
        .collect();
    specs.push(HIDDEN);
    FamilyGroup::new(&specs, move || {
        metrics
            .upgrade()
            .map_or_else(Vec::new, |metrics| families(&metrics))
    })
}

fn families(metrics: &Metrics) -> Vec<MetricFamily> {
    let shown = rule_series::within_cap(snapshot(metrics).into_iter(), metrics.max_rule_series);
    let mut families: Vec<MetricFamily> = COUNTERS
        .iter()
        .enumerate()
        .map(|(i, (name, help))| {
            let mut family = Spec::counter(name, help, DETAILED_LABELS).family();
            for ((domain, rule, descriptor), values) in &shown.series {
                match descriptor {
                    Some(descriptor) => family.sample(&[domain, rule, descriptor], values[i]),
                    None => family.sample(&[domain, rule], values[i]),
                };
            }
            family.done()
        })
        .collect();
    families.push(HIDDEN.single(shown.hidden as u64));
    families
}

/// Every label set with its counts, sorted by label, each once. Overridden hits join the rule's
/// series: its plain one, or for a detailed rule the descriptor's. The lock is held only to copy
/// the counts and the (shared) names out.
fn snapshot(metrics: &Metrics) -> Vec<(Labels, Values)> {
    let mut series: Vec<(Labels, Values)> = Vec::new();
    for (domain, rules) in metrics.rules.read().iter() {
        for (path, stats) in rules {
            let labels = |descriptor: Option<&str>| {
                (domain.clone(), path.clone(), descriptor.map(str::to_string))
            };
            if stats.plain_used.load(Ordering::Relaxed) {
                series.push((labels(None), stats.plain.read()));
            }
            for (label, counters) in stats.detailed.by_label.read().iter() {
                series.push((labels(Some(label)), counters.read()));
            }
            if stats.detailed.overflow_used.load(Ordering::Relaxed) {
                series.push((labels(Some(OVERFLOW_LABEL)), stats.detailed.overflow.read()));
            }
            let detailed = stats.is_detailed.load(Ordering::Relaxed);
            for (label, counters) in stats.overridden.by_label.read().iter() {
                series.push((labels(detailed.then_some(label)), counters.read()));
            }
            if stats.overridden.overflow_used.load(Ordering::Relaxed) {
                series.push((
                    labels(detailed.then_some(OVERFLOW_LABEL)),
                    stats.overridden.overflow.read(),
                ));
            }
        }
    }
    series.sort_unstable_by(|(a, _), (b, _)| a.cmp(b));
    series.dedup_by(|(labels, values), (kept_labels, kept)| {
        if labels != kept_labels {
            return false;
        }
        for (kept, value) in kept.iter_mut().zip(*values) {
            *kept += value;
        }
        true
    });
    series
}
