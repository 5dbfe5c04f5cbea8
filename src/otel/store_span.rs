//! The span of a store call, as the Redis store sees it: the store learns which script call
//! carries a request only when its dispatcher forms the batch, long after the call began.

/// The span of the store call a request is decided in, captured where the request is queued and
/// told the size of the script call that carries it. Without the `otel` feature it is empty.
#[derive(Debug, Clone)]
pub struct StoreCallSpan {
    #[cfg(feature = "otel")]
    span: tracing::Span,
}

impl Default for StoreCallSpan {
    /// No span.
    fn default() -> StoreCallSpan {
        StoreCallSpan {
            #[cfg(feature = "otel")]
            span: tracing::Span::none(),
        }
    }
}

impl StoreCallSpan {
    /// The current span: the store call's, when tracing is on and the call is traced; with
    /// tracing off, no span (and no look-up of the current one).
    #[inline]
    pub fn current() -> StoreCallSpan {
        StoreCallSpan {
            #[cfg(feature = "otel")]
            span: if super::pipeline::is_running() {
                tracing::Span::current()
            } else {
                tracing::Span::none()
            },
        }
    }

    /// Records that the request goes out in a script call carrying `requests` requests with
    /// `checks` checks in all (on a cluster: the batch, of which each master gets its part).
    #[inline]
    pub fn record_batch(&self, requests: usize, checks: usize) {
        #[cfg(feature = "otel")]
        if !self.span.is_none() {
            self.span
                .record("ratelimit.store.batch_requests", requests as u64)
                .record("ratelimit.store.batch_checks", checks as u64);
        }
        #[cfg(not(feature = "otel"))]
        let _ = (requests, checks);
    }
}
