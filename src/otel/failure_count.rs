//! The count of span exports that failed, kept whether or not the build exports spans, so the
//! metric reads 0 in a build without the `otel` feature.

use std::sync::atomic::{AtomicU64, Ordering};

/// Span exports that failed since the process started (a collector down, unreachable or slow);
/// each failure drops its batch.
pub(super) static EXPORT_FAILURES: AtomicU64 = AtomicU64::new(0);

/// The number of span exports that failed (`ratelimitd_tracing_export_failures_total`).
pub fn export_failures() -> u64 {
    EXPORT_FAILURES.load(Ordering::Relaxed)
}
