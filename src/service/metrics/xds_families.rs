//! The families of the xDS client: the `version_info` in force, and the state of its stream
//! (whether it is up, how long the configuration may have been stale, the last response, the
//! stalls).

use std::sync::Arc;

use prometheus::proto::MetricFamily;

use super::family::{FamilyGroup, Spec};
use crate::config::xds::XdsConfig;
use crate::service::version_info;

const VERSION_INFO: Spec<'static> = Spec::gauge(
    "ratelimitd_config_xds_version_info",
    "1, labelled with the version_info of the xDS configuration in force (none before the first).",
    &["version"],
);
const STREAM_UP: Spec<'static> = Spec::gauge(
    "ratelimitd_xds_stream_up",
    "1 while the xDS stream is open, 0 while it is down (the configuration in force keeps serving).",
    &[],
);
const STALE_SECONDS: Spec<'static> = Spec::gauge(
    "ratelimitd_xds_config_stale_seconds",
    "Seconds the xDS stream has been down (0 while it is open): how long changes on the control plane may have gone unseen.",
    &[],
);
const LAST_RESPONSE: Spec<'static> = Spec::gauge(
    "ratelimitd_xds_last_response_timestamp_seconds",
    "Unix time of the last xDS response received (0 before the first).",
    &[],
);
const STALLS: Spec<'static> = Spec::counter(
    "ratelimitd_xds_stream_stalls_total",
    "xDS streams dropped because a response did not arrive whole within --xds-response-timeout.",
    &[],
);

/// The collector of `config`'s families.
pub(super) fn group(config: Arc<XdsConfig>) -> prometheus::Result<FamilyGroup> {
    let specs = [
        VERSION_INFO,
        STREAM_UP,
        STALE_SECONDS,
        LAST_RESPONSE,
        STALLS,
    ];
    FamilyGroup::new(&specs, move || families(&config))
}

fn families(config: &XdsConfig) -> Vec<MetricFamily> {
    let mut in_force = VERSION_INFO.family();
    if let Some(version) = config.version() {
        in_force.sample(&[&version_info::shown(&version)], 1);
    }
    let stream = config.stream();
    vec![
        in_force.done(),
        STREAM_UP.single(u64::from(stream.is_up())),
        STALE_SECONDS.single(stream.stale_for().as_secs()),
        LAST_RESPONSE.single(stream.last_response_unix().unwrap_or(0)),
        STALLS.single(stream.stalls()),
    ]
}
