//! TLS on the gRPC port: the server's certificate, optional client-certificate checks (mutual
//! TLS, optionally pinned to one Subject Alternative Name), and their reload when the files
//! change.
//!
//! The files are PEM. Each handshake uses the [`rustls::ServerConfig`] current when it starts
//! ([`ServerTls::acceptor`]); a background task reads the files every
//! [`reload::TLS_RELOAD_INTERVAL`] and swaps in a new configuration when their contents changed
//! and make a valid one. A replacement that cannot be used (unreadable, not PEM, key and
//! certificate that do not match) is logged and the configuration in use stays.

mod client_san;
mod files;
mod reload;
mod uri_sans;

use std::path::PathBuf;

pub use self::client_san::SanPin;
pub use self::files::TlsError;
pub use self::reload::{watch, ServerTls, TLS_RELOAD_INTERVAL};

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
    /// `--grpc-tls-client-san` spells it (see [`SanPin::parse`]: `dns:`, `ip:`, `uri:` or an
    /// untyped name), matched against SANs of its type only. `None`: any certificate the CA
    /// signed for client authentication will do.
    pub san: Option<String>,
}
