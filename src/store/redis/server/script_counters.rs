//! What the scripts cost, counted for metrics (a leaf both the pools and the script calls use).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// What the scripts cost, counted over every server, for metrics: the reloads after `NOSCRIPT`
/// (or a library found gone), the calls of the request script sent and the requests they carried
/// (divided, how well concurrent requests share calls, see `store::redis::batch`); and whether a
/// server's refusal of the Functions library was logged yet.
#[derive(Default)]
pub(in crate::store::redis) struct ScriptCounters {
    pub(in crate::store::redis) reloads: AtomicU64,
    pub(in crate::store::redis) calls: AtomicU64,
    pub(in crate::store::redis) requests: AtomicU64,
    functions_refused: AtomicBool,
}

impl ScriptCounters {
    /// A server refused the Functions library: true the first time (the one time it is logged).
    pub(super) fn note_functions_refused(&self) -> bool {
        !self.functions_refused.swap(true, Ordering::Relaxed)
    }

    pub(super) fn reloaded(&self) {
        self.reloads.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn sent(&self, requests: usize) {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.requests.fetch_add(requests as u64, Ordering::Relaxed);
    }
}
