//! TLS to Redis, over rustls with ring: the certificates trusted ([`trust`]), the check of a
//! server's certificate ([`anchor_verifier`], or none for a URL's `#insecure`, [`unverified`]),
//! the client certificate ([`identity`]), and the connections made with them ([`RedisTls`]).
//!
//! The redis crate builds its own rustls configuration from PEM bytes and cannot take a verifier,
//! so the store opens its TLS connections itself and hands the stream to the crate's
//! multiplexed connection (see `wire::link`). The crate's own connections (Sentinel's lookups:
//! the sentinels, and the master's role check) get the same anchors and client certificate as
//! PEM ([`RedisTls::crate_certificates`]), and WebPKI alone checks them.

pub mod anchor_verifier;
pub mod identity;
pub mod trust;
pub mod unverified;

use std::sync::Arc;

use redis::{ClientTlsConfig, ErrorKind, RedisError, TlsCertificates};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::ServerName;
use rustls::ClientConfig;
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

use self::anchor_verifier::AnchorVerifier;
use self::identity::ClientIdentity;
use self::trust::TrustAnchors;
use self::unverified::AcceptAnyServer;
use crate::store::redis::settings::tls::RedisTlsSettings;
use crate::store::StoreError;

/// The TLS of every connection to one Redis deployment, made once at startup from the files
/// the settings name (a file changed later is read again only at the next start).
pub struct RedisTls {
    verified: TlsConnector,
    /// For a URL's `#insecure`: no check of the server's certificate.
    unverified: TlsConnector,
    crate_certificates: TlsCertificates,
}

impl RedisTls {
    /// The TLS of a deployment that uses it (`uses_tls`: a `rediss://` URL, or `--redis-tls`);
    /// `None` for one that does not, and an error if `settings` name files it would not use.
    pub fn when_used(
        uses_tls: bool,
        settings: &RedisTlsSettings,
    ) -> Result<Option<Arc<RedisTls>>, StoreError> {
        if uses_tls {
            return RedisTls::load(settings).map(|tls| Some(Arc::new(tls)));
        }
        let given = settings.files_given();
        if given.is_empty() {
            return Ok(None);
        }
        Err(StoreError::Unavailable(format!(
            "{}: used by TLS connections only; use a rediss:// url (or --redis-tls for a cluster \
             or a Sentinel setup)",
            given.join(", ")
        )))
    }

    /// Reads the files `settings` name and makes the configurations; errors name the file at
    /// fault (a key that is not the certificate's included).
    pub fn load(settings: &RedisTlsSettings) -> Result<RedisTls, StoreError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let anchors = TrustAnchors::load(settings)?;
        let identity = settings
            .client_identity
            .as_ref()
            .map(ClientIdentity::load)
            .transpose()?;
        let webpki = WebPkiServerVerifier::builder_with_provider(
            Arc::new(anchors.roots.clone()),
            provider.clone(),
        )
        .build()
        .map_err(|error| StoreError::Unavailable(format!("redis TLS: {error}")))?;
        let verifier = AnchorVerifier::new(webpki, anchors.certificates.iter().cloned());
        let verified = client_config(&provider, Arc::new(verifier), identity.as_ref(), settings)?;
        let mut unverified = client_config(
            &provider,
            Arc::new(AcceptAnyServer::new(&provider)),
            identity.as_ref(),
            settings,
        )?;
        unverified.enable_sni = false;
        tracing::info!(
            anchors = anchors.roots.len(),
            client_certificate = identity.is_some(),
            "redis TLS trusts {}",
            anchors.source
        );
        Ok(RedisTls {
            verified: TlsConnector::from(Arc::new(verified)),
            unverified: TlsConnector::from(Arc::new(unverified)),
            crate_certificates: TlsCertificates {
                client_tls: identity.map(|identity| ClientTlsConfig {
                    client_cert: identity.cert_pem,
                    client_key: identity.key_pem,
                }),
                root_cert: anchors.pem(),
            },
        })
    }

    /// A TLS connection to `host:port` (each address the name resolves to in turn, until one
    /// accepts), `TCP_NODELAY` set. The server's certificate must be trusted and name `host`,
    /// unless `insecure`; the client certificate is presented when the server asks for one.
    pub async fn connect(
        &self,
        host: &str,
        port: u16,
        insecure: bool,
    ) -> Result<TlsStream<TcpStream>, RedisError> {
        let name = ServerName::try_from(host.to_owned()).map_err(|_| {
            RedisError::from((
                ErrorKind::InvalidClientConfig,
                "not a DNS name or IP address for TLS",
                host.to_owned(),
            ))
        })?;
        let stream = TcpStream::connect((host, port)).await?;
        stream.set_nodelay(true)?;
        let connector = if insecure {
            &self.unverified
        } else {
            &self.verified
        };
        Ok(connector.connect(name, stream).await?)
    }

    /// The same anchors and client certificate, for the connections the redis crate opens
    /// itself. The crate checks servers with WebPKI alone: there a server presenting an anchor
    /// that is a CA is refused (`CaUsedAsEndEntity`).
    pub fn crate_certificates(&self) -> TlsCertificates {
        self.crate_certificates.clone()
    }
}

fn client_config(
    provider: &Arc<rustls::crypto::CryptoProvider>,
    verifier: Arc<dyn rustls::client::danger::ServerCertVerifier>,
    identity: Option<&ClientIdentity>,
    settings: &RedisTlsSettings,
) -> Result<ClientConfig, StoreError> {
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|error| StoreError::Unavailable(format!("redis TLS: {error}")))?
        .dangerous()
        .with_custom_certificate_verifier(verifier);
    let (Some(identity), Some(files)) = (identity, &settings.client_identity) else {
        return Ok(builder.with_no_client_auth());
    };
    builder
        .with_client_auth_cert(identity.chain.clone(), identity.key.clone_key())
        .map_err(|error| {
            StoreError::Unavailable(match error {
                rustls::Error::InconsistentKeys(_) => format!(
                    "{} is not the private key of the certificate in {}",
                    files.key, files.cert
                ),
                other => format!("{} with {}: {other}", files.cert, files.key),
            })
        })
}
