//! The background task that fills the status page's ring buffer: every sample interval, the
//! per-rule and process counters `/metrics` shows and one health check of the store, timed
//! (bounded by the interval). It reads counters the decisions add to anyway, so the decision
//! path does no more work for the page.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::limiter::SystemClock;

use tokio_util::sync::CancellationToken;

use super::history::StoreProbe;
use super::StatusPage;
use crate::service::Metrics;
use crate::store::Store;

/// Samples into `page` until `stopping` is cancelled.
pub async fn run<S: Store>(
    page: Arc<StatusPage>,
    metrics: Arc<Metrics>,
    store: Arc<S>,
    stopping: CancellationToken,
) {
    let interval = page.settings.sample_interval;
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stopping.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let probe = probe(&*store, interval).await;
        let (page, metrics) = (page.clone(), metrics.clone());
        // Off the runtime's threads: with many configured rules, reading them takes a while.
        let sampled = tokio::task::spawn_blocking(move || {
            let rules = metrics.rule_totals();
            let process = metrics.process_totals();
            page.history
                .lock()
                .record(SystemClock::now_secs(), rules, process, probe);
        });
        if sampled.await.is_err() {
            tracing::warn!("the status page's sample was not taken");
        }
    }
}

/// The store's health check, timed; unhealthy when it does not answer within `within`.
async fn probe<S: Store>(store: &S, within: Duration) -> StoreProbe {
    if !store.is_connected() {
        return StoreProbe::Connecting;
    }
    let started = Instant::now();
    match tokio::time::timeout(within, store.is_healthy()).await {
        Ok(true) => StoreProbe::Healthy {
            micros: u32::try_from(started.elapsed().as_micros()).unwrap_or(u32::MAX),
        },
        _ => StoreProbe::Unhealthy,
    }
}
