//! envoyproxy/ratelimit's Prometheus metrics (`USE_PROMETHEUS=true`), as its Prometheus sink
//! exposes them: its statsd stats (the very names the statsd sink sends, from the same
//! counters, see [`crate::service::statsd`]) put through statsd_exporter's mapper
//! ([`mapper`]: upstream's built-in mapping, or a `PROMETHEUS_MAPPER_YAML` file), and written
//! as its Go client writes them ([`text`]). So the dashboards and alerts of an upstream
//! deployment read the same families and labels, e.g.
//! `ratelimit_service_rate_limit_total_hits{domain="edge",key1="client"}`.
//!
//! Counters are the totals since start: what upstream's sink adds up flush after flush, but
//! current at each scrape (upstream's move at each `STATS_FLUSH_INTERVAL`). A series shows once
//! its stat has counted, as there. The request time (`response_time`, whole milliseconds) is a
//! histogram (upstream's built-in mapping: client_golang's default buckets, in seconds; with
//! `PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`, in milliseconds) or, where a mapping says so or
//! leaves the type unset, a summary ([`summary`]).
//!
//! The series are bounded as the stats are: one set per configured rule, the detailed and
//! overridden descriptors capped per rule, unknown domains capped
//! ([`crate::service::metrics`]); the mapping only renames them.

pub mod mapper;
mod summary;
pub mod text;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use self::mapper::{Mapped, Mapper, Observer, StatType};
use self::text::{Families, Sample};
use crate::service::metrics::Metrics;
use crate::service::statsd::{counter_stats, response_time_stat, ExtraTags, StatNames};

/// envoyproxy/ratelimit's built-in mapping (`src/stats/prom/default_mapper.yaml`).
const DEFAULT_MAPPER: &str = include_str!("default_mapper.yaml");

/// Largest mapping file read.
const MAX_MAPPER_BYTES: u64 = 1 << 20;

/// Most stat names whose mapping is remembered; beyond, the memory starts over. The stat names
/// are bounded by the configuration (see the module documentation), so this only bounds a
/// configuration of very many rules.
const MAX_CACHED_NAMES: usize = 100_000;

/// Which mapping names the families.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MapperSource {
    /// Upstream's built-in mapping; `response_time_ms`: its request-time histogram in
    /// milliseconds rather than seconds (`PROMETHEUS_RESPONSE_TIME_AS_MILLISECONDS`).
    Builtin { response_time_ms: bool },
    /// A statsd_exporter mapping file (`PROMETHEUS_MAPPER_YAML`).
    File(PathBuf),
}

/// The envoyproxy-format metrics port: where, and how the families are named.
#[derive(Debug, Clone)]
pub struct EnvoyproxyMetricsSettings {
    pub path: String,
    pub mapper: Arc<Mapper>,
    /// envoyproxy/ratelimit's `EXTRA_TAGS`, written into the stat names before they are mapped.
    pub extra_tags: ExtraTags,
}

/// Reads the mapping `source` names; unknown keys (statsd_exporter ignores them) are returned
/// to be reported. An error names the file and where in it.
pub fn load_mapper(source: &MapperSource) -> Result<(Mapper, Vec<String>), String> {
    let mut unknown = Vec::new();
    match source {
        MapperSource::Builtin { response_time_ms } => {
            let text = if *response_time_ms {
                // As upstream: the built-in mapping without its seconds scale.
                DEFAULT_MAPPER.replacen("    scale: 0.001\n", "", 1)
            } else {
                DEFAULT_MAPPER.to_string()
            };
            let mapper = Mapper::parse(&text, &mut unknown)
                .map_err(|error| format!("the built-in mapping: {error}"))?;
            Ok((mapper, unknown))
        }
        MapperSource::File(path) => {
            let shown = path.display();
            let text = crate::regular_file::read_text(path, MAX_MAPPER_BYTES)
                .map_err(|error| format!("{shown}: {error}"))?;
            let mapper =
                Mapper::parse(&text, &mut unknown).map_err(|error| format!("{shown}:{error}"))?;
            let unknown = unknown
                .into_iter()
                .map(|key| format!("{shown}:{key}"))
                .collect();
            Ok((mapper, unknown))
        }
    }
}

/// How `source` is named in the log.
pub fn describe(source: &MapperSource) -> String {
    match source {
        MapperSource::Builtin {
            response_time_ms: false,
        } => "envoyproxy/ratelimit's built-in mapping".into(),
        MapperSource::Builtin {
            response_time_ms: true,
        } => "envoyproxy/ratelimit's built-in mapping, request times in milliseconds".into(),
        MapperSource::File(path) => format!("the mapping file {}", Path::new(path).display()),
    }
}

/// The families, rendered from the metrics at each scrape.
pub struct EnvoyproxyMetrics {
    metrics: Arc<Metrics>,
    names: StatNames,
    mapper: Arc<Mapper>,
    /// What the request-time timer maps to (one name, known at startup).
    timer: Mapped,
    /// The timer's sliding window, when it is a summary.
    window: Option<summary::Window>,
    cache: Mutex<HashMap<String, Mapped>>,
}

impl EnvoyproxyMetrics {
    /// The families of `metrics` under `settings`' mapping. Asks `metrics` to keep request
    /// times.
    pub fn new(settings: &EnvoyproxyMetricsSettings, metrics: Arc<Metrics>) -> EnvoyproxyMetrics {
        metrics.keep_response_times();
        let names = StatNames::new(&settings.extra_tags);
        let timer = settings
            .mapper
            .map(&response_time_stat(&names), StatType::Observer);
        let window = match &timer {
            Mapped::Series(target) => match &target.observer {
                Observer::Summary {
                    max_age,
                    age_buckets,
                    ..
                } => Some(summary::Window::new(*max_age, *age_buckets)),
                Observer::Histogram { .. } => None,
            },
            Mapped::Dropped => None,
        };
        EnvoyproxyMetrics {
            metrics,
            names,
            mapper: settings.mapper.clone(),
            timer,
            window,
            cache: Mutex::new(HashMap::new()),
        }
    }

    /// What the request-time timer becomes: `histogram`, `summary` or `dropped` (for the log).
    pub fn timer_kind(&self) -> &'static str {
        match &self.timer {
            Mapped::Series(target) => match target.observer {
                Observer::Histogram { .. } => "histogram",
                Observer::Summary { .. } => "summary",
            },
            Mapped::Dropped => "dropped",
        }
    }

    /// Until `stopping`: rotates the request-time summary's window (nothing to do for a
    /// histogram).
    pub async fn run(self: Arc<Self>, stopping: CancellationToken) {
        let Some(window) = &self.window else {
            return;
        };
        let step = window.step();
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + step, step);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stopping.cancelled() => return,
                _ = ticks.tick() => window.rotate(&self.metrics),
            }
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut families = Families::default();
        // The timer first: upstream observes it on the first request, before any counter flush.
        if let Mapped::Series(target) = &self.timer {
            let times = summary::totals(&self.metrics);
            let count: u64 = times.iter().map(|(_, n)| n).sum();
            if count > 0 {
                let scale = target.scale.unwrap_or(1.0);
                let sum: f64 = times
                    .iter()
                    .map(|(ms, n)| *ms as f64 * scale * *n as f64)
                    .sum();
                let sample = match &target.observer {
                    Observer::Histogram { buckets } => Sample::Histogram {
                        buckets: buckets
                            .iter()
                            .filter(|bound| bound.is_finite())
                            .map(|bound| {
                                let within = times
                                    .iter()
                                    .filter(|(ms, _)| *ms as f64 * scale <= *bound)
                                    .map(|(_, n)| n)
                                    .sum();
                                (*bound, within)
                            })
                            .collect(),
                        sum,
                        count,
                    },
                    Observer::Summary { quantiles, .. } => {
                        let window = self
                            .window
                            .as_ref()
                            .map_or_else(|| times.clone(), |w| w.observations(&times));
                        Sample::Summary {
                            quantiles: summary::quantiles(&window, quantiles, scale),
                            sum,
                            count,
                        }
                    }
                };
                families.add(target, sample);
            }
        }
        let counters = counter_stats(&self.metrics.upstream_totals(), &self.names);
        let mut cache = self.cache.lock();
        if cache.len() > MAX_CACHED_NAMES {
            cache.clear();
        }
        for (name, value) in counters {
            let mapped = cache
                .entry(name)
                .or_insert_with_key(|name| self.mapper.map(name, StatType::Counter));
            if let Mapped::Series(target) = mapped {
                let value = value as f64 * target.scale.unwrap_or(1.0);
                families.add(target, Sample::Counter(value));
            }
        }
        drop(cache);
        families.render()
    }
}

#[cfg(test)]
mod tests;
