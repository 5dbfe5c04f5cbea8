//! Failed OTLP exports: counted (`ratelimitd_tracing_export_failures_total`) and logged at WARN
//! at most once a minute with the number of failures held back, so that a collector that is
//! down, refuses or times out is seen without a line per batch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// The shortest time between two logged failures.
pub const LOG_PERIOD: Duration = Duration::from_secs(60);

/// Exports that failed since startup.
static FAILURES: AtomicU64 = AtomicU64::new(0);

/// When a failure was last logged, and the failures held back since.
static LOGGED: Mutex<(Option<Instant>, u64)> = Mutex::new((None, 0));

/// Failed exports since startup (0 with tracing off).
pub fn failures() -> u64 {
    FAILURES.load(Ordering::Relaxed)
}

/// Counts a failed export of `spans` spans, and logs it unless one was logged in the last
/// [`LOG_PERIOD`].
pub fn record(spans: usize, error: &dyn std::fmt::Display) {
    FAILURES.fetch_add(1, Ordering::Relaxed);
    if let Some(suppressed) = admit(Instant::now()) {
        tracing::warn!(
            spans,
            suppressed,
            %error,
            "tracing: OTLP export failed, the batch's spans are dropped (logged at most once a minute)"
        );
    }
}

/// `Some(failures held back since the last line)` when a line may be written at `now`.
fn admit(now: Instant) -> Option<u64> {
    let mut logged = LOGGED.lock();
    match logged.0 {
        Some(at) if now.saturating_duration_since(at) < LOG_PERIOD => {
            logged.1 += 1;
            None
        }
        _ => {
            let suppressed = std::mem::take(&mut logged.1);
            logged.0 = Some(now);
            Some(suppressed)
        }
    }
}

/// An exporter whose failed exports are [`record`]ed.
#[cfg(feature = "otel")]
#[derive(Debug)]
pub struct Counted<E> {
    pub inner: E,
}

#[cfg(feature = "otel")]
impl<E: opentelemetry_sdk::trace::SpanExporter> opentelemetry_sdk::trace::SpanExporter
    for Counted<E>
{
    fn export(
        &self,
        batch: Vec<opentelemetry_sdk::trace::SpanData>,
    ) -> impl std::future::Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send {
        let spans = batch.len();
        let exported = self.inner.export(batch);
        async move {
            let result = exported.await;
            if let Err(error) = &result {
                record(spans, error);
            }
            result
        }
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &opentelemetry_sdk::Resource) {
        self.inner.set_resource(resource);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_minute_with_the_failures_held_back() {
        let start = Instant::now();
        assert_eq!(admit(start), Some(0));
        assert_eq!(admit(start + Duration::from_secs(1)), None);
        assert_eq!(admit(start + Duration::from_secs(59)), None);
        assert_eq!(admit(start + LOG_PERIOD), Some(2));
        assert_eq!(admit(start + LOG_PERIOD + Duration::from_secs(1)), None);
    }
}
