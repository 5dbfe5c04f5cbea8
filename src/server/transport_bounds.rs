//! Transport bounds: how much one peer, and all peers together, may make the gRPC and HTTP ports
//! hold (streams, bytes, connections, time), and the descriptor budget they share.
//!
//! Each bound has a flag and a `RATELIMITD_...` variable (see `ratelimitd serve --help` and
//! docs/operations/hardening.md); [`TransportBounds::default`] holds the defaults those fall back to.

use std::time::Duration;

/// Every transport bound of `serve`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransportBounds {
    /// Largest request accepted, in bytes: a gRPC message (RESOURCE_EXHAUSTED above it) or a
    /// `/json` body (413 above it).
    pub max_request_size: usize,
    /// HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS advertised on every gRPC connection.
    pub grpc_max_concurrent_streams: u32,
    /// HTTP/2 initial stream window: bytes a peer may send on one stream before we read them.
    pub grpc_stream_window: u32,
    /// HTTP/2 initial connection window (bytes a peer may send on all its streams before we read
    /// them), and the cap on the bytes of partly received request messages of one connection
    /// (never below one message of `max_request_size`, which could not arrive otherwise).
    pub grpc_connection_window: u32,
    /// Cap on the bytes of partly received request messages of all connections together (never
    /// below the per-connection cap).
    pub grpc_max_buffered_bytes: usize,
    /// Concurrent long-lived calls (health `Watch`, reflection streams), all connections.
    pub grpc_max_streaming_calls: usize,
    /// Concurrent long-lived calls on one connection.
    pub grpc_max_streaming_calls_per_connection: u32,
    /// Time a call that takes one request message (every method but reflection) has to send it
    /// and end its request stream.
    pub grpc_read_timeout: Duration,
    /// A gRPC connection with no call open for this long is closed with GOAWAY; `None`: never.
    pub grpc_idle_timeout: Option<Duration>,
    /// Most gRPC connections at once (lowered to fit the open-files limit, see
    /// [`TransportBounds::connection_caps`]).
    pub grpc_max_connections: usize,
    /// Most HTTP-port connections at once (lowered likewise).
    pub http_max_connections: usize,
    /// Time an HTTP client has to send a request's headers, the first and every next one.
    pub http_header_read_timeout: Duration,
    /// Longest an HTTP connection stays open, whatever it does.
    pub http_connection_timeout: Duration,
    /// Open files never given to client connections: listeners, the runtimes' own descriptors,
    /// Redis connections, configuration files being read.
    pub fd_reserve: usize,
}

impl TransportBounds {
    pub const DEFAULT_MAX_REQUEST_SIZE: usize = 64 << 10;
    pub const DEFAULT_GRPC_MAX_CONCURRENT_STREAMS: u32 = 100;
    pub const DEFAULT_GRPC_STREAM_WINDOW: u32 = 64 << 10;
    pub const DEFAULT_GRPC_CONNECTION_WINDOW: u32 = 256 << 10;
    pub const DEFAULT_GRPC_MAX_BUFFERED_BYTES: usize = 64 << 20;
    pub const DEFAULT_GRPC_MAX_STREAMING_CALLS: usize = 1000;
    pub const DEFAULT_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION: u32 = 8;
    pub const DEFAULT_GRPC_READ_TIMEOUT: Duration = Duration::from_secs(10);
    pub const DEFAULT_GRPC_IDLE_TIMEOUT: Duration = Duration::from_secs(300);
    pub const DEFAULT_GRPC_MAX_CONNECTIONS: usize = 10_000;
    pub const DEFAULT_HTTP_MAX_CONNECTIONS: usize = 128;
    pub const DEFAULT_HTTP_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);
    pub const DEFAULT_HTTP_CONNECTION_TIMEOUT: Duration = Duration::from_secs(60);
    pub const DEFAULT_FD_RESERVE: usize = 64;

    /// The connection caps that fit `open_files` (the soft RLIMIT_NOFILE): after
    /// [`TransportBounds::fd_reserve`], the HTTP port gets at most half of what is left and gRPC the
    /// rest, each never more than its flag says. Both are at least 1, so a server started with
    /// too few descriptors still serves (and says so in its startup line).
    pub fn connection_caps(&self, open_files: u64) -> ConnectionCaps {
        let available = usize::try_from(open_files)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.fd_reserve);
        let http = self.http_max_connections.min(available / 2).max(1);
        let grpc = self
            .grpc_max_connections
            .min(available.saturating_sub(http))
            .max(1);
        ConnectionCaps { grpc, http }
    }
}

impl Default for TransportBounds {
    fn default() -> TransportBounds {
        TransportBounds {
            max_request_size: TransportBounds::DEFAULT_MAX_REQUEST_SIZE,
            grpc_max_concurrent_streams: TransportBounds::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS,
            grpc_stream_window: TransportBounds::DEFAULT_GRPC_STREAM_WINDOW,
            grpc_connection_window: TransportBounds::DEFAULT_GRPC_CONNECTION_WINDOW,
            grpc_max_buffered_bytes: TransportBounds::DEFAULT_GRPC_MAX_BUFFERED_BYTES,
            grpc_max_streaming_calls: TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS,
            grpc_max_streaming_calls_per_connection:
                TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION,
            grpc_read_timeout: TransportBounds::DEFAULT_GRPC_READ_TIMEOUT,
            grpc_idle_timeout: Some(TransportBounds::DEFAULT_GRPC_IDLE_TIMEOUT),
            grpc_max_connections: TransportBounds::DEFAULT_GRPC_MAX_CONNECTIONS,
            http_max_connections: TransportBounds::DEFAULT_HTTP_MAX_CONNECTIONS,
            http_header_read_timeout: TransportBounds::DEFAULT_HTTP_HEADER_READ_TIMEOUT,
            http_connection_timeout: TransportBounds::DEFAULT_HTTP_CONNECTION_TIMEOUT,
            fd_reserve: TransportBounds::DEFAULT_FD_RESERVE,
        }
    }
}

/// Connections each port may hold at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionCaps {
    pub grpc: usize,
    pub http: usize,
}

/// A byte size: a number, optionally followed by `B`, `KiB`, `MiB` or `GiB` (`K`, `M`, `G` and
/// `KB`, `MB`, `GB` mean the same binary units; case does not matter).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let bad = || format!("`{text}` is not a size (e.g. 65536, 64KiB, 1MiB)");
    let number: u64 = number.parse().map_err(|_| bad())?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => return Err(bad()),
    };
    number.checked_mul(1 << shift).ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_binary_units() {
        assert_eq!(parse_size("65536"), Ok(65536));
        assert_eq!(parse_size("64KiB"), Ok(64 << 10));
        assert_eq!(parse_size("64k"), Ok(64 << 10));
        assert_eq!(parse_size("1 MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2GB"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("KiB").is_err());
        assert!(parse_size("1.5MiB").is_err());
        assert!(parse_size("1TiB").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
    }

    #[test]
    fn caps_fit_the_open_files_limit() {
        let bounds = TransportBounds::default();
        assert_eq!(
            bounds.connection_caps(1_048_576),
            ConnectionCaps {
                grpc: 10_000,
                http: 128
            }
        );
        assert_eq!(
            bounds.connection_caps(1024),
            ConnectionCaps {
                grpc: 1024 - 64 - 128,
                http: 128
            }
        );
        assert_eq!(
            bounds.connection_caps(256),
            ConnectionCaps { grpc: 96, http: 96 }
        );
        assert_eq!(
            bounds.connection_caps(10),
            ConnectionCaps { grpc: 1, http: 1 }
        );
    }
}
