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
pub mod options;
pub mod received;
pub mod stream_state;
pub mod tls;
pub mod watched;

pub use backoff::BackoffPolicy;
pub use client::{run, XdsUpdate};
pub use convert::RATE_LIMIT_CONFIG_TYPE;
pub use options::{NodeIdentity, XdsOptions};
pub use received::XdsConfig;
pub use stream_state::XdsStream;
pub use tls::XdsTls;
