//! The families of configuration loading: reloads and their result, kept by [`Metrics`], and the
//! files the running configuration's loader read, parsed and refused, read from the loader.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use super::state::Metrics;
use crate::config::{ConfigBound, Loader};

const RELOADS: Spec<'static> = Spec::counter(
    "ratelimitd_config_reloads_total",
    "Configuration reloads (file change, SIGHUP or xDS response), by result.",
    &["result"],
);
const LAST_RELOAD_SUCCESSFUL: Spec<'static> = Spec::gauge(
    "ratelimitd_config_last_reload_successful",
    "1 if the last configuration reload succeeded (or none was tried), 0 if it was rejected.",
    &[],
);
const LAST_SUCCESS_TIMESTAMP: Spec<'static> = Spec::gauge(
    "ratelimitd_config_last_reload_success_timestamp_seconds",
    "Unix time of the last configuration load that succeeded.",
    &[],
);
const FILE_READS: Spec<'static> = Spec::counter(
    "ratelimitd_config_file_reads_total",
    "Configuration files read, to load them or to see whether they changed (unchanged files are not read).",
    &[],
);
const FILE_PARSES: Spec<'static> = Spec::counter(
    "ratelimitd_config_file_parses_total",
    "Configuration files parsed (each load, at startup, on a change or SIGHUP, parses the files it reads).",
    &[],
);
const LIMIT_REJECTIONS: Spec<'static> = Spec::counter(
    "ratelimitd_config_limit_rejections_total",
    "Configuration files refused by a configuration limit (file_bytes, file_type, alias_bytes), at each load that met them.",
    &["limit"],
);

/// The collector of the reload families of `metrics`.
pub(super) fn reloads(metrics: Weak<Metrics>) -> prometheus::Result<FamilyGroup> {
    let specs = [RELOADS, LAST_RELOAD_SUCCESSFUL, LAST_SUCCESS_TIMESTAMP];
    FamilyGroup::new(&specs, move || {
        let Some(metrics) = metrics.upgrade() else {
            return Vec::new();
        };
        let load = |counter: &std::sync::atomic::AtomicU64| counter.load(Ordering::Relaxed);
        let mut reloads = RELOADS.family();
        reloads
            .sample(&["success"], load(&metrics.reloads_ok))
            .sample(&["failure"], load(&metrics.reloads_failed));
        let last_ok = metrics.last_reload_ok.load(Ordering::Relaxed);
        vec![
            reloads.done(),
            LAST_RELOAD_SUCCESSFUL.single(u64::from(last_ok)),
            LAST_SUCCESS_TIMESTAMP.single(load(&metrics.last_success_unix)),
        ]
    })
}

/// The collector of `loader`'s families.
pub(super) fn loader(loader: Arc<Loader>) -> prometheus::Result<FamilyGroup> {
    FamilyGroup::new(&[FILE_READS, FILE_PARSES, LIMIT_REJECTIONS], move || {
        loader_families(&loader)
    })
}

fn loader_families(loader: &Loader) -> Vec<MetricFamily> {
    let stats = loader.stats();
    let mut rejections = LIMIT_REJECTIONS.family();
    for bound in ConfigBound::ALL {
        rejections.sample(&[bound.label()], stats.rejected(bound));
    }
    vec![
        FILE_READS.single(stats.files_read()),
        FILE_PARSES.single(stats.files_parsed()),
        rejections.done(),
    ]
}
