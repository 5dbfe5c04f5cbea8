//! Where the rules come from: files (reloaded when they change and on SIGHUP) or an xDS server.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use super::error::ServerError;
use super::memory_release;
use super::settings::Settings;
use super::tasks::Tasks;
use crate::config::reload::{ReloadOutcome, Reloader};
use crate::config::xds::{XdsConfig, XdsOptions, XdsUpdate};
use crate::config::{self, Loader};
use crate::limiter::Rules;
use crate::service::version_info::shown;
use crate::service::Metrics;

/// After a change is noticed, how long to let the writer finish before loading.
const RELOAD_SETTLE: Duration = Duration::from_millis(100);

/// Called after the rules in force changed (clears the deny cache, re-reads RLQS rules).
pub type OnRulesChanged = Box<dyn Fn() + Send + Sync>;

/// Where the rules come from, and whether any have loaded.
#[derive(Clone)]
pub enum ConfigFeed {
    /// Files, reloaded when they change or on SIGHUP.
    Files {
        reloader: Arc<Reloader>,
        /// How often the files are checked for changes; `None`: only on SIGHUP.
        interval: Option<Duration>,
    },
    /// An xDS server, through a client that validates with `loader`.
    Xds {
        config: Arc<XdsConfig>,
        options: Box<XdsOptions>,
        loader: Arc<Loader>,
    },
}

impl ConfigFeed {
    /// Loads the configuration files (their errors stop the start, unless
    /// `--force-start-without-initial-config`), or prepares the xDS client, which connects once
    /// [`ConfigFeed::follow`] runs; the loader's and xDS's families registered on `metrics`.
    pub fn start(settings: &Settings, metrics: &Metrics) -> Result<ConfigFeed, ServerError> {
        let loader = Arc::new(Loader::new(settings.config_bounds).with_options(settings.load));
        metrics.register_config_loader(loader.clone());
        let feed = match settings.xds.clone() {
            Some(options) => {
                tracing::info!(
                    server = %options.server,
                    node = %options.node.id,
                    tls = options.tls.is_some(),
                    "configuration from xDS; waiting for the server's first response"
                );
                let config = Arc::new(XdsConfig::new());
                metrics.register_xds_config(config.clone());
                ConfigFeed::Xds {
                    config,
                    options: Box::new(options),
                    loader,
                }
            }
            None => ConfigFeed::Files {
                reloader: Arc::new(start_files(settings, loader)?),
                interval: settings.reload_interval.filter(|every| !every.is_zero()),
            },
        };
        metrics.register_rules(&feed.rules().load());
        Ok(feed)
    }

    /// The rules in force, swapped whole by every reload or xDS update.
    pub fn rules(&self) -> &Arc<ArcSwap<Rules>> {
        match self {
            ConfigFeed::Files { reloader, .. } => reloader.rules(),
            ConfigFeed::Xds { config, .. } => config.rules(),
        }
    }

    pub fn has_loaded(&self) -> bool {
        match self {
            ConfigFeed::Files { reloader, .. } => reloader.has_loaded(),
            ConfigFeed::Xds { config, .. } => config.has_loaded(),
        }
    }

    /// Whether the service waits for the xDS server's first configuration before it answers.
    pub fn is_xds(&self) -> bool {
        matches!(self, ConfigFeed::Xds { .. })
    }

    /// Completes once a valid configuration has arrived over xDS; at once for files, which
    /// load before serving starts (or were forced to start without).
    pub async fn loaded(&self) {
        match self {
            ConfigFeed::Files { .. } => {}
            ConfigFeed::Xds { config, .. } => config.loaded().await,
        }
    }

    pub fn xds(&self) -> Option<Arc<XdsConfig>> {
        match self {
            ConfigFeed::Files { .. } => None,
            ConfigFeed::Xds { config, .. } => Some(config.clone()),
        }
    }

    /// Keeps the rules current until shutdown: the files watched (and SIGHUP), or the xDS client
    /// run; each change counted as a reload on `metrics`, its rules registered there, and
    /// `on_rules_changed` called.
    pub fn follow(
        &self,
        metrics: Arc<Metrics>,
        on_rules_changed: OnRulesChanged,
        tasks: &mut Tasks,
    ) {
        let stopping = tasks.stopping();
        match self.clone() {
            ConfigFeed::Files { reloader, interval } => tasks.spawn(watch_config(
                reloader,
                metrics,
                interval,
                on_rules_changed,
                Hangups::listen(),
                stopping,
            )),
            ConfigFeed::Xds {
                config,
                options,
                loader,
            } => {
                let on_update = xds_updates(config.clone(), metrics, on_rules_changed);
                tasks.spawn(config::xds::run(
                    *options, config, loader, on_update, stopping,
                ));
            }
        }
    }
}

/// Loads the configuration files for the first time: their errors stop the start, unless
/// `--force-start-without-initial-config` starts without them.
fn start_files(settings: &Settings, loader: Arc<Loader>) -> Result<Reloader, ServerError> {
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

/// SIGHUP, listened to by the reload task itself (signals that arrive before it takes one are
/// one reload, as the OS delivers them).
struct Hangups {
    #[cfg(unix)]
    signal: tokio::signal::unix::Signal,
}

impl Hangups {
    /// `None` where signals do not exist or cannot be caught (said in a warning).
    fn listen() -> Option<Hangups> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            match signal(SignalKind::hangup()) {
                Ok(signal) => Some(Hangups { signal }),
                Err(error) => {
                    tracing::warn!(%error, "cannot listen for SIGHUP; reload on file change only");
                    None
                }
            }
        }
        #[cfg(not(unix))]
        None
    }

    /// The next SIGHUP; `None` once no more can come.
    async fn next(&mut self) -> Option<()> {
        #[cfg(unix)]
        return self.signal.recv().await;
        #[cfg(not(unix))]
        std::future::pending().await
    }
}

/// Reloads the configuration when its files change (checked every `interval`) and on SIGHUP.
async fn watch_config(
    reloader: Arc<Reloader>,
    metrics: Arc<Metrics>,
    interval: Option<Duration>,
    on_rules_changed: OnRulesChanged,
    mut hangups: Option<Hangups>,
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
                    Some(hangups) => hangups.next().await,
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
                applied(&metrics, reloader.rules(), &*on_rules_changed, changed);
                let change = if changed { "" } else { ", no change" };
                tracing::info!(trigger, domains, limits, "configuration reloaded{change}");
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
    on_rules_changed: OnRulesChanged,
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
            applied(metrics, config.rules(), on_rules_changed, changed);
            let change = if changed { "" } else { ", no change" };
            tracing::info!(version = %shown(&version), domains, limits, "xDS configuration applied{change}");
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

/// A configuration that validated is in force: counted as a reload; when it changed the rules,
/// their metrics registered and `on_rules_changed` called.
fn applied(
    metrics: &Metrics,
    rules: &ArcSwap<Rules>,
    on_rules_changed: &(dyn Fn() + Send + Sync),
    changed: bool,
) {
    metrics.record_reload(true);
    if changed {
        metrics.register_rules(&rules.load_full());
        on_rules_changed();
    }
}
