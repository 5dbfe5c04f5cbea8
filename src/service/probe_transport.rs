//! How `ratelimitd health` reaches the server: TCP or a unix socket, in plaintext or TLS (with a
//! client certificate for a server that requires one).

use std::future::Future;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};
use tokio_rustls::TlsConnector;

use crate::regular_file::{self, MAX_PEM_FILE_BYTES};

/// Where the server listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeAddress {
    /// `host:port`.
    Tcp(String),
    /// The path of a unix domain socket.
    Unix(PathBuf),
}

/// TLS to the server.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProbeTls {
    /// PEM CA certificate(s) the server's certificate must chain to; `None`: the public roots.
    pub ca: Option<PathBuf>,
    /// PEM certificate chain and private key to present, for a server that requires client
    /// certificates.
    pub identity: Option<(PathBuf, PathBuf)>,
    /// The name the server's certificate must carry (and the SNI sent); `None`: the host of a
    /// TCP address, `localhost` for a unix socket.
    pub server_name: Option<String>,
}

/// The server to probe and how to speak to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeTarget {
    pub address: ProbeAddress,
    pub tls: Option<ProbeTls>,
}

impl ProbeTarget {
    /// The address for messages.
    pub fn describe(&self) -> String {
        match &self.address {
            ProbeAddress::Tcp(addr) => addr.clone(),
            ProbeAddress::Unix(path) => format!("unix:{}", path.display()),
        }
    }

    /// A connector that opens one connection to the target per call; fails when the TLS files
    /// cannot be read or used, naming the flag and file.
    pub fn connector(&self) -> Result<ProbeConnector, String> {
        let tls = match &self.tls {
            None => None,
            Some(tls) => {
                let name = tls
                    .server_name
                    .clone()
                    .unwrap_or_else(|| match &self.address {
                        ProbeAddress::Tcp(addr) => host_of(addr).to_owned(),
                        ProbeAddress::Unix(_) => "localhost".to_owned(),
                    });
                let name = ServerName::try_from(name.clone()).map_err(|_| {
                    format!("`{name}` is not a DNS name or IP address (--tls-server-name)")
                })?;
                Some((TlsConnector::from(Arc::new(client_config(tls)?)), name))
            }
        };
        Ok(ProbeConnector {
            address: self.address.clone(),
            tls,
        })
    }
}

/// The host part of `host:port` (`[v6]:port` too).
fn host_of(addr: &str) -> &str {
    let host = addr.rsplit_once(':').map_or(addr, |(host, _)| host);
    host.trim_start_matches('[').trim_end_matches(']')
}

fn client_config(tls: &ProbeTls) -> Result<ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = RootCertStore::empty();
    match &tls.ca {
        Some(path) => {
            for certificate in certificates("--tls-ca", path)? {
                roots
                    .add(certificate)
                    .map_err(|error| format!("--tls-ca {}: {error}", path.display()))?;
            }
        }
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
    }
    let builder = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|error| format!("TLS setup: {error}"))?
        .with_root_certificates(roots);
    let mut config = match &tls.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let chain = certificates("--tls-cert", cert)?;
            let key = PrivateKeyDer::from_pem_slice(&read_pem_file("--tls-key", key)?)
                .map_err(|error| format!("--tls-key {}: {error}", key.display()))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|error| format!("--tls-cert/--tls-key: {error}"))?
        }
    };
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

fn certificates(flag: &str, path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let chain = CertificateDer::pem_slice_iter(&read_pem_file(flag, path)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| format!("{flag} {}: {error}", path.display()))?;
    if chain.is_empty() {
        return Err(format!(
            "{flag} {}: holds no PEM certificate",
            path.display()
        ));
    }
    Ok(chain)
}

/// The bytes of a PEM file given by `flag`: a regular file of at most [`MAX_PEM_FILE_BYTES`],
/// opened without blocking (a FIFO at the path is refused, not waited on).
fn read_pem_file(flag: &str, path: &Path) -> Result<Vec<u8>, String> {
    regular_file::read(path, MAX_PEM_FILE_BYTES)
        .map(|(bytes, _)| bytes)
        .map_err(|error| format!("{flag} {}: {error}", path.display()))
}

/// A byte stream to the server, whatever carries it.
pub trait ProbeIo: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> ProbeIo for T {}

/// Opens connections to a [`ProbeTarget`] for tonic's channel.
#[derive(Clone)]
pub struct ProbeConnector {
    address: ProbeAddress,
    tls: Option<(TlsConnector, ServerName<'static>)>,
}

impl ProbeConnector {
    async fn connect(self) -> io::Result<TokioIo<Box<dyn ProbeIo>>> {
        let stream: Box<dyn ProbeIo> = match &self.address {
            ProbeAddress::Tcp(addr) => Box::new(TcpStream::connect(addr.as_str()).await?),
            ProbeAddress::Unix(path) => Box::new(UnixStream::connect(path).await?),
        };
        let stream = match self.tls {
            None => stream,
            Some((connector, name)) => Box::new(connector.connect(name, stream).await?),
        };
        Ok(TokioIo::new(stream))
    }
}

impl tower_service::Service<hyper::Uri> for ProbeConnector {
    type Response = TokioIo<Box<dyn ProbeIo>>;
    type Error = io::Error;
    type Future = Pin<Box<dyn Future<Output = io::Result<Self::Response>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: hyper::Uri) -> Self::Future {
        Box::pin(self.clone().connect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_of_an_address() {
        assert_eq!(host_of("127.0.0.1:8081"), "127.0.0.1");
        assert_eq!(host_of("ratelimit.internal:8081"), "ratelimit.internal");
        assert_eq!(host_of("[::1]:8081"), "::1");
        assert_eq!(host_of("localhost"), "localhost");
    }
}
