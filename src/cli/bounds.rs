//! Bounds on what clients can make the server hold: per request, per connection, in all.

use std::time::Duration;

use super::parse;
use crate::limiter::RequestBounds;
use crate::server::memory_budget;
use crate::server::transport_bounds::TransportBounds;

/// What one request may carry; a request beyond it is refused with INVALID_ARGUMENT.
#[derive(clap::Args)]
#[command(next_help_heading = "Request limits")]
pub struct RequestBoundArgs {
    /// Most descriptors in one request (at most 1024, the checks of one Redis call).
    #[arg(long, env = "RATELIMITD_MAX_DESCRIPTORS", default_value_t = RequestBounds::DEFAULT_MAX_DESCRIPTORS as u32, value_parser = clap::value_parser!(u32).range(1..=RequestBounds::MAX_DESCRIPTORS_CEILING as i64))]
    max_descriptors: u32,
    /// Most entries in one descriptor.
    #[arg(long, env = "RATELIMITD_MAX_DESCRIPTOR_ENTRIES", default_value_t = RequestBounds::DEFAULT_MAX_ENTRIES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_descriptor_entries: u32,
    /// Longest key, and longest value, of a descriptor entry, in bytes.
    #[arg(long, env = "RATELIMITD_MAX_ENTRY_BYTES", default_value_t = RequestBounds::DEFAULT_MAX_ENTRY_BYTES as u32, value_parser = clap::value_parser!(u32).range(1..))]
    max_entry_bytes: u32,
}

impl RequestBoundArgs {
    /// The bounds every request is checked against.
    pub fn bounds(&self) -> RequestBounds {
        RequestBounds {
            max_descriptors: self.max_descriptors as usize,
            max_entries: self.max_descriptor_entries as usize,
            max_entry_bytes: self.max_entry_bytes as usize,
        }
    }
}

/// Transport bounds (docs/operations/hardening.md).
#[derive(clap::Args)]
#[command(next_help_heading = "Limits")]
pub struct TransportBoundArgs {
    /// Largest request accepted: a gRPC message (RESOURCE_EXHAUSTED above) or a /json body (413
    /// above). Sizes take B, KiB, MiB, GiB.
    #[arg(long, env = "RATELIMITD_MAX_REQUEST_SIZE", default_value = "64KiB", value_parser = parse::size)]
    max_request_size: usize,
    /// Concurrent streams per gRPC connection (HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS).
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONCURRENT_STREAMS", default_value_t = TransportBounds::DEFAULT_GRPC_MAX_CONCURRENT_STREAMS, value_parser = clap::value_parser!(u32).range(1..))]
    grpc_max_concurrent_streams: u32,
    /// HTTP/2 stream window: bytes a peer may send on one stream before the server reads them.
    #[arg(long, env = "RATELIMITD_GRPC_STREAM_WINDOW", default_value = "64KiB", value_parser = parse::window)]
    grpc_stream_window: u32,
    /// HTTP/2 connection window, and the most bytes of partly received messages one connection
    /// may hold (at least one message of --max-request-size).
    #[arg(long, env = "RATELIMITD_GRPC_CONNECTION_WINDOW", default_value = "256KiB", value_parser = parse::window)]
    grpc_connection_window: u32,
    /// Most bytes of partly received gRPC messages all connections together may hold.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_BUFFERED_BYTES", default_value = "64MiB", value_parser = parse::size)]
    grpc_max_buffered_bytes: usize,
    /// Concurrent long-lived gRPC calls (health Watch, reflection), all connections.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_STREAMING_CALLS", default_value_t = TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS)]
    grpc_max_streaming_calls: usize,
    /// Concurrent long-lived gRPC calls on one connection.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION", default_value_t = TransportBounds::DEFAULT_GRPC_MAX_STREAMING_CALLS_PER_CONNECTION)]
    grpc_max_streaming_calls_per_connection: u32,
    /// Time a call has to send its request and end its request stream (DEADLINE_EXCEEDED after).
    #[arg(long, env = "RATELIMITD_GRPC_READ_TIMEOUT", default_value = "10s", value_parser = parse::positive_duration)]
    grpc_read_timeout: Duration,
    /// A gRPC connection without calls for this long is closed with GOAWAY (`0s`: never).
    #[arg(long, env = "RATELIMITD_GRPC_IDLE_TIMEOUT", default_value = "5m", value_parser = humantime::parse_duration)]
    grpc_idle_timeout: Duration,
    /// Most gRPC connections at once; lowered to fit the open-files limit. At the cap, the
    /// connection idle the longest is closed to take a new one.
    #[arg(long, env = "RATELIMITD_GRPC_MAX_CONNECTIONS", default_value_t = TransportBounds::DEFAULT_GRPC_MAX_CONNECTIONS, value_parser = parse::count)]
    grpc_max_connections: usize,
    /// Most HTTP-port connections at once; lowered to fit the open-files limit. At the cap, the
    /// oldest is closed to take a new one.
    #[arg(long, env = "RATELIMITD_HTTP_MAX_CONNECTIONS", default_value_t = TransportBounds::DEFAULT_HTTP_MAX_CONNECTIONS, value_parser = parse::count)]
    http_max_connections: usize,
    /// Time an HTTP client has to send a request's headers (the first and every next one).
    #[arg(long, env = "RATELIMITD_HTTP_HEADER_READ_TIMEOUT", default_value = "5s", value_parser = parse::positive_duration)]
    http_header_read_timeout: Duration,
    /// Longest an HTTP connection stays open.
    #[arg(long, env = "RATELIMITD_HTTP_CONNECTION_TIMEOUT", default_value = "60s", value_parser = parse::positive_duration)]
    http_connection_timeout: Duration,
    /// Open files kept for anything but client connections (listeners, Redis, runtime).
    #[arg(long, env = "RATELIMITD_FD_RESERVE", default_value_t = TransportBounds::DEFAULT_FD_RESERVE)]
    fd_reserve: usize,
    /// Most memory all gRPC calls together may hold: 6 KiB per open call plus its request
    /// headers, plus the messages being received at the length their prefix declares. A call or
    /// message past it is refused with RESOURCE_EXHAUSTED. Default: a quarter of the memory the
    /// process may use (its cgroup's limit, else the machine's RAM), at least 32 MiB. Sizes take
    /// B, KiB, MiB, GiB.
    #[arg(long, env = "RATELIMITD_GRPC_MEMORY_BUDGET", value_name = "SIZE", value_parser = memory_budget)]
    grpc_memory_budget: Option<usize>,
}

impl TransportBoundArgs {
    /// The transport's bounds.
    pub fn bounds(&self) -> TransportBounds {
        TransportBounds {
            max_request_size: self.max_request_size,
            grpc_max_concurrent_streams: self.grpc_max_concurrent_streams,
            grpc_stream_window: self.grpc_stream_window,
            grpc_connection_window: self.grpc_connection_window,
            grpc_max_buffered_bytes: self.grpc_max_buffered_bytes,
            grpc_max_streaming_calls: self.grpc_max_streaming_calls,
            grpc_max_streaming_calls_per_connection: self.grpc_max_streaming_calls_per_connection,
            grpc_read_timeout: self.grpc_read_timeout,
            grpc_idle_timeout: (!self.grpc_idle_timeout.is_zero())
                .then_some(self.grpc_idle_timeout),
            grpc_max_connections: self.grpc_max_connections,
            http_max_connections: self.http_max_connections,
            http_header_read_timeout: self.http_header_read_timeout,
            http_connection_timeout: self.http_connection_timeout,
            fd_reserve: self.fd_reserve,
        }
    }

    /// The budget of all gRPC calls in bytes: the flag's, else [`memory_budget::default_bytes`].
    pub fn grpc_memory_budget(&self) -> usize {
        self.grpc_memory_budget
            .unwrap_or_else(memory_budget::default_bytes)
    }
}

/// A budget of at least one call.
fn memory_budget(text: &str) -> Result<usize, String> {
    let size = parse::size(text)?;
    if size >= memory_budget::CALL_COST {
        Ok(size)
    } else {
        Err(format!(
            "`{text}` is below one call's {} bytes (sizes take B, KiB, MiB, GiB)",
            memory_budget::CALL_COST
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_memory_budget_takes_sizes_of_at_least_one_call() {
        assert_eq!(memory_budget("64MiB"), Ok(64 << 20));
        assert!(memory_budget("1KiB").is_err());
        assert!(memory_budget("lots").is_err());
    }
}
