//! The families of requests as a whole: the latency histogram, requests by result, requests
//! refused by a request bound, requests in an unknown domain, requests global shadow mode let
//! through.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use super::overflow_label::OVERFLOW_LABEL;
use super::state::{Metrics, RequestResult, LATENCY_BUCKETS_US};
use crate::limiter::RequestBound;

const DURATION: Spec<'static> = Spec::histogram(
    "ratelimitd_request_duration_seconds",
    "Time to decide a rate-limit request (gRPC or /json): validation, matching, store.",
);
const REQUESTS: Spec<'static> = Spec::counter(
    "ratelimitd_requests_total",
    "Rate-limit requests by result (ok, over_limit, invalid_argument, unavailable).",
    &["result"],
);
const REQUEST_LIMIT_REJECTIONS: Spec<'static> = Spec::counter(
    "ratelimitd_request_limit_rejections_total",
    "Requests refused with INVALID_ARGUMENT for exceeding a request limit (descriptors, entries, entry_bytes).",
    &["limit"],
);
const DOMAIN_NOT_FOUND: Spec<'static> = Spec::counter(
    "ratelimitd_domain_not_found_total",
    "Descriptors of requests whose domain no configuration defines (answered OK without a limit), by domain (at most 100; further ones as _other).",
    &["domain"],
);
const GLOBAL_SHADOW_MODE: Spec<'static> = Spec::counter(
    "ratelimitd_global_shadow_mode_total",
    "Requests answered OK by global shadow mode (--shadow-mode) although a descriptor was over its limit.",
    &[],
);

/// The collector of the request families of `metrics`.
pub(super) fn group(metrics: Weak<Metrics>) -> prometheus::Result<FamilyGroup> {
    let specs = [
        DURATION,
        REQUESTS,
        REQUEST_LIMIT_REJECTIONS,
        DOMAIN_NOT_FOUND,
        GLOBAL_SHADOW_MODE,
    ];
    FamilyGroup::new(&specs, move || {
        metrics
            .upgrade()
            .map_or_else(Vec::new, |metrics| families(&metrics))
    })
}

fn families(metrics: &Metrics) -> Vec<MetricFamily> {
    let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
    let latency = &metrics.latency;
    let mut cumulative = 0;
    let buckets = LATENCY_BUCKETS_US
        .iter()
        .zip(&latency.buckets)
        .map(|(bound, bucket)| {
            cumulative += load(bucket);
            (*bound as f64 / 1e6, cumulative)
        });
    let duration = DURATION.histogram_of(
        buckets,
        load(&latency.count),
        load(&latency.sum_ns) as f64 / 1e9,
    );

    let mut requests = REQUESTS.family();
    for (result, counter) in RequestResult::ALL.iter().zip(&metrics.requests) {
        requests.sample(&[result.label()], load(counter));
    }

    let mut rejections = REQUEST_LIMIT_REJECTIONS.family();
    for (bound, counter) in RequestBound::ALL.iter().zip(&metrics.request_bounds) {
        rejections.sample(&[bound.label()], load(counter));
    }

    let mut not_found = DOMAIN_NOT_FOUND.family();
    for (domain, counter) in metrics.domains_not_found.read().iter() {
        not_found.sample(&[domain], load(&counter.value));
    }
    let overflow = load(&metrics.domains_not_found_overflow.value);
    if overflow > 0 {
        not_found.sample(&[OVERFLOW_LABEL], overflow);
    }

    vec![
        duration,
        requests.done(),
        rejections.done(),
        not_found.done(),
        GLOBAL_SHADOW_MODE.single(load(&metrics.global_shadow_mode)),
    ]
}
