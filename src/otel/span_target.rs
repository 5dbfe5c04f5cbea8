//! The `tracing` target that sets exported spans apart from log events.

/// The `tracing` target of every span exported as OpenTelemetry (and of no log event).
pub const SPAN_TARGET: &str = "ratelimitd::spans";
