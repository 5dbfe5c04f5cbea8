//! Which Redis deployment the store talks to, and the address of each of its servers (the
//! clients made of them: `store::redis::server::client`).
//!
//! - [`Topology::Single`]: one server (or a proxy in front of several), by URL.
//! - [`Topology::Cluster`]: a Redis Cluster, discovered from one or more seed nodes; the store
//!   learns the slot map (`CLUSTER SLOTS`) and talks to every master (see
//!   `store::redis::topology::cluster`).
//! - [`Topology::Sentinel`]: a master watched by Sentinel; the store asks the sentinels where the
//!   master is and asks again when its connection is lost or answers `READONLY` (see
//!   `store::redis::server::sentinel`).
//!
//! The servers of a cluster or of a Sentinel setup all take the same [`ServerAuth`]: user,
//! password and TLS. A single server's URL carries its own.

use std::fmt;

use super::url::redacted_url;

/// A server's address as `host:port`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl HostPort {
    /// Parses `host:port` (`[v6]:port` for IPv6 literals). Errors name the text.
    pub fn parse(text: &str) -> Result<HostPort, String> {
        let text = text.trim();
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("`{text}` is not HOST:PORT"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() {
            return Err(format!("`{text}` has no host"));
        }
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|port| *port > 0)
            .ok_or_else(|| format!("`{text}` has no valid port"))?;
        Ok(HostPort {
            host: host.to_owned(),
            port,
        })
    }

    /// Parses a comma-separated list of `host:port`, at least one.
    pub fn parse_list(text: &str) -> Result<Vec<HostPort>, String> {
        let list = text
            .split(',')
            .filter(|part| !part.trim().is_empty())
            .map(HostPort::parse)
            .collect::<Result<Vec<_>, _>>()?;
        if list.is_empty() {
            return Err("no HOST:PORT given".into());
        }
        Ok(list)
    }
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// How the store authenticates to, and encrypts its connections with, the servers of a cluster
/// or a Sentinel setup (the sentinels have their own, see [`Topology::Sentinel`]).
#[derive(Clone, Default, PartialEq, Eq)]
pub struct ServerAuth {
    /// ACL user (`AUTH user password`); without it, `AUTH password` (the `default` user).
    pub user: Option<String>,
    pub password: Option<String>,
    /// TLS on every connection (trusting and presenting what `RedisSettings::tls` says).
    pub tls: bool,
}

/// Never shows the password.
impl fmt::Debug for ServerAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerAuth")
            .field("user", &self.user)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .field("tls", &self.tls)
            .finish()
    }
}

/// The deployment the store talks to.
#[derive(Clone, PartialEq, Eq)]
pub enum Topology {
    /// `redis://[user:password@]host[:port][/db]`, `rediss://...` for TLS (a `#insecure`
    /// fragment skips certificate verification), or `unix:///path/to/socket[?db=N&pass=P]`.
    Single { url: String },
    /// A Redis Cluster reached through any of `seeds` (the others are learned from it).
    Cluster {
        seeds: Vec<HostPort>,
        auth: ServerAuth,
    },
    /// The master that the sentinels at `sentinels` know as `master_name`.
    Sentinel {
        master_name: String,
        sentinels: Vec<HostPort>,
        /// Credentials of the master and its replicas.
        auth: ServerAuth,
        /// Credentials of the sentinels themselves (their own `requirepass`); TLS follows `auth`.
        sentinel_auth: ServerAuth,
    },
}

impl Topology {
    /// Parses `MASTER_NAME@HOST:PORT[,HOST:PORT...]`, the sentinel form of the command line.
    pub fn parse_sentinel(text: &str) -> Result<(String, Vec<HostPort>), String> {
        let (name, hosts) = text
            .split_once('@')
            .ok_or_else(|| format!("`{text}` is not MASTER_NAME@HOST:PORT[,HOST:PORT...]"))?;
        if name.trim().is_empty() {
            return Err(format!("`{text}` names no master"));
        }
        Ok((name.trim().to_owned(), HostPort::parse_list(hosts)?))
    }

    /// Where the store connects, for logs and errors, without any password: the URL (its
    /// password, and a unix URL's `pass=`, as `***`), the cluster's seeds, or the master's name
    /// and its sentinels.
    pub fn address(&self) -> String {
        let list = |hosts: &[HostPort]| {
            hosts
                .iter()
                .map(HostPort::to_string)
                .collect::<Vec<_>>()
                .join(",")
        };
        match self {
            Topology::Single { url } => redacted_url(url),
            Topology::Cluster { seeds, .. } => format!("cluster {}", list(seeds)),
            Topology::Sentinel {
                master_name,
                sentinels,
                ..
            } => format!("master {master_name} via sentinels {}", list(sentinels)),
        }
    }

    /// A short name for logs and metrics: `single`, `cluster` or `sentinel`.
    pub fn kind(&self) -> &'static str {
        match self {
            Topology::Single { .. } => "single",
            Topology::Cluster { .. } => "cluster",
            Topology::Sentinel { .. } => "sentinel",
        }
    }
}

/// Shows no password.
impl fmt::Debug for Topology {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Topology::Single { url } => f
                .debug_struct("Single")
                .field("url", &redacted_url(url))
                .finish(),
            Topology::Cluster { seeds, auth } => f
                .debug_struct("Cluster")
                .field("seeds", seeds)
                .field("auth", auth)
                .finish(),
            Topology::Sentinel {
                master_name,
                sentinels,
                auth,
                sentinel_auth,
            } => f
                .debug_struct("Sentinel")
                .field("master_name", master_name)
                .field("sentinels", sentinels)
                .field("auth", auth)
                .field("sentinel_auth", sentinel_auth)
                .finish(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_host_port_lists_and_sentinel_targets() {
        let list = HostPort::parse_list("10.0.0.1:7000, redis-1:7001,[::1]:7002").unwrap();
        assert_eq!(list.len(), 3);
        assert_eq!(list[1].host, "redis-1");
        assert_eq!(list[2].host, "::1");
        assert_eq!(list[2].to_string(), "[::1]:7002");
        assert!(HostPort::parse_list("").is_err());
        assert!(HostPort::parse("redis").is_err());
        assert!(HostPort::parse("redis:0").is_err());
        assert!(HostPort::parse(":6379").is_err());

        let (name, sentinels) = Topology::parse_sentinel("mymaster@s1:26379,s2:26379").unwrap();
        assert_eq!(name, "mymaster");
        assert_eq!(sentinels.len(), 2);
        assert!(Topology::parse_sentinel("s1:26379").is_err());
        assert!(Topology::parse_sentinel("@s1:26379").is_err());
    }

    #[test]
    fn debug_output_hides_passwords() {
        let topology = Topology::Sentinel {
            master_name: "m".into(),
            sentinels: vec![HostPort::parse("s:1").unwrap()],
            auth: ServerAuth {
                user: Some("u".into()),
                password: Some("data-secret".into()),
                tls: false,
            },
            sentinel_auth: ServerAuth {
                password: Some("sentinel-secret".into()),
                ..ServerAuth::default()
            },
        };
        let shown = format!("{topology:?}");
        assert!(!shown.contains("secret"), "{shown}");
    }
}
