//! Bounds on what clients can make the server hold: per request, per connection, in all.

use std::time::Duration;

use super::parse;
use crate::limiter::RequestBounds;
use crate::server::memory_budget;
use crate::server::transport_bounds::TransportBounds;

/// What one request may carry; a request beyond it is refused with INVALID_ARGUMENT.
#[derive(clap::Args)]
pub struct RequestBoundArgs {
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=RequestBounds::MAX_DESCRIPTORS_CEILING as i64))]
    max_descriptors: u32,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    max_descriptor_entries: u32,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
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
pub struct TransportBoundArgs {
    #[arg(long, value_parser = parse::size)]
    max_request_size: usize,
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    grpc_max_concurrent_streams: u32,
    #[arg(long, value_parser = parse::window)]
    grpc_stream_window: u32,
    #[arg(long, value_parser = parse::window)]
    grpc_connection_window: u32,
    #[arg(long, value_parser = parse::size)]
    grpc_max_buffered_bytes: usize,
    #[arg(long)]
    grpc_max_streaming_calls: usize,
    #[arg(long)]
    grpc_max_streaming_calls_per_connection: u32,
    #[arg(long, value_parser = parse::positive_duration)]
    grpc_read_timeout: Duration,
    #[arg(long, value_parser = humantime::parse_duration)]
    grpc_idle_timeout: Duration,
    #[arg(long, value_parser = parse::count)]
    grpc_max_connections: usize,
    #[arg(long, value_parser = parse::count)]
    http_max_connections: usize,
    #[arg(long, value_parser = parse::positive_duration)]
    http_header_read_timeout: Duration,
    #[arg(long, value_parser = parse::positive_duration)]
    http_connection_timeout: Duration,
    #[arg(long)]
    fd_reserve: usize,
    #[arg(long, value_name = "SIZE", value_parser = memory_budget)]
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
