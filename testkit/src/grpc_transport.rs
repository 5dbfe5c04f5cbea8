//! Clients for a gRPC port that speaks TLS or listens on a unix socket: tonic's own TLS (rustls,
//! ALPN h2) and a tonic channel over a `UnixStream` connector, and a bare TLS handshake that
//! reports the certificate the server presented.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use ratelimitd::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

use super::pki::Issued;
use super::ratelimitd::Client;

/// A TLS channel to `addr` that trusts `ca` and checks the name `localhost`, presenting
/// `identity` when given. Connection errors are returned, not panicked on.
pub async fn tls_channel(
    addr: SocketAddr,
    ca: &Path,
    identity: Option<&Issued>,
) -> Result<Channel, tonic::transport::Error> {
    let mut tls = ClientTlsConfig::new()
        .ca_certificate(Certificate::from_pem(read(ca)))
        .domain_name("localhost");
    if let Some(identity) = identity {
        tls = tls.identity(Identity::from_pem(
            read(&identity.cert),
            read(&identity.key),
        ));
    }
    Endpoint::from_shared(format!("https://{addr}"))
        .unwrap()
        .tls_config(tls)?
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect()
        .await
}

/// A channel to the gRPC server on the unix socket `path`.
pub async fn uds_channel(path: &Path) -> Channel {
    let path: PathBuf = path.to_owned();
    Endpoint::from_static("http://localhost")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(10))
        .connect_with_connector(tower::service_fn(move |_| {
            let path = path.clone();
            async move {
                Ok::<_, std::io::Error>(TokioIo::new(tokio::net::UnixStream::connect(path).await?))
            }
        }))
        .await
        .expect("connect to the unix socket")
}

/// A RateLimitService client on `channel`.
pub fn rls(channel: Channel) -> Client {
    RateLimitServiceClient::new(channel)
}

/// The overall health status over `channel` (compare with `ServingStatus::Serving as i32`), or
/// the call's error.
pub async fn health_status(channel: Channel) -> Result<i32, tonic::Status> {
    HealthClient::new(channel)
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .map(|response| response.into_inner().status)
}

/// Completes a TLS handshake with `addr` (trusting `ca`, name `localhost`, ALPN h2) and returns
/// the DER of the certificate the server presented, and the protocol it chose.
pub async fn presented_certificate(addr: SocketAddr, ca: &Path) -> (Vec<u8>, Option<Vec<u8>>) {
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(ca).expect("read the CA") {
        roots
            .add(cert.expect("CA certificate"))
            .expect("add the CA");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let tls = tokio::time::timeout(
        Duration::from_secs(5),
        tokio_rustls::TlsConnector::from(Arc::new(config))
            .connect(ServerName::try_from("localhost").unwrap(), tcp),
    )
    .await
    .expect("TLS handshake within 5 s")
    .expect("TLS handshake");
    let (_, session) = tls.get_ref();
    let certificate = session
        .peer_certificates()
        .and_then(|chain| chain.first())
        .expect("the server presented a certificate")
        .to_vec();
    (certificate, session.alpn_protocol().map(<[u8]>::to_vec))
}

fn read(path: &Path) -> Vec<u8> {
    std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}
