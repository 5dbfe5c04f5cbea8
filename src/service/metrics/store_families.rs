//! The families of store failures (errors by kind, the answers the store-failure policy gave) and
//! of the counter resets the HTTP port asked the store for.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use super::state::{CounterReset, Metrics, STORE_ERROR_KINDS};

const STORE_ERRORS: Spec<'static> = Spec::counter(
    "ratelimitd_store_errors_total",
    "Store calls that failed, by kind (timeout, unavailable, protocol).",
    &["kind"],
);
const STORE_ERROR_ANSWERS: Spec<'static> = Spec::counter(
    "ratelimitd_store_error_answers_total",
    "Requests answered by the store-failure policy (--on-store-error) because the store failed.",
    &["policy"],
);
const COUNTER_RESETS: Spec<'static> = Spec::counter(
    "ratelimitd_counter_resets_total",
    "POST /counters/reset calls, by result: reset, refused (resets off, no or wrong token), invalid (selector), failed (store).",
    &["result"],
);

/// The collector of the store-failure families of `metrics`.
pub(super) fn group(metrics: Weak<Metrics>) -> prometheus::Result<FamilyGroup> {
    FamilyGroup::new(
        &[STORE_ERRORS, STORE_ERROR_ANSWERS, COUNTER_RESETS],
        move || {
            metrics
                .upgrade()
                .map_or_else(Vec::new, |metrics| families(&metrics))
        },
    )
}

fn families(metrics: &Metrics) -> Vec<MetricFamily> {
    let mut errors = STORE_ERRORS.family();
    for (kind, counter) in STORE_ERROR_KINDS.iter().zip(&metrics.store_errors) {
        errors.sample(&[kind], counter.load(Ordering::Relaxed));
    }
    let mut answers = STORE_ERROR_ANSWERS.family();
    let policy: &str = &metrics.policy.lock();
    answers.sample(&[policy], metrics.policy_answers.load(Ordering::Relaxed));
    let mut resets = COUNTER_RESETS.family();
    for (outcome, count) in CounterReset::ALL.iter().zip(&metrics.counter_resets) {
        resets.sample(&[outcome.label()], count.load(Ordering::Relaxed));
    }
    vec![errors.done(), answers.done(), resets.done()]
}
