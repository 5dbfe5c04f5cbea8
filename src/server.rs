//! The server: configuration, store, the RLS and RLQS services, health, and the ports, each a
//! component that starts from the shared state and stops when shutdown starts.
//!
//! [`run`] takes already-bound listeners so tests can bind port 0 and read the real ports. The
//! transport (connections, their bounds, TLS, the HTTP port) lives in the submodules.

mod accept;
mod announce;
mod call_gate;
mod config_feed;
pub mod connection_age;
mod connections;
mod error;
mod grpc_connection;
pub mod grpc_options;
mod grpc_port;
mod grpc_timeout;
mod health_probe;
mod http_port;
mod http_ports;
mod lanes;
pub mod listener;
mod machine_memory;
pub mod memory_budget;
mod memory_leases;
pub mod memory_release;
pub mod open_files;
mod quotas;
mod request_body;
mod rlqs_thread;
pub mod rls_port;
mod settings;
mod shared;
mod status_sampler;
mod store_metrics;
mod store_stack;
mod store_startup;
mod tasks;
pub mod tls;
pub mod transport_bounds;
pub mod uds_mode;
mod unary_rls;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use self::config_feed::ConfigFeed;
pub use self::error::ServerError;
pub use self::grpc_options::GrpcOptions;
use self::grpc_port::{Capacity, GrpcPort};
use self::health_probe::{ConfigGate, HealthComponent, StoreHealth};
use self::http_ports::{HttpListeners, HttpPorts};
pub use self::listener::GrpcListener;
use self::quotas::Quotas;
pub use self::settings::{
    default_lanes, DropIn, InitialConfig, Listeners, Settings, DEFAULT_RELOAD_INTERVAL,
    ENVOYPROXY_KEYS_NEED_REDIS,
};
use self::shared::Shared;
use self::store_stack::{Stacked, StoreStack};
use self::store_startup::Startup;
use self::tasks::Tasks;
pub use self::transport_bounds::TransportBounds;

use crate::service::rlqs::RlqsSettings;
use crate::service::statsd;
use crate::service::{Metrics, RateLimitEdge};
use crate::store::{Store, StoreError};

/// How long the statsd sink's last flush may take once serving has stopped.
const STATSD_LAST_FLUSH: Duration = Duration::from_secs(3);

/// The listeners [`run`] serves: bound, or bound once the first configuration has arrived.
enum Ports<'a> {
    Bound(Box<Listeners>),
    AfterFirstConfig(Pin<Box<dyn Future<Output = std::io::Result<Listeners>> + 'a>>),
}

impl<'a> Ports<'a> {
    /// Binds at once, unless drop-in mode over xDS waits for the first configuration (see
    /// [`run`]).
    async fn bind(
        settings: &Settings,
        bind: impl Future<Output = std::io::Result<Listeners>> + 'a,
    ) -> std::io::Result<Ports<'a>> {
        match &settings.xds {
            Some(options) if settings.drop_in.is_some() && !settings.initial_config.force_start => {
                tracing::warn!(
                    server = %options.server,
                    "no port opens until the xDS server's first configuration arrives, as \
                     envoyproxy/ratelimit (FORCE_START_WITHOUT_INITIAL_CONFIG=true opens them at once)"
                );
                Ok(Ports::AfterFirstConfig(Box::pin(bind)))
            }
            _ => Ok(Ports::Bound(Box::new(bind.await?))),
        }
    }

    /// The listeners, once `feed` has loaded; `None` when shutdown came first.
    async fn open(
        self,
        feed: &ConfigFeed,
        stopping: &CancellationToken,
    ) -> std::io::Result<Option<Listeners>> {
        match self {
            Ports::Bound(listeners) => Ok(Some(*listeners)),
            Ports::AfterFirstConfig(bind) => {
                tokio::select! {
                    () = feed.loaded() => bind.await.map(Some),
                    () = stopping.cancelled() => {
                        tracing::info!("shutting down before the first configuration");
                        Ok(None)
                    }
                }
            }
        }
    }
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
    let ports = Ports::bind(&settings, bind).await?;
    let transport = grpc_port::transport_options(&settings.grpc)?;
    let metrics = Arc::new(server_metrics(&settings));
    let feed = ConfigFeed::start(&settings, &metrics)?;
    let stack = StoreStack::build(&settings, feed.rules(), &metrics).await?;
    let start = Start {
        settings,
        metrics,
        feed,
        transport,
        ports,
        shutdown: Box::pin(shutdown),
    };
    match stack.store {
        Stacked::Memory(store) => serve(start, store, stack.parts).await,
        Stacked::Redis(store) => serve(start, store, stack.parts).await,
        Stacked::RedisDenyCache(store) => serve(start, store, stack.parts).await,
    }
}

/// What [`run`] has made ready before the store.
struct Start<'a> {
    settings: Settings,
    metrics: Arc<Metrics>,
    feed: ConfigFeed,
    transport: grpc_connection::TransportOptions,
    ports: Ports<'a>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
}

/// The metrics every component registers its families on.
fn server_metrics(settings: &Settings) -> Metrics {
    let metrics = Metrics::new(settings.near_limit_ratio)
        .with_max_rule_series(settings.metrics_max_rule_series)
        .with_top(&settings.top);
    if settings.statsd.is_some() {
        metrics.keep_response_times();
    }
    metrics.register_counter(
        "ratelimitd_tracing_export_failures_total",
        "Span exports that failed (collector down, unreachable or slow); each drops its batch.",
        crate::otel::export_failures,
    );
    metrics
}

/// Serves through `store` until shutdown (or until startup, still waiting for Redis, gives up:
/// then with its error), and stops the components in order: health NOT_SERVING, the gRPC calls
/// drained, the HTTP ports closed, the store's leases given back, statsd's last flush, the
/// background tasks.
async fn serve<S: Store>(
    start: Start<'_>,
    store: Arc<S>,
    parts: store_stack::StoreParts,
) -> Result<(), ServerError> {
    let Start {
        settings,
        metrics,
        feed,
        transport,
        ports,
        shutdown,
    } = start;
    let (shutdown, gave_up) = until_startup_gives_up(shutdown, parts.startup);
    let mut tasks = Tasks::until(shutdown);
    let waits_for_xds = feed.is_xds() && !settings.initial_config.force_start;
    let edge = Arc::new(rls_edge(
        &settings,
        &feed,
        store.clone(),
        &metrics,
        waits_for_xds,
    ));
    let quotas = Quotas::start(
        feed.rules().clone(),
        RlqsSettings {
            never_deny: settings.modes.shadow_mode || settings.modes.quota_mode,
            ..settings.rlqs
        },
        parts.quota_demands,
        &metrics,
        tasks.stopping(),
    )?;
    let health = HealthComponent::start(
        store.clone(),
        StoreHealth {
            followed: settings.health_follows_store,
        },
        ConfigGate {
            config: feed.clone(),
            required: settings.initial_config.healthy_only_when_loaded || waits_for_xds,
        },
        &mut tasks,
    )
    .await;
    feed.follow(
        metrics.clone(),
        quotas.on_rules_changed(parts.on_rules_changed),
        &mut tasks,
    );
    let status_page = status_sampler::start(&settings, &metrics, store.clone(), &mut tasks);
    let statsd = (settings.statsd.clone())
        .map(|sink| tokio::spawn(statsd::run(sink, metrics.clone(), tasks.stopping())));

    let Some(listeners) = ports.open(&feed, &tasks.stopping()).await? else {
        tasks.stop().await;
        return Ok(());
    };
    let grpc_address = listeners.grpc.address()?;
    let rls_address = listeners
        .rls
        .as_ref()
        .map(|rls| rls.local_addr())
        .transpose()?;
    let open_files = open_files::current_soft_limit().unwrap_or(u64::MAX);
    let caps = settings.transport_bounds.connection_caps(open_files);
    let grpc = GrpcPort::start(
        health.service,
        health.check,
        edge.clone(),
        &quotas,
        transport,
        &settings.transport_bounds,
        Capacity {
            max_connections: caps.grpc,
            memory_budget: settings.grpc_memory_budget,
            lanes: settings.lanes,
        },
        metrics.clone(),
        &mut tasks,
    )?;
    let shared = Shared {
        settings,
        metrics,
        feed,
        edge,
        health: health.health,
        quotas,
        status_page,
    };
    let http = HttpPorts::start(
        HttpListeners {
            http: listeners.http,
            metrics: listeners.metrics,
            debug: listeners.debug,
            envoyproxy_metrics: listeners.envoyproxy_metrics,
        },
        &shared,
        caps.http,
        &mut tasks,
    )?;
    announce::serving(
        &grpc_address,
        rls_address,
        &http,
        caps,
        open_files,
        shared.settings.grpc_memory_budget,
        shared.settings.drop_in.as_ref(),
    );

    let served = grpc
        .serve(
            listeners.grpc,
            listeners.rls,
            health.closed,
            tasks.stopping(),
        )
        .await;
    tasks.stopping().cancel();
    http.stopped().await;
    store.release().await;
    if let Some(sink) = statsd {
        if tokio::time::timeout(STATSD_LAST_FLUSH, sink).await.is_err() {
            tracing::warn!(
                ?STATSD_LAST_FLUSH,
                "the last statsd flush did not finish in time"
            );
        }
    }
    tasks.stop().await;
    tracing::info!("stopped");
    match gave_up.get() {
        Some(error) => Err(error.clone().into()),
        None => served,
    }
}

/// `shutdown`, completed early when `startup`, still waiting for Redis, gives up; the error it
/// gave up with is kept in the cell.
fn until_startup_gives_up(
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
    startup: Startup,
) -> (
    impl Future<Output = ()> + Send + 'static,
    Arc<std::sync::OnceLock<StoreError>>,
) {
    let gave_up = Arc::new(std::sync::OnceLock::new());
    let cell = gave_up.clone();
    let shutdown = async move {
        tokio::select! {
            () = shutdown => {}
            error = startup.gave_up() => {
                tracing::error!(%error, "startup gave up waiting for redis; stopping");
                let _ = cell.set(error);
            }
        }
    };
    (shutdown, gave_up)
}

/// The RLS handler over `store`, as the settings shape its answers; over xDS, unless it may
/// start without, it answers UNAVAILABLE until the first configuration has arrived.
fn rls_edge<S: Store>(
    settings: &Settings,
    feed: &ConfigFeed,
    store: Arc<S>,
    metrics: &Arc<Metrics>,
    waits_for_xds: bool,
) -> RateLimitEdge<S> {
    let mut edge = RateLimitEdge::new(feed.rules().clone(), store);
    if waits_for_xds {
        let feed = feed.clone();
        edge = edge.with_initial_config(
            Arc::new(move || feed.has_loaded()),
            "no configuration yet: waiting for the xDS server's first one",
        );
    }
    edge.with_response_headers(settings.response_headers.clone())
        .with_metrics(metrics.clone())
        .with_store_error_policy(settings.on_store_error)
        .with_modes(settings.modes)
        .with_dynamic_metadata(settings.response_dynamic_metadata)
        .with_request_bounds(settings.request_bounds)
}
