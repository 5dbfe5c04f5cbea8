//! What the server tells about itself: logs, traces, the near-limit metric, statsd.

use std::io::IsTerminal;
use std::time::Duration;

use clap::ValueEnum;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Layer};

use super::log_filter;
use super::log_lines::OneLine;
use super::parse;
use super::traces::TracingArgs;
use crate::otel;
use crate::service::statsd::{
    Dialect, DogStatsd, ExtraTags, Mogrifiers, StatsdAddr, StatsdSettings,
};

/// Log records as text lines or JSON objects.
#[derive(Clone, Copy, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Logs, metrics and statsd.
#[derive(clap::Args)]
pub struct TelemetryArgs {
    #[arg(long, value_enum)]
    log_format: LogFormat,
    #[arg(long, value_name = "LEVEL|FILTER", value_parser = log_filter::directives)]
    log_level: String,
    #[arg(long, value_parser = parse::ratio)]
    near_limit_ratio: f64,
    #[arg(long, value_name = "N", value_parser = parse::count)]
    metrics_max_rule_series: usize,
    #[command(flatten)]
    statsd: StatsdArgs,
    #[command(flatten)]
    tracing: TracingArgs,
}

impl TelemetryArgs {
    /// Starts the trace pipeline when `--tracing` asks for it and installs the global log
    /// subscriber with it; a pipeline that cannot start is logged and refused.
    pub fn init(&self) -> Result<Option<otel::Pipeline>, String> {
        let traces = self.tracing.settings().and_then(otel::Pipeline::start);
        init_logging(
            self.log_format,
            &self.log_level,
            traces.as_ref().ok().and_then(Option::as_ref),
        );
        let traces = traces?;
        if let Some(traces) = &traces {
            tracing::info!("{}", traces.describe());
        }
        Ok(traces)
    }

    /// The near-limit share of the metrics.
    pub fn near_limit_ratio(&self) -> f64 {
        self.near_limit_ratio
    }

    /// The most per-rule series `/metrics` shows.
    pub fn metrics_max_rule_series(&self) -> usize {
        self.metrics_max_rule_series
    }

    /// The statsd sink, if asked for; an error names the flag or variable at fault.
    pub fn statsd(&self) -> Result<Option<StatsdSettings>, String> {
        self.statsd.settings()
    }

    /// `--statsd-extra-tags`, which the envoyproxy-format metrics write into their stat names
    /// too.
    pub fn extra_tags(&self) -> ExtraTags {
        self.statsd.statsd_extra_tags.clone().unwrap_or_default()
    }
}

/// What the statsd sink speaks.
#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum StatsdFormat {
    /// Plain statsd, tags written into the names (lyft/gostats).
    Statsd,
    /// DogStatsD: tags as tags (envoyproxy/ratelimit's USE_DOG_STATSD).
    Dogstatsd,
}

/// Logs to stdout, one record per line ([`OneLine`]), through `directives` (checked by
/// [`log_filter::directives`] when the flag was parsed; `info` should they still not parse),
/// colours only on a terminal; the request spans go to `traces` only (see [`otel`]).
fn init_logging(format: LogFormat, directives: &str, traces: Option<&otel::Pipeline>) {
    let (filter, refused) = match EnvFilter::try_new(directives) {
        Ok(filter) => (filter, None),
        Err(error) => (EnvFilter::new("info"), Some(error)),
    };
    let output = tracing_subscriber::fmt::layer()
        .with_ansi(std::io::stdout().is_terminal())
        .with_writer(OneLine(std::io::stdout));
    let output = match format {
        LogFormat::Text => output.boxed(),
        LogFormat::Json => output.json().boxed(),
    };
    tracing_subscriber::registry()
        .with(output.with_filter(otel::without_spans(filter)))
        .with(traces.map(otel::Pipeline::layer))
        .init();
    if let Some(error) = refused {
        tracing::warn!(
            "--log-level `{directives}` is not a log level or filter ({error}); logging at info"
        );
    }
}

/// The statsd sink: envoyproxy/ratelimit's stats, under its names, over UDP.
#[derive(clap::Args)]
struct StatsdArgs {
    #[arg(long, value_name = "HOST:PORT", value_parser = StatsdAddr::parse)]
    statsd_addr: Option<StatsdAddr>,
    #[arg(long, value_parser = parse::positive_duration, requires = "statsd_addr")]
    statsd_flush_interval: Duration,
    #[arg(long, value_name = "K:V[,K:V...]", value_parser = ExtraTags::parse, requires = "stats_sinks")]
    statsd_extra_tags: Option<ExtraTags>,
    #[arg(long, value_enum, requires = "statsd_addr")]
    statsd_format: StatsdFormat,
    #[arg(long, value_name = "NAME[,NAME...]", requires = "statsd_addr")]
    statsd_mogrifiers: Option<String>,
}

impl StatsdArgs {
    fn settings(&self) -> Result<Option<StatsdSettings>, String> {
        let Some(addr) = self.statsd_addr.clone() else {
            return Ok(None);
        };
        let environment = |name: &str| std::env::var(name).ok();
        let dialect = match (self.statsd_format, &self.statsd_mogrifiers) {
            (StatsdFormat::Statsd, None) => Dialect::Statsd,
            (StatsdFormat::Statsd, Some(_)) => {
                return Err(
                    "--statsd-mogrifiers applies to DogStatsD: add --statsd-format dogstatsd"
                        .into(),
                )
            }
            (StatsdFormat::Dogstatsd, mogrifiers) => {
                let mogrifiers = match mogrifiers {
                    Some(list) => Mogrifiers::from_env(list, environment)
                        .map_err(|error| format!("--statsd-mogrifiers: {error}"))?,
                    None => Mogrifiers::default(),
                };
                Dialect::DogStatsd(DogStatsd::new(mogrifiers, environment))
            }
        };
        Ok(Some(StatsdSettings {
            flush_interval: self.statsd_flush_interval,
            extra_tags: self.statsd_extra_tags.clone().unwrap_or_default(),
            dialect,
            ..StatsdSettings::new(addr)
        }))
    }
}
