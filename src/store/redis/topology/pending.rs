//! A request waiting for a script call: what the batcher queues and hands to a [`super::route::Route`],
//! which answers it.

use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::limiter::algorithm::Verdict;
use crate::otel::StoreCallSpan;
use crate::store::redis::scripts::request::Invocation;
use crate::store::StoreError;

/// A request's answer: what decided it, or why it was not decided.
pub(in crate::store::redis) type Answer = Result<Decided, StoreError>;

/// A request's verdicts in check order, with the clock of the call that decided it.
#[derive(Debug)]
pub(in crate::store::redis) struct Decided {
    pub(in crate::store::redis) verdicts: Vec<Verdict>,
    /// The µs of the `TIME` the call read, the instant of its writes (a pinned request's own
    /// time instead); on a cluster, the earliest of the calls of its nodes.
    pub(in crate::store::redis) clock_us: u64,
}

/// A request waiting for a script call.
pub(in crate::store::redis) struct Pending {
    pub(in crate::store::redis) invocation: Invocation,
    pub(in crate::store::redis) deadline: Instant,
    pub(in crate::store::redis) answer: oneshot::Sender<Answer>,
    /// The span of the store call waiting for this request, told the size of the script call
    /// that carries it.
    pub(in crate::store::redis) span: StoreCallSpan,
}

impl Pending {
    /// `Some(self)` while worth deciding. A request whose caller is gone (its RPC was cancelled)
    /// is dropped, and one past its deadline is answered with a timeout: deciding either now
    /// would count hits nobody is told about.
    pub(in crate::store::redis) fn live(self, timeout: Duration, now: Instant) -> Option<Pending> {
        if self.answer.is_closed() {
            return None;
        }
        if self.deadline <= now {
            let _ = self.answer.send(Err(StoreError::Timeout(timeout)));
            return None;
        }
        Some(self)
    }
}
