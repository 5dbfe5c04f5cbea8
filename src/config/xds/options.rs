//! Where the xDS server is, who this client says it is, and how it talks to the server.

use std::time::Duration;

use super::backoff::BackoffPolicy;
use super::tls::XdsTls;

/// Where the xDS server is and how to talk to it.
#[derive(Debug, Clone, PartialEq)]
pub struct XdsOptions {
    /// The server, `HOST:PORT`.
    pub server: String,
    /// Who this client says it is (the `node` of every request).
    pub node: NodeIdentity,
    /// Metadata added to the stream's request headers (e.g. an authorization token), lowercase
    /// names.
    pub headers: Vec<(String, String)>,
    /// TLS to the server; `None`: plaintext.
    pub tls: Option<XdsTls>,
    /// The wait between attempts while the server cannot be reached at all (refused, TLS
    /// failure), ± 50 %, as envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL`.
    pub connect_retry_interval: Duration,
    /// The waits after a stream the server had accepted ends.
    pub backoff: BackoffPolicy,
    /// Largest response accepted, bytes (a larger one ends the stream, which is reopened).
    pub max_message_bytes: usize,
    /// How long a response may take to arrive whole once its first byte has, and the first
    /// response while no configuration is in force may take after the stream opened; past it
    /// the stream is dropped and reopened. An idle stream has no deadline: the server sends
    /// when it has something new.
    pub response_timeout: Duration,
}

impl XdsOptions {
    /// gRPC's default largest message.
    pub const DEFAULT_MAX_MESSAGE_BYTES: usize = 4 << 20;
    /// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL` default.
    pub const DEFAULT_CONNECT_RETRY_INTERVAL: Duration = Duration::from_secs(3);
    /// The response deadline by default: about as long as the HTTP/2 keepalive takes to notice a
    /// vanished server (a 30 s ping interval, 10 s for the answer), and enough for a response of
    /// the default 4 MiB cap to cross a link of 1.2 Mbit/s.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(30);

    /// Defaults for everything but the server: node `default`, plaintext, envoyproxy/ratelimit's
    /// delays.
    pub fn new(server: impl Into<String>) -> XdsOptions {
        XdsOptions {
            server: server.into(),
            node: NodeIdentity::default(),
            headers: Vec::new(),
            tls: None,
            connect_retry_interval: Self::DEFAULT_CONNECT_RETRY_INTERVAL,
            backoff: BackoffPolicy::DEFAULT,
            max_message_bytes: Self::DEFAULT_MAX_MESSAGE_BYTES,
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
        }
    }
}

/// The `node` of the discovery requests: the control plane picks the configuration by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeIdentity {
    pub id: String,
    /// Empty: not sent.
    pub cluster: String,
    /// String fields of the node's metadata, in order.
    pub metadata: Vec<(String, String)>,
}

impl Default for NodeIdentity {
    /// envoyproxy/ratelimit's `CONFIG_GRPC_XDS_NODE_ID` default.
    fn default() -> Self {
        NodeIdentity {
            id: "default".into(),
            cluster: String::new(),
            metadata: Vec::new(),
        }
    }
}
