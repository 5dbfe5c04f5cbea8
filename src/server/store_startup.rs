//! Redis connected as `--redis-startup-wait` says, with the ports open while startup waits.
//!
//! The first attempt is made before serving starts, so that a Redis that answers is connected
//! before the listening line, as it always was, and a start that does not wait stops at the first
//! failure. When the first attempt fails and startup may wait (drop-in mode waits for ever, as
//! envoyproxy/ratelimit), serving starts with the store's [`Connecting`] slots empty: health
//! NOT_SERVING (liveness SERVING), RLS calls and `/json` answered at once as for a store that
//! failed (`UNAVAILABLE` naming the address), `/healthcheck` 503. The attempts go on behind the
//! open ports; the one that succeeds fills the slots, and the next health probe (within a second)
//! turns health SERVING. A wait that runs out stops the server with the last error (exit 1), as
//! a start that could not connect.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::store::redis::{ConnectionMode, KeyLayout, RedisDemands};
use crate::store::{Connecting, RedisSettings, RedisStore, StoreError};

/// The parts of the server that need Redis connected: the store and the RLQS demands.
#[derive(Clone)]
pub struct RedisSlots {
    pub store: Arc<Connecting<RedisStore>>,
    pub demands: Arc<Connecting<RedisDemands>>,
}

impl RedisSlots {
    /// Empty slots for the Redis at `address` (without its password).
    pub fn new(address: &str) -> RedisSlots {
        RedisSlots {
            store: Arc::new(Connecting::new(address)),
            demands: Arc::new(Connecting::new(address)),
        }
    }

    fn fill(&self, store: RedisStore) {
        self.demands.fill(RedisDemands::new(store.clone()));
        self.store.fill(store);
    }
}

/// Where startup stands once serving may begin.
pub enum Startup {
    /// Redis is connected.
    Connected,
    /// Startup still waits for Redis behind the open ports.
    Waiting(JoinHandle<Result<(), StoreError>>),
}

impl Startup {
    /// Completes with the last error if the wait runs out; never once Redis is connected.
    pub async fn gave_up(self) -> StoreError {
        match self {
            Startup::Connected => std::future::pending().await,
            Startup::Waiting(attempts) => match attempts.await {
                Ok(Ok(())) => std::future::pending().await,
                Ok(Err(error)) => error,
                Err(error) => {
                    StoreError::Unavailable(format!("waiting for redis at startup failed: {error}"))
                }
            },
        }
    }
}

/// Connects Redis with `settings` (its keys laid out as `layout`) into `slots`: returns once it
/// is connected, or once the first attempt failed and `settings.startup` lets startup wait (the
/// attempts going on in the background); the error when startup stops here.
pub async fn connect(
    settings: RedisSettings,
    layout: KeyLayout,
    slots: RedisSlots,
) -> Result<Startup, StoreError> {
    let waits = settings.startup.retries();
    let address = settings.topology.address();
    let (first_failure, failed) = oneshot::channel::<()>();
    let first_failure = Mutex::new(Some(first_failure));
    let filled = slots.clone();
    let mut attempts = tokio::spawn(async move {
        let on_failure = |_: &StoreError| {
            if let Some(first) = first_failure.lock().take() {
                let _ = first.send(());
            }
        };
        let store =
            RedisStore::connect_observed(settings, ConnectionMode::default(), &on_failure).await?;
        filled.fill(store.with_key_layout(layout));
        Ok(())
    });
    tokio::select! {
        connected = &mut attempts => match connected {
            Ok(Ok(())) => Ok(Startup::Connected),
            Ok(Err(error)) => Err(error),
            Err(error) => Err(StoreError::Unavailable(format!("connecting to redis failed: {error}"))),
        },
        Ok(()) = failed, if waits => {
            tracing::warn!(
                redis = %address,
                "serving while startup waits for redis: health NOT_SERVING, rate-limit calls \
                 answered UNAVAILABLE until it answers (--redis-startup-wait)"
            );
            Ok(Startup::Waiting(attempts))
        }
    }
}
