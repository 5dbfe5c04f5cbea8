//! What TLS to Redis trusts and presents, beyond the `rediss://` of a URL or `--redis-tls`: the
//! certificates to trust instead of the system's store, and a client certificate (mutual TLS).

use std::fmt;
use std::path::PathBuf;

/// The flag of [`RedisTlsSettings::ca`].
pub const CA_FLAG: &str = "--redis-tls-ca";
/// The flag of [`ClientIdentityFiles::cert`].
pub const CLIENT_CERT_FLAG: &str = "--redis-tls-client-cert";
/// The flag of [`ClientIdentityFiles::key`].
pub const CLIENT_KEY_FLAG: &str = "--redis-tls-client-key";

/// A file of the TLS settings and the name the user gave it by: its flag, or the
/// envoyproxy/ratelimit variable it was read from. Errors about the file show both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFile {
    pub path: PathBuf,
    pub given_as: String,
}

impl TlsFile {
    pub fn new(path: impl Into<PathBuf>, given_as: impl Into<String>) -> TlsFile {
        TlsFile {
            path: path.into(),
            given_as: given_as.into(),
        }
    }
}

/// `NAME PATH`, as the user gave it.
impl fmt::Display for TlsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.given_as, self.path.display())
    }
}

/// A client certificate chain (the certificate first) and its private key, PEM files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIdentityFiles {
    pub cert: TlsFile,
    pub key: TlsFile,
}

/// Whom TLS connections to Redis (servers and sentinels alike) trust, and the certificate they
/// present. The defaults: the system's certificate store, no client certificate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RedisTlsSettings {
    /// PEM certificates to trust instead of the system's store: a private CA, or a server's own
    /// self-signed certificate.
    pub ca: Option<TlsFile>,
    /// With `ca`: trust the system's store as well (envoyproxy/ratelimit's `REDIS_TLS_CACERT`
    /// adds to it).
    pub ca_with_system_roots: bool,
    /// Presented to servers that ask for a client certificate (`tls-auth-clients`).
    pub client_identity: Option<ClientIdentityFiles>,
}

impl RedisTlsSettings {
    /// Trusting only the certificates of the PEM file at `path` (`--redis-tls-ca`).
    pub fn with_ca(path: impl Into<PathBuf>) -> RedisTlsSettings {
        RedisTlsSettings {
            ca: Some(TlsFile::new(path, CA_FLAG)),
            ..RedisTlsSettings::default()
        }
    }

    /// The names of the files given, which only a TLS connection uses (empty: none given).
    pub fn files_given(&self) -> Vec<&str> {
        let mut names = Vec::new();
        if let Some(ca) = &self.ca {
            names.push(ca.given_as.as_str());
        }
        if let Some(identity) = &self.client_identity {
            names.push(identity.cert.given_as.as_str());
            names.push(identity.key.given_as.as_str());
        }
        names
    }
}
