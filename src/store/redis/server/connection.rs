//! Connections: a bb8 pool of multiplexed Redis connections ([`Link`]s), with broken-connection
//! detection and a reconnect backoff so a dead Redis is not hammered.
//!
//! bb8 owns the connections' lifetime: it opens them (through [`Manager::connect`]), replaces the
//! ones marked broken, and keeps `min_idle` of them open. A connection is marked broken when a
//! command on it fails at the connection level (I/O error, dropped connection, timeout); it is then
//! dropped at its next check-out or return and a new one is opened in the background. A dead
//! connection is rarely alone (a Redis restart kills them all, in every pool), so once one is
//! found dead, every other one is pinged at its next check-out before it carries a command.
//! The client a manager opens its connections with comes from [`super::client`]; over TLS it
//! connects with the deployment's [`RedisTls`].

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bb8_redis::bb8;
use parking_lot::Mutex;
use redis::{AsyncConnectionConfig, ErrorKind, RedisError};

use super::sentinel::MasterLocator;
use crate::store::redis::tls::RedisTls;
use crate::store::redis::wire::link::Link;
use crate::store::StoreError;

/// First pause after a failed connection attempt; doubles per consecutive failure.
const BACKOFF_FIRST: Duration = Duration::from_millis(50);
/// Longest pause between connection attempts while Redis stays unreachable.
const BACKOFF_MAX: Duration = Duration::from_secs(1);

/// One pooled connection: a [`Link`] (cheap to clone; clones share its socket) and the flag that
/// tells the pool to replace it.
pub struct Conn {
    pub link: Link,
    pub broken: Arc<AtomicBool>,
    /// [`Reachability::connections_lost`] when this connection was last known alive.
    alive_at_losses: u64,
    /// The Sentinel master generation it was opened in (see [`MasterLocator::generation`]).
    generation: u64,
}

impl Conn {
    /// A connection just opened (so alive) through `manager`.
    pub fn new(link: Link, manager: &Manager) -> Conn {
        Conn {
            link,
            broken: Arc::default(),
            alive_at_losses: manager.reachability.connections_lost(),
            generation: manager.generation(),
        }
    }
}

/// Where a [`Manager`] opens its connections.
#[derive(Clone)]
enum Target {
    /// Always the same server.
    Fixed(Box<redis::Client>),
    /// The master the sentinels name at the time of each connection.
    Sentinel(Arc<MasterLocator>),
}

impl Target {
    /// The server's address for logs: `host:port` or the socket path, or the master's name.
    fn address(&self) -> String {
        match self {
            Target::Fixed(client) => client.get_connection_info().addr().to_string(),
            Target::Sentinel(locator) => format!("the master {} (Sentinel)", locator.master_name()),
        }
    }
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
    connections_lost: AtomicU64,
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

    /// Connections found dead so far (a command failed at the connection level or timed out).
    pub fn connections_lost(&self) -> u64 {
        self.connections_lost.load(Ordering::Relaxed)
    }

    /// Marks a connection dead through its `broken` flag (the pool then replaces it), counted
    /// once however many of its clones fail: the others get pinged at their next check-out.
    pub fn mark_lost(&self, broken: &AtomicBool) {
        if !broken.swap(true, Ordering::Relaxed) {
            self.connections_lost.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Notes an attempt's outcome; `address` names the server in the log (never a password).
    fn record<T>(&self, result: &Result<T, RedisError>, address: impl FnOnce() -> String) {
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
                    let redis = address();
                    tracing::warn!(%redis, %error, "cannot connect to redis; retrying with backoff");
                } else {
                    let redis = address();
                    tracing::debug!(%redis, %error, ?pause, "redis connection attempt failed");
                }
            }
        }
    }
}

/// Opens connections for bb8, pausing (exponential backoff, capped at [`BACKOFF_MAX`]) after
/// failures: while paused, attempts fail at once without touching the network. Clones share the
/// reachability record (and so the backoff).
#[derive(Clone)]
pub struct Manager {
    target: Target,
    /// The deployment's TLS, when its connections speak TLS.
    tls: Option<Arc<RedisTls>>,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    reachability: Arc<Reachability>,
    /// The runtime whose task drives each connection opened (see [`Manager::driven_on`]); `None`:
    /// the runtime of whoever asks the pool for a connection.
    home: Option<tokio::runtime::Handle>,
}

impl Manager {
    /// A manager opening every connection to `client`'s server, with `tls` when it speaks TLS.
    pub fn new(
        client: redis::Client,
        tls: Option<Arc<RedisTls>>,
        connect_timeout: Duration,
    ) -> Manager {
        Manager::opening(Target::Fixed(Box::new(client)), tls, connect_timeout)
    }

    /// A manager opening every connection to the master that `locator` finds.
    pub fn sentinel(
        locator: Arc<MasterLocator>,
        tls: Option<Arc<RedisTls>>,
        connect_timeout: Duration,
    ) -> Manager {
        Manager::opening(Target::Sentinel(locator), tls, connect_timeout)
    }

    fn opening(target: Target, tls: Option<Arc<RedisTls>>, connect_timeout: Duration) -> Manager {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            // Every call is bounded by the store's own deadline instead.
            .set_response_timeout(None);
        Manager {
            target,
            tls,
            config,
            connect_timeout,
            reachability: Arc::default(),
            home: None,
        }
    }

    /// The Sentinel master generation (0 for a fixed server).
    fn generation(&self) -> u64 {
        match &self.target {
            Target::Fixed(_) => 0,
            Target::Sentinel(locator) => locator.generation(),
        }
    }

    /// A connection answered `READONLY`: the server it reaches is a replica now. With Sentinel,
    /// every connection to it is dropped at its next check-out.
    pub fn saw_readonly(&self) {
        if let Target::Sentinel(locator) = &self.target {
            locator.master_moved();
        }
    }

    /// This manager, opening every connection on `home`. A multiplexed connection is driven by a
    /// task on the runtime that opened it, and bb8 opens connections on the runtime of the caller
    /// that found the pool short: a pool shared by several runtimes (the store's startup pool,
    /// which serving lanes borrow from) would otherwise keep connections that break for good
    /// when the lane that happened to open them stops ("broken pipe").
    pub fn driven_on(&self, home: tokio::runtime::Handle) -> Manager {
        Manager {
            home: Some(home),
            ..self.clone()
        }
    }

    pub fn reachability(&self) -> Arc<Reachability> {
        self.reachability.clone()
    }

    /// This manager, opening every connection on the runtime of whoever asks the pool for one
    /// (a serving lane's own pool: its connections are driven where its calls are made).
    pub fn driven_by_caller(&self) -> Manager {
        Manager {
            home: None,
            ..self.clone()
        }
    }

    /// Opens a connection now, ignoring the backoff (used once at startup).
    pub async fn open(&self) -> Result<Link, RedisError> {
        let result = match &self.target {
            Target::Fixed(client) => self.open_to(client).await,
            Target::Sentinel(locator) => match locator.master_client().await {
                Ok(client) => self.open_to(&client).await,
                Err(error) => Err(error),
            },
        };
        self.reachability.record(&result, || self.target.address());
        result
    }

    /// A connection to `client`'s server within the connect timeout.
    async fn open_to(&self, client: &redis::Client) -> Result<Link, RedisError> {
        let open = Link::open(client, &self.config, self.tls.as_deref());
        match tokio::time::timeout(self.connect_timeout, open).await {
            Ok(result) => result,
            Err(_) => Err(RedisError::from(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("no connection to redis within {:?}", self.connect_timeout),
            ))),
        }
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
        let link = match &self.home {
            None => self.open().await?,
            Some(home) => {
                let this = self.clone();
                home.spawn(async move { this.open().await })
                    .await
                    .map_err(|stopped| {
                        RedisError::from((
                            ErrorKind::Io,
                            "the runtime driving redis connections has stopped",
                            stopped.to_string(),
                        ))
                    })??
            }
        };
        Ok(Conn::new(link, self))
    }

    /// Check-out test: the broken flag (a failed command sets it), and a `PING` only when
    /// another connection was found dead since this one was last known alive. No round trip
    /// otherwise.
    async fn is_valid(&self, conn: &mut Conn) -> Result<(), RedisError> {
        if conn.broken.load(Ordering::Relaxed) {
            return Err(RedisError::from((
                ErrorKind::Io,
                "connection marked broken",
            )));
        }
        if conn.generation != self.generation() {
            return Err(RedisError::from((
                ErrorKind::Io,
                "the sentinels named another master",
            )));
        }
        let losses = self.reachability.connections_lost();
        if conn.alive_at_losses != losses {
            if let Err(error) = redis::cmd("PING")
                .query_async::<redis::Value>(&mut conn.link)
                .await
            {
                self.reachability.mark_lost(&conn.broken);
                return Err(error);
            }
            conn.alive_at_losses = losses;
        }
        Ok(())
    }

    fn has_broken(&self, conn: &mut Conn) -> bool {
        conn.broken.load(Ordering::Relaxed) || conn.generation != self.generation()
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

/// The error of a failed first connection (bad address, TLS, credentials, database number), with
/// a hint for the usual causes.
pub fn connect_error(error: &RedisError) -> StoreError {
    let hint = if error.kind() == ErrorKind::AuthenticationFailed {
        " (wrong user or password in the redis url)"
    } else {
        tls_hint(&error.to_string())
    };
    StoreError::Unavailable(format!("cannot connect to redis: {error}{hint}"))
}

/// What to do about a TLS failure, read from rustls's words in `error` ("" when it is none).
fn tls_hint(error: &str) -> &'static str {
    if error.contains("CaUsedAsEndEntity") {
        " (TLS: the server presents a CA certificate as its own: it is accepted only when it is \
         exactly one of the trusted certificates (--redis-tls-ca, or the system's certificate \
         store), and never for Sentinel's lookups, which need a certificate issued by a CA)"
    } else if error.contains("certificate not valid for name") {
        " (TLS: the server's certificate does not carry the host connected to: use a name or \
         address it names)"
    } else if error.contains("invalid peer certificate") {
        " (TLS: the server's certificate is not trusted; for a self-signed or private CA pass its \
         certificate with --redis-tls-ca or add it to the system's certificate store, or add \
         #insecure to the url to skip verification)"
    } else if error.contains("CertificateRequired") {
        " (TLS: the server requires a client certificate: --redis-tls-client-cert and \
         --redis-tls-client-key)"
    } else if ["UnknownCA", "BadCertificate", "CertificateUnknown"]
        .iter()
        .any(|alert| error.contains(&format!("received fatal alert: {alert}")))
    {
        " (TLS: the server refused the client certificate of --redis-tls-client-cert)"
    } else {
        ""
    }
}

#[cfg(test)]
mod tests {
    use super::tls_hint;

    #[test]
    fn tls_failures_say_what_to_do() {
        for (error, expected) in [
            (
                "invalid peer certificate: Other(OtherError(CaUsedAsEndEntity))",
                "exactly one of the trusted certificates",
            ),
            (
                "invalid peer certificate: UnknownIssuer",
                "--redis-tls-ca or add it to the system's certificate store",
            ),
            (
                "invalid peer certificate: certificate not valid for name \"redis\"; \
                 certificate is only valid for DnsName(\"localhost\")",
                "does not carry the host",
            ),
            (
                "received fatal alert: CertificateRequired",
                "requires a client certificate",
            ),
            (
                "received fatal alert: UnknownCA",
                "refused the client certificate",
            ),
        ] {
            assert!(
                tls_hint(error).contains(expected),
                "{error}: {}",
                tls_hint(error)
            );
        }
        assert_eq!(tls_hint("Connection refused (os error 111)"), "");
    }
}
