//! A part of the store that startup is still connecting: empty while startup waits for Redis
//! (`--redis-startup-wait`), then the connected part for good.
//!
//! The ports open before Redis answers, so that a client meets an answer rather than a connection
//! nobody reads: while the slot is empty, every call the store would make fails at once with
//! `UNAVAILABLE` naming the address (never its password), and health is NOT_SERVING while
//! liveness stays SERVING. Once startup connects, it fills the slot and everything is as if Redis
//! had answered at once, without a restart.

use std::sync::OnceLock;

use super::{Check, LeaseAnswer, LeaseAsk, LeaseReturn, Store, StoreError};
use crate::limiter::algorithm::Verdict;

/// The connected `T`, once there is one.
#[derive(Debug)]
pub struct Connecting<T> {
    part: OnceLock<T>,
    /// What a call gets meanwhile.
    waiting: String,
}

impl<T> Connecting<T> {
    /// Empty, waiting for the store at `address` (shown as is: give it without a password).
    pub fn new(address: &str) -> Connecting<T> {
        Connecting {
            part: OnceLock::new(),
            waiting: format!(
                "{address} is not reachable yet: startup keeps trying it (--redis-startup-wait)"
            ),
        }
    }

    /// Puts the connected part in; a second call changes nothing.
    pub fn fill(&self, part: T) {
        let _ = self.part.set(part);
    }

    /// The connected part; `None` while startup still waits.
    pub fn get(&self) -> Option<&T> {
        self.part.get()
    }

    /// The error of a call made while startup still waits.
    pub fn not_yet(&self) -> StoreError {
        StoreError::Unavailable(self.waiting.clone())
    }
}

impl<S: Store> Store for Connecting<S> {
    async fn decide(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        match self.get() {
            Some(store) => store.decide(checks).await,
            None => Err(self.not_yet()),
        }
    }

    async fn lease(&self, asks: &[LeaseAsk]) -> Result<Vec<LeaseAnswer>, StoreError> {
        match self.get() {
            Some(store) => store.lease(asks).await,
            None => Err(self.not_yet()),
        }
    }

    async fn give_back(&self, returns: &[LeaseReturn]) -> Result<(), StoreError> {
        match self.get() {
            Some(store) => store.give_back(returns).await,
            None => Err(self.not_yet()),
        }
    }

    async fn peek(&self, checks: &[Check]) -> Result<Vec<Verdict>, StoreError> {
        match self.get() {
            Some(store) => store.peek(checks).await,
            None => Err(self.not_yet()),
        }
    }

    async fn reset(&self, checks: &[Check]) -> Result<Vec<bool>, StoreError> {
        match self.get() {
            Some(store) => store.reset(checks).await,
            None => Err(self.not_yet()),
        }
    }

    async fn release(&self) {
        if let Some(store) = self.get() {
            store.release().await;
        }
    }

    async fn is_healthy(&self) -> bool {
        match self.get() {
            Some(store) => store.is_healthy().await,
            None => false,
        }
    }

    fn is_connected(&self) -> bool {
        self.get().is_some_and(Store::is_connected)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::check::Check;
    use crate::store::MemoryStore;

    #[tokio::test]
    async fn calls_fail_at_once_until_the_store_is_filled_in() {
        let slot = Connecting::<MemoryStore>::new("redis://redis:6379");
        assert!(!slot.is_connected());
        assert!(!slot.is_healthy().await);
        let checks: Vec<Check> = Vec::new();
        assert_eq!(
            slot.decide(&checks).await,
            Err(StoreError::Unavailable(
                "redis://redis:6379 is not reachable yet: startup keeps trying it \
                 (--redis-startup-wait)"
                    .into()
            ))
        );
        slot.fill(MemoryStore::new());
        assert!(slot.is_connected());
        assert!(slot.is_healthy().await);
        assert_eq!(slot.decide(&checks).await, Ok(Vec::new()));
    }
}
