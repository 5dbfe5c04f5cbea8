//! Exports that fail: a collector that is down, unreachable or too slow loses spans, and the SDK
//! (built without its internal logs) says nothing. Each failure is counted; one warning a minute
//! says so, with the failures since the last one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

use super::failure_count::EXPORT_FAILURES;

/// How often a failing export is logged at most.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// `E`, with its failures counted in [`EXPORT_FAILURES`] and logged at most once a minute.
#[derive(Debug)]
pub struct Reported<E> {
    inner: E,
    origin: Instant,
    /// Milliseconds after `origin` of the last warning, plus one (0: none yet).
    last_warned_ms: AtomicU64,
    /// Failures since the last warning.
    unreported: AtomicU64,
}

impl<E> Reported<E> {
    pub fn new(inner: E) -> Reported<E> {
        Reported {
            inner,
            origin: Instant::now(),
            last_warned_ms: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
        }
    }

    fn failed(&self, spans: usize, error: &dyn std::fmt::Display) {
        EXPORT_FAILURES.fetch_add(1, Ordering::Relaxed);
        let failures = self.unreported.fetch_add(1, Ordering::Relaxed) + 1;
        let now = self.origin.elapsed().as_millis() as u64 + 1;
        let last = self.last_warned_ms.load(Ordering::Relaxed);
        let due = last == 0 || now >= last + WARN_EVERY.as_millis() as u64;
        if due
            && self
                .last_warned_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            self.unreported.fetch_sub(failures, Ordering::Relaxed);
            tracing::warn!(
                %error,
                spans,
                failures_since_last_warning = failures,
                "tracing: spans could not be exported to the OTLP collector and are dropped \
                 (ratelimitd_tracing_export_failures_total counts every failed export)"
            );
        }
    }
}

impl<E: SpanExporter> SpanExporter for Reported<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        if let Err(error) = &result {
            self.failed(spans, error);
        }
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
