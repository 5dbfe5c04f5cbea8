//! What [`run`](super::run) is given: the settings of every subsystem and the bound listeners.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;

use super::grpc_options::GrpcOptions;
use super::listener::GrpcListener;
use super::memory_budget;
use super::transport_bounds::TransportBounds;
use crate::config::xds::XdsOptions;
use crate::config::{self, LoadOptions};
use crate::limiter::consistency::DEFAULT_LEASE_PERIOD;
use crate::limiter::{Modes, RequestBounds};
use crate::service::counters::AdminToken;
use crate::service::http::DEFAULT_METRICS_PATH;
use crate::service::metrics::{DEFAULT_MAX_RULE_SERIES, DEFAULT_NEAR_LIMIT_RATIO};
use crate::service::rlqs::RlqsSettings;
use crate::service::statsd::StatsdSettings;
use crate::service::statsd_exporter::EnvoyproxyMetricsSettings;
use crate::service::status_page::StatusPageSettings;
use crate::service::store_error_policy::StoreErrorPolicy;
use crate::service::top_values::TopSettings;
use crate::service::ResponseHeaders;
use crate::store::redis::KeyLayout;
use crate::store::{DenyCacheSettings, FailureHealthSettings, RedisSettings};

/// Everything [`run`](super::run) needs besides the listeners.
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
    /// [`Metrics::with_max_rule_series`](crate::service::Metrics::with_max_rule_series)).
    pub metrics_max_rule_series: usize,
    /// What `GET /top` keeps and shows (values per rule, rules, values or hashes).
    pub top: TopSettings,
    /// Serving lanes: threads serving gRPC connections, each with its own current-thread runtime
    /// (see [`lanes`](super::lanes)); lane 0 is the runtime `run` is called on.
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
    /// The status page (`GET /`): its sample interval and how much it lists.
    pub status_page: StatusPageSettings,
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

/// The sockets [`run`](super::run) serves, bound by the caller's binding future (tests bind port 0).
pub struct Listeners {
    /// RLS, health and reflection: TCP or a unix socket.
    pub grpc: GrpcListener,
    /// The RLS port (`--rls-addr`): `ShouldRateLimit` and health `Check` only, through
    /// ratelimitd's own HTTP/2 server.
    pub rls: Option<TcpListener>,
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
            status_page: StatusPageSettings::default(),
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

/// Why `--key-format envoyproxy` is refused without Redis.
pub const ENVOYPROXY_KEYS_NEED_REDIS: &str =
    "--key-format envoyproxy names Redis keys: it needs a Redis store (--redis-url, \
     --redis-cluster or --redis-sentinel); the in-memory store has no keys";
