//! TLS and mutual TLS from the xDS client to its server.

use std::path::{Path, PathBuf};

use tonic::transport::{Certificate, ClientTlsConfig, Identity};

/// How the xDS client checks the server and proves who it is (envoyproxy/ratelimit's
/// `CONFIG_GRPC_XDS_SERVER_TLS_CACERT`, `CONFIG_GRPC_XDS_CLIENT_TLS_CERT`/`_KEY` and
/// `CONFIG_GRPC_XDS_SERVER_TLS_SAN`). The files are read at every connection, so rotated
/// certificates are used from the next reconnect on. TLS 1.2 and 1.3 are offered; a server
/// that requires 1.3 (Envoy Gateway's) gets 1.3.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XdsTls {
    /// PEM certificates the server's chain must lead to; `None`: the public web roots.
    pub ca: Option<PathBuf>,
    /// PEM client certificate chain and its key, for servers that require one (Envoy
    /// Gateway's); both or neither.
    pub client_cert: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// The name the server's certificate must carry (a DNS SAN), and the SNI sent; `None`: the
    /// host of the server's address.
    pub san: Option<String>,
}

impl XdsTls {
    /// The tonic TLS settings for a connection to `host`.
    pub fn client_config(&self, host: &str) -> Result<ClientTlsConfig, String> {
        let name = self.san.as_deref().unwrap_or(host);
        let mut config = ClientTlsConfig::new().domain_name(name);
        config = match &self.ca {
            Some(ca) => config.ca_certificate(Certificate::from_pem(read(ca, "CA")?)),
            None => config.with_webpki_roots(),
        };
        match (&self.client_cert, &self.client_key) {
            (Some(cert), Some(key)) => {
                let identity =
                    Identity::from_pem(read(cert, "client certificate")?, read(key, "client key")?);
                config = config.identity(identity);
            }
            (None, None) => {}
            _ => {
                return Err(
                    "xDS client TLS needs both the client certificate and its key".to_string(),
                )
            }
        }
        Ok(config)
    }
}

fn read(path: &Path, what: &str) -> Result<Vec<u8>, String> {
    std::fs::read(path)
        .map_err(|error| format!("cannot read the xDS {what} {}: {error}", path.display()))
}
