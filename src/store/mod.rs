//! Counter storage: one trait, an in-process backend and a Redis backend.
//!
//! A store decides a whole request atomically: it evaluates every [`Check`] and commits only if
//! all enforced (non-shadow) checks admit, so a denied request consumes nothing anywhere.

pub mod connecting;
pub mod deny_cache;
pub mod failure_health;
pub mod lease;
pub mod memory;
pub mod quota_demands;
pub mod redis;

use std::future::Future;

use crate::limiter::algorithm::lease::{Grant, LeaseTerms};
use crate::limiter::algorithm::Verdict;
pub use crate::limiter::check::Check;
use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::Rate;

pub use self::redis::{RedisSettings, RedisStore};
pub use connecting::Connecting;
pub use deny_cache::{DenyCache, DenyCacheSettings};
pub use failure_health::{FailureHealth, FailureHealthSettings};
pub use memory::MemoryStore;
pub use quota_demands::{Demands, MemoryDemands, QuotaDemands, StreamDemand};

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
    /// The same error, saying which store it came from (`redis://host:6379`, never a password),
    /// unless it already does.
    pub fn at(self, address: &str) -> StoreError {
        match self {
            StoreError::Unavailable(message) if !message.contains(address) => {
                StoreError::Unavailable(format!("{address}: {message}"))
            }
            StoreError::Protocol(message) if !message.contains(address) => {
                StoreError::Protocol(format!("{address}: {message}"))
            }
            other => other,
        }
    }

    /// Short label for logs and metrics (`timeout`, `unavailable`, `protocol`).
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::Unavailable(_) => "unavailable",
            StoreError::Protocol(_) => "protocol",
        }
    }
}

/// One lease a replica asks for: `terms` on the counter `key` of `rate`.
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseAsk {
    pub key: CounterKey,
    pub rate: Rate,
    pub terms: LeaseTerms,
}

/// Hits of a lease that its replica gives back unspent: `hits` of the lease on the counter `key`
/// of `rate` that the store granted at `granted_at_us` (its own clock, [`Grant::granted_at_us`]).
/// Only the window algorithms' are taken back (see `limiter::algorithm::lease::give_back`).
#[derive(Debug, Clone, PartialEq)]
pub struct LeaseReturn {
    pub key: CounterKey,
    pub rate: Rate,
    pub hits: u64,
    pub granted_at_us: u64,
}

/// A store's answer to one [`LeaseAsk`]: the grant, `None` when this store cannot lease that
/// counter (its algorithm, or a key kept in envoyproxy/ratelimit's format), or why it failed.
pub type LeaseAnswer = Result<Option<Grant>, StoreError>;

/// Counter storage shared by every request.
pub trait Store: Send + Sync + 'static {
    /// Decides `checks` together and returns one verdict per check, in order. Each verdict says
    /// what its check alone would get on top of the earlier *admitted* checks of the same request
    /// that share its counter (same key, algorithm and window): those are evaluated with
    /// cumulative hits and committed once with their total. Nothing is written unless every non-shadow
    /// check admits; then every admitted check is committed, shadow ones included, and a
    /// shadow check that does not admit is left unchanged (it never vetoes). The one exception,
    /// envoyproxy/ratelimit's counters in drop-in mode, count as envoyproxy/ratelimit does, and
    /// their verdicts say so ([`Verdict::counted_when_vetoed`]).
    fn decide(
        &self,
        checks: &[Check],
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send;

    /// Grants what it can of each of `asks` (see `limiter::algorithm::lease`), one answer per
    /// ask, in order: each ask on its own, atomically, charged to its counter when granted, with
    /// no all-or-nothing between asks. The outer error fails them all.
    fn lease(
        &self,
        asks: &[LeaseAsk],
    ) -> impl Future<Output = Result<Vec<LeaseAnswer>, StoreError>> + Send;

    /// Gives back each of `returns` (see [`LeaseReturn`]), each on its own. Given back at most
    /// once: a call that fails leaves (some of) the hits charged, which is stricter and never
    /// more permissive, so it is never retried.
    fn give_back(
        &self,
        returns: &[LeaseReturn],
    ) -> impl Future<Output = Result<(), StoreError>> + Send;

    /// Reads the state of each of `checks`' counters without consuming or writing anything: one
    /// verdict per check, what a check of 0 hits on that counter alone would get (`remaining`,
    /// and `reset_after_us` until the counter is fully replenished), in order, from the store
    /// itself: decorators that answer from state of their own (a deny cache, leases in hand)
    /// pass it through. The checks' `hits` and `shadow` are ignored.
    fn peek(
        &self,
        checks: &[Check],
    ) -> impl Future<Output = Result<Vec<Verdict>, StoreError>> + Send;

    /// Deletes the stored state of each of `checks`' counters (every key the counter's state
    /// lives under, on the store's own clock for the window algorithms), so the next request on
    /// it starts as on a counter never used; nothing else is touched. One answer per check, in
    /// order: whether it held any state. Each counter is reset on its own, not all or nothing;
    /// an error means some may not have been reset.
    fn reset(&self, checks: &[Check])
        -> impl Future<Output = Result<Vec<bool>, StoreError>> + Send;

    /// Hands back, as the server stops, what this store holds that other replicas could use
    /// (the lease layer's unspent hits); nothing is decided through the store afterwards. A store
    /// that holds nothing for others has nothing to do.
    fn release(&self) -> impl Future<Output = ()> + Send {
        std::future::ready(())
    }

    /// Whether the store can currently serve decisions (drives health checks).
    fn is_healthy(&self) -> impl Future<Output = bool> + Send;

    /// Whether the store is connected: false only while startup still waits for it (see
    /// [`Connecting`]). Health is NOT_SERVING meanwhile, whether or not it follows the store.
    fn is_connected(&self) -> bool {
        true
    }
}
