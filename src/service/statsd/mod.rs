//! The statsd sink: envoyproxy/ratelimit's stats under its names, sent over UDP the way its
//! statsd library (lyft/gostats, plain statsd) sends them, for the statsd_exporter mappings and
//! dashboards built on them; or as its DogStatsD sink sends them ([`Dialect::DogStatsd`]: tags
//! instead of names, see [`dogstatsd`]).
//!
//! Nothing is counted here: every flush reads what [`Metrics`] counted since the previous one
//! (the counters `/metrics` serves), so the request path pays nothing for the sink. Counters go
//! out as deltas (`name:delta|c`, none when zero), each request's time as a timer line
//! (`ratelimit_server.ShouldRateLimit.response_time:<ms>|ms`), packed into datagrams of at most
//! 1432 bytes. The host is looked up at start and again after any failure; while no address is
//! known nothing is taken, so the counts wait for the next flush that can send them. The address
//! a lookup gives is logged (INFO) once, and again only when a later lookup gives another. A send
//! that fails loses its datagram (as gostats drops it), is counted in
//! `ratelimitd_statsd_send_errors_total` and logged at most once a second, as are failed lookups.

mod address;
mod datagrams;
pub mod dogstatsd;
mod flush;
mod names;
mod tags;

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio_util::sync::CancellationToken;

pub use self::address::StatsdAddr;
pub use self::dogstatsd::{DogStatsd, Mogrifiers};
pub use self::flush::{counter_stats, response_time_stat, Dialect};
pub use self::names::StatNames;
pub use self::tags::ExtraTags;

use super::metrics::Metrics;
use super::throttle::WarnThrottle;

/// How long a lookup of the statsd host may take before the flush gives up (and retries at the
/// next one).
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where and how often to send, and the tags of every stat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdSettings {
    pub addr: StatsdAddr,
    /// envoyproxy/ratelimit's `STATS_FLUSH_INTERVAL`.
    pub flush_interval: Duration,
    /// envoyproxy/ratelimit's `EXTRA_TAGS`.
    pub extra_tags: ExtraTags,
    /// Plain statsd, or DogStatsD (envoyproxy/ratelimit's `USE_DOG_STATSD`).
    pub dialect: Dialect,
}

impl StatsdSettings {
    /// envoyproxy/ratelimit's default flush interval.
    pub const DEFAULT_FLUSH_INTERVAL: Duration = Duration::from_secs(10);

    /// Sends to `addr` every 10 s, without extra tags.
    pub fn new(addr: StatsdAddr) -> StatsdSettings {
        StatsdSettings {
            addr,
            flush_interval: StatsdSettings::DEFAULT_FLUSH_INTERVAL,
            extra_tags: ExtraTags::default(),
            dialect: Dialect::Statsd,
        }
    }
}

/// What the sink did, for `/metrics`.
#[derive(Debug, Default)]
struct SinkStats {
    datagrams: AtomicU64,
    errors: AtomicU64,
}

/// Flushes every `flush_interval` until `stopping`, then once more; returns after that last
/// flush.
pub async fn run(settings: StatsdSettings, metrics: Arc<Metrics>, stopping: CancellationToken) {
    let stats = Arc::new(SinkStats::default());
    let datagrams = stats.clone();
    metrics.register_counter(
        "ratelimitd_statsd_datagrams_sent_total",
        "Datagrams sent to the statsd server (--statsd-addr).",
        move || datagrams.datagrams.load(Ordering::Relaxed),
    );
    let errors = stats.clone();
    metrics.register_counter(
        "ratelimitd_statsd_send_errors_total",
        "Failures to look up, reach or send to the statsd server (each failed datagram, lookup or connect).",
        move || errors.errors.load(Ordering::Relaxed),
    );
    let every = settings.flush_interval.max(Duration::from_millis(1));
    let mut sink = Sink {
        names: Arc::new(StatNames::new(&settings.extra_tags)),
        dialect: Arc::new(settings.dialect),
        addr: settings.addr,
        metrics,
        socket: None,
        stats,
        warnings: WarnThrottle::new(),
        announced: None,
    };
    sink.connect().await;
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let last = tokio::select! {
            _ = stopping.cancelled() => true,
            _ = ticks.tick() => false,
        };
        sink.flush().await;
        if last {
            return;
        }
    }
}

struct Sink {
    addr: StatsdAddr,
    names: Arc<StatNames>,
    dialect: Arc<Dialect>,
    metrics: Arc<Metrics>,
    /// Connected to the address last looked up; `None` until a lookup succeeds, and again after
    /// a failure.
    socket: Option<UdpSocket>,
    stats: Arc<SinkStats>,
    warnings: WarnThrottle,
    /// The address the "sending stats to statsd" line last named: a reconnect after a failed
    /// send (a closed port fails every flush) logs it again only when the lookup gave another.
    announced: Option<SocketAddr>,
}

impl Sink {
    /// Looks the host up and connects a UDP socket to it; logs and counts a failure. The address
    /// found is logged when it differs from the one logged before.
    async fn connect(&mut self) {
        match self.try_connect().await {
            Ok((socket, resolved)) => {
                if self.announced != Some(resolved) {
                    tracing::info!(statsd_addr = %self.addr, %resolved, "sending stats to statsd");
                    self.announced = Some(resolved);
                }
                self.socket = Some(socket);
            }
            Err(error) => {
                self.stats.errors.fetch_add(1, Ordering::Relaxed);
                if let Some(suppressed) = self.warnings.admit() {
                    tracing::warn!(statsd_addr = %self.addr, %error, suppressed, "cannot reach statsd; stats wait for the next flush");
                }
            }
        }
    }

    async fn try_connect(&self) -> std::io::Result<(UdpSocket, SocketAddr)> {
        let resolved = self.addr.resolve(RESOLVE_TIMEOUT).await?;
        let local: SocketAddr = match resolved {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local).await?;
        socket.connect(resolved).await?;
        Ok((socket, resolved))
    }

    async fn flush(&mut self) {
        if self.socket.is_none() {
            self.connect().await;
        }
        let Some(socket) = &self.socket else {
            return;
        };
        let (metrics, names, dialect) = (
            self.metrics.clone(),
            self.names.clone(),
            self.dialect.clone(),
        );
        let composed =
            tokio::task::spawn_blocking(move || flush::compose(&metrics, &names, &dialect)).await;
        let (datagrams, dropped) = match composed {
            Ok(datagrams) => datagrams.finish(),
            Err(error) => {
                tracing::error!(%error, "statsd flush failed");
                return;
            }
        };
        if dropped > 0 {
            tracing::warn!(
                dropped,
                "stat lines longer than a UDP datagram were not sent"
            );
        }
        let mut failed = false;
        for datagram in &datagrams {
            match socket.send(datagram).await {
                Ok(_) => {
                    self.stats.datagrams.fetch_add(1, Ordering::Relaxed);
                }
                Err(error) => {
                    failed = true;
                    self.stats.errors.fetch_add(1, Ordering::Relaxed);
                    if let Some(suppressed) = self.warnings.admit() {
                        tracing::warn!(statsd_addr = %self.addr, %error, suppressed, "sending to statsd failed; its stats are lost");
                    }
                }
            }
        }
        if failed {
            // Look the host up again before the next flush: it may have moved.
            self.socket = None;
        }
    }
}
