//! The Redis-backed [`Store`]: connected at startup to the deployment the settings name
//! ([`Backend`]), deciding each request in one of the next script calls of the calling thread's
//! dispatcher (see `store::redis::local`), and counting for metrics what the scripts and the
//! connections cost.

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use redis::Value;
use tokio::time::Instant;

use super::local::Locals;
use super::scripts::envoyproxy_key::envoyproxy_key;
use super::scripts::key_layout::KeyLayout;
use super::scripts::keys::prefixed_redis_key;
use super::scripts::library::library;
use super::scripts::refund::Refund;
use super::scripts::request::{sha1, CounterKind, Invocation};
use super::scripts::script::CallCommand;
use super::scripts::side::SideScript;
use super::server::errors::{command_error, is_noscript};
use super::server::pool::PoolSettings;
use super::server::sentinel::MasterLocator;
use super::settings::{ConnectionMode, RedisSettings};
use super::topology::backend::Backend;
use super::topology::cluster;
use super::topology::pending::Decided;
use crate::limiter::algorithm::lease::{can_give_back, Grant};
use crate::limiter::algorithm::Verdict;
use crate::limiter::clock::{Clock, SystemClock};
use crate::limiter::counter_state::probes;
use crate::limiter::rate::{Algorithm, MICROS_PER_SECOND};
use crate::store::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};

/// The Redis-backed [`Store`]. Cheap to clone; clones share the pool.
#[derive(Clone)]
pub struct RedisStore {
    backend: Backend,
    settings: PoolSettings,
    /// Script calls go through the calling thread's own pool and dispatcher.
    locals: Arc<Locals>,
    pinned_clock: Option<Arc<dyn Clock>>,
    layout: KeyLayout,
    /// Kept alive for the sentinels' announcements (see `store::redis::server::sentinel`).
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
        RedisStore::connect_observed(settings, mode, &|_| {}).await
    }

    /// [`RedisStore::connect_with_mode`], telling `on_failure` of each failed attempt of
    /// `settings.startup` (the server opens its ports once the first one failed).
    pub async fn connect_observed(
        settings: RedisSettings,
        mode: ConnectionMode,
        on_failure: &(dyn Fn(&StoreError) + Sync),
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
        let (backend, locator) =
            Backend::connect(&settings, &pool_settings, connect_timeout, on_failure).await?;
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
        let evalsha = script.evalsha(key, args);
        match lease.query(&evalsha).await? {
            Ok(value) => Ok(value),
            Err(error) if is_noscript(&error) => {
                let eval = script.eval(key, args);
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

    /// The SHA1 of the script this store calls with `EVALSHA` (where a server runs the scripts
    /// so).
    pub fn script_sha1(&self) -> &'static str {
        sha1()
    }

    /// The name of the Functions library this store calls with `FCALL` (where a server runs the
    /// scripts so): `ratelimitd_<version>`.
    pub fn function_library(&self) -> &'static str {
        library().name()
    }

    /// How the store calls the scripts on each server it has reached, one entry per server (a
    /// cluster's masters, and any node met since): `FCALL` where the server has the library,
    /// `EVALSHA` where it has no Functions or refuses them; `None` for a node no call has reached
    /// yet.
    pub fn call_commands(&self) -> Vec<Option<CallCommand>> {
        match &self.backend {
            Backend::Server(server) => vec![server.calling.get()],
            Backend::Cluster(cluster) => cluster.call_commands(),
        }
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

/// Deletes one counter's state (`POST /counters/reset`).
static RESET: SideScript = SideScript::new(include_str!("../../../lua/reset.lua"));

impl RedisStore {
    /// The `lua/reset.lua` calls that delete every key `check`'s counter may live under: each
    /// key with its arguments.
    fn reset_calls(&self, check: &Check) -> Vec<(String, Vec<String>)> {
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let pinned_arg = pinned.map(|now| now.to_string()).into_iter();
        let native_window = match check.rate.algorithm() {
            Algorithm::FixedWindow => check.rate.window_us(),
            _ => 0,
        };
        let native = prefixed_redis_key(self.layout.prefix(), &check.key, &check.rate);
        let mut calls = vec![(
            native,
            std::iter::once(native_window.to_string())
                .chain(pinned_arg)
                .collect(),
        )];
        if self.layout.envoyproxy_counting().is_some() && KeyLayout::counts_as_envoyproxy(check) {
            let now_s = pinned.unwrap_or_else(|| SystemClock.now_us()) / MICROS_PER_SECOND;
            let window_s = (check.rate.window_us() / MICROS_PER_SECOND).max(1);
            for at_s in [now_s, now_s.saturating_sub(window_s)] {
                let key = envoyproxy_key(self.layout.prefix(), &check.key, &check.rate, at_s);
                calls.push((key, vec!["0".to_owned()]));
            }
        }
        calls
    }
}

impl Store for RedisStore {
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        if checks.is_empty() {
            return Ok(Vec::new());
        }
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let invocation = Invocation::laid_out(checks, pinned, &self.layout);
        let counted_when_vetoed = invocation.counted_when_vetoed();
        let deadline = Instant::now() + self.settings.timeout;
        let mut verdicts = self
            .locals
            .dispatcher()
            .decide(invocation, deadline)
            .await?
            .verdicts;
        if let Some(counted) = counted_when_vetoed {
            for (verdict, counted) in verdicts.iter_mut().zip(counted) {
                verdict.counted_when_vetoed = counted;
            }
        }
        Ok(verdicts)
    }

    /// Each lease is a request of its own in the request script (`lua/lease.lua`), all of them
    /// queued at once so that they share one call per server.
    async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let mut sent = Vec::with_capacity(asks.len());
        let leasable: Vec<bool> = asks
            .iter()
            .map(|ask| {
                Invocation::lease(&ask.key, ask.rate, ask.terms, pinned, &self.layout)
                    .map(|invocation| sent.push(invocation))
                    .is_some()
            })
            .collect();
        let deadline = Instant::now() + self.settings.timeout;
        let mut answers = self
            .locals
            .dispatcher()
            .decide_many(sent, deadline)
            .await
            .into_iter();
        let grant = |decided: Decided| match decided.verdicts.first() {
            Some(verdict) => Ok(Some(Grant {
                hits: u64::from(verdict.remaining),
                after_us: verdict.reset_after_us,
                granted_at_us: decided.clock_us,
            })),
            None => Err(StoreError::Protocol("a lease without its verdict".into())),
        };
        Ok(leasable
            .into_iter()
            .map(|leasable| match leasable.then(|| answers.next()) {
                Some(Some(answer)) => answer.and_then(grant),
                Some(None) => Err(StoreError::Protocol("a lease without its answer".into())),
                None => Ok(None),
            })
            .collect())
    }

    /// One refund per lease given back (`lua/refund.lua`, see `algorithm::lease::give_back` for
    /// why a refund is the give-back), one call per server; token_bucket and gcra leases, and
    /// counters kept in envoyproxy/ratelimit's format (never leased), are left alone.
    async fn give_back(&self, returns: &[LeaseReturn]) -> Result<(), StoreError> {
        let refunds: Vec<Refund> = returns
            .iter()
            .filter(|given| given.hits > 0 && can_give_back(given.rate.algorithm()))
            .filter(|given| {
                let probe = Check {
                    key: given.key.clone(),
                    rate: given.rate,
                    hits: given.hits,
                    shadow: false,
                    consistency: crate::limiter::Consistency::Leased,
                    rule: None,
                };
                self.layout.envoyproxy_counting().is_none()
                    || !KeyLayout::counts_as_envoyproxy(&probe)
            })
            .map(|given| Refund {
                key: prefixed_redis_key(self.layout.prefix(), &given.key, &given.rate),
                rate: given.rate,
                counter: CounterKind::Native,
                hits: given.hits.min(u64::from(given.rate.burst())),
                committed_at_us: given.granted_at_us,
                debt_before_us: 0,
            })
            .collect();
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let deadline = Instant::now() + self.settings.timeout;
        self.locals
            .dispatcher()
            .give_back(refunds, pinned, deadline)
            .await
    }

    /// Each check a request of its own with 0 hits, which the request script only reads (every
    /// algorithm's evaluation of 0 hits writes nothing), all queued at once so that they share
    /// one call per server: the same math as a decision, on Redis's clock.
    async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        let pinned = self.pinned_clock.as_ref().map(|clock| clock.now_us());
        let sent = probes(checks)
            .iter()
            .map(|probe| Invocation::laid_out(std::slice::from_ref(probe), pinned, &self.layout))
            .collect();
        let deadline = Instant::now() + self.settings.timeout;
        let answers = self.locals.dispatcher().decide_many(sent, deadline).await;
        answers
            .into_iter()
            .map(|answer| {
                answer?.verdicts.first().copied().ok_or_else(|| {
                    StoreError::Protocol("a counter read without its verdict".into())
                })
            })
            .collect()
    }

    /// One `lua/reset.lua` call per key the counter may live under, on the server that owns it,
    /// all at once (so a reset takes one timeout at most): ratelimitd's own key (a fixed window's
    /// current and previous windows), and, for a fixed window in envoyproxy/ratelimit's format,
    /// that format's keys of the current and previous windows on this host's clock (as they are
    /// named).
    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        let calls: Vec<(usize, String, Vec<String>)> = checks
            .iter()
            .enumerate()
            .flat_map(|(index, check)| {
                self.reset_calls(check)
                    .into_iter()
                    .map(move |(key, args)| (index, key, args))
            })
            .collect();
        let answers = futures::future::join_all(
            calls
                .iter()
                .map(|(_, key, args)| self.run_side_script(&RESET, key, args)),
        )
        .await;
        let mut held = vec![false; checks.len()];
        for ((index, _, _), answer) in calls.iter().zip(answers) {
            match answer? {
                Value::Int(deleted) => held[*index] |= deleted > 0,
                other => {
                    return Err(StoreError::Protocol(format!(
                        "reset answered {other:?}, not a count"
                    )))
                }
            }
        }
        Ok(held)
    }

    /// A `PING` through the calling thread's pool(s), the ones its requests use, so health and
    /// requests see the same connections: the one server, or every master of a cluster (and the
    /// slot map must cover every slot).
    async fn is_healthy(&self) -> bool {
        let deadline = Instant::now() + self.settings.timeout.min(HEALTH_PROBE_TIMEOUT);
        self.locals.dispatcher().is_healthy(deadline).await
    }
}
