//! Redis store: every request is decided by ONE call of the request script in `lua/` (all its
//! checks, all or nothing, one round trip), with the time taken from Redis (`TIME`), so instances
//! with skewed clocks agree. Concurrent requests share calls (see [`batch`]), and each thread
//! calls through its own pool and dispatcher (see [`local`]).
//!
//! - Scripts: where the server has Redis Functions (Redis 7.0+, Valkey) and lets the user load
//!   and call them, one versioned library holding every script, called with `FCALL`; elsewhere
//!   each script loaded once and called by SHA1 (`EVALSHA`). Chosen per server from what it
//!   answers (see [`server`]'s `calling`, [`scripts::library`]). When the server lost them
//!   (`NOSCRIPT`, a function not found: restart, failover, `SCRIPT FLUSH`, `FUNCTION FLUSH`) they
//!   are loaded again and the call retried once, transparently. No other error is retried: the
//!   script may have committed.
//! - Keys: see [`scripts::keys`]. Every key written expires 0.5 to 1 s after its state becomes
//!   worthless, at the end of a half-second step, so a write that stays in its key's step keeps
//!   the expiry (`KEEPTTL`: Redis 6.0 or later, checked at startup, see [`server::version`]).
//!   [`scripts::key_layout`] adds a prefix, or envoyproxy/ratelimit's keys for fixed windows
//!   ([`scripts::envoyproxy_key`]: its TTL of window plus jitter, its counting).
//! - Connections: bb8 pools of multiplexed connections (see [`ConnectionMode`]): one per thread
//!   that decides or probes health, and the startup pool. Over plain TCP each is the store's own
//!   pipelined connection, whose script calls are encoded into its buffer and read in place
//!   (see [`wire::pipe`]); over TLS the store makes the TLS connection ([`tls`]) and the redis
//!   crate's multiplexed connection runs on it (see [`wire::link`]). Broken connections are
//!   replaced in the background with backoff, so the store recovers from a Redis restart by
//!   itself.
//! - URLs: `redis://[user:password@]host[:port][/db]`, and `rediss://...` for TLS (rustls,
//!   trusting the system's certificate store, or only the certificates of
//!   [`RedisSettings::tls`]'s CA file, with a client certificate when given; a `#insecure`
//!   fragment skips certificate verification). See [`server::client::client`] and [`tls`].
//! - Every call is bounded by [`RedisSettings::timeout`]: [`StoreError::Timeout`] past it,
//!   [`StoreError::Unavailable`] for connection failures, [`StoreError::Protocol`] for replies the
//!   store does not understand.
//!
//! The modules, each importing only those listed after it (the direction the test
//! `tests/it/redis_module_graph.rs` keeps):
//! - [`store`] (the [`RedisStore`]) and [`quota_demands`] (RLQS demands through it);
//! - [`local`]: each thread's dispatcher; [`batch`]: the dispatcher, gathering requests into calls;
//! - [`topology`]: what the calls go to (one server, Sentinel's master, a cluster) behind the one
//!   interface a dispatcher calls;
//! - [`server`]: one server's connections, pools and script calls;
//! - [`scripts`]: the Lua scripts, their arguments and replies, and the keys they write;
//! - [`wire`]: the RESP codec and the pipelined connection;
//! - [`tls`]: TLS to the servers (whom to trust, the client certificate);
//! - [`settings`]: what the command line configures.
//!
//! [`StoreError::Timeout`]: crate::store::StoreError::Timeout
//! [`StoreError::Unavailable`]: crate::store::StoreError::Unavailable
//! [`StoreError::Protocol`]: crate::store::StoreError::Protocol

mod batch;
mod local;
mod quota_demands;
pub mod scripts;
pub mod server;
pub mod settings;
mod store;
pub mod tls;
pub mod topology;
pub mod wire;

pub use self::quota_demands::RedisDemands;
pub use self::scripts::key_layout::{KeyFormat, KeyLayout, KeyLayoutError};
pub use self::scripts::script::CallCommand;
pub use self::scripts::side::SideScript;
pub use self::settings::startup::StartupRetry;
pub use self::settings::tls::{ClientIdentityFiles, RedisTlsSettings, TlsFile};
pub use self::settings::topology::{HostPort, ServerAuth, Topology};
pub use self::settings::url::redacted_url;
pub use self::settings::{ConnectionMode, RedisSettings};
pub use self::store::RedisStore;
