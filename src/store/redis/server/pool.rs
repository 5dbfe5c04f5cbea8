//! One server's pool of connections, shared by the store's clones and a batch dispatcher, and the
//! connection a call takes from it ([`Lease`]) until its deadline.

use std::sync::Arc;
use std::time::Duration;

use bb8_redis::bb8;
use redis::{RedisError, Value};
use tokio::time::{timeout_at, Instant};

use super::calling::Calling;
use super::connection::{is_connection_error, Manager, Reachability};
use super::script_counters::ScriptCounters;
use crate::store::redis::settings::ConnectionMode;
use crate::store::redis::wire::link::Link;
use crate::store::StoreError;

/// What every pool of the store shares, whichever server it reaches.
#[derive(Clone)]
pub(in crate::store::redis) struct PoolSettings {
    pub(in crate::store::redis) pool_size: u32,
    pub(in crate::store::redis) timeout: Duration,
    pub(in crate::store::redis) mode: ConnectionMode,
    pub(in crate::store::redis) wait_replicas: u32,
    pub(in crate::store::redis) scripts: Arc<ScriptCounters>,
}

/// One server's connections (a thread's own pool, or the startup pool) and what every script call
/// to it needs; shared by the store's clones and a batch dispatcher.
pub(in crate::store::redis) struct Shared {
    pub(super) pool: bb8::Pool<Manager>,
    pub(super) manager: Manager,
    pub(in crate::store::redis) reachability: Arc<Reachability>,
    pub(super) timeout: Duration,
    mode: ConnectionMode,
    pub(super) wait_replicas: u32,
    pub(super) scripts: Arc<ScriptCounters>,
    /// How the server runs the scripts, shared by every pool to it.
    pub(in crate::store::redis) calling: Arc<Calling>,
    /// Used while `pool` has no connection yet: a thread's pool starts empty, and its first
    /// calls must not wait out a connection handshake (see `store::redis::local`).
    fallback: Option<bb8::Pool<Manager>>,
}

impl Shared {
    /// A new pool through `manager` to the server whose calls go as `calling` says, borrowing
    /// from `fallback` until it has a connection.
    pub(in crate::store::redis) fn new(
        manager: Manager,
        settings: &PoolSettings,
        calling: Arc<Calling>,
        fallback: Option<bb8::Pool<Manager>>,
    ) -> Shared {
        Shared {
            pool: new_pool(settings.pool_size, settings.timeout, manager.clone()),
            reachability: manager.reachability(),
            manager,
            timeout: settings.timeout,
            mode: settings.mode,
            wait_replicas: settings.wait_replicas,
            scripts: settings.scripts.clone(),
            calling,
            fallback,
        }
    }
}

/// A pool of at most `size` connections that opens one at once in the background (more on
/// demand) and waits at most `timeout` for one. Check-out tests are cheap: `Manager::is_valid`
/// only reads the broken flag, no round trip.
fn new_pool(size: u32, timeout: std::time::Duration, manager: Manager) -> bb8::Pool<Manager> {
    bb8::Pool::builder()
        .max_size(size)
        .min_idle(Some(1))
        .connection_timeout(timeout)
        .test_on_check_out(true)
        .retry_connection(true)
        .build_unchecked(manager)
}

impl Shared {
    /// Takes a connection: a clone of a pooled multiplexed handle; in exclusive mode the pool slot
    /// is held until the lease is dropped.
    pub(in crate::store::redis) async fn lease(
        &self,
        deadline: Instant,
    ) -> Result<Lease<'_>, StoreError> {
        let shared = self;
        // Redis known down (the last connection attempt failed moments ago) and no connection
        // left: fail at once instead of waiting out the timeout.
        if let Some(reason) = shared.reachability.down_reason() {
            if shared.pool.state().idle_connections == 0 {
                return Err(StoreError::Unavailable(reason));
            }
        }
        let pool = match &shared.fallback {
            Some(fallback) if shared.pool.state().connections == 0 => fallback,
            _ => &shared.pool,
        };
        let pooled = match timeout_at(deadline, pool.get()).await {
            Ok(Ok(pooled)) => pooled,
            Ok(Err(bb8::RunError::User(error))) => {
                return Err(StoreError::Unavailable(error.to_string()))
            }
            Ok(Err(bb8::RunError::TimedOut)) | Err(_) => {
                return Err(match shared.reachability.last_error() {
                    Some(reason) => StoreError::Unavailable(reason),
                    None => StoreError::Timeout(shared.timeout),
                })
            }
        };
        let link = pooled.link.clone();
        let broken = pooled.broken.clone();
        let slot = match shared.mode {
            ConnectionMode::Exclusive => Some(pooled),
            ConnectionMode::Multiplexed => None,
        };
        Ok(Lease {
            link,
            broken,
            shared: self,
            _slot: slot,
            deadline,
        })
    }

    /// A `PING`. A connection found dead (it may have idled through a Redis restart) is replaced
    /// and the probe retried once before the server counts as down.
    pub(in crate::store::redis) async fn ping(&self, deadline: Instant) -> bool {
        for _ in 0..2 {
            let Ok(mut lease) = self.lease(deadline).await else {
                return false;
            };
            match lease.query(&redis::cmd("PING")).await {
                Ok(Ok(Value::SimpleString(pong))) => return pong == "PONG",
                Err(StoreError::Unavailable(_)) => continue,
                _ => return false,
            }
        }
        false
    }
}

/// A connection taken for one call, with the call's deadline.
pub(in crate::store::redis) struct Lease<'a> {
    pub(super) link: Link,
    broken: Arc<std::sync::atomic::AtomicBool>,
    pub(super) shared: &'a Shared,
    _slot: Option<bb8::PooledConnection<'a, Manager>>,
    pub(super) deadline: Instant,
}

impl Lease<'_> {
    /// Runs `cmd` before the deadline. The outer error ends the call (timeout, broken
    /// connection); the inner one is the command's own error, for the caller to inspect.
    pub(in crate::store::redis) async fn query(
        &mut self,
        cmd: &redis::Cmd,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        let result = timeout_at(self.deadline, cmd.query_async::<Value>(&mut self.link)).await;
        self.settle(result)
    }

    pub(super) fn settle<T>(
        &self,
        result: Result<Result<T, RedisError>, tokio::time::error::Elapsed>,
    ) -> Result<Result<T, RedisError>, StoreError> {
        match result {
            Err(_) => {
                // A blackholed peer shows only as timeouts: replace the connection.
                self.mark_broken();
                Err(StoreError::Timeout(self.shared.timeout))
            }
            Ok(Err(error)) if is_connection_error(&error) => {
                self.mark_broken();
                Err(StoreError::Unavailable(error.to_string()))
            }
            Ok(result) => Ok(result),
        }
    }

    /// The server answered `READONLY`: it is a replica now. The connection is dropped at once
    /// (and, with Sentinel, every connection to that server).
    pub(super) fn readonly(&self) {
        tracing::warn!("redis answered READONLY: the server is a replica now; reconnecting");
        self.mark_broken();
        self.shared.manager.saw_readonly();
    }

    /// Has the pool replace this connection.
    pub(super) fn mark_broken(&self) {
        self.shared.reachability.mark_lost(&self.broken);
    }
}
