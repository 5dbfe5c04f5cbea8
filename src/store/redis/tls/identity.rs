//! The client certificate TLS to Redis presents to servers that ask for one (mutual TLS:
//! `tls-auth-clients yes`, or a proxy that verifies clients).

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use super::trust::{read_certificates, read_pem};
use crate::store::redis::settings::tls::ClientIdentityFiles;
use crate::store::StoreError;

/// A certificate chain (the client's certificate first) and its private key.
pub struct ClientIdentity {
    pub chain: Vec<CertificateDer<'static>>,
    pub key: PrivateKeyDer<'static>,
    /// The files as read, for the redis crate's own TLS (the connections it opens itself).
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

impl ClientIdentity {
    /// Reads both files; errors name the file at fault. Whether the key is the certificate's is
    /// checked where the configuration is made (see [`super::RedisTls::load`]).
    pub fn load(files: &ClientIdentityFiles) -> Result<ClientIdentity, StoreError> {
        let chain = read_certificates(&files.cert)?;
        let cert_pem = read_pem(&files.cert)?;
        let key_pem = read_pem(&files.key)?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|error| {
            let problem = match error {
                rustls::pki_types::pem::Error::NoItemsFound => {
                    "holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1)".to_owned()
                }
                other => format!("not a PEM private key: {other}"),
            };
            StoreError::Unavailable(format!("{}: {problem}", files.key))
        })?;
        Ok(ClientIdentity {
            chain,
            key,
            cert_pem,
            key_pem,
        })
    }
}
