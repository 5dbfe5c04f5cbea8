//! Counter storage: one trait, an in-process backend and a Redis backend.
//!
//! A store decides a whole request atomically: it evaluates every [`Check`] and commits only if
//! all of them admit, so a denied request consumes nothing anywhere.

pub mod memory;
pub mod redis;

use std::future::Future;

use crate::limiter::algorithm::Verdict;
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::Rate;

pub use self::redis::RedisStore;
pub use memory::MemoryStore;

/// One counted descriptor of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub key: CounterKey,
    pub rate: Rate,
    /// Hits to consume; 0 checks without consuming. Any value is accepted: hits beyond the
    /// rate's capacity are denied (see `algorithm::clamp_hits`).
    pub hits: u64,
}

/// Why a store could not decide. The gRPC edge answers these with `UNAVAILABLE`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    #[error("store did not answer within {0:?}")]
    Timeout(std::time::Duration),
    #[error("store unavailable: {0}")]
    Unavailable(String),
    #[error("store answered unexpectedly: {0}")]
    Protocol(String),
}

impl StoreError {
    /// Short label for logs and metrics (`timeout`, `unavailable`, `protocol`).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Protocol(_) => "protocol",
        }
    }
}

/// Counter storage shared by every request.
pub trait Store: Send + Sync + 'static {
    /// Decides `checks` together and returns one verdict per check, in order. Each verdict says
    /// what its check alone would get on top of the earlier checks of the same request that
    /// share its counter. Nothing is written unless every verdict admits. Checks that share a
    /// counter (same key, algorithm and window) are applied as if decided one after another.
    fn decide(
        &self,
        checks: &[Check],
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send;

    /// Whether the store can currently serve decisions (drives health checks).
    fn is_healthy(&self) -> impl Future<Output = bool> + Send;
}
