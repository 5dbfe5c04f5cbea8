//! `--grpc-tls-client-san`: a client certificate the CA accepted must also carry one given
//! Subject Alternative Name, as envoyproxy/ratelimit's GRPC_CLIENT_TLS_SAN checks it (Go's
//! `VerifyOptions.DNSName`: a DNS name, with the certificate's wildcards, or an IP address),
//! and, beyond it, a URI name compared exactly (SPIFFE IDs).

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::uri_sans::uri_sans;

/// A client-certificate verifier that also requires `san` among the certificate's names.
#[derive(Debug)]
pub struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    san: String,
}

impl SanVerifier {
    pub fn new(inner: Arc<dyn ClientCertVerifier>, san: String) -> SanVerifier {
        SanVerifier { inner, san }
    }
}

/// Whether the certificate `der` names `name`: a DNS name or IP address among its DNS and IP
/// Subject Alternative Names (webpki's rules: wildcards in the certificate, no Common Name), or
/// exactly one of its URI names.
pub fn certificate_has_name(der: &CertificateDer<'_>, name: &str) -> bool {
    let by_dns_or_ip = ServerName::try_from(name).ok().is_some_and(|name| {
        webpki::EndEntityCert::try_from(der)
            .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
    });
    by_dns_or_ip || uri_sans(der).contains(&name)
}

impl ClientCertVerifier for SanVerifier {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        if certificate_has_name(end_entity, &self.san) {
            Ok(verified)
        } else {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName,
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
