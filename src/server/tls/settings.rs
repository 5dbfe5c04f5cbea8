//! Where the gRPC port's TLS material lives and what a client's certificate must be: the
//! settings the command line gives, read by the loader and its reload.

use std::path::PathBuf;

/// Where the gRPC port's TLS material lives (`--grpc-tls-cert`, `--grpc-tls-key`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM certificate chain, the server's own certificate first.
    pub cert: PathBuf,
    /// PEM private key of that certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// Client certificates to require; `None`: clients are not asked for one.
    pub client_auth: Option<ClientAuth>,
}

/// Mutual TLS: what a client's certificate must be for its handshake to succeed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientAuth {
    /// PEM file of the CA certificate(s) a client certificate must chain to.
    pub ca: PathBuf,
    /// A Subject Alternative Name the client certificate must also carry, as
    /// `--grpc-tls-client-san` spells it (see [`super::SanPin::parse`]: `dns:`, `ip:`, `uri:` or an
    /// untyped name), matched against SANs of its type only. `None`: any certificate the CA
    /// signed for client authentication will do.
    pub san: Option<String>,
}
