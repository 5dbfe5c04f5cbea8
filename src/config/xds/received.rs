//! The configuration received over xDS: the rules in force, whether any arrived, its version,
//! and the state of the stream it comes over.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Notify;

use super::stream_state::XdsStream;
use crate::limiter::Rules;

/// The configuration an xDS client maintains: the rules the service answers with (swapped
/// whole), whether any configuration arrived yet, the version in force, and the state of the
/// stream that keeps it up to date.
#[derive(Debug, Default)]
pub struct XdsConfig {
    rules: Arc<ArcSwap<Rules>>,
    loaded: AtomicBool,
    /// Wakes [`XdsConfig::loaded`] when the first configuration arrives.
    arrived: Notify,
    version: Mutex<Option<String>>,
    stream: XdsStream,
}

impl XdsConfig {
    /// No configuration yet: no domains.
    pub fn new() -> XdsConfig {
        XdsConfig::default()
    }

    /// The rules, for the service to read.
    pub fn rules(&self) -> &Arc<ArcSwap<Rules>> {
        &self.rules
    }

    /// Whether a valid configuration has arrived.
    pub fn has_loaded(&self) -> bool {
        self.loaded.load(Ordering::Acquire)
    }

    /// Completes once a valid configuration has arrived (at once if one has).
    pub async fn loaded(&self) {
        loop {
            let arrived = self.arrived.notified();
            if self.has_loaded() {
                return;
            }
            arrived.await;
        }
    }

    /// The state of the stream the configuration comes over.
    pub fn stream(&self) -> &XdsStream {
        &self.stream
    }

    /// The `version_info` of the configuration in force (ACKed last); `None` before the first.
    pub fn version(&self) -> Option<String> {
        self.version.lock().clone()
    }

    /// Puts `rules` in force as `version`; returns whether they differ from those they replace
    /// (always true for the first).
    pub(super) fn apply(&self, rules: Rules, version: &str) -> bool {
        let changed = !self.has_loaded() || **self.rules.load() != rules;
        if changed {
            self.rules.store(Arc::new(rules));
        }
        *self.version.lock() = Some(version.to_string());
        self.loaded.store(true, Ordering::Release);
        self.arrived.notify_waiters();
        changed
    }
}
