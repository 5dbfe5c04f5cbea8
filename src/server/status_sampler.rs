//! The status page's state, and the task that samples into its ring buffer.

use std::sync::Arc;

use super::settings::Settings;
use super::tasks::Tasks;
use crate::service::status_page::{self, ConfigSource, StatusPage, StoreName};
use crate::service::Metrics;
use crate::store::Store;

/// The status page of this server (where its configuration and store are), its ring buffer
/// within the rule-series cap of `/metrics`, sampled from `metrics` and `store` until shutdown.
pub fn start<S: Store>(
    settings: &Settings,
    metrics: &Arc<Metrics>,
    store: Arc<S>,
    tasks: &mut Tasks,
) -> Arc<StatusPage> {
    let source = match &settings.xds {
        Some(options) => ConfigSource::Xds(options.server.to_string()),
        None => ConfigSource::Files(
            (settings.config_paths.iter())
                .map(|path| path.display().to_string())
                .collect(),
        ),
    };
    let store_name = match &settings.redis {
        None => StoreName {
            kind: "memory",
            address: None,
        },
        Some(redis) => StoreName {
            kind: "redis",
            address: Some(redis.topology.address()),
        },
    };
    let page = Arc::new(StatusPage::new(
        settings.status_page,
        source,
        store_name,
        metrics.max_rule_series(),
    ));
    tasks.spawn(status_page::sampler::run(
        page.clone(),
        metrics.clone(),
        store,
        tasks.stopping(),
    ));
    page
}
