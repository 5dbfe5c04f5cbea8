//! Wiring: configuration -> store -> RLS edge -> tonic services (RLS, RLQS, health, reflection) +
//! HTTP.
//!
//! [`run`] takes already-bound listeners so tests can bind port 0 and read the real ports. The
//! transport (connections, their bounds, TLS, the HTTP port) lives in the submodules.

mod accept;
mod call_gate;
pub mod connection_age;
mod connections;
mod grpc_connection;
pub mod grpc_options;
mod grpc_timeout;
mod http_port;
mod lanes;
pub mod listener;
mod machine_memory;
pub mod memory_budget;
mod memory_leases;
pub mod memory_release;
pub mod open_files;
mod request_body;
mod rlqs_thread;
mod store_startup;
pub mod tls;
pub mod transport_bounds;
pub mod uds_mode;

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tonic::service::Routes;

use self::accept::AcceptBackoff;
use self::connections::Registry;
use self::grpc_connection::{GrpcTransport, TransportOptions};
pub use self::grpc_options::GrpcOptions;
use self::http_port::HttpBounds;
use self::listener::GrpcAddress;
pub use self::listener::GrpcListener;
use self::memory_budget::MemoryBudget;
use self::store_startup::{RedisSlots, Startup};
use self::tls::{ServerTls, TlsError, TLS_RELOAD_INTERVAL};
pub use self::transport_bounds::TransportBounds;

use crate::config::reload::{ReloadOutcome, Reloader};
use crate::config::xds::{XdsConfig, XdsOptions, XdsUpdate};
use crate::config::{self, ConfigErrors, LoadOptions};
use crate::limiter::consistency::DEFAULT_LEASE_PERIOD;
use crate::limiter::{Modes, RequestBounds, Rules};
use crate::proto::rlqs::rate_limit_quota_service_server::RateLimitQuotaServiceServer;
use crate::proto::rls::rate_limit_service_server::RateLimitServiceServer;
use crate::proto::FILE_DESCRIPTOR_SET;
use crate::service::counters::AdminToken;
use crate::service::http::{HttpState, DEFAULT_METRICS_PATH};
use crate::service::metrics::{DEFAULT_MAX_RULE_SERIES, DEFAULT_NEAR_LIMIT_RATIO};
use crate::service::rlqs::{QuotaRegistry, RlqsService, RlqsSettings};
use crate::service::statsd::{self, StatsdSettings};
use crate::service::statsd_exporter::{EnvoyproxyMetrics, EnvoyproxyMetricsSettings};
use crate::service::store_error_policy::StoreErrorPolicy;
use crate::service::top_values::TopSettings;
use crate::service::transport_refusal::Port;
use crate::service::version_info::shown;
use crate::service::{Health, Metrics, RateLimitEdge, ResponseHeaders};
use crate::store::lease::{LeaseSettings, LeaseStats, LeasedStore, RuleLeaseCounts};
use crate::store::redis::{KeyFormat, KeyLayout};
use crate::store::{
    Connecting, Demands, DenyCache, DenyCacheSettings, FailureHealth, FailureHealthSettings,
    MemoryDemands, MemoryStore, RedisSettings, RedisStore, Store, StoreError,
};

/// How often the store's health is probed, and idle memory-store keys swept.
const PROBE_INTERVAL: Duration = Duration::from_secs(1);

/// How long in-flight calls may take to finish once shutdown starts.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// How long the statsd sink's last flush may take once serving has stopped.
const STATSD_LAST_FLUSH: Duration = Duration::from_secs(3);

/// Everything `serve` needs besides the listeners.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Configuration files or directories (unused with [`Settings::xds`]).
    pub config_paths: Vec<PathBuf>,
    /// Configuration from an xDS server instead of files.
    pub xds: Option<XdsOptions>,
    /// Redis to share counters with other instances; `None` keeps them in this process.
    pub redis: Option<RedisSettings>,
    /// The keys the Redis store writes (prefix, envoyproxy/ratelimit's format); the envoyproxy
    /// format needs Redis.
    pub redis_keys: KeyLayout,
    /// Rate-limit headers added to every response (`response_headers_to_add`).
    pub response_headers: ResponseHeaders,
    /// How often the configuration files are checked for changes; `None`: only on SIGHUP.
    pub reload_interval: Option<Duration>,
    /// What to answer when the store fails.
    pub on_store_error: StoreErrorPolicy,
    /// The local deny cache in front of Redis; `None` turns it off. Unused without Redis.
    pub deny_cache: Option<DenyCacheSettings>,
    /// When failed Redis calls turn health NOT_SERVING (besides the store's probe). Unused
    /// without Redis, where nothing fails.
    pub failure_health: FailureHealthSettings,
    /// Whether health follows the store (its probe and [`Settings::failure_health`]); `false`:
    /// health says only that the process serves (envoyproxy/ratelimit's default).
    pub health_follows_store: bool,
    /// Drop-in mode: what to say at startup (see [`DropIn`]); `None` in native mode.
    pub drop_in: Option<DropIn>,
    /// Share of a limit above which admitted hits count as near the limit (metrics).
    pub near_limit_ratio: f64,
    /// Most series of the per-rule families on `/metrics` (see
    /// [`Metrics::with_max_rule_series`]).
    pub metrics_max_rule_series: usize,
    /// What `GET /top` keeps and shows (values per rule, rules, values or hashes).
    pub top: TopSettings,
    /// Serving lanes: threads serving gRPC connections, each with its own current-thread runtime
    /// (see [`lanes`]); lane 0 is the runtime `run` is called on.
    pub lanes: usize,
    /// What clients may make the ports hold (streams, bytes, connections, time).
    pub transport_bounds: TransportBounds,
    /// Bytes all gRPC calls together may hold (see [`memory_budget`]).
    pub grpc_memory_budget: usize,
    /// Global shadow mode (`shadow_mode`: no limit denies, `overall_code` is always OK) and
    /// quota mode (`quota_mode`: every limit in quota mode).
    pub modes: Modes,
    /// Fill every response's `dynamic_metadata` (envoyproxy/ratelimit's
    /// `RESPONSE_DYNAMIC_METADATA`).
    pub response_dynamic_metadata: bool,
    /// How configuration files of the same domain combine (merged or refused), and the
    /// consistency of counted rules that do not say (`--consistency`, in
    /// [`LoadOptions::default_consistency`], applied wherever the configuration comes from).
    pub load: LoadOptions,
    /// How long a replica holds a lease on a leased rule's counter (`--lease-period`); unused
    /// with the memory store, which decides every rule exactly.
    pub lease_period: Duration,
    /// What one request may carry (descriptors, entries, entry bytes).
    pub request_bounds: RequestBounds,
    /// Bounds on configuration files (size, alias expansion).
    pub config_bounds: config::ConfigBounds,
    /// Whether serving may start without a valid configuration, and whether health waits for
    /// one.
    pub initial_config: InitialConfig,
    /// Where the metrics port (see [`Listeners::metrics`]) serves the Prometheus text.
    pub metrics_path: String,
    /// The statsd sink (envoyproxy/ratelimit's stats over UDP); `None`: off.
    pub statsd: Option<StatsdSettings>,
    /// envoyproxy/ratelimit's Prometheus families on [`Listeners::envoyproxy_metrics`].
    pub envoyproxy_metrics: Option<EnvoyproxyMetricsSettings>,
    /// The gRPC port's TLS and connection age.
    pub grpc: GrpcOptions,
    /// The rate limit quota service (RLQS).
    pub rlqs: RlqsSettings,
    /// The bearer token of `POST /counters/reset` (`--admin-token-file`); `None`: resets are off.
    pub admin_token: Option<Arc<AdminToken>>,
}

/// Drop-in mode (envoyproxy/ratelimit's environment): once serving, the listeners are logged at
/// WARN, as envoyproxy/ratelimit logs them (its default level is warn, so a start is never
/// silent), followed by each of `differences`: what still differs from envoyproxy/ratelimit in
/// this deployment (docs/migration.md, "What changes for you").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DropIn {
    pub differences: Vec<String>,
}

/// What happens while no valid configuration has loaded (envoyproxy/ratelimit's
/// `FORCE_START_WITHOUT_INITIAL_CONFIG` and `HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InitialConfig {
    /// Start serving even when the configuration does not load: no domain is configured (every
    /// request is answered as for an unknown domain) until a valid one is loaded.
    pub force_start: bool,
    /// Health is NOT_SERVING until a valid configuration has loaded.
    pub healthy_only_when_loaded: bool,
}

/// The sockets [`run`] serves, bound by the caller's binding future (tests bind port 0).
pub struct Listeners {
    /// RLS, health and reflection: TCP or a unix socket.
    pub grpc: GrpcListener,
    /// `/healthcheck`, `/metrics`, `/json`, `/rlconfig`.
    pub http: TcpListener,
    /// A port of its own for the Prometheus text at [`Settings::metrics_path`] (and
    /// `/healthcheck`), as envoyproxy/ratelimit's `USE_PROMETHEUS` opens one.
    pub metrics: Option<TcpListener>,
    /// A second port serving what the HTTP port serves, where envoyproxy/ratelimit's debug
    /// port is expected (`/rlconfig` among them).
    pub debug: Option<TcpListener>,
    /// envoyproxy/ratelimit's Prometheus families (its `USE_PROMETHEUS` port), at the path of
    /// [`Settings::envoyproxy_metrics`].
    pub envoyproxy_metrics: Option<TcpListener>,
}

impl Settings {
    /// Defaults for everything but the configuration: in-memory store, no headers, reload
    /// checked every second, `unavailable` on store errors, deny cache on (with Redis), near
    /// limit at 80 %, the default transport bounds, plaintext gRPC without an age limit.
    pub fn new(config_paths: Vec<PathBuf>) -> Settings {
        Settings {
            config_paths,
            xds: None,
            redis: None,
            redis_keys: KeyLayout::default(),
            response_headers: ResponseHeaders::None,
            reload_interval: Some(DEFAULT_RELOAD_INTERVAL),
            on_store_error: StoreErrorPolicy::Unavailable,
            deny_cache: Some(DenyCacheSettings::default()),
            failure_health: FailureHealthSettings::default(),
            health_follows_store: true,
            drop_in: None,
            near_limit_ratio: DEFAULT_NEAR_LIMIT_RATIO,
            metrics_max_rule_series: DEFAULT_MAX_RULE_SERIES,
            top: TopSettings::default(),
            lanes: default_lanes(),
            transport_bounds: TransportBounds::default(),
            grpc_memory_budget: memory_budget::default_bytes(),
            modes: Modes::default(),
            response_dynamic_metadata: false,
            load: LoadOptions::default(),
            lease_period: DEFAULT_LEASE_PERIOD,
            request_bounds: RequestBounds::default(),
            config_bounds: config::ConfigBounds::default(),
            initial_config: InitialConfig::default(),
            metrics_path: DEFAULT_METRICS_PATH.to_owned(),
            statsd: None,
            envoyproxy_metrics: None,
            grpc: GrpcOptions::default(),
            rlqs: RlqsSettings::default(),
            admin_token: None,
        }
    }
}

/// One serving lane per CPU this process may run on (its affinity mask, so `taskset` counts).
pub fn default_lanes() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// Default period of the configuration change check.
pub const DEFAULT_RELOAD_INTERVAL: Duration = Duration::from_secs(1);

/// After a change is noticed, how long to let the writer finish before loading.
const RELOAD_SETTLE: Duration = Duration::from_millis(100);

/// Why `--key-format envoyproxy` is refused without Redis.
pub const ENVOYPROXY_KEYS_NEED_REDIS: &str =
    "--key-format envoyproxy names Redis keys: it needs a Redis store (--redis-url, \
     --redis-cluster or --redis-sentinel); the in-memory store has no keys";

/// Why the server could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {}", .0.one_line())]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Settings(String),
    #[error("gRPC server failed: {0}")]
    Lanes(#[from] lanes::LaneStopped),
    #[error("gRPC reflection setup failed: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}

/// The listeners [`serve`] takes: bound, or bound once the first configuration has arrived.
enum Ports<'a> {
    Bound(Box<Listeners>),
    AfterFirstConfig(Pin<Box<dyn Future<Output = std::io::Result<Listeners>> + 'a>>),
}

/// Where the rules come from, and whether any have loaded.
#[derive(Clone)]
enum ConfigFeed {
    /// Files, reloaded when they change or on SIGHUP.
    Files(Arc<Reloader>),
    /// An xDS server, through a client that validates with `loader`.
    Xds {
        config: Arc<XdsConfig>,
        options: Box<XdsOptions>,
        loader: Arc<config::Loader>,
    },
}

impl ConfigFeed {
    fn has_loaded(&self) -> bool {
        match self {
            ConfigFeed::Files(reloader) => reloader.has_loaded(),
            ConfigFeed::Xds { config, .. } => config.has_loaded(),
        }
    }

    /// Completes once a valid configuration has arrived over xDS; at once for files, which
    /// load before serving starts (or were forced to start without).
    async fn loaded(&self) {
        match self {
            ConfigFeed::Files(_) => {}
            ConfigFeed::Xds { config, .. } => config.loaded().await,
        }
    }

    fn xds(&self) -> Option<Arc<XdsConfig>> {
        match self {
            ConfigFeed::Files(_) => None,
            ConfigFeed::Xds { config, .. } => Some(config.clone()),
        }
    }
}

/// Loads the configuration files for the first time: their errors stop the start, unless
/// `--force-start-without-initial-config` starts without them.
fn start_files(settings: &Settings, loader: Arc<config::Loader>) -> Result<Reloader, ServerError> {
    if !settings.initial_config.force_start {
        return Ok(Reloader::start(settings.config_paths.clone(), loader)?);
    }
    let (reloader, errors) = Reloader::start_forced(settings.config_paths.clone(), loader);
    if let Some(errors) = errors {
        tracing::error!(
            errors = errors.len(),
            "configuration does not load; serving without one until it does \
             (--force-start-without-initial-config): {}",
            errors.one_line()
        );
    }
    Ok(reloader)
}

/// What the serving loop needs besides the store, whatever the store is.
struct Context {
    rules: Arc<ArcSwap<Rules>>,
    config: ConfigFeed,
    metrics: Arc<Metrics>,
    headers: ResponseHeaders,
    reload_interval: Option<Duration>,
    on_store_error: StoreErrorPolicy,
    health_follows_store: bool,
    drop_in: Option<DropIn>,
    /// Called after a reload changed the rules (clears the deny cache).
    on_rules_changed: Box<dyn Fn() + Send + Sync>,
    lanes: usize,
    transport_bounds: TransportBounds,
    grpc_memory_budget: usize,
    modes: Modes,
    response_dynamic_metadata: bool,
    request_bounds: RequestBounds,
    initial_config: InitialConfig,
    metrics_path: String,
    statsd: Option<StatsdSettings>,
    /// envoyproxy/ratelimit's Prometheus families and their path.
    envoyproxy_metrics: Option<(Arc<EnvoyproxyMetrics>, String)>,
    transport: TransportOptions,
    rlqs: RlqsSettings,
    /// Where RLQS demands are shared: Redis when the store is Redis, else this process.
    quota_demands: Demands,
    admin_token: Option<Arc<AdminToken>>,
}

/// Binds the listeners with `bind`, loads the TLS files and the configuration, builds the store
/// and serves until `shutdown` completes. Then health turns NOT_SERVING, listeners close (a unix
/// socket's file is removed), and in-flight calls finish before this returns.
///
/// `bind` runs first, so a busy port stops the start at once; but in drop-in mode over xDS
/// without `--force-start-without-initial-config` it runs once the first configuration has
/// arrived, as envoyproxy/ratelimit opens no port before its first configuration (a client meets
/// a refused connection, not a server without limits).
pub async fn run<'a>(
    settings: Settings,
    bind: impl Future<Output = std::io::Result<Listeners>> + 'a,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let listeners = match &settings.xds {
        Some(options) if settings.drop_in.is_some() && !settings.initial_config.force_start => {
            tracing::warn!(
                server = %options.server,
                "no port opens until the xDS server's first configuration arrives, as \
                 envoyproxy/ratelimit (FORCE_START_WITHOUT_INITIAL_CONFIG=true opens them at once)"
            );
            Ports::AfterFirstConfig(Box::pin(bind))
        }
        _ => Ports::Bound(Box::new(bind.await?)),
    };
    let transport = TransportOptions {
        tls: settings
            .grpc
            .tls
            .clone()
            .map(ServerTls::load)
            .transpose()?
            .map(Arc::new),
        connection_age: settings.grpc.connection_age,
    };
    let loader = Arc::new(config::Loader::new(settings.config_bounds).with_options(settings.load));
    let feed = match settings.xds.clone() {
        Some(options) => {
            tracing::info!(
                server = %options.server,
                node = %options.node.id,
                tls = options.tls.is_some(),
                "configuration from xDS; waiting for the server's first response"
            );
            ConfigFeed::Xds {
                config: Arc::new(XdsConfig::new()),
                options: Box::new(options),
                loader: loader.clone(),
            }
        }
        None => ConfigFeed::Files(Arc::new(start_files(&settings, loader.clone())?)),
    };
    let rules = match &feed {
        ConfigFeed::Files(reloader) => reloader.rules().clone(),
        ConfigFeed::Xds { config, .. } => config.rules().clone(),
    };
    let domains = rules.load().domains.len();
    let metrics = Arc::new(
        Metrics::new(settings.near_limit_ratio)
            .with_max_rule_series(settings.metrics_max_rule_series)
            .with_top(&settings.top),
    );
    metrics.register_rules(&rules.load());
    metrics.register_config_loader(loader);
    if let ConfigFeed::Xds { config, .. } = &feed {
        metrics.register_xds_config(config.clone());
    }
    if settings.statsd.is_some() {
        metrics.keep_response_times();
    }
    metrics.register_counter(
        "ratelimitd_tracing_export_failures_total",
        "Span exports that failed (collector down, unreachable or slow); each drops its batch.",
        crate::otel::export_failures,
    );
    let envoyproxy_metrics = settings.envoyproxy_metrics.as_ref().map(|envoyproxy| {
        (
            Arc::new(EnvoyproxyMetrics::new(envoyproxy, metrics.clone())),
            envoyproxy.path.clone(),
        )
    });
    let mut context = Context {
        rules,
        config: feed,
        metrics: metrics.clone(),
        headers: settings.response_headers,
        reload_interval: settings.reload_interval.filter(|i| !i.is_zero()),
        on_store_error: settings.on_store_error,
        health_follows_store: settings.health_follows_store,
        drop_in: settings.drop_in.clone(),
        on_rules_changed: Box::new(|| {}),
        lanes: settings.lanes,
        transport_bounds: settings.transport_bounds.clone(),
        grpc_memory_budget: settings.grpc_memory_budget,
        modes: settings.modes,
        response_dynamic_metadata: settings.response_dynamic_metadata,
        request_bounds: settings.request_bounds,
        initial_config: settings.initial_config,
        metrics_path: settings.metrics_path.clone(),
        statsd: settings.statsd.clone(),
        envoyproxy_metrics,
        transport,
        rlqs: RlqsSettings {
            never_deny: settings.modes.shadow_mode || settings.modes.quota_mode,
            ..settings.rlqs
        },
        quota_demands: Demands::Memory(MemoryDemands::new()),
        admin_token: settings.admin_token.clone(),
    };
    match settings.redis {
        None if settings.redis_keys.format() == KeyFormat::Envoyproxy => {
            Err(ServerError::Settings(ENVOYPROXY_KEYS_NEED_REDIS.into()))
        }
        None => {
            let note = memory_leases::note_exact_decisions(context.rules.clone());
            note();
            context.on_rules_changed = Box::new(note);
            let store = Arc::new(MemoryStore::new());
            store.spawn_sweeper(PROBE_INTERVAL);
            tracing::info!(domains, store = "memory", "configuration loaded");
            serve(context, store, listeners, shutdown).await
        }
        Some(redis) => {
            let leases = LeaseSettings {
                period: settings.lease_period,
                wait: redis.timeout,
                max_counters: LeaseSettings::DEFAULT_MAX_COUNTERS,
            };
            let slots = RedisSlots::new(&redis.topology.address());
            let layout = settings.redis_keys.clone();
            let startup = store_startup::connect(redis, layout.clone(), slots.clone()).await?;
            context.quota_demands = Demands::Redis(slots.demands.clone());
            tracing::info!(
                key_format = %layout.format(),
                key_prefix = layout.prefix(),
                key_format_until = layout.until_s().map(|until| {
                    humantime::format_rfc3339(std::time::UNIX_EPOCH + Duration::from_secs(until))
                        .to_string()
                }),
                "redis keys"
            );
            register_redis_counters(&metrics, &slots.store);
            let store = Arc::new(FailureHealth::new(
                slots.store.clone(),
                settings.failure_health,
            ));
            if settings.failure_health.is_on() {
                register_failure_health(&metrics, &store);
            }
            match settings.deny_cache {
                None => {
                    tracing::info!(
                        domains,
                        store = "redis",
                        deny_cache = false,
                        "configuration loaded"
                    );
                    let store = with_leases(store, leases, &metrics);
                    serve_while(startup, context, store, listeners, shutdown).await
                }
                Some(cache_settings) => {
                    let epoch = slots.store.clone();
                    let cache = Arc::new(
                        DenyCache::new(store, cache_settings)
                            .with_epoch(move || epoch.get().map_or(0, RedisStore::epoch)),
                    );
                    let (hits, entries, clear) = (cache.clone(), cache.clone(), cache.clone());
                    metrics.register_counter(
                        "ratelimitd_deny_cache_hits_total",
                        "Requests answered OVER_LIMIT by the local deny cache, without a Redis round trip.",
                        move || hits.hits(),
                    );
                    metrics.register_gauge(
                        "ratelimitd_deny_cache_entries",
                        "Counters held in the local deny cache (expired ones not yet dropped included).",
                        move || entries.len() as u64,
                    );
                    context.on_rules_changed = Box::new(move || clear.clear());
                    tracing::info!(
                        domains,
                        store = "redis",
                        deny_cache = true,
                        "configuration loaded"
                    );
                    let store = with_leases(cache, leases, &metrics);
                    serve_while(startup, context, store, listeners, shutdown).await
                }
            }
        }
    }
}

/// The Redis store's counters, read through its slot (0 while startup still waits for it).
fn register_redis_counters(metrics: &Metrics, slot: &Arc<Connecting<RedisStore>>) {
    type StoreCounter = (&'static str, &'static str, fn(&RedisStore) -> u64);
    let counters: [StoreCounter; 6] = [
        (
            "ratelimitd_redis_script_reloads_total",
            "Times the Redis scripts were loaded again after Redis lost them (NOSCRIPT, or a Functions library found gone: a restart, a failover, SCRIPT FLUSH or FUNCTION FLUSH).",
            RedisStore::script_reloads,
        ),
        (
            "ratelimitd_redis_script_calls_total",
            "Calls of the request script (FCALL or EVALSHA) sent to Redis; concurrent requests share a call.",
            RedisStore::script_calls,
        ),
        (
            "ratelimitd_redis_script_call_requests_total",
            "Requests those calls carried: over ratelimitd_redis_script_calls_total, the mean batch.",
            RedisStore::script_call_requests,
        ),
        (
            "ratelimitd_redis_connections_lost_total",
            "Redis connections found dead (connection error or timeout) and replaced.",
            RedisStore::connections_lost,
        ),
        (
            "ratelimitd_redis_slot_map_refreshes_total",
            "Times the Redis Cluster slot map was read again (redirections, lost masters).",
            RedisStore::slot_map_refreshes,
        ),
        (
            "ratelimitd_redis_refunds_failed_total",
            "Refunds of a denied cross-node request that failed: the reservation stays until its window or refill takes it back.",
            RedisStore::refunds_failed,
        ),
    ];
    for (name, help, read) in counters {
        let slot = slot.clone();
        metrics.register_counter(name, help, move || slot.get().map_or(0, read));
    }
}

/// [`serve`], stopped with the last error when startup, still waiting for Redis, gives up.
async fn serve_while<S: Store>(
    startup: Startup,
    context: Context,
    store: Arc<S>,
    listeners: Ports<'_>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let gave_up = Arc::new(std::sync::OnceLock::new());
    let shutdown = {
        let (gave_up, waiting) = (gave_up.clone(), startup.gave_up());
        async move {
            tokio::select! {
                () = shutdown => {}
                error = waiting => {
                    tracing::error!(%error, "startup gave up waiting for redis; stopping");
                    let _ = gave_up.set(error);
                }
            }
        }
    };
    let served = serve(context, store, listeners, shutdown).await;
    match gave_up.get() {
        Some(error) => Err(error.clone().into()),
        None => served,
    }
}

async fn serve<S: Store>(
    context: Context,
    store: Arc<S>,
    listeners: Ports<'_>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServerError> {
    let (reporter, health_service) = tonic_health::server::health_reporter();
    let health = Arc::new(Health::new(reporter).await);
    let reflection_v1 = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1()?;
    let reflection_v1alpha = tonic_reflection::server::Builder::configure()
        .register_encoded_file_descriptor_set(FILE_DESCRIPTOR_SET)
        .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
        .build_v1alpha()?;
    // Over xDS, the service starts before any configuration: health waits for one, and RLS
    // answers UNAVAILABLE meanwhile, unless it may start without.
    let waits_for_xds =
        matches!(context.config, ConfigFeed::Xds { .. }) && !context.initial_config.force_start;
    let mut edge = RateLimitEdge::new(context.rules.clone(), store.clone());
    if waits_for_xds {
        let config = context.config.clone();
        edge = edge.with_initial_config(
            Arc::new(move || config.has_loaded()),
            "no configuration yet: waiting for the xDS server's first one",
        );
    }
    let edge = edge
        .with_response_headers(context.headers)
        .with_metrics(context.metrics.clone())
        .with_store_error_policy(context.on_store_error)
        .with_modes(context.modes)
        .with_dynamic_metadata(context.response_dynamic_metadata)
        .with_request_bounds(context.request_bounds);
    let edge = Arc::new(edge);
    let quotas = Arc::new(QuotaRegistry::new(
        context.rules.clone(),
        context.rlqs,
        context.quota_demands,
    ));
    register_rlqs_metrics(&context.metrics, &quotas);

    let stopping = CancellationToken::new();
    let rlqs_work = rlqs_thread::start(stopping.clone())?;
    rlqs_work.spawn(sweep_quotas(quotas.clone(), stopping.clone()));
    let on_rules_changed: Box<dyn Fn() + Send + Sync> = {
        let (previous, quotas) = (context.on_rules_changed, quotas.clone());
        Box::new(move || {
            previous();
            quotas.rules_changed();
        })
    };
    tokio::spawn({
        let stopping = stopping.clone();
        async move {
            shutdown.await;
            stopping.cancel();
        }
    });

    let config_gate = ConfigGate {
        config: context.config.clone(),
        required: context.initial_config.healthy_only_when_loaded || waits_for_xds,
    };
    let store_health = StoreHealth {
        followed: context.health_follows_store,
    };
    health
        .set_serving(store_health.healthy(&*store).await && config_gate.open())
        .await;
    let released = store.clone();
    tokio::spawn(probe_store(
        store,
        store_health,
        config_gate,
        health.clone(),
        stopping.clone(),
    ));
    match context.config.clone() {
        ConfigFeed::Files(reloader) => {
            tokio::spawn(watch_config(
                reloader,
                context.metrics.clone(),
                context.reload_interval,
                on_rules_changed,
                hangups(),
                stopping.clone(),
            ));
        }
        ConfigFeed::Xds {
            config,
            options,
            loader,
        } => {
            let on_update = xds_updates(config.clone(), context.metrics.clone(), on_rules_changed);
            tokio::spawn(config::xds::run(
                *options,
                config,
                loader,
                on_update,
                stopping.clone(),
            ));
        }
    }
    let statsd_sink = context.statsd.clone().map(|settings| {
        tokio::spawn(statsd::run(
            settings,
            context.metrics.clone(),
            stopping.clone(),
        ))
    });

    if let Some(tls) = context.transport.tls.clone() {
        tokio::spawn(tls::watch(tls, TLS_RELOAD_INTERVAL, stopping.clone()));
    }

    let listeners = match listeners {
        Ports::Bound(listeners) => *listeners,
        Ports::AfterFirstConfig(bind) => {
            tokio::select! {
                () = context.config.loaded() => {}
                () = stopping.cancelled() => {
                    tracing::info!("shutting down before the first configuration");
                    return Ok(());
                }
            }
            bind.await?
        }
    };
    let Listeners {
        grpc,
        http,
        metrics: metrics_port,
        debug: debug_port,
        envoyproxy_metrics: envoyproxy_metrics_port,
    } = listeners;
    let grpc_address = grpc.address()?;
    let http_addr = http.local_addr()?;
    let bounds = &context.transport_bounds;
    let open_files = open_files::current_soft_limit().unwrap_or(u64::MAX);
    let caps = bounds.connection_caps(open_files);
    let metrics = context.metrics.clone();
    let budget = MemoryBudget::new(context.grpc_memory_budget);
    let held = {
        let (budget, quotas) = (budget.clone(), quotas.clone());
        move || {
            let quotas = quotas.budget().held();
            (
                budget.take_peak().saturating_add(quotas),
                budget.held().saturating_add(quotas),
            )
        }
    };
    tokio::spawn(memory_release::watch(held, stopping.clone()));
    let registry = Registry::new(caps.grpc, budget, metrics.clone());
    register_transport_gauges(&metrics, &registry);
    let http_state = Arc::new(HttpState {
        health: health.clone(),
        metrics: Some(metrics.clone()),
        edge: Some(edge.clone()),
        max_json_body: bounds.max_request_size,
        metrics_path: DEFAULT_METRICS_PATH.to_owned(),
        xds: context.config.xds(),
        rlqs: Some(quotas.clone()),
        envoyproxy_metrics: None,
        admin_token: context.admin_token.clone(),
    });
    let mut http_ports = vec![(http, http_state.clone())];
    let mut extra_ports = Vec::new();
    if let Some(listener) = metrics_port {
        extra_ports.push(("metrics", listener.local_addr()?));
        let metrics_state = HttpState {
            health: health.clone(),
            metrics: Some(metrics.clone()),
            edge: None,
            max_json_body: bounds.max_request_size,
            metrics_path: context.metrics_path.clone(),
            xds: None,
            rlqs: None,
            envoyproxy_metrics: None,
            admin_token: None,
        };
        http_ports.push((listener, Arc::new(metrics_state)));
    }
    if let (Some(listener), Some((families, path))) =
        (envoyproxy_metrics_port, context.envoyproxy_metrics.clone())
    {
        extra_ports.push(("envoyproxy_metrics", listener.local_addr()?));
        tracing::info!(
            path,
            response_time = families.timer_kind(),
            "serving envoyproxy/ratelimit's Prometheus metrics"
        );
        tokio::spawn(families.clone().run(stopping.clone()));
        let mut state = HttpState::health_only(health.clone());
        state.metrics_path = path;
        state.envoyproxy_metrics = Some(families);
        http_ports.push((listener, Arc::new(state)));
    }
    if let Some(listener) = debug_port {
        extra_ports.push(("debug", listener.local_addr()?));
        http_ports.push((listener, http_state.clone()));
    }
    let http_bounds = HttpBounds {
        max_connections: caps.http,
        header_read_timeout: bounds.http_header_read_timeout,
        connection_timeout: bounds.http_connection_timeout,
    };
    let http_task = tokio::spawn(http_port::serve(
        http_ports,
        http_bounds,
        metrics.clone(),
        stopping.clone().cancelled_owned(),
    ));
    log_transport(&context.transport);
    match &grpc_address {
        GrpcAddress::Tcp(grpc_addr) => tracing::info!(
            %grpc_addr,
            %http_addr,
            grpc_max_connections = caps.grpc,
            http_max_connections = caps.http,
            open_files,
            grpc_memory_budget = context.grpc_memory_budget,
            "serving"
        ),
        GrpcAddress::Unix(path) => tracing::info!(
            grpc_uds = %path.display(),
            %http_addr,
            grpc_max_connections = caps.grpc,
            http_max_connections = caps.http,
            open_files,
            grpc_memory_budget = context.grpc_memory_budget,
            "serving"
        ),
    }
    for (port, addr) in &extra_ports {
        tracing::info!(port, %addr, "serving HTTP");
    }
    if let Some(drop_in) = &context.drop_in {
        announce_drop_in(drop_in, &grpc_address, http_addr, &extra_ports);
    }

    // Health turns NOT_SERVING (and its Watch streams end) before the lanes start draining.
    let closing = CancellationToken::new();
    tokio::spawn({
        let (health, stopping, closing) = (health.clone(), stopping.clone(), closing.clone());
        async move {
            stopping.cancelled().await;
            tracing::info!("shutting down: health NOT_SERVING, draining in-flight calls");
            health.close().await;
            closing.cancel();
        }
    });
    let rls =
        RateLimitServiceServer::from_arc(edge).max_decoding_message_size(bounds.max_request_size);
    let max_report = quotas.settings().max_report_bytes();
    let quota_service = RateLimitQuotaServiceServer::new(RlqsService::new(quotas, rlqs_work))
        .max_decoding_message_size(max_report);
    let routes = Routes::new(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        .add_service(rls)
        .add_service(quota_service);
    let transport = Arc::new(GrpcTransport::new(
        routes,
        bounds,
        max_report,
        context.transport.clone(),
    ));
    register_connection_counters(&metrics, &transport, &context.transport);
    let lane = {
        let stopping = stopping.clone();
        move |connections: lanes::Connections| {
            let served = transport.clone().serve_lane(connections, closing.clone());
            let stopping = stopping.clone();
            async move {
                tokio::select! {
                    () = served => {}
                    _ = drain_deadline(&stopping) => {
                        tracing::warn!(?DRAIN_TIMEOUT, "calls still open after the drain timeout (e.g. health Watch streams); closing them");
                    }
                }
            }
        }
    };
    let backoff = AcceptBackoff::new(Port::Grpc, metrics);
    let result = lanes::start(context.lanes, lane)?
        .accept(grpc, registry, backoff, stopping.clone())
        .await;
    stopping.cancel();
    let _ = http_task.await;
    released.release().await;
    if let Some(sink) = statsd_sink {
        if tokio::time::timeout(STATSD_LAST_FLUSH, sink).await.is_err() {
            tracing::warn!(
                ?STATSD_LAST_FLUSH,
                "the last statsd flush did not finish in time"
            );
        }
    }
    tracing::info!("stopped");
    result.map_err(ServerError::from)
}

/// How often idle RLQS buckets are looked for: a tenth of the idle timeout, between 50 ms and 1 s.
fn sweep_interval(idle_timeout: Duration) -> Duration {
    (idle_timeout / 10).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// Until shutdown, on the RLQS thread: computes the shares of RLQS buckets that wait for it,
/// abandons idle buckets and applies rule changes.
async fn sweep_quotas(quotas: Arc<QuotaRegistry<Demands>>, stopping: CancellationToken) {
    let mut sweeps = tokio::time::interval(sweep_interval(quotas.settings().idle_timeout));
    sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut rebalances = tokio::time::interval(quotas.settings().rebalance_gap);
    rebalances.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let rule_changes = quotas.follow_rule_changes();
    tokio::pin!(rule_changes);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = sweeps.tick() => quotas.sweep().await,
            _ = rebalances.tick() => quotas.rebalance_due().await,
            () = &mut rule_changes => {}
        }
    }
}

/// The RLQS families of `/metrics`.
fn register_rlqs_metrics(metrics: &Metrics, quotas: &Arc<QuotaRegistry<Demands>>) {
    let streams = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_streams",
        "Open RLQS streams (one per Envoy).",
        move || streams.streams() as u64,
    );
    let buckets = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_buckets",
        "RLQS buckets subscribed by at least one stream (per domain and bucket id).",
        move || buckets.buckets() as u64,
    );
    let budget = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_memory_budget_bytes",
        "The memory budget of the RLQS streams' state (--rlqs-memory-budget).",
        move || budget.budget().limit() as u64,
    );
    let held = quotas.clone();
    metrics.register_gauge(
        "ratelimitd_rlqs_memory_held_bytes",
        "Bytes held against it: streams, their buckets and the buckets' ids.",
        move || held.budget().held() as u64,
    );
    let sent = quotas.clone();
    metrics.register_counter(
        "ratelimitd_rlqs_assignments_sent_total",
        "RLQS bucket assignments sent to Envoys (new, changed and renewed).",
        move || sent.assignments_sent(),
    );
    let computations = quotas.clone();
    metrics.register_counter(
        "ratelimitd_rlqs_share_computations_total",
        "Computations of an RLQS bucket's fair shares (at most ten per bucket per second).",
        move || computations.computations(),
    );
    let allowed = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_reported_allowed_total",
        "Requests Envoys reported allowed in RLQS buckets, by the bucket's rule (`unmatched`: none).",
        "rule",
        move || {
            allowed
                .reported()
                .into_iter()
                .map(|(rule, allowed, _)| (rule, allowed))
                .collect()
        },
    );
    let refused = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_limited_total",
        "RLQS streams refused or ended by an RLQS cap, by limit (docs/rlqs.md, Bounds and errors).",
        "limit",
        move || refused.refusals().counts(),
    );
    let denied = quotas.clone();
    metrics.register_labelled_counter(
        "ratelimitd_rlqs_reported_denied_total",
        "Requests Envoys reported denied in RLQS buckets, by the bucket's rule (`unmatched`: none).",
        "rule",
        move || {
            denied
                .reported()
                .into_iter()
                .map(|(rule, _, denied)| (rule, denied))
                .collect()
        },
    );
}

/// Drop-in mode's startup lines at WARN (see [`DropIn`]): the listeners, worded as
/// envoyproxy/ratelimit words them, then what differs from it here.
fn announce_drop_in(
    drop_in: &DropIn,
    grpc: &GrpcAddress,
    http: SocketAddr,
    extra_ports: &[(&str, SocketAddr)],
) {
    tracing::warn!("Listening for HTTP on '{http}'");
    for (port, addr) in extra_ports {
        tracing::warn!("Listening for {port} on '{addr}'");
    }
    match grpc {
        GrpcAddress::Tcp(addr) => tracing::warn!("Listening for gRPC on '{addr}'"),
        GrpcAddress::Unix(path) => tracing::warn!("Listening for gRPC on '{}'", path.display()),
    }
    for difference in &drop_in.differences {
        tracing::warn!("differs from envoyproxy/ratelimit: {difference}");
    }
}

/// Says what the gRPC port speaks (TLS, client certificates) and how long its connections live.
fn log_transport(transport: &TransportOptions) {
    if let Some(tls) = &transport.tls {
        let settings = tls.settings();
        let client_auth = settings.client_auth.as_ref();
        tracing::info!(
            cert = %settings.cert.display(),
            key = %settings.key.display(),
            client_ca = client_auth.map(|auth| auth.ca.display().to_string()),
            client_san = client_auth.and_then(|auth| auth.san.clone()),
            reload_interval = ?TLS_RELOAD_INTERVAL,
            "gRPC port speaks TLS"
        );
    }
    if let Some(age) = transport.connection_age {
        let grace = age.grace.map_or_else(
            || "none (calls run to their end)".to_owned(),
            |grace| humantime::format_duration(grace).to_string(),
        );
        tracing::info!(
            max_connection_age = %humantime::format_duration(age.max_age),
            max_connection_age_grace = %grace,
            "gRPC connections get GOAWAY at their maximum age (±10 %)"
        );
    }
}

/// Counters of aged connections, and of TLS handshakes and reloads (with TLS only).
fn register_connection_counters(
    metrics: &Metrics,
    transport: &Arc<GrpcTransport>,
    options: &TransportOptions,
) {
    let aged = transport.clone();
    metrics.register_counter(
        "ratelimitd_grpc_connections_aged_total",
        "gRPC connections sent GOAWAY for reaching --grpc-max-connection-age.",
        move || aged.aged_connections(),
    );
    let Some(tls) = &options.tls else { return };
    let failures = transport.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_handshake_failures_total",
        "gRPC TLS handshakes that failed or timed out (plaintext clients, refused client certificates).",
        move || failures.tls_handshake_failures(),
    );
    let reloads = tls.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_reloads_total",
        "Times changed gRPC TLS files were put in use.",
        move || reloads.reloads(),
    );
    let rejected = tls.clone();
    metrics.register_counter(
        "ratelimitd_grpc_tls_reloads_rejected_total",
        "Times changed gRPC TLS files could not be used (the certificate in use stayed).",
        move || rejected.rejected(),
    );
}

/// Gauges of what the gRPC connections hold, read when scraped.
fn register_transport_gauges(metrics: &Metrics, registry: &Arc<Registry>) {
    let accepted = registry.clone();
    metrics.register_counter(
        "ratelimitd_grpc_connections_accepted_total",
        "gRPC connections accepted (and not refused at the connection cap).",
        move || accepted.admitted(),
    );
    let open = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_connections",
        "Open gRPC connections (those being closed to make room included).",
        move || open.open_connections() as u64,
    );
    let streaming = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_streaming_calls",
        "Open long-lived gRPC calls (health Watch, reflection), all connections.",
        move || streaming.streaming_calls() as u64,
    );
    let buffered = registry.clone();
    metrics.register_gauge(
        "ratelimitd_grpc_buffered_request_bytes",
        "Bytes of partly received gRPC request messages (at the length their prefix declares), all connections.",
        move || buffered.buffered() as u64,
    );
    let limit = registry.budget().limit() as u64;
    metrics.register_gauge(
        "ratelimitd_grpc_memory_budget_bytes",
        "The memory budget of all gRPC calls together (--grpc-memory-budget).",
        move || limit,
    );
    let held = registry.budget().clone();
    metrics.register_gauge(
        "ratelimitd_grpc_memory_held_bytes",
        "Bytes held against the memory budget: open calls, their request heads and messages being received.",
        move || held.held() as u64,
    );
    let calls = registry.budget().clone();
    metrics.register_gauge(
        "ratelimitd_grpc_open_calls",
        "Open gRPC calls (streams served), all connections.",
        move || calls.calls() as u64,
    );
}

/// SIGHUP as a stream of unit events (none where signals do not exist or cannot be caught).
fn hangups() -> Option<tokio::sync::mpsc::Receiver<()>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::hangup()) {
            Ok(mut hangup) => {
                let (tx, rx) = tokio::sync::mpsc::channel(1);
                tokio::spawn(async move {
                    while hangup.recv().await.is_some() {
                        // A reload already pending covers this one too.
                        let _ = tx.try_send(());
                        if tx.is_closed() {
                            return;
                        }
                    }
                });
                Some(rx)
            }
            Err(error) => {
                tracing::warn!(%error, "cannot listen for SIGHUP; reload on file change only");
                None
            }
        }
    }
    #[cfg(not(unix))]
    None
}

/// Reloads the configuration when its files change (checked every `interval`) and on SIGHUP.
async fn watch_config(
    reloader: Arc<Reloader>,
    metrics: Arc<Metrics>,
    interval: Option<Duration>,
    on_rules_changed: Box<dyn Fn() + Send + Sync>,
    mut hangups: Option<tokio::sync::mpsc::Receiver<()>>,
    stopping: CancellationToken,
) {
    let mut ticks = interval.map(|every| {
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks
    });
    loop {
        let forced = tokio::select! {
            _ = stopping.cancelled() => return,
            _ = async {
                match ticks.as_mut() {
                    Some(ticks) => { ticks.tick().await; }
                    None => std::future::pending::<()>().await,
                }
            } => false,
            received = async {
                match hangups.as_mut() {
                    Some(hangups) => hangups.recv().await,
                    None => std::future::pending().await,
                }
            } => {
                if received.is_none() {
                    hangups = None;
                    continue;
                }
                true
            }
        };
        let worker = reloader.clone();
        let outcome = tokio::task::spawn_blocking(move || {
            if !forced {
                worker.changed()?;
                std::thread::sleep(RELOAD_SETTLE);
            }
            let outcome = worker.reload();
            // What the parse allocated is free now, whether the configuration was applied or not.
            memory_release::give_back();
            Some(outcome)
        })
        .await;
        let outcome = match outcome {
            Ok(Some(outcome)) => outcome,
            Ok(None) => continue,
            Err(error) => {
                tracing::error!(%error, "configuration reload task failed");
                continue;
            }
        };
        let trigger = if forced { "SIGHUP" } else { "file change" };
        match outcome {
            ReloadOutcome::Applied {
                domains,
                limits,
                changed,
            } => {
                metrics.record_reload(true);
                if changed {
                    metrics.register_rules(&reloader_rules(&reloader));
                    on_rules_changed();
                    tracing::info!(trigger, domains, limits, "configuration reloaded");
                } else {
                    tracing::info!(
                        trigger,
                        domains,
                        limits,
                        "configuration reloaded, no change"
                    );
                }
            }
            ReloadOutcome::Rejected(errors) => {
                metrics.record_reload(false);
                tracing::error!(
                    trigger,
                    errors = errors.len(),
                    "configuration rejected, the running one stays: {}",
                    errors.one_line()
                );
            }
        }
    }
}

/// What each xDS response did: counted as a reload, logged, and (when the rules changed) the
/// per-limit metrics registered and `on_rules_changed` called; then what the parse allocated
/// and the replaced rules held is given back to the operating system.
fn xds_updates(
    config: Arc<XdsConfig>,
    metrics: Arc<Metrics>,
    on_rules_changed: Box<dyn Fn() + Send + Sync>,
) -> Arc<dyn Fn(XdsUpdate) + Send + Sync> {
    Arc::new(move |update| {
        xds_update(&config, &metrics, &*on_rules_changed, update);
        tokio::task::spawn_blocking(memory_release::give_back);
    })
}

fn xds_update(
    config: &XdsConfig,
    metrics: &Metrics,
    on_rules_changed: &(dyn Fn() + Send + Sync),
    update: XdsUpdate,
) {
    match update {
        XdsUpdate::Applied {
            version,
            domains,
            limits,
            changed,
        } => {
            metrics.record_reload(true);
            if changed {
                metrics.register_rules(&config.rules().load_full());
                on_rules_changed();
                tracing::info!(version = %shown(&version), domains, limits, "xDS configuration applied");
            } else {
                tracing::info!(
                    version = %shown(&version),
                    domains,
                    limits,
                    "xDS configuration applied, no change"
                );
            }
        }
        XdsUpdate::Rejected { version, errors } => {
            metrics.record_reload(false);
            tracing::error!(
                version = %shown(&version),
                errors = errors.len(),
                "xDS configuration rejected (NACK); the running one stays: {}",
                errors.one_line()
            );
        }
    }
}

/// The `/metrics` view of the rule on failed store calls.
/// `store` behind the lease layer: leased checks decided from leases (see `store::lease`), every
/// other check by `store`; its totals registered as metrics.
fn with_leases<S: Store>(
    store: Arc<S>,
    settings: LeaseSettings,
    metrics: &Metrics,
) -> Arc<LeasedStore<S>> {
    let leased = LeasedStore::start(store, settings);
    register_lease_metrics(metrics, &leased.stats());
    Arc::new(leased)
}

/// The lease layer's totals as metric families, per rule (domain, rule) where they have one.
fn register_lease_metrics(metrics: &Metrics, stats: &Arc<LeaseStats>) {
    type Pick = fn(&RuleLeaseCounts) -> u64;
    let per_rule = |kinds: &'static [(&'static str, Pick)]| {
        let stats = Arc::clone(stats);
        move || {
            let mut series = Vec::new();
            for (rule, counts) in stats.by_rule() {
                for (kind, pick) in kinds {
                    let labels = vec![
                        rule.domain.to_string(),
                        rule.rule.to_string(),
                        (*kind).to_owned(),
                    ];
                    series.push((labels, pick(&counts)));
                }
            }
            series
        }
    };
    metrics.register_counter_family(
        "ratelimitd_lease_decisions_total",
        "Checks of leased rules, by how this replica decided them: from hits it held (local), after waiting for a refill (after_refill), denied without a store call because the store had nothing to grant (denied_locally), or by the store exactly (store: a limit too small to lease, or the replica held leases on its most counters).",
        &["domain", "rule", "decided"],
        per_rule(&[
                ("local", |c| c.local),
                ("after_refill", |c| c.waited),
                ("denied_locally", |c| c.denied_locally),
                ("store", |c| c.exact),
            ],
        ),
    );
    metrics.register_counter_family(
        "ratelimitd_lease_hits_total",
        "Hits of leased counters: granted to this replica by the store, used by admitted requests, returned to the store unused, and expired unused when their lease ended.",
        &["domain", "rule", "hits"],
        per_rule(&[
                ("granted", |c| c.granted),
                ("used", |c| c.used),
                ("returned", |c| c.returned),
                ("expired", |c| c.expired),
            ],
        ),
    );
    let asks = Arc::clone(stats);
    metrics.register_counter_family(
        "ratelimitd_lease_asks_total",
        "Leases asked for (one per counter per store call), by rule.",
        &["domain", "rule"],
        move || {
            asks.by_rule()
                .into_iter()
                .map(|(rule, counts)| {
                    (
                        vec![rule.domain.to_string(), rule.rule.to_string()],
                        counts.asks,
                    )
                })
                .collect()
        },
    );
    let rounds = Arc::clone(stats);
    metrics.register_counter(
        "ratelimitd_lease_calls_total",
        "Store calls that asked for leases: each carries every counter due for a refill then, whatever its rule.",
        move || rounds.rounds(),
    );
    let refused = Arc::clone(stats);
    metrics.register_counter(
        "ratelimitd_lease_counters_refused_total",
        "Checks of leased rules decided exactly because the replica already held leases on as many counters as it may.",
        move || refused.counters_refused(),
    );
}

fn register_failure_health<S: Store>(metrics: &Metrics, store: &Arc<FailureHealth<S>>) {
    let (calls, failures, trips) = (store.clone(), store.clone(), store.clone());
    metrics.register_gauge(
        "ratelimitd_health_store_calls",
        "Requests the store decided or failed in the health window (--health-failure-window).",
        move || calls.tally().calls,
    );
    metrics.register_gauge(
        "ratelimitd_health_store_failures",
        "Of those, the ones that failed (errors, timeouts, lost connections).",
        move || failures.tally().failures,
    );
    metrics.register_counter(
        "ratelimitd_health_store_failure_trips_total",
        "Times failed store calls turned health NOT_SERVING (--health-failure-ratio reached).",
        move || trips.trips(),
    );
}

fn reloader_rules(reloader: &Reloader) -> Arc<Rules> {
    reloader.rules().load_full()
}

/// Completes `DRAIN_TIMEOUT` after shutdown starts: long-lived streams (health `Watch`) and
/// unresponsive peers never finish by themselves and must not keep the process alive.
async fn drain_deadline(stopping: &CancellationToken) {
    stopping.cancelled().await;
    tokio::time::sleep(DRAIN_TIMEOUT).await;
}

/// Whether the configuration lets health be SERVING: always, unless health waits for a
/// configuration to have loaded ([`InitialConfig::healthy_only_when_loaded`]).
struct ConfigGate {
    config: ConfigFeed,
    required: bool,
}

impl ConfigGate {
    fn open(&self) -> bool {
        !self.required || self.config.has_loaded()
    }
}

/// Whether the store's state counts for health (`--health-follows-store`).
#[derive(Clone, Copy)]
struct StoreHealth {
    followed: bool,
}

impl StoreHealth {
    /// The store's health as health sees it: unhealthy while startup still waits for it (see
    /// [`Connecting`]); then always healthy when not followed, and then the store is not even
    /// asked.
    async fn healthy<S: Store>(self, store: &S) -> bool {
        store.is_connected() && (!self.followed || store.is_healthy().await)
    }
}

/// Drives health from the store (NOT_SERVING while it cannot answer, SERVING when it is back)
/// and from the configuration's [`ConfigGate`].
async fn probe_store<S: Store>(
    store: Arc<S>,
    store_health: StoreHealth,
    config: ConfigGate,
    health: Arc<Health>,
    stopping: CancellationToken,
) {
    let mut ticks = tokio::time::interval(PROBE_INTERVAL);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let store_healthy = store_health.healthy(&*store).await;
        let healthy = store_healthy && config.open();
        if healthy != health.is_serving() {
            tracing::warn!(
                healthy,
                store_healthy,
                config_loaded = config.open(),
                "health changed"
            );
        }
        health.set_serving(healthy).await;
    }
}
