//! `ratelimitd serve`: every flag group, put together into the server's settings, and the
//! process around [`server::run`]: its runtime, its signals, its exit code.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use super::admin::AdminArgs;
use super::bounds::{RequestBoundArgs, TransportBoundArgs};
use super::config_source::{ConfigSourceArgs, InitialConfigArgs, ReloadArgs};
use super::leases::LeaseArgs;
use super::listeners::{GrpcTransportArgs, ListenerArgs};
use super::responses::ResponseArgs;
use super::rlqs::RlqsArgs;
use super::status_page::StatusPageArgs;
use super::store::StoreArgs;
use super::telemetry::TelemetryArgs;
use super::top_values::TopValuesArgs;
use super::upstream_env;
use super::xds::XdsArgs;
use crate::config;
use crate::envoyproxy_env;
use crate::server::{self, open_files};
use crate::service::statsd_exporter::{self, EnvoyproxyMetricsSettings};

/// Every flag of `serve`, by group.
#[derive(clap::Args)]
#[command(group(
    clap::ArgGroup::new("stats_sinks")
        .args(["statsd_addr", "envoyproxy_metrics_addr"])
        .multiple(true)
))]
pub struct ServeArgs {
    #[command(flatten)]
    config: ConfigSourceArgs,
    #[command(flatten)]
    xds: XdsArgs,
    #[command(flatten)]
    reload: ReloadArgs,
    #[command(flatten)]
    initial_config: InitialConfigArgs,
    #[command(flatten)]
    listeners: ListenerArgs,
    #[command(flatten)]
    grpc_transport: GrpcTransportArgs,
    #[command(flatten)]
    store: StoreArgs,
    #[command(flatten)]
    leases: LeaseArgs,
    #[command(flatten)]
    responses: ResponseArgs,
    #[command(flatten)]
    request_bounds: RequestBoundArgs,
    #[command(flatten)]
    transport_bounds: TransportBoundArgs,
    #[command(flatten)]
    rlqs: RlqsArgs,
    #[command(flatten)]
    telemetry: TelemetryArgs,
    #[command(flatten)]
    top_values: TopValuesArgs,
    #[command(flatten)]
    status_page: StatusPageArgs,
    #[command(flatten)]
    admin: AdminArgs,
}

impl ServeArgs {
    /// The server's settings; an error names the flags that do not fit together.
    pub fn settings(
        &self,
        upstream: &envoyproxy_env::Translation,
    ) -> Result<server::Settings, String> {
        let (redis, redis_keys) = self.store.redis(upstream)?;
        let xds = self.xds.options(&self.config.config)?;
        Ok(server::Settings {
            config_paths: self.config.config.clone(),
            xds,
            redis,
            redis_keys,
            response_headers: self.responses.headers(),
            reload_interval: self.reload.interval(),
            on_store_error: self.store.on_store_error(),
            deny_cache: self.store.deny_cache(),
            failure_health: self.store.failure_health(),
            health_follows_store: self.store.health_follows_store(),
            drop_in: upstream.drop_in.then(|| server::DropIn {
                differences: upstream.differences(),
            }),
            near_limit_ratio: self.telemetry.near_limit_ratio(),
            metrics_max_rule_series: self.telemetry.metrics_max_rule_series(),
            top: self.top_values.settings()?,
            lanes: self.listeners.lanes(),
            transport_bounds: self.transport_bounds.bounds(),
            grpc_memory_budget: self.transport_bounds.grpc_memory_budget(),
            modes: self.responses.modes(),
            response_dynamic_metadata: self.responses.dynamic_metadata(),
            load: config::LoadOptions {
                default_consistency: self.leases.default_consistency(),
                ..self.config.load_options()
            },
            lease_period: self.leases.lease_period(),
            request_bounds: self.request_bounds.bounds(),
            config_bounds: self.config.bounds.bounds(),
            initial_config: self.initial_config.initial_config(),
            metrics_path: self.listeners.ports.metrics_path.clone(),
            statsd: self.telemetry.statsd()?,
            envoyproxy_metrics: self.envoyproxy_metrics()?,
            grpc: self.grpc_transport.options()?,
            rlqs: self.rlqs.settings(),
            status_page: self.status_page.settings(),
            admin_token: self.admin.admin_token()?,
        })
    }
}

impl ServeArgs {
    /// envoyproxy/ratelimit's Prometheus families, with their mapping read (a mapping that
    /// cannot be used is an error naming the file and the place); keys statsd_exporter ignores
    /// are logged.
    fn envoyproxy_metrics(&self) -> Result<Option<EnvoyproxyMetricsSettings>, String> {
        let Some((source, path)) = self.listeners.ports.envoyproxy.source() else {
            return Ok(None);
        };
        let (mapper, unknown) = statsd_exporter::load_mapper(&source)
            .map_err(|error| format!("--envoyproxy-metrics-mapper: {error}"))?;
        for key in unknown {
            tracing::warn!(
                "--envoyproxy-metrics-mapper: {key}: not a statsd_exporter key, ignored"
            );
        }
        tracing::info!(
            mapping = statsd_exporter::describe(&source),
            "envoyproxy/ratelimit's Prometheus metrics"
        );
        Ok(Some(EnvoyproxyMetricsSettings {
            path: path.to_owned(),
            mapper: Arc::new(mapper),
            extra_tags: self.telemetry.extra_tags(),
        }))
    }
}

/// How long exit waits for blocking work still running (a reload reading files) once serving
/// has stopped; such work must never keep the process alive.
const BLOCKING_WORK_GRACE: Duration = Duration::from_secs(1);

/// Logs, binds, serves until SIGTERM or SIGINT; exit 1 with the reason on any error.
pub fn serve(args: ServeArgs, upstream: &envoyproxy_env::Translation) -> ExitCode {
    let traces = args.telemetry.init();
    upstream_env::log(upstream);
    let traces = match traces {
        Ok(traces) => traces,
        Err(error) => return fatal(error),
    };
    open_files::raise_to_hard_limit();
    let settings = match args.settings(upstream) {
        Ok(settings) => settings,
        Err(error) => return fatal(error),
    };
    // Serving lane 0 and the housekeeping (HTTP, health probes, reload) share this thread; the
    // other lanes start their own (see `server::run`).
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => return fatal(format!("cannot start the async runtime: {error}")),
    };
    let result = runtime.block_on(server::run(
        settings,
        args.listeners.bind(&args.grpc_transport),
        shutdown_signal(),
    ));
    runtime.shutdown_timeout(BLOCKING_WORK_GRACE);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => fatal(error),
    }
}

/// Ends a start or a run that failed with exit 1: the reason as an error record and, whatever
/// the log level lets through, as a line on stderr, so that no process exits 1 without a word
/// (a crash loop with empty logs).
fn fatal(error: impl std::fmt::Display) -> ExitCode {
    tracing::error!("{error}");
    eprintln!("error: {error}");
    ExitCode::FAILURE
}

/// Completes on SIGTERM or SIGINT.
async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(
            tokio::signal::unix::SignalKind::terminate(),
        ) {
            Ok(signal) => signal,
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM; only SIGINT stops the server");
                let _ = interrupt.await;
                return;
            }
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
