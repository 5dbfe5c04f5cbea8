//! Redis store: every request is decided by ONE `EVALSHA` of the script in `lua/` (all its
//! checks, all or nothing, one round trip), with the time taken from Redis (`TIME`), so instances
//! with skewed clocks agree. Concurrent requests share calls (see [`batch`]), and each thread
//! calls through its own pool and dispatcher (see [`local`]).
//!
//! - Script: loaded once, called by SHA1; on `NOSCRIPT` (restart, failover, `SCRIPT FLUSH`) it is
//!   reloaded and the call retried once, transparently. No other error is retried: the script may
//!   have committed.
//! - Keys: see [`keys`]. Every key written expires 0.5 to 1 s after its state becomes worthless,
//!   at the end of a half-second step, so a write that stays in its key's step keeps the expiry
//!   (`KEEPTTL`: Redis 6.0 or later, checked at startup, see [`version`]). [`key_layout`] adds a
//!   prefix, or envoyproxy/ratelimit's keys for fixed windows ([`envoyproxy_key`]: its TTL of
//!   window plus jitter, its counting).
//! - Connections: bb8 pools of multiplexed connections (see [`ConnectionMode`]): one per thread
//!   that decides or probes health, and the startup pool. Over plain TCP each is the store's own
//!   pipelined connection, whose script calls are encoded into its buffer and read in place
//!   (see [`pipe`]); TLS keeps the redis crate's multiplexed connection (see [`link`]). Broken
//!   connections are replaced in the background with backoff, so the store recovers from a Redis
//!   restart by itself.
//! - URLs: `redis://[user:password@]host[:port][/db]`, and `rediss://...` for TLS (rustls, with
//!   the bundled Mozilla roots, or only the CA of [`RedisSettings::tls_ca`]; a `#insecure` fragment
//!   skips certificate verification). See [`connection::client`].
//! - Every call is bounded by [`RedisSettings::timeout`]: [`StoreError::Timeout`] past it,
//!   [`StoreError::Unavailable`] for connection failures, [`StoreError::Protocol`] for replies the
//!   store does not understand.

mod batch;
mod local;
mod quota_demands;
pub mod scripts;
pub mod server;
pub mod settings;
pub mod topology;
pub mod wire;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bb8_redis::bb8;
use redis::{ErrorKind, RedisError, Value};
use tokio::time::{timeout_at, Instant};

use self::local::Locals;
pub use self::quota_demands::RedisDemands;
pub use self::scripts::key_layout::{KeyFormat, KeyLayout, KeyLayoutError};
use self::scripts::request::{
    decode_call_frame, decode_call_reply, sha1, CallReply, EvalSha, Invocation, KeyPlacement,
    Script, DECIDE,
};
use self::server::connection::{connect_error, is_connection_error, Conn, Manager, Reachability};
use self::server::sentinel::MasterLocator;
use self::server::{connection, version};
pub use self::settings::startup::StartupRetry;
pub use self::settings::topology::{HostPort, ServerAuth, Topology};
use self::topology::cluster::{self, Cluster};
use self::wire::link::Link;
use self::wire::pipe::CallError;
use self::wire::resp;
use super::{Check, Store, StoreError};
use crate::limiter::algorithm::Verdict;
use crate::limiter::clock::Clock;

/// How to reach Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// A single server, a cluster or a Sentinel setup (see [`Topology`]).
    pub topology: Topology,
    /// Bound on every call: connection check-out plus the script round trip(s).
    pub timeout: Duration,
    /// Connections kept open. Each one is multiplexed (see [`ConnectionMode::Multiplexed`]), so a
    /// few carry any number of concurrent requests.
    pub pool_size: u32,
    /// PEM file of the CA certificate(s) to trust for TLS instead of the bundled public roots
    /// (self-signed or private-CA deployments). Only valid with TLS (`rediss://`, or
    /// [`ServerAuth::tls`]).
    pub tls_ca: Option<PathBuf>,
    /// Replicas that must acknowledge each script call's writes (`WAIT`) before its requests are
    /// answered; 0 (the default) waits for none. A call whose writes fewer replicas acknowledged
    /// by the deadline is answered as a store failure: its admitted hits might not survive a
    /// failover.
    pub wait_replicas: u32,
    /// How long startup keeps trying a Redis that does not answer (none by default: the first
    /// failure stops startup).
    pub startup: StartupRetry,
}

/// Shows the URL without its password, so settings can be logged.
impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("topology", &self.topology)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("tls_ca", &self.tls_ca)
            .field("wait_replicas", &self.wait_replicas)
            .field("startup", &self.startup)
            .finish()
    }
}

/// `url` with the password of its `user:password@` part, and a unix URL's `pass=` parameter,
/// replaced by `***`, so a URL can be logged.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let mut redacted = match rest[..authority_end].rfind('@') {
        Some(at) => {
            let user = rest[..at].split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***{}", &rest[at..])
        }
        None => format!("{scheme}://{rest}"),
    };
    if let Some(query) = query {
        let parameters: Vec<String> = query
            .split('&')
            .map(|parameter| match parameter.split_once('=') {
                Some(("pass" | "password", _)) => {
                    format!("{}=***", parameter.split('=').next().unwrap_or("pass"))
                }
                _ => parameter.to_owned(),
            })
            .collect();
        redacted.push('?');
        redacted.push_str(&parameters.join("&"));
    }
    redacted
}

impl RedisSettings {
    /// Default bound on every call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);
    /// Default number of (multiplexed) connections.
    pub const DEFAULT_POOL_SIZE: u32 = 4;

    /// Settings for the single server at `url` with the default timeout and pool size.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings::for_topology(Topology::Single { url: url.into() })
    }

    /// Settings for `topology` with the default timeout and pool size.
    pub fn for_topology(topology: Topology) -> RedisSettings {
        RedisSettings {
            topology,
            timeout: Self::DEFAULT_TIMEOUT,
            pool_size: Self::DEFAULT_POOL_SIZE,
            tls_ca: None,
            wait_replicas: 0,
            startup: StartupRetry::NONE,
        }
    }
}

impl Default for RedisSettings {
    fn default() -> RedisSettings {
        RedisSettings::new("redis://127.0.0.1:6379")
    }
}

/// How script calls use the pooled connections (a thread has at most `pool_size` calls in flight
/// either way; see [`batch`]).
///
/// Measured with `examples/redis_pool_bench.rs` when every request was a call of its own (64
/// concurrent tasks, local redis-server, 2 cores): multiplexed reached roughly 1.5–2× the
/// throughput of exclusive pooling with millisecond tails, while exclusive pools (this store's and
/// bb8-redis's stock manager alike) let bb8 starve some waiters for seconds under contention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionMode {
    /// The default and the faster: a call takes a pooled connection only long enough to clone
    /// its handle, then sends its command on the shared socket, where concurrent calls are
    /// pipelined.
    #[default]
    Multiplexed,
    /// Classic pooling: a call holds a connection for its whole round trip.
    Exclusive,
}

/// What every pool of the store shares, whichever server it reaches.
#[derive(Clone)]
struct PoolSettings {
    pool_size: u32,
    timeout: Duration,
    mode: ConnectionMode,
    wait_replicas: u32,
    scripts: Arc<ScriptCounters>,
}

/// What the scripts cost, counted over every server, for metrics: the reloads after `NOSCRIPT`,
/// the calls of the request script sent and the requests they carried (divided, how well
/// concurrent requests share calls, see [`batch`]).
#[derive(Default)]
struct ScriptCounters {
    reloads: AtomicU64,
    calls: AtomicU64,
    requests: AtomicU64,
}

impl ScriptCounters {
    fn reloaded(&self) {
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    fn sent(&self, requests: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
    }
}

/// One server's connections (a thread's own pool, or the startup pool) and what every script call
/// to it needs; shared by the store's clones and a batch dispatcher.
struct Shared {
    pool: bb8::Pool<Manager>,
    manager: Manager,
    reachability: Arc<Reachability>,
    timeout: Duration,
    mode: ConnectionMode,
    wait_replicas: u32,
    scripts: Arc<ScriptCounters>,
    /// Used while `pool` has no connection yet: a thread's pool starts empty, and its first
    /// calls must not wait out a connection handshake (see [`local`]).
    fallback: Option<bb8::Pool<Manager>>,
}

impl Shared {
    /// A new pool through `manager`, borrowing from `fallback` until it has a connection.
    fn new(
        manager: Manager,
        settings: &PoolSettings,
        fallback: Option<bb8::Pool<Manager>>,
    ) -> Shared {
        Shared {
            pool: new_pool(settings.pool_size, settings.timeout, manager.clone()),
            reachability: manager.reachability(),
            manager,
            timeout: settings.timeout,
            mode: settings.mode,
            wait_replicas: settings.wait_replicas,
            scripts: settings.scripts.clone(),
            fallback,
        }
    }
}

/// A pool of at most `size` connections that opens one at once in the background (more on
/// demand) and waits at most `timeout` for one. Check-out tests are cheap: `Manager::is_valid`
/// only reads the broken flag, no round trip.
fn new_pool(size: u32, timeout: std::time::Duration, manager: Manager) -> bb8::Pool<Manager> {
    bb8::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(timeout)
        .test_on_check_out(true)
        .retry_connection(true)
        .build_unchecked(manager)
}

/// A server the store has checked and loaded its scripts on: its connection manager and the
/// startup pool, driven by the runtime that connected (threads borrow from it, see [`local`]).
#[derive(Clone)]
struct Server {
    /// Opens each connection on the runtime that asks for it (see [`Server::thread_pool`]).
    manager: Manager,
    startup: Arc<Shared>,
}

impl Server {
    /// Opens a first connection through `manager` by `deadline`, loads `scripts` and checks the
    /// version, so a wrong address, password or an unreachable server fails here.
    async fn start(
        manager: Manager,
        settings: &PoolSettings,
        scripts: &[&Script],
        connect_timeout: Duration,
    ) -> Result<Server, StoreError> {
        let deadline = Instant::now() + connect_timeout;
        let timed_out = |_| StoreError::Timeout(connect_timeout);
        let mut first = timeout_at(deadline, manager.open())
            .await
            .map_err(timed_out)?
            .map_err(|e| connect_error(&e))?;
        for script in scripts {
            let loaded = timeout_at(deadline, load_script(&mut first, script))
                .await
                .map_err(timed_out)??;
            tracing::debug!(sha1 = %loaded, "script loaded");
        }
        timeout_at(deadline, version::check(&mut first))
            .await
            .map_err(timed_out)??;
        let driven = manager.driven_on(tokio::runtime::Handle::current());
        let startup = Shared::new(driven.clone(), settings, None);
        // The pool may already be filling itself; a full pool simply drops this connection.
        let _ = startup.pool.add(Conn::new(first, &driven));
        Ok(Server {
            manager: driven.driven_by_caller(),
            startup: Arc::new(startup),
        })
    }

    /// A pool for the calling thread, borrowing the startup pool's connections until its own has
    /// one. Its connections are opened, and so driven, on the calling thread's runtime: a call
    /// never wakes another thread.
    fn thread_pool(&self, settings: &PoolSettings) -> Arc<Shared> {
        Arc::new(Shared::new(
            self.manager.clone(),
            settings,
            Some(self.startup.pool.clone()),
        ))
    }
}

/// What the store's calls go to.
#[derive(Clone)]
enum Backend {
    /// One master: a single server, or the one Sentinel names.
    Server(Box<Server>),
    /// Every master of a Redis Cluster.
    Cluster(Arc<Cluster>),
}

/// The Redis-backed [`Store`]. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct RedisStore {
    backend: Backend,
    settings: PoolSettings,
    /// Script calls go through the calling thread's own pool and dispatcher.
    locals: Arc<Locals>,
    pinned_clock: Option<Arc<dyn Clock>>,
    layout: KeyLayout,
    /// Kept alive for the sentinels' announcements (see [`sentinel`]).
    _locator: Option<Arc<MasterLocator>>,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("timeout", &self.settings.timeout)
            .field("mode", &self.settings.mode)
            .field("cluster", &matches!(self.backend, Backend::Cluster(_)))
            .field("pinned_clock", &self.pinned_clock.is_some())
            .field("layout", &self.layout)
            .finish()
    }
}

/// The health probe's bound, below a long `--redis-timeout` (envoyproxy/ratelimit's 10 s): a
/// Redis that does not answer `PING` within it counts as down, so health turns within seconds of
/// an outage whatever the calls may wait.
const HEALTH_PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// Connection attempts at startup may take this long even when the per-call timeout is shorter
/// (TLS handshakes, remote hosts).
const STARTUP_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

impl RedisStore {
    /// Connects with [`ConnectionMode::Multiplexed`]: opens a first connection to every master
    /// and loads the scripts, so a wrong address, a wrong password or an unreachable Redis fails
    /// here, at startup. Later outages are survived: the store reconnects by itself.
    pub async fn connect(settings: RedisSettings) -> Result<RedisStore, StoreError> {
        RedisStore::connect_with_mode(settings, ConnectionMode::default()).await
    }

    /// [`RedisStore::connect`] with an explicit [`ConnectionMode`].
    pub async fn connect_with_mode(
        settings: RedisSettings,
        mode: ConnectionMode,
    ) -> Result<RedisStore, StoreError> {
        if settings.timeout.is_zero() {
            return Err(StoreError::Unavailable(
                "redis timeout must be positive".into(),
            ));
        }
        if settings.pool_size == 0 {
            return Err(StoreError::Unavailable(
                "redis pool size must be positive".into(),
            ));
        }
        let pool_settings = PoolSettings {
            pool_size: settings.pool_size,
            timeout: settings.timeout,
            mode,
            wait_replicas: settings.wait_replicas,
            scripts: Arc::default(),
        };
        let connect_timeout = settings.timeout.max(STARTUP_CONNECT_TIMEOUT);
        let tls_ca = settings.tls_ca.as_deref();
        let address = settings.topology.address();
        let at_address = |error: StoreError| match error {
            StoreError::Timeout(limit) => StoreError::Unavailable(format!(
                "{address}: no answer within {}",
                humantime::format_duration(limit)
            )),
            other => other.at(&address),
        };
        let retry = settings.startup;
        let server_start = |manager: &Manager, pool_settings: &PoolSettings| {
            let (manager, pool_settings) = (manager.clone(), pool_settings.clone());
            async move { Server::start(manager, &pool_settings, &[&DECIDE], connect_timeout).await }
        };
        let mut locator = None;
        let backend = match &settings.topology {
            Topology::Single { url } => {
                let manager = Manager::new(
                    connection::client(url, tls_ca).map_err(at_address)?,
                    connect_timeout,
                );
                let server = retry
                    .run(&address, || server_start(&manager, &pool_settings))
                    .await
                    .map_err(at_address)?;
                Backend::Server(Box::new(server))
            }
            Topology::Sentinel {
                master_name,
                sentinels,
                auth,
                sentinel_auth,
            } => {
                let found = Arc::new(MasterLocator::new(
                    master_name,
                    sentinels,
                    auth,
                    sentinel_auth,
                    tls_ca,
                )?);
                found.spawn_watch();
                let manager = Manager::sentinel(found.clone(), connect_timeout);
                locator = Some(found);
                let server = retry
                    .run(&address, || server_start(&manager, &pool_settings))
                    .await
                    .map_err(at_address)?;
                Backend::Server(Box::new(server))
            }
            Topology::Cluster { seeds, auth } => Backend::Cluster(
                retry
                    .run(&address, || {
                        Cluster::connect(seeds, auth, tls_ca, &pool_settings, connect_timeout)
                    })
                    .await
                    .map_err(at_address)?,
            ),
        };
        let locals = Locals::new(backend.clone(), pool_settings.clone());
        Ok(RedisStore {
            backend,
            settings: pool_settings,
            locals: Arc::new(locals),
            pinned_clock: None,
            layout: KeyLayout::default(),
            _locator: locator,
        })
    }

    /// **For tests only.** Pins time: every request sends `clock.now_us()` to the script, which
    /// then uses it instead of Redis's `TIME`, so tests can step exactly across window boundaries
    /// and compare with the memory store. Production never calls this: pinned time gives up the
    /// skew immunity of Redis time (and key TTLs still run on Redis's real clock).
    pub fn with_pinned_clock(mut self, clock: Arc<dyn Clock>) -> RedisStore {
        self.pinned_clock = Some(clock);
        self
    }

    /// Writes the keys `layout` says (a prefix, envoyproxy/ratelimit's format) instead of
    /// ratelimitd's own unprefixed ones.
    pub fn with_key_layout(mut self, layout: KeyLayout) -> RedisStore {
        self.layout = layout;
        self
    }

    /// The keys this store writes.
    pub fn key_layout(&self) -> &KeyLayout {
        &self.layout
    }

    /// Runs `script` with `key` and `args` on the server that owns `key` (on a cluster, the
    /// master of its slot), by `EVALSHA`, sending the source on `NOSCRIPT`. For the store's side
    /// scripts (RLQS demands, a call per bucket report), not the batched request path: no batching,
    /// no retry on a redirection (the next report tries again).
    pub async fn run_side_script(
        &self,
        script: &SideScript,
        key: &str,
        args: &[String],
    ) -> Result<Value, StoreError> {
        let deadline = Instant::now() + self.settings.timeout;
        let shared = match &self.backend {
            Backend::Server(server) => server.startup.clone(),
            Backend::Cluster(cluster) => {
                let slot = cluster::slots::slot_of(key.as_bytes());
                let map = cluster.slot_map();
                let master = map.master_of(slot).ok_or_else(|| {
                    StoreError::Unavailable(format!("no master serves slot {slot}"))
                })?;
                cluster.server(master)?.startup
            }
        };
        let mut lease = shared.lease(deadline).await?;
        let evalsha = redis::cmd("EVALSHA")
            .arg(script.sha1())
            .arg(1)
            .arg(key)
            .arg(args)
            .clone();
        match lease.query(&evalsha).await? {
            Ok(value) => Ok(value),
            Err(error) if is_noscript(&error) => {
                let eval = redis::cmd("EVAL")
                    .arg(script.source)
                    .arg(1)
                    .arg(key)
                    .arg(args)
                    .clone();
                lease.query(&eval).await?.map_err(command_error)
            }
            Err(error) => Err(command_error(error)),
        }
    }

    /// How many times a script was reloaded after a `NOSCRIPT` (for metrics), on every server.
    pub fn script_reloads(&self) -> u64 {
        self.settings.scripts.reloads.load(Ordering::Relaxed)
    }

    /// How many calls of the request script were sent (a retry after `NOSCRIPT` is a call of its
    /// own, as Redis counts it), to every server.
    pub fn script_calls(&self) -> u64 {
        self.settings.scripts.calls.load(Ordering::Relaxed)
    }

    /// How many requests those calls carried (a request split over cluster nodes counts once per
    /// node); over [`RedisStore::script_calls`], the mean batch.
    pub fn script_call_requests(&self) -> u64 {
        self.settings.scripts.requests.load(Ordering::Relaxed)
    }

    /// How many connections were found dead (a command failed at the connection level or timed
    /// out), in every pool, to every server.
    pub fn connections_lost(&self) -> u64 {
        match &self.backend {
            Backend::Server(server) => server.startup.reachability.connections_lost(),
            Backend::Cluster(cluster) => cluster.connections_lost(),
        }
    }

    /// A number that changes whenever Redis may have lost its counters since the last reading:
    /// script reloads plus connections found dead (plus, on a cluster, slot map changes), or
    /// given back hits that concurrent requests saw as taken (a cluster's refunds). A
    /// restart shows as both, but often only as the second: when every request is answered
    /// without Redis (the deny cache), only the health probe meets a dead connection, and it
    /// reconnects before any script call sees `NOSCRIPT`.
    pub fn epoch(&self) -> u64 {
        let topology_changes = match &self.backend {
            Backend::Server(_) => 0,
            Backend::Cluster(cluster) => cluster
                .slot_map_changes()
                .wrapping_add(cluster.refunds_sent()),
        };
        self.script_reloads()
            .wrapping_add(self.connections_lost())
            .wrapping_add(topology_changes)
    }

    /// The connection mode in use.
    pub fn mode(&self) -> ConnectionMode {
        self.settings.mode
    }

    /// The SHA1 of the script this store calls.
    pub fn script_sha1(&self) -> &'static str {
        sha1()
    }

    /// Refunds of denied cross-node requests that failed (their reservation stays: stricter,
    /// never more permissive); 0 off a cluster.
    pub fn refunds_failed(&self) -> u64 {
        match &self.backend {
            Backend::Server(_) => 0,
            Backend::Cluster(cluster) => cluster.refunds_failed(),
        }
    }

    /// Times a cluster's slot map was read again (after a redirection or a lost node); 0 off a
    /// cluster.
    pub fn slot_map_refreshes(&self) -> u64 {
        match &self.backend {
            Backend::Server(_) => 0,
            Backend::Cluster(cluster) => cluster.slot_map_refreshes(),
        }
    }
}

impl Shared {
    /// Takes a connection: a clone of a pooled multiplexed handle; in exclusive mode the pool slot
    /// is held until the lease is dropped.
    async fn lease(&self, deadline: Instant) -> Result<Lease<'_>, StoreError> {
        let shared = self;
        // Redis known down (the last connection attempt failed moments ago) and no connection
        // left: fail at once instead of waiting out the timeout.
        if let Some(reason) = shared.reachability.down_reason() {
            if shared.pool.state().idle_connections == 0 {
                return Err(StoreError::Unavailable(reason));
            }
        }
        let pool = match &shared.fallback {
            Some(fallback) if shared.pool.state().connections == 0 => fallback,
            _ => &shared.pool,
        };
        let pooled = match timeout_at(deadline, pool.get()).await {
            Ok(Ok(pooled)) => pooled,
            Ok(Err(bb8::RunError::User(error))) => {
                return Err(StoreError::Unavailable(error.to_string()))
            }
            Ok(Err(bb8::RunError::TimedOut)) | Err(_) => {
                return Err(match shared.reachability.last_error() {
                    Some(reason) => StoreError::Unavailable(reason),
                    None => StoreError::Timeout(shared.timeout),
                })
            }
        };
        let link = pooled.link.clone();
        let broken = pooled.broken.clone();
        let slot = match shared.mode {
            ConnectionMode::Exclusive => Some(pooled),
            ConnectionMode::Multiplexed => None,
        };
        Ok(Lease {
            link,
            broken,
            shared: self,
            _slot: slot,
            deadline,
        })
    }

    /// One call of the request script deciding `requests` by `deadline` (see
    /// [`Shared::decide_raw`]).
    async fn decide<'a>(
        &self,
        requests: impl Iterator<Item = &'a Invocation> + Clone + Send,
        deadline: Instant,
    ) -> Result<CallReply, StoreError> {
        self.decide_raw(requests, KeyPlacement::Declared, false, deadline)
            .await?
            .map_err(command_error)
    }

    /// One call of the request script deciding `requests` by `deadline`, its keys placed as
    /// `placement` says, after `ASKING` when `asking`, its reply decoded; on `NOSCRIPT` the
    /// script is reloaded and the call retried once (see [`Shared::evaluate_raw`], whose
    /// contract this shares). On a pipelined connection the command is encoded straight into
    /// the connection's output buffer and the reply read in place.
    async fn decide_raw<'a>(
        &self,
        requests: impl Iterator<Item = &'a Invocation> + Clone + Send,
        placement: KeyPlacement,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<CallReply, RedisError>, StoreError> {
        let mut call = EvalSha::new(requests.clone(), placement);
        let checks = || requests.clone().map(Invocation::checks);
        let mut lease = self.lease(deadline).await?;
        self.scripts.sent(call.request_count());
        let mut reply = lease
            .decide(&mut call, checks(), asking, self.wait_replicas)
            .await?;
        if matches!(&reply, Err(error) if is_noscript(error)) {
            self.scripts.reloaded();
            tracing::info!("redis lost a ratelimitd script (NOSCRIPT); reloading it");
            let loaded = lease
                .query(&DECIDE.load_command())
                .await?
                .map_err(command_error)?;
            check_loaded_sha(&loaded, &DECIDE)?;
            self.scripts.sent(call.request_count());
            reply = lease
                .decide(&mut call, checks(), asking, self.wait_replicas)
                .await?;
        }
        match &reply {
            Ok(decoded) if answered_readonly(decoded) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }

    /// Runs a call of `script` by `deadline` (see [`Shared::evaluate_raw`]).
    async fn evaluate(
        &self,
        script: &Script,
        command: &redis::Cmd,
        deadline: Instant,
    ) -> Result<Value, StoreError> {
        self.evaluate_raw(script, command, false, deadline)
            .await?
            .map_err(command_error)
    }

    /// Runs a call of `script` by `deadline`, after `ASKING` when `asking` (a cluster slot being
    /// imported); on `NOSCRIPT` reloads the script and retries it once. With
    /// [`RedisSettings::wait_replicas`], the call's writes must also reach that many replicas by
    /// the deadline (`WAIT`, in the same round trip). A connection that answers `READONLY` (the
    /// server is a replica now) is dropped at once. The outer error ends the call; the inner one
    /// is the command's own (a cluster redirection, say), for the caller to inspect.
    async fn evaluate_raw(
        &self,
        script: &Script,
        command: &redis::Cmd,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        let mut lease = self.lease(deadline).await?;
        let mut reply = lease.call(command, asking, self.wait_replicas).await?;
        if matches!(&reply, Err(error) if is_noscript(error)) {
            self.scripts.reloaded();
            tracing::info!("redis lost a ratelimitd script (NOSCRIPT); reloading it");
            let loaded = lease
                .query(&script.load_command())
                .await?
                .map_err(command_error)?;
            check_loaded_sha(&loaded, script)?;
            reply = lease.call(command, asking, self.wait_replicas).await?;
        }
        match &reply {
            Ok(value) if value_answered_readonly(value) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }
}

/// Whether a script's reply holds a request's `READONLY` error: it ran on a replica.
fn answered_readonly(reply: &CallReply) -> bool {
    reply.answers.iter().any(|answer| {
        matches!(answer, Err(StoreError::Unavailable(message)) if message.starts_with("READONLY"))
    })
}

/// [`answered_readonly`] of a reply the redis crate parsed.
fn value_answered_readonly(reply: &Value) -> bool {
    let Value::Array(values) = reply else {
        return false;
    };
    values.iter().any(|value| match value {
        Value::BulkString(text) => text.starts_with(b"READONLY"),
        Value::SimpleString(text) => text.starts_with("READONLY"),
        _ => false,
    })
}

/// The redis crate's error for the error reply `frame` (`-<CODE> <text>`): the error its own
/// connections report (code, kind, redirection target).
fn error_reply(frame: &[u8]) -> RedisError {
    match redis::parse_redis_value(frame).and_then(Value::extract_error) {
        Err(error) => error,
        Ok(other) => RedisError::from((
            ErrorKind::Parse,
            "expected an error reply",
            format!("{other:?}"),
        )),
    }
}

/// The `left` replies of one call, back to back as the pipe delimited them, taken one at a
/// time (the last is what remains).
struct Frames<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Frames<'a> {
    fn next(&mut self) -> Result<&'a [u8], StoreError> {
        let len = match self.left {
            0 => return Err(StoreError::Protocol("a redis reply is missing".into())),
            1 => self.rest.len(),
            _ => resp::frame_len(self.rest)
                .map_err(|error| StoreError::Protocol(error.to_string()))?
                .ok_or_else(|| StoreError::Protocol("a redis reply ended early".into()))?,
        };
        let (frame, rest) = self.rest.split_at(len);
        self.rest = rest;
        self.left -= 1;
        Ok(frame)
    }
}

/// A connection taken for one call, with the call's deadline.
struct Lease<'a> {
    link: Link,
    broken: Arc<std::sync::atomic::AtomicBool>,
    shared: &'a Shared,
    _slot: Option<bb8::PooledConnection<'a, Manager>>,
    deadline: Instant,
}

impl Lease<'_> {
    /// Runs `cmd` before the deadline. The outer error ends the call (timeout, broken
    /// connection); the inner one is the command's own error, for the caller to inspect.
    async fn query(&mut self, cmd: &redis::Cmd) -> Result<Result<Value, RedisError>, StoreError> {
        let result = timeout_at(self.deadline, cmd.query_async::<Value>(&mut self.link)).await;
        self.settle(result)
    }

    /// Runs `call` as [`Lease::call`] runs a command, its reply decoded for requests of
    /// `checks` checks each. On a pipelined connection the commands (`ASKING`, the call, `WAIT`)
    /// are encoded into the connection's output buffer and the replies read in place; else the
    /// redis crate's command and value carry them.
    async fn decide<'a, I: Iterator<Item = &'a Invocation> + Clone>(
        &mut self,
        call: &mut EvalSha<I>,
        checks: impl Iterator<Item = usize>,
        asking: bool,
        replicas: u32,
    ) -> Result<Result<CallReply, RedisError>, StoreError> {
        let pipe = match &self.link {
            Link::Pipe(pipe) => pipe.clone(),
            Link::Mux(_) => {
                let command = call.command();
                return match self.call(&command, asking, replicas).await? {
                    Ok(value) => Ok(Ok(decode_call_reply(value, checks)?)),
                    Err(error) => Ok(Err(error)),
                };
            }
        };
        let left_ms = self
            .deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1) as u64;
        let frames = 1 + usize::from(asking) + usize::from(replicas > 0);
        let sent = pipe.call(frames, Some(self.deadline), |output| {
            if asking {
                resp::push_args(output, &[b"ASKING"]);
            }
            call.encode(output);
            if replicas > 0 {
                resp::push_command(output, 3);
                resp::push_bulk(output, b"WAIT");
                resp::push_bulk_u64(output, u64::from(replicas));
                resp::push_bulk_u64(output, left_ms);
            }
        });
        let replies = match sent.await {
            Ok(replies) => replies,
            Err(CallError::TimedOut) => {
                self.mark_broken();
                return Err(StoreError::Timeout(self.shared.timeout));
            }
            Err(CallError::Closed(closed)) => {
                self.mark_broken();
                return Err(StoreError::Unavailable(
                    RedisError::from(closed).to_string(),
                ));
            }
        };
        let mut frames = Frames {
            rest: &replies,
            left: frames,
        };
        if asking {
            let asked = frames.next()?;
            if asked.first() == Some(&b'-') {
                return Ok(Err(error_reply(asked)));
            }
        }
        let reply = frames.next()?;
        if reply.first() == Some(&b'-') {
            return Ok(Err(error_reply(reply)));
        }
        if replicas > 0 {
            let acknowledged = frames.next()?;
            match redis::parse_redis_value(acknowledged).and_then(Value::extract_error) {
                Ok(Value::Int(count)) if count >= i64::from(replicas) => {}
                Ok(Value::Int(count)) => {
                    return Err(StoreError::Unavailable(format!(
                        "only {count} of {replicas} redis replicas acknowledged the writes in time"
                    )))
                }
                Ok(other) => return Err(StoreError::Protocol(format!("WAIT answered {other:?}"))),
                Err(error) => return Ok(Err(error)),
            }
        }
        Ok(Ok(decode_call_frame(reply, checks)?))
    }

    /// Runs `cmd`, after `ASKING` when `asking`, and followed in the same round trip by `WAIT
    /// replicas <ms left>` when `replicas` is not 0; the command's reply, or a store failure when
    /// fewer replicas acknowledged.
    async fn call(
        &mut self,
        cmd: &redis::Cmd,
        asking: bool,
        replicas: u32,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        if replicas == 0 && !asking {
            return self.query(cmd).await;
        }
        let mut pipeline = redis::pipe();
        if asking {
            pipeline.cmd("ASKING").ignore();
        }
        pipeline.add_command(cmd.clone());
        if replicas == 0 {
            let result = timeout_at(
                self.deadline,
                pipeline.query_async::<(Value,)>(&mut self.link),
            )
            .await;
            return Ok(self.settle(result)?.map(|(reply,)| reply));
        }
        let left_ms = self
            .deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        pipeline.cmd("WAIT").arg(replicas).arg(left_ms as u64);
        let result = timeout_at(
            self.deadline,
            pipeline.query_async::<Vec<Value>>(&mut self.link),
        )
        .await;
        let replies = match self.settle(result)? {
            Ok(replies) => replies,
            Err(error) => return Ok(Err(error)),
        };
        let mut replies = replies.into_iter();
        let (Some(reply), Some(acknowledged)) = (replies.next(), replies.next()) else {
            return Err(StoreError::Protocol("WAIT pipeline answered short".into()));
        };
        match acknowledged {
            Value::Int(count) if count >= i64::from(replicas) => Ok(Ok(reply)),
            Value::Int(count) => Err(StoreError::Unavailable(format!(
                "only {count} of {replicas} redis replicas acknowledged the writes in time"
            ))),
            other => Err(StoreError::Protocol(format!("WAIT answered {other:?}"))),
        }
    }

    fn settle<T>(
        &self,
        result: Result<Result<T, RedisError>, tokio::time::error::Elapsed>,
    ) -> Result<Result<T, RedisError>, StoreError> {
        match result {
            Err(_) => {
                // A blackholed peer shows only as timeouts: replace the connection.
                self.mark_broken();
                Err(StoreError::Timeout(self.shared.timeout))
            }
            Ok(Err(error)) if is_connection_error(&error) => {
                self.mark_broken();
                Err(StoreError::Unavailable(error.to_string()))
            }
            Ok(result) => Ok(result),
        }
    }

    /// The server answered `READONLY`: it is a replica now. The connection is dropped at once
    /// (and, with Sentinel, every connection to that server).
    fn readonly(&self) {
        tracing::warn!("redis answered READONLY: the server is a replica now; reconnecting");
        self.mark_broken();
        self.shared.manager.saw_readonly();
    }

    /// Has the pool replace this connection.
    fn mark_broken(&self) {
        self.shared.reachability.mark_lost(&self.broken);
    }
}

/// A small script the store runs besides the request script ([`RedisStore::run_side_script`]),
/// hashed once.
pub struct SideScript {
    source: &'static str,
    sha1: std::sync::OnceLock<String>,
}

impl SideScript {
    pub const fn new(source: &'static str) -> SideScript {
        SideScript {
            source,
            sha1: std::sync::OnceLock::new(),
        }
    }

    fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| redis::Script::new(self.source).get_hash().to_owned())
    }
}

fn is_noscript(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || error.code() == Some("NOSCRIPT")
}

/// A command-level error: the script or the reply is wrong (protocol) or Redis refuses to serve
/// (out of memory, loading, read-only replica, busy...: unavailable).
pub(crate) fn command_error(error: RedisError) -> StoreError {
    let protocol = matches!(
        error.kind(),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType
    ) || matches!(error.code(), Some("ERR" | "WRONGTYPE"));
    if protocol {
        StoreError::Protocol(error.to_string())
    } else {
        StoreError::Unavailable(error.to_string())
    }
}

fn check_loaded_sha(value: &Value, script: &Script) -> Result<(), StoreError> {
    let loaded = match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => {
            return Err(StoreError::Protocol(format!(
                "SCRIPT LOAD answered {other:?}"
            )))
        }
    };
    if loaded.eq_ignore_ascii_case(script.sha1()) {
        Ok(())
    } else {
        Err(StoreError::Protocol(format!(
            "SCRIPT LOAD returned sha1 {loaded}, expected {}",
            script.sha1()
        )))
    }
}

/// Loads the script on a fresh connection, at startup: the first command after the handshake, so
/// its errors also tell about missing credentials or permissions.
async fn load_script(conn: &mut Link, script: &Script) -> Result<String, StoreError> {
    let value = script
        .load_command()
        .query_async::<Value>(conn)
        .await
        .map_err(|e| {
            let text = e.to_string();
            if e.code() == Some("NOAUTH") || text.contains("unauthenticated") {
                // Redis 7 answers a large unauthenticated argument (the script) with
                // "Protocol error: unauthenticated bulk length" rather than NOAUTH.
                StoreError::Unavailable(format!(
                    "redis requires authentication: put the user and password in the url \
                     (redis://[user]:password@host:port): {text}"
                ))
            } else if is_connection_error(&e) {
                StoreError::Unavailable(format!("cannot load the rate-limit script: {text}"))
            } else {
                match command_error(e) {
                    StoreError::Protocol(m) => {
                        StoreError::Protocol(format!("cannot load the rate-limit script: {m}"))
                    }
                    StoreError::Unavailable(m) => {
                        StoreError::Unavailable(format!("cannot load the rate-limit script: {m}"))
                    }
                    other => other,
                }
            }
        })?;
    check_loaded_sha(&value, script)?;
    Ok(script.sha1().to_owned())
}

impl Store for RedisStore {
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let invocation = Invocation::laid_out(checks, pinned, &self.layout);
        let deadline = Instant::now() + self.settings.timeout;
        self.locals.dispatcher().decide(invocation, deadline).await
    }

    /// A `PING` through the calling thread's pool(s), the ones its requests use, so health and
    /// requests see the same connections: the one server, or every master of a cluster (and the
    /// slot map must cover every slot).
    async fn is_healthy(&self) -> bool {
        let deadline = Instant::now() + self.settings.timeout.min(HEALTH_PROBE_TIMEOUT);
        self.locals.dispatcher().is_healthy(deadline).await
    }
}

impl Shared {
    /// A `PING`. A connection found dead (it may have idled through a Redis restart) is replaced
    /// and the probe retried once before the server counts as down.
    async fn ping(&self, deadline: Instant) -> bool {
        for _ in 0..2 {
            let Ok(mut lease) = self.lease(deadline).await else {
                return false;
            };
            match lease.query(&redis::cmd("PING")).await {
                Ok(Ok(Value::SimpleString(pong))) => return pong == "PONG",
                Err(StoreError::Unavailable(_)) => continue,
                _ => return false,
            }
        }
        false
    }
}

#[cfg(test)]
mod settings_tests {
    use super::*;

    #[test]
    fn debug_output_hides_the_password() {
        let settings = RedisSettings::new("redis://limiter:s3cret@redis:6379/2");
        let shown = format!("{settings:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("redis://limiter:***@redis:6379/2"),
            "{shown}"
        );
        assert_eq!(redacted_url("redis://redis:6379"), "redis://redis:6379");
        assert_eq!(
            redacted_url("rediss://:pw@h/1#insecure"),
            "rediss://:***@h/1#insecure"
        );
        assert_eq!(
            redacted_url("unix:///run/redis.sock?db=2&pass=pw&user=u"),
            "unix:///run/redis.sock?db=2&pass=***&user=u"
        );
    }
}
