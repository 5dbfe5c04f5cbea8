//! The certificates TLS to Redis trusts: the CA file, the system's store, or both, as
//! [`RedisTlsSettings`] say; the bundled Mozilla roots only where the system has no store.
//!
//! The system's store is what OpenSSL (and envoyproxy/ratelimit's Go) reads: `SSL_CERT_FILE`
//! and `SSL_CERT_DIR` when set, else the distribution's bundle (`/etc/ssl/certs/...`), found by
//! `rustls-native-certs`. An image without one (`FROM scratch`) falls back to the bundled roots,
//! with a warning, so a Redis with a public certificate still works there; the bundled roots are
//! never added to a store that exists, so a store an operator trimmed stays trimmed.

use std::fmt;

use base64::Engine;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;
use rustls::RootCertStore;

use crate::regular_file::{self, MAX_PEM_FILE_BYTES};
use crate::store::redis::settings::tls::{RedisTlsSettings, TlsFile};
use crate::store::StoreError;

/// Where the trusted certificates come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TrustSource {
    /// The CA file alone (`--redis-tls-ca`).
    CaFile,
    /// The CA file and the system's store (`--redis-tls-ca` with `--redis-tls-system-roots`).
    CaFileAndSystem,
    /// The system's store.
    System,
    /// The bundled Mozilla roots: the system has no store.
    Bundled,
}

impl fmt::Display for TrustSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrustSource::CaFile => "the CA file",
            TrustSource::CaFileAndSystem => "the CA file and the system's certificate store",
            TrustSource::System => "the system's certificate store",
            TrustSource::Bundled => "the bundled Mozilla roots",
        })
    }
}

/// The trust anchors of every TLS connection to Redis.
pub struct TrustAnchors {
    /// What WebPKI checks chains against.
    pub roots: RootCertStore,
    /// The certificate of every anchor in `roots` but the bundled roots (which come as names and
    /// keys only): a server presenting one of these very certificates is trusted (see
    /// [`super::anchor_verifier`]).
    pub certificates: Vec<CertificateDer<'static>>,
    pub source: TrustSource,
}

impl TrustAnchors {
    /// The anchors `settings` name. A CA file that cannot be read, holds no certificate or one
    /// that is no usable anchor is an error naming it; a system store file that cannot be read is
    /// skipped with a warning, as OpenSSL skips it.
    pub fn load(settings: &RedisTlsSettings) -> Result<TrustAnchors, StoreError> {
        let mut anchors = TrustAnchors {
            roots: RootCertStore::empty(),
            certificates: Vec::new(),
            source: TrustSource::System,
        };
        if let Some(ca) = &settings.ca {
            for certificate in read_certificates(ca)? {
                anchors.roots.add(certificate.clone()).map_err(|error| {
                    StoreError::Unavailable(format!(
                        "{ca}: a certificate there is not usable as a trust anchor: {error}"
                    ))
                })?;
                anchors.certificates.push(certificate);
            }
            if !settings.ca_with_system_roots {
                anchors.source = TrustSource::CaFile;
                return Ok(anchors);
            }
            anchors.source = TrustSource::CaFileAndSystem;
        }
        let mut found = 0usize;
        for certificate in system_certificates() {
            if anchors.roots.add(certificate.clone()).is_ok() {
                anchors.certificates.push(certificate);
                found += 1;
            }
        }
        if found == 0 && settings.ca.is_none() {
            tracing::warn!(
                "no system certificate store found (SSL_CERT_FILE, SSL_CERT_DIR, /etc/ssl/certs): \
                 redis TLS trusts the bundled Mozilla roots"
            );
            anchors
                .roots
                .extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
            anchors.source = TrustSource::Bundled;
        }
        Ok(anchors)
    }

    /// The anchors as PEM, for the redis crate's own TLS; `None` for the bundled roots, which the
    /// crate trusts by itself.
    pub fn pem(&self) -> Option<Vec<u8>> {
        if self.source == TrustSource::Bundled {
            return None;
        }
        let mut pem = String::new();
        for certificate in &self.certificates {
            let base64 = base64::engine::general_purpose::STANDARD.encode(certificate.as_ref());
            pem.push_str("-----BEGIN CERTIFICATE-----\n");
            for line in base64.as_bytes().chunks(64) {
                pem.push_str(&String::from_utf8_lossy(line));
                pem.push('\n');
            }
            pem.push_str("-----END CERTIFICATE-----\n");
        }
        Some(pem.into_bytes())
    }
}

/// The certificates of the system's store; the files that cannot be read are logged and skipped.
fn system_certificates() -> Vec<CertificateDer<'static>> {
    let found = rustls_native_certs::load_native_certs();
    for error in &found.errors {
        tracing::warn!(%error, "system certificate store: skipped what cannot be read");
    }
    found.certs
}

/// Every certificate of the PEM file `file`, read as [`regular_file::read`] does (a regular file
/// of at most [`MAX_PEM_FILE_BYTES`], opened without blocking); at least one.
pub fn read_certificates(file: &TlsFile) -> Result<Vec<CertificateDer<'static>>, StoreError> {
    let pem = read_pem(file)?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|error| StoreError::Unavailable(format!("{file}: not valid PEM: {error}")))?;
    if certificates.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "{file}: holds no PEM certificate"
        )));
    }
    Ok(certificates)
}

/// The bytes of `file`, read as [`read_certificates`] says.
pub fn read_pem(file: &TlsFile) -> Result<Vec<u8>, StoreError> {
    regular_file::read(&file.path, MAX_PEM_FILE_BYTES)
        .map(|(bytes, _)| bytes)
        .map_err(|error| StoreError::Unavailable(format!("{file}: {error}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pem_round_trips_the_anchors() {
        let certificates = vec![
            CertificateDer::from((0u8..=200).collect::<Vec<u8>>()),
            CertificateDer::from(vec![7u8; 3]),
        ];
        let anchors = TrustAnchors {
            roots: RootCertStore::empty(),
            certificates: certificates.clone(),
            source: TrustSource::CaFile,
        };
        let pem = anchors.pem().unwrap();
        let back = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        assert_eq!(back, certificates);
        assert!(String::from_utf8(pem)
            .unwrap()
            .lines()
            .all(|line| line.len() <= 64));
    }

    #[test]
    fn the_bundled_roots_are_left_to_the_crate() {
        let anchors = TrustAnchors {
            roots: RootCertStore::empty(),
            certificates: Vec::new(),
            source: TrustSource::Bundled,
        };
        assert_eq!(anchors.pem(), None);
    }
}
