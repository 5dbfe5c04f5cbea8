//! Configuration over xDS: an ADS client (state of the world) subscribed to envoyproxy/ratelimit's
//! `RateLimitConfig` resources, one per domain, as Envoy Gateway's control plane serves them.
//!
//! Every response holds the whole configuration. It is turned into the trees files produce
//! ([`convert`]) and validated and assembled by the same [`Loader`](super::Loader) as files;
//! valid, it replaces the running rules in one swap and is ACKed with its version and nonce;
//! invalid, it is NACKed with the errors (resource name and field path) in `error_detail`, and
//! the running rules stay. [`client`] holds the stream, [`backoff`] the reconnect delays,
//! [`tls`] the connection's TLS, [`watched`] the response bytes as they arrive (for the response
//! deadline), [`stream_state`] what is said of the stream (up, stale since, why it ended).

pub mod backoff;
pub mod client;
pub mod convert;
pub mod stream_state;
pub mod tls;
pub mod watched;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use tokio::sync::Notify;

pub use backoff::BackoffPolicy;
pub use client::{run, XdsUpdate};
pub use convert::RATE_LIMIT_CONFIG_TYPE;
pub use stream_state::XdsStream;
pub use tls::XdsTls;

use crate::limiter::Rules;

/// Where the xDS server is and how to talk to it.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsOptions {
    /// The server, `HOST:PORT`.
    pub server: String,
    /// Who this client says it is (the `node` of every request).
    pub node: NodeIdentity,
    /// Metadata added to the stream's request headers (e.g. an authorization token), lowercase
    /// names.
    pub headers: Vec<(String, String)>,
    /// TLS to the server; `None`: plaintext.
    pub tls: Option<XdsTls>,
    /// The wait between attempts while the server cannot be reached at all (refused, TLS
    /// failure), ± 50 %, as envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`.
    pub connect_retry_interval: Duration,
    /// The waits after a stream the server had accepted ends.
    pub backoff: BackoffPolicy,
    /// Largest response accepted, bytes (a larger one ends the stream, which is reopened).
    pub max_message_bytes: usize,
    /// How long a response may take to arrive whole once its first byte has, and the first
    /// response while no configuration is in force may take after the stream opened; past it
    /// the stream is dropped and reopened. An idle stream has no deadline: the server sends
    /// when it has something new.
    pub response_timeout: Duration,
}

impl XdsOptions {
    /// gRPC's default largest message.
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
    /// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` default.
    pub const DEFAULT_CONNECT_RETRY_INTERVAL: Duration = Duration::from_secs(3);
    /// The response deadline by default: about as long as the HTTP/2 keepalive takes to notice a
    /// vanished server (a 30 s ping interval, 10 s for the answer), and enough for a response of
    /// the default 4 MiB cap to cross a link of 1.2 Mbit/s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

    /// Defaults for everything but the server: node `default`, plaintext, envoyproxy/ratelimit's
    /// delays.
    pub fn new(server: impl Into<String>) -> XdsOptions {
        XdsOptions {
            server: server.into(),
            node: NodeIdentity::default(),
            headers: Vec::new(),
            tls: None,
            connect_retry_interval: Self::DEFAULT_CONNECT_RETRY_INTERVAL,
            backoff: BackoffPolicy::DEFAULT,
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
        }
    }
}

/// The `node` of the discovery requests: the control plane picks the configuration by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub id: String,
    /// Empty: not sent.
    pub cluster: String,
    /// String fields of the node's metadata, in order.
    pub metadata: Vec<(String, String)>,
}

impl Default for NodeIdentity {
    /// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_NODE_ID` default.
    fn default() -> Self {
        NodeIdentity {
            id: "default".into(),
            cluster: String::new(),
            metadata: Vec::new(),
        }
    }
}

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
    fn apply(&self, rules: Rules, version: &str) -> bool {
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
