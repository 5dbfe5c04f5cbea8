//! `GET /` on the HTTP port: a self-contained status page ([`document`]), and the
//! `GET /status.json` it reads every few seconds ([`status_json`]): the configuration in force,
//! decisions per second and the share over the limit per rule over the last 15 minutes (from the
//! [`history`] ring buffer a background [`sampler`] fills from the counters `/metrics` shows),
//! the top limited values, the store's health and health-check time, RLQS streams and buckets,
//! build and uptime (docs/operations/http-endpoints.md, "The status page").
//!
//! Bounded whatever the configuration and the traffic: the ring holds at most
//! `--metrics-max-rule-series` rules, `/status.json` lists at most `--status-page-max-rules`
//! rules, charts, top rules and RLQS buckets, and only reads. Neither changes any state.

pub mod document;
pub mod history;
pub mod sampler;
pub mod status_json;

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use self::history::History;
use crate::limiter::{Rules, SystemClock};

/// What the status page keeps and shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StatusPageSettings {
    /// How often the ring buffer samples the counters; it keeps [`history::SAMPLES`] samples.
    pub sample_interval: Duration,
    /// Most rules, charts, top rules and RLQS buckets `/status.json` lists.
    pub max_rules: usize,
}

impl StatusPageSettings {
    pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_secs(10);
    pub const DEFAULT_MAX_RULES: usize = 50;
    /// Most rules `--status-page-max-rules` may ask for.
    pub const MAX_RULES: usize = 1000;
}

impl Default for StatusPageSettings {
    fn default() -> StatusPageSettings {
        StatusPageSettings {
            sample_interval: StatusPageSettings::DEFAULT_SAMPLE_INTERVAL,
            max_rules: StatusPageSettings::DEFAULT_MAX_RULES,
        }
    }
}

/// Where the configuration comes from, as the page names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    Files(Vec<String>),
    /// The xDS server's address.
    Xds(String),
}

/// The store, as the page names it: `memory` or `redis`, and where it is (no password).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreName {
    pub kind: &'static str,
    pub address: Option<String>,
}

/// The status page's state: what it was started with, and the ring buffer.
pub struct StatusPage {
    settings: StatusPageSettings,
    source: ConfigSource,
    store: StoreName,
    started: Instant,
    started_unix: u64,
    history: Mutex<History>,
    /// The configuration section of the last `/status.json`, kept while the rules are the same.
    config: Mutex<Option<(std::sync::Weak<Rules>, Arc<serde_json::Value>)>>,
}

impl StatusPage {
    /// `max_tracked_rules`: the most rules the ring keeps (`--metrics-max-rule-series`).
    pub fn new(
        settings: StatusPageSettings,
        source: ConfigSource,
        store: StoreName,
        max_tracked_rules: usize,
    ) -> StatusPage {
        StatusPage {
            settings,
            source,
            store,
            started: Instant::now(),
            started_unix: SystemClock::now_secs(),
            history: Mutex::new(History::new(max_tracked_rules)),
            config: Mutex::new(None),
        }
    }

    pub fn settings(&self) -> &StatusPageSettings {
        &self.settings
    }
}
