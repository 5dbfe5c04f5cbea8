//! The families of the transport: what its bounds refused or closed, and failed accepts.

use std::sync::atomic::Ordering;
use std::sync::Weak;

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use super::state::Metrics;
use crate::service::transport_refusal::{Port, TransportRefusal};

const TRANSPORT_LIMITED: Spec<'static> = Spec::counter(
    "ratelimitd_transport_limited_total",
    "Calls, messages and connections a transport limit refused or closed, by limit (see the README's Limits and hardening).",
    &["limit"],
);
const ACCEPT_ERRORS: Spec<'static> = Spec::counter(
    "ratelimitd_accept_errors_total",
    "Failed accepts (e.g. out of file descriptors), by port; each is followed by a backoff.",
    &["port"],
);

/// The collector of the transport families of `metrics`.
pub(super) fn group(metrics: Weak<Metrics>) -> prometheus::Result<FamilyGroup> {
    FamilyGroup::new(&[TRANSPORT_LIMITED, ACCEPT_ERRORS], move || {
        metrics
            .upgrade()
            .map_or_else(Vec::new, |metrics| families(&metrics))
    })
}

fn families(metrics: &Metrics) -> Vec<MetricFamily> {
    let mut limited = TRANSPORT_LIMITED.family();
    for (refusal, counter) in TransportRefusal::ALL
        .iter()
        .zip(&metrics.transport_refusals)
    {
        limited.sample(&[refusal.label()], counter.load(Ordering::Relaxed));
    }
    let mut accept_errors = ACCEPT_ERRORS.family();
    for (port, counter) in Port::ALL.iter().zip(&metrics.accept_errors) {
        accept_errors.sample(&[port.label()], counter.load(Ordering::Relaxed));
    }
    vec![limited.done(), accept_errors.done()]
}
