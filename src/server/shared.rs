//! What the server's components start from.

use std::sync::Arc;

use super::config_feed::ConfigFeed;
use super::quotas::Quotas;
use super::settings::Settings;
use crate::service::status_page::StatusPage;
use crate::service::{Health, Metrics, RateLimitEdge};

/// The state every component may read: the settings, the metrics each registers its families
/// on, where the rules come from, the RLS edge deciding through the store, health, RLQS and the status page.
pub struct Shared<S> {
    pub settings: Settings,
    pub metrics: Arc<Metrics>,
    pub feed: ConfigFeed,
    pub edge: Arc<RateLimitEdge<S>>,
    pub health: Arc<Health>,
    pub quotas: Quotas,
    pub status_page: Arc<StatusPage>,
}
