//! Connections: a bb8 pool of multiplexed Redis connections, with broken-connection detection and a
//! reconnect backoff so a dead Redis is not hammered.
//!
//! bb8 owns the connections' lifetime: it opens them (through [`Manager::connect`]), replaces the
//! ones marked broken, and keeps `min_idle` of them open. A connection is marked broken when a
//! command on it fails at the connection level (I/O error, dropped connection, timeout); it is then
//! dropped at its next check-out or return and a new one is opened in the background.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bb8_redis::bb8;
use parking_lot::Mutex;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError};

/// First pause after a failed connection attempt; doubles per consecutive failure.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between connection attempts while Redis stays unreachable.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One pooled connection: a multiplexed connection (cheap to clone; clones share its socket) and
/// the flag that tells the pool to replace it.
pub struct Conn {
    pub mux: MultiplexedConnection,
    pub broken: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Backoff {
    failures: u32,
    retry_at: Option<Instant>,
    last_error: Option<String>,
}

/// Outcome of the recent connection attempts, shared by the [`Manager`] and the store.
#[derive(Debug, Default)]
pub struct Reachability {
    backoff: Mutex<Backoff>,
}

impl Reachability {
    /// Why Redis is considered down: the last connection attempt failed and the backoff pause that
    /// followed has not ended yet.
    pub fn down_reason(&self) -> Option<String> {
        let backoff = self.backoff.lock();
        match backoff.retry_at {
            Some(at) if Instant::now() < at => backoff.last_error.clone(),
            _ => None,
        }
    }

    /// The error of the last connection attempt, if it failed.
    pub fn last_error(&self) -> Option<String> {
        self.backoff.lock().last_error.clone()
    }

    fn record<T>(&self, result: &Result<T, RedisError>) {
        let mut backoff = self.backoff.lock();
        match result {
            Ok(_) => {
                if backoff.failures > 0 {
                    tracing::info!(
                        failed_attempts = backoff.failures,
                        "redis connection re-established"
                    );
                }
                *backoff = Backoff::default();
            }
            Err(error) => {
                backoff.failures = backoff.failures.saturating_add(1);
                let exponent = (backoff.failures - 1).min(16);
                let pause = BACKOFF_FIRST.saturating_mul(1 << exponent).min(BACKOFF_MAX);
                backoff.retry_at = Some(Instant::now() + pause);
                backoff.last_error = Some(error.to_string());
                if backoff.failures == 1 {
                    tracing::warn!(%error, "cannot connect to redis; retrying with backoff");
                } else {
                    tracing::debug!(%error, ?pause, "redis connection attempt failed");
                }
            }
        }
    }
}

/// Opens connections for bb8, pausing (exponential backoff, capped at [`BACKOFF_MAX`]) after
/// failures: while paused, attempts fail at once without touching the network.
pub struct Manager {
    client: redis::Client,
    config: AsyncConnectionConfig,
    reachability: Arc<Reachability>,
}

impl Manager {
    pub fn new(client: redis::Client, connect_timeout: Duration) -> Manager {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // Every call is bounded by the store's own deadline instead.
            .set_response_timeout(None);
        Manager {
            client,
            config,
            reachability: Arc::default(),
        }
    }

    pub fn reachability(&self) -> Arc<Reachability> {
        self.reachability.clone()
    }

    /// Opens a connection now, ignoring the backoff (used once at startup).
    pub async fn open(&self) -> Result<MultiplexedConnection, RedisError> {
        let result = self
            .client
            .get_multiplexed_async_connection_with_config(&self.config)
            .await;
        self.reachability.record(&result);
        result
    }
}

impl bb8::ManageConnection for Manager {
    type Connection = Conn;
    type Error = RedisError;

    async fn connect(&self) -> Result<Conn, RedisError> {
        if let Some(reason) = self.reachability.down_reason() {
            return Err(RedisError::from((
                ErrorKind::Io,
                "redis unreachable, waiting before the next attempt",
                reason,
            )));
        }
        let mux = self.open().await?;
        Ok(Conn {
            mux,
            broken: Arc::new(AtomicBool::new(false)),
        })
    }

    /// Check-out test: no round trip, only the broken flag (a failed command sets it).
    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        if conn.broken.load(Ordering::Relaxed) {
            Err(RedisError::from((
                ErrorKind::Io,
                "connection marked broken",
            )))
        } else {
            Ok(())
        }
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken.load(Ordering::Relaxed)
    }
}

/// Whether `error` means the connection itself is unusable (as opposed to a command error).
pub fn is_connection_error(error: &RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        || error.is_unrecoverable_error()
}
