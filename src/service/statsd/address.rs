//! `--statsd-addr`: where the statsd server listens, as `HOST:PORT`.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

/// A statsd server's address. HOST may be a name (looked up when the sink starts and again after
/// a failure, so a server that moves is followed), an IPv4 address or a bracketed IPv6 one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatsdAddr {
    host: String,
    port: u16,
}

impl StatsdAddr {
    /// Parses `HOST:PORT` (`[ADDR]:PORT` for IPv6); the port must be 1 to 65535.
    pub fn parse(text: &str) -> Result<StatsdAddr, String> {
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| format!("`{text}` is not HOST:PORT"))?;
        let host = match host.strip_prefix('[') {
            Some(bracketed) => bracketed
                .strip_suffix(']')
                .ok_or_else(|| format!("`{text}`: unclosed `[` around the IPv6 address"))?,
            None if host.contains(':') => {
                return Err(format!(
                    "`{text}`: an IPv6 address goes in brackets, `[ADDR]:PORT`"
                ))
            }
            None => host,
        };
        if host.is_empty() {
            return Err(format!("`{text}` has an empty host"));
        }
        match port.parse::<u16>() {
            Ok(port) if port > 0 => Ok(StatsdAddr {
                host: host.to_string(),
                port,
            }),
            _ => Err(format!("`{text}`: `{port}` is not a port (1-65535)")),
        }
    }

    /// Looks the host up and returns its first address, giving up after `timeout`.
    pub async fn resolve(&self, timeout: Duration) -> io::Result<SocketAddr> {
        let lookup = tokio::net::lookup_host((self.host.as_str(), self.port));
        let mut addrs = tokio::time::timeout(timeout, lookup).await.map_err(|_| {
            io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no answer within {timeout:?}"),
            )
        })??;
        addrs
            .next()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no address"))
    }
}

impl fmt::Display for StatsdAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_and_port_forms() {
        let name = StatsdAddr::parse("statsd.monitoring:8125").unwrap();
        assert_eq!(name.to_string(), "statsd.monitoring:8125");
        assert_eq!(
            StatsdAddr::parse("[::1]:9125").unwrap().to_string(),
            "[::1]:9125"
        );
        assert_eq!(StatsdAddr::parse("127.0.0.1:1").unwrap().port, 1);
        for bad in [
            "statsd",
            ":8125",
            "statsd:",
            "statsd:0",
            "statsd:70000",
            "::1:8125",
            "[::1:8125",
        ] {
            assert!(StatsdAddr::parse(bad).is_err(), "{bad}");
        }
    }
}
