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
mod settings;
mod uri_sans;

pub use self::client_san::SanPin;
pub use self::files::TlsError;
pub use self::reload::{watch, ServerTls, TLS_RELOAD_INTERVAL};
pub use self::settings::{ClientAuth, TlsSettings};
