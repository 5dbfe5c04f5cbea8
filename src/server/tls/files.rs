//! Reading the TLS files and making a server configuration of them, with errors that name the
//! flag and the file at fault.

use std::path::Path;
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{RootCertStore, ServerConfig};

use super::client_san::{SanPin, SanVerifier};
use super::settings::{ClientAuth, TlsSettings};
use crate::regular_file::{self, FileError, MAX_PEM_FILE_BYTES};

const CERT_FLAG: &str = "--grpc-tls-cert";
const KEY_FLAG: &str = "--grpc-tls-key";
const CLIENT_CA_FLAG: &str = "--grpc-tls-client-ca";
const CLIENT_SAN_FLAG: &str = "--grpc-tls-client-san";

/// Why the TLS files do not make a usable configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Not read: missing, unreadable, not a regular file (a FIFO would block the reading thread
    /// until a writer came) or larger than [`MAX_PEM_FILE_BYTES`].
    #[error("{flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: FileError,
    },
    #[error("{flag} {path}: {problem}")]
    Invalid {
        flag: &'static str,
        path: String,
        problem: String,
    },
    #[error("{KEY_FLAG} {key} is not the private key of the certificate in {CERT_FLAG} {cert}")]
    KeyMismatch { cert: String, key: String },
    #[error("{CLIENT_SAN_FLAG} {value}: {problem}")]
    BadSan { value: String, problem: String },
}

/// The bytes of every file of a TLS configuration, read at one moment; two reads compare equal
/// when no file changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsFileContents {
    cert: Vec<u8>,
    key: Vec<u8>,
    client_ca: Option<Vec<u8>>,
}

impl TlsFileContents {
    /// Reads the files `settings` names.
    pub fn read(settings: &TlsSettings) -> Result<TlsFileContents, TlsError> {
        Ok(TlsFileContents {
            cert: read_pem_file(CERT_FLAG, &settings.cert)?,
            key: read_pem_file(KEY_FLAG, &settings.key)?,
            client_ca: settings
                .client_auth
                .as_ref()
                .map(|auth| read_pem_file(CLIENT_CA_FLAG, &auth.ca))
                .transpose()?,
        })
    }
}

/// The server configuration the files make: the certificate chain and its key, ALPN `h2`, TLS
/// 1.3 and 1.2, and the client-certificate checks when `settings` asks for them.
pub fn server_config(
    settings: &TlsSettings,
    contents: &TlsFileContents,
) -> Result<ServerConfig, TlsError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let chain = certificates(CERT_FLAG, &settings.cert, &contents.cert)?;
    let key = PrivateKeyDer::from_pem_slice(&contents.key).map_err(|error| TlsError::Invalid {
        flag: KEY_FLAG,
        path: shown(&settings.key),
        problem: match error {
            rustls::pki_types::pem::Error::NoItemsFound => {
                "holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned()
            }
            other => format!("not a PEM private key: {other}"),
        },
    })?;
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(rustls::DEFAULT_VERSIONS)
        .map_err(|error| invalid(CERT_FLAG, &settings.cert, error))?;
    let builder = match (&settings.client_auth, &contents.client_ca) {
        (Some(auth), Some(ca)) => {
            builder.with_client_cert_verifier(client_verifier(auth, ca, provider.clone())?)
        }
        _ => builder.with_no_client_auth(),
    };
    let mut config = builder
        .with_single_cert(chain, key)
        .map_err(|error| match error {
            rustls::Error::InconsistentKeys(_) => TlsError::KeyMismatch {
                cert: shown(&settings.cert),
                key: shown(&settings.key),
            },
            other => invalid(KEY_FLAG, &settings.key, other),
        })?;
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

/// Checks client certificates against the CAs of `ca`, and for `auth.san` when given.
fn client_verifier(
    auth: &ClientAuth,
    ca: &[u8],
    provider: Arc<CryptoProvider>,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let mut roots = RootCertStore::empty();
    for certificate in certificates(CLIENT_CA_FLAG, &auth.ca, ca)? {
        roots
            .add(certificate)
            .map_err(|error| invalid(CLIENT_CA_FLAG, &auth.ca, error))?;
    }
    let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider)
        .build()
        .map_err(|error| invalid(CLIENT_CA_FLAG, &auth.ca, error))?;
    Ok(match &auth.san {
        Some(san) => {
            let pin = SanPin::parse(san).map_err(|problem| TlsError::BadSan {
                value: san.clone(),
                problem,
            })?;
            Arc::new(SanVerifier::new(verifier, pin))
        }
        None => verifier,
    })
}

/// Every PEM certificate of `pem`; at least one.
fn certificates(
    flag: &'static str,
    path: &Path,
    pem: &[u8],
) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let chain = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| TlsError::Invalid {
            flag,
            path: shown(path),
            problem: format!("not a PEM certificate file: {error}"),
        })?;
    if chain.is_empty() {
        return Err(TlsError::Invalid {
            flag,
            path: shown(path),
            problem: "holds no PEM certificate".to_owned(),
        });
    }
    Ok(chain)
}

/// The whole file, read as [`regular_file::read`] does: a regular file of at most
/// [`MAX_PEM_FILE_BYTES`], opened without blocking.
fn read_pem_file(flag: &'static str, path: &Path) -> Result<Vec<u8>, TlsError> {
    regular_file::read(path, MAX_PEM_FILE_BYTES)
        .map(|(bytes, _)| bytes)
        .map_err(|source| TlsError::Read {
            flag,
            path: shown(path),
            source,
        })
}

fn invalid(flag: &'static str, path: &Path, error: impl std::fmt::Display) -> TlsError {
    TlsError::Invalid {
        flag,
        path: shown(path),
        problem: error.to_string(),
    }
}

fn shown(path: &Path) -> String {
    path.display().to_string()
}
