//! What the gRPC port speaks and how long its connections live, besides the [`super::TransportBounds`].

use super::connection_age::ConnectionAge;
use super::tls::TlsSettings;

/// The gRPC port's TLS (`--grpc-tls-*`) and connection age (`--grpc-max-connection-age*`).
/// The default: plaintext, connections live as long as their clients keep them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GrpcOptions {
    /// TLS on the gRPC port; `None`: plaintext HTTP/2.
    pub tls: Option<TlsSettings>,
    /// Maximum connection age and its grace; `None`: no age limit.
    pub connection_age: Option<ConnectionAge>,
}
