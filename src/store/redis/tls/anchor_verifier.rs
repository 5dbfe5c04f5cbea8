//! The check of a Redis server's certificate: WebPKI against the trust anchors, and besides, a
//! server whose certificate is byte for byte one of the anchors.
//!
//! Self-signed Redis certificates are common, and the usual recipe (`openssl req -x509`, as
//! envoyproxy/ratelimit's CI makes them) marks them as CAs (`basicConstraints CA:TRUE`). Given as
//! the CA file, or installed in the system's store, such a certificate is an anchor; WebPKI
//! still refuses it as the server's own certificate (`CaUsedAsEndEntity`), where OpenSSL and
//! Go accept it. Trusting a server that presents an anchor itself is no wider than trusting the
//! anchor: the handshake proves the server holds the anchor's key, with which it could sign any
//! certificate WebPKI would accept.
//!
//! For such a server what is checked is exactly: the certificate is identical to one of the
//! anchors' (DER, byte for byte); it is within its validity period (WebPKI checks that before
//! it refuses a CA as end entity, and reports an expired or not yet valid certificate as such);
//! it names the host connected to (a DNS or IP Subject Alternative Name, as WebPKI matches them;
//! never the Common Name); and the handshake is signed by its key. Not checked: its key usage
//! and extended key usage, and its own signature (it is trusted as itself, not as issued).

use std::collections::HashSet;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, OtherError};
use rustls::{Error, SignatureScheme};

/// WebPKI's verifier, which also accepts a server whose certificate is one of `anchors`.
#[derive(Debug)]
pub struct AnchorVerifier {
    webpki: Arc<WebPkiServerVerifier>,
    /// The anchors' certificates (DER).
    anchors: HashSet<Vec<u8>>,
}

impl AnchorVerifier {
    /// `webpki` checks chains against the anchors whose certificates are `anchors`.
    pub fn new(
        webpki: Arc<WebPkiServerVerifier>,
        anchors: impl IntoIterator<Item = CertificateDer<'static>>,
    ) -> AnchorVerifier {
        AnchorVerifier {
            webpki,
            anchors: anchors
                .into_iter()
                .map(|anchor| anchor.as_ref().to_vec())
                .collect(),
        }
    }
}

impl ServerCertVerifier for AnchorVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(error)
                if is_ca_used_as_end_entity(&error)
                    && self.anchors.contains(end_entity.as_ref()) =>
            {
                let certificate = webpki::EndEntityCert::try_from(end_entity)
                    .map_err(|_| Error::InvalidCertificate(CertificateError::BadEncoding))?;
                certificate
                    .verify_is_valid_for_subject_name(server_name)
                    .map_err(name_error)?;
                Ok(ServerCertVerified::assertion())
            }
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }

    fn root_hint_subjects(&self) -> Option<&[DistinguishedName]> {
        self.webpki.root_hint_subjects()
    }
}

/// Whether WebPKI refused the end-entity certificate for being a CA, and for nothing before that.
fn is_ca_used_as_end_entity(error: &Error) -> bool {
    let Error::InvalidCertificate(CertificateError::Other(OtherError(inner))) = error else {
        return false;
    };
    matches!(
        inner.downcast_ref::<webpki::Error>(),
        Some(webpki::Error::CaUsedAsEndEntity)
    )
}

/// A name mismatch as rustls reports it for certificates WebPKI checked.
fn name_error(error: webpki::Error) -> Error {
    match error {
        webpki::Error::CertNotValidForName(context) => {
            Error::InvalidCertificate(CertificateError::NotValidForNameContext {
                expected: context.expected,
                presented: context.presented,
            })
        }
        other => Error::InvalidCertificate(CertificateError::Other(OtherError(Arc::new(other)))),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rustls::pki_types::pem::PemObject;
    use rustls::RootCertStore;

    use super::*;

    /// A certificate of `tests/fixtures/redis_tls` (see its `make.sh`): `anchor` and `stranger`
    /// are self-signed CAs for localhost and 127.0.0.1, `elsewhere` one for redis.example, and
    /// `leaf` a server certificate `anchor` issued.
    fn fixture(name: &str) -> CertificateDer<'static> {
        let path = format!(
            "{}/tests/fixtures/redis_tls/{name}.crt",
            env!("CARGO_MANIFEST_DIR")
        );
        CertificateDer::from_pem_file(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn webpki(anchors: &[&str]) -> Arc<WebPkiServerVerifier> {
        let mut roots = RootCertStore::empty();
        for anchor in anchors {
            roots.add(fixture(anchor)).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .unwrap()
    }

    fn verifier(anchors: &[&str]) -> AnchorVerifier {
        AnchorVerifier::new(webpki(anchors), anchors.iter().map(|name| fixture(name)))
    }

    fn verify_at(
        verifier: &dyn ServerCertVerifier,
        presented: &str,
        host: &str,
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let name = ServerName::try_from(host.to_owned()).unwrap();
        verifier.verify_server_cert(&fixture(presented), &[], &name, &[], now)
    }

    fn verify(verifier: &dyn ServerCertVerifier, presented: &str, host: &str) -> Result<(), Error> {
        verify_at(verifier, presented, host, UnixTime::now()).map(|_| ())
    }

    #[test]
    fn webpki_alone_refuses_a_server_that_presents_an_anchor() {
        let error = verify(webpki(&["anchor"]).as_ref(), "anchor", "localhost").unwrap_err();
        assert!(is_ca_used_as_end_entity(&error), "{error}");
    }

    #[test]
    fn a_server_that_presents_an_anchor_is_accepted_by_dns_name_and_ip() {
        let verifier = verifier(&["anchor"]);
        verify(&verifier, "anchor", "localhost").unwrap();
        verify(&verifier, "anchor", "127.0.0.1").unwrap();
        // Among other anchors too.
        let among = super::AnchorVerifier::new(
            webpki(&["stranger", "anchor"]),
            [fixture("stranger"), fixture("anchor")],
        );
        verify(&among, "anchor", "localhost").unwrap();
    }

    #[test]
    fn a_certificate_an_anchor_issued_still_goes_through_webpki() {
        let verifier = verifier(&["anchor"]);
        verify(&verifier, "leaf", "localhost").unwrap();
        let error = verify(&verifier, "leaf", "redis.internal").unwrap_err();
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(CertificateError::NotValidForNameContext { .. })
            ),
            "{error:?}"
        );
        // Issued by an anchor that is not trusted.
        let error = verify(&self::verifier(&["stranger"]), "leaf", "localhost").unwrap_err();
        assert_eq!(
            error,
            Error::InvalidCertificate(CertificateError::UnknownIssuer)
        );
    }

    #[test]
    fn a_ca_that_is_no_anchor_is_refused_as_webpki_refuses_it() {
        let error = verify(&verifier(&["anchor"]), "stranger", "localhost").unwrap_err();
        assert!(is_ca_used_as_end_entity(&error), "{error}");
    }

    #[test]
    fn the_anchor_must_name_the_host() {
        let error = verify(&verifier(&["anchor"]), "anchor", "redis.internal").unwrap_err();
        assert_eq!(
            error.to_string(),
            "invalid peer certificate: certificate not valid for name \"redis.internal\"; \
             certificate is only valid for DnsName(\"localhost\") or IpAddress(127.0.0.1)"
        );
        // Its common name (redis.example) is no name to connect by: only its SANs are.
        let elsewhere = verifier(&["elsewhere"]);
        verify(&elsewhere, "elsewhere", "redis.example").unwrap();
        assert!(verify(&elsewhere, "elsewhere", "localhost").is_err());
    }

    #[test]
    fn the_anchor_must_be_within_its_validity_period() {
        let verifier = verifier(&["anchor"]);
        let year = Duration::from_secs(365 * 24 * 3600);
        let later = UnixTime::since_unix_epoch(year * 230);
        let error = verify_at(&verifier, "anchor", "localhost", later).unwrap_err();
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(CertificateError::ExpiredContext { .. })
            ),
            "{error:?}"
        );
        let earlier = UnixTime::since_unix_epoch(year);
        let error = verify_at(&verifier, "anchor", "localhost", earlier).unwrap_err();
        assert!(
            matches!(
                error,
                Error::InvalidCertificate(CertificateError::NotValidYetContext { .. })
            ),
            "{error:?}"
        );
    }
}
