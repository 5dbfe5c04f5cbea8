//! What the command line configures: the deployment to reach ([`topology`]), what TLS to it
//! trusts and presents ([`tls`]), how startup waits for it ([`startup`]), the bound on calls and
//! the pools ([`RedisSettings`]), and how script calls use the pooled connections
//! ([`ConnectionMode`]).

pub(super) mod startup;
pub mod tls;
pub mod topology;
pub(super) mod url;

use std::fmt;
use std::time::Duration;

use self::startup::StartupRetry;
use self::tls::RedisTlsSettings;
use self::topology::Topology;

/// How to reach Redis.
#[derive(Clone, PartialEq, Eq)]
pub struct RedisSettings {
    /// A single server, a cluster or a Sentinel setup (see [`Topology`]).
    pub topology: Topology,
    /// Bound on every call: connection check-out plus the script round trip(s).
    pub timeout: Duration,
    /// Connections kept open. Each one is multiplexed (see [`ConnectionMode::Multiplexed`]), so a
    /// few carry any number of concurrent requests.
    pub pool_size: u32,
    /// What TLS trusts and presents (see [`RedisTlsSettings`]). Files given are only valid with
    /// TLS (`rediss://`, or [`topology::ServerAuth::tls`]).
    pub tls: RedisTlsSettings,
    /// Replicas that must acknowledge each script call's writes (`WAIT`) before its requests are
    /// answered; 0 (the default) waits for none. A call whose writes fewer replicas acknowledged
    /// by the deadline is answered as a store failure: its admitted hits might not survive a
    /// failover.
    pub wait_replicas: u32,
    /// How long startup keeps trying a Redis that does not answer (none by default: the first
    /// failure stops startup).
    pub startup: StartupRetry,
}

/// Shows the URL without its password, so settings can be logged.
impl fmt::Debug for RedisSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisSettings")
            .field("topology", &self.topology)
            .field("timeout", &self.timeout)
            .field("pool_size", &self.pool_size)
            .field("tls", &self.tls)
            .field("wait_replicas", &self.wait_replicas)
            .field("startup", &self.startup)
            .finish()
    }
}

impl RedisSettings {
    /// Default bound on every call.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_millis(100);
    /// Default number of (multiplexed) connections.
    pub const DEFAULT_POOL_SIZE: u32 = 4;

    /// Settings for the single server at `url` with the default timeout and pool size.
    pub fn new(url: impl Into<String>) -> RedisSettings {
        RedisSettings::for_topology(Topology::Single { url: url.into() })
    }

    /// Settings for `topology` with the default timeout and pool size.
    pub fn for_topology(topology: Topology) -> RedisSettings {
        RedisSettings {
            topology,
            timeout: Self::DEFAULT_TIMEOUT,
            pool_size: Self::DEFAULT_POOL_SIZE,
            tls: RedisTlsSettings::default(),
            wait_replicas: 0,
            startup: StartupRetry::NONE,
        }
    }
}

impl Default for RedisSettings {
    fn default() -> RedisSettings {
        RedisSettings::new("redis://127.0.0.1:6379")
    }
}

/// How script calls use the pooled connections (a thread has at most `pool_size` calls in flight
/// either way; see `store::redis::batch`).
///
/// Measured with `examples/redis_pool_bench.rs` when every request was a call of its own (64
/// concurrent tasks, local redis-server, 2 cores): multiplexed reached roughly 1.5–2× the
/// throughput of exclusive pooling with millisecond tails, while exclusive pools (this store's and
/// bb8-redis's stock manager alike) let bb8 starve some waiters for seconds under contention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConnectionMode {
    /// The default and the faster: a call takes a pooled connection only long enough to clone
    /// its handle, then sends its command on the shared socket, where concurrent calls are
    /// pipelined.
    #[default]
    Multiplexed,
    /// Classic pooling: a call holds a connection for its whole round trip.
    Exclusive,
}

#[cfg(test)]
mod tests {
    use super::url::redacted_url;
    use super::*;

    #[test]
    fn debug_output_hides_the_password() {
        let settings = RedisSettings::new("redis://limiter:s3cret@redis:6379/2");
        let shown = format!("{settings:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
        assert!(
            shown.contains("redis://limiter:***@redis:6379/2"),
            "{shown}"
        );
        assert_eq!(redacted_url("redis://redis:6379"), "redis://redis:6379");
        assert_eq!(
            redacted_url("rediss://:pw@h/1#insecure"),
            "rediss://:***@h/1#insecure"
        );
        assert_eq!(
            redacted_url("unix:///run/redis.sock?db=2&pass=pw&user=u"),
            "unix:///run/redis.sock?db=2&pass=***&user=u"
        );
    }
}
