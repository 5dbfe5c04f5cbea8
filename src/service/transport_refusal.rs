//! What a transport bound did, as `ratelimitd_transport_limited_total{limit}` counts it.

/// One way a transport bound stepped in (a call, message or connection refused or closed).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TransportRefusal {
    /// A gRPC message or `/json` body larger than `--max-request-size` (RESOURCE_EXHAUSTED / 413).
    RequestSize,
    /// A call that brought its connection to `--grpc-max-concurrent-streams`: the peer must wait
    /// for one to end before opening another (HTTP/2 itself refuses any stream beyond).
    ConcurrentStreams,
    /// A call refused because its connection's partly received messages reached
    /// `--grpc-connection-window` bytes.
    ConnectionBuffer,
    /// A call refused because all connections' partly received messages reached
    /// `--grpc-max-buffered-bytes`.
    BufferedBytes,
    /// A call, or a message of one, refused because all calls together hold
    /// `--grpc-memory-budget`.
    MemoryBudget,
    /// A long-lived call (Watch, reflection) refused at `--grpc-max-streaming-calls`.
    StreamingCalls,
    /// A long-lived call refused at `--grpc-max-streaming-calls-per-connection`.
    StreamingCallsPerConnection,
    /// A call that did not send its request within `--grpc-read-timeout`.
    ReadTimeout,
    /// A gRPC connection closed after `--grpc-idle-timeout` without calls.
    IdleTimeout,
    /// A gRPC connection closed (GOAWAY) to make room under `--grpc-max-connections`.
    ConnectionShed,
    /// A gRPC connection refused at once: the cap was reached and none could be shed.
    ConnectionRefused,
    /// A gRPC request that was not a POST of `application/grpc` (405 / 415).
    ContentType,
    /// A call that takes one request message and sent none or several (UNIMPLEMENTED).
    Cardinality,
    /// An HTTP connection closed for not sending request headers within
    /// `--http-header-read-timeout`.
    HeaderReadTimeout,
    /// An HTTP connection closed at `--http-connection-timeout`.
    HttpConnectionTimeout,
    /// An HTTP connection closed (the oldest) to make room under `--http-max-connections`.
    HttpConnectionShed,
}

impl TransportRefusal {
    pub const ALL: [TransportRefusal; 16] = [
        TransportRefusal::RequestSize,
        TransportRefusal::ConcurrentStreams,
        TransportRefusal::ConnectionBuffer,
        TransportRefusal::BufferedBytes,
        TransportRefusal::MemoryBudget,
        TransportRefusal::StreamingCalls,
        TransportRefusal::StreamingCallsPerConnection,
        TransportRefusal::ReadTimeout,
        TransportRefusal::IdleTimeout,
        TransportRefusal::ConnectionShed,
        TransportRefusal::ConnectionRefused,
        TransportRefusal::ContentType,
        TransportRefusal::Cardinality,
        TransportRefusal::HeaderReadTimeout,
        TransportRefusal::HttpConnectionTimeout,
        TransportRefusal::HttpConnectionShed,
    ];

    /// The `limit` label value.
    pub fn label(self) -> &'static str {
        match self {
            TransportRefusal::RequestSize => "request_size",
            TransportRefusal::ConcurrentStreams => "grpc_concurrent_streams",
            TransportRefusal::ConnectionBuffer => "grpc_connection_buffer",
            TransportRefusal::BufferedBytes => "grpc_buffered_bytes",
            TransportRefusal::MemoryBudget => "grpc_memory_budget",
            TransportRefusal::StreamingCalls => "grpc_streaming_calls",
            TransportRefusal::StreamingCallsPerConnection => "grpc_streaming_calls_per_connection",
            TransportRefusal::ReadTimeout => "grpc_read_timeout",
            TransportRefusal::IdleTimeout => "grpc_idle_timeout",
            TransportRefusal::ConnectionShed => "grpc_connection_shed",
            TransportRefusal::ConnectionRefused => "grpc_connection_refused",
            TransportRefusal::ContentType => "grpc_content_type",
            TransportRefusal::Cardinality => "grpc_cardinality",
            TransportRefusal::HeaderReadTimeout => "http_header_read_timeout",
            TransportRefusal::HttpConnectionTimeout => "http_connection_timeout",
            TransportRefusal::HttpConnectionShed => "http_connection_shed",
        }
    }

    /// Position in [`TransportRefusal::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// The port an accept error happened on (`ratelimitd_accept_errors_total{port}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Port {
    Grpc,
    Http,
}

impl Port {
    pub const ALL: [Port; 2] = [Port::Grpc, Port::Http];

    pub fn label(self) -> &'static str {
        match self {
            Port::Grpc => "grpc",
            Port::Http => "http",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_is_the_position_in_all() {
        for (position, refusal) in TransportRefusal::ALL.iter().enumerate() {
            assert_eq!(refusal.index(), position, "{refusal:?}");
        }
        let mut labels: Vec<_> = TransportRefusal::ALL.iter().map(|l| l.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), TransportRefusal::ALL.len());
    }
}
