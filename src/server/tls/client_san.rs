//! `--grpc-tls-client-san`: a client certificate the CA accepted must also carry one given
//! Subject Alternative Name, of the type the pin names, as envoyproxy/ratelimit's
//! GRPC_CLIENT_TLS_SAN checks it (Go's `VerifyOptions.DNSName`: a DNS name, with the
//! certificate's wildcards, or an IP address), and, beyond it, a URI name compared exactly
//! (SPIFFE IDs).
//!
//! A pin is `dns:NAME`, `ip:ADDRESS` or `uri:URI`, or an untyped value read by its form: an IP
//! address is an `ip:` pin, a value with a colon (a URI's scheme) a `uri:` pin, anything else a
//! `dns:` pin (so the names envoyproxy/ratelimit takes mean what they mean there). A pin matches SANs of its own type only: a URI SAN that reads
//! `envoy.mesh` does not satisfy the DNS pin `envoy.mesh`, nor a DNS SAN an IP pin.
//!
//! Extended key usage is checked by the CA verifier underneath (webpki, RFC 5280 4.2.1.12): a
//! client certificate that has the extension must list `clientAuth` (or is refused); one without
//! it is not restricted to any usage and passes, as Go's crypto/tls (envoyproxy/ratelimit)
//! accepts it.

use std::net::IpAddr;
use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, DnsName, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::uri_sans::uri_sans;

/// One Subject Alternative Name a client certificate must carry, and its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SanPin {
    /// A dNSName, compared as for servers (case-insensitive; a wildcard in the certificate,
    /// `*.mesh.example`, matches one label).
    Dns(DnsName<'static>),
    /// An iPAddress.
    Ip(IpAddr),
    /// A uniformResourceIdentifier, compared exactly (e.g. a SPIFFE ID).
    Uri(String),
}

impl SanPin {
    /// Reads `dns:NAME`, `ip:ADDRESS`, `uri:URI` (the type case-insensitive), or an untyped
    /// value: an IP address, a URI when it holds a colon, else a DNS name. A URI whose scheme is
    /// itself `dns`, `ip` or `uri` must be written with `uri:` in front. Errors say what is
    /// wrong with the value.
    pub fn parse(text: &str) -> Result<SanPin, String> {
        let typed = text.split_once(':').and_then(|(kind, value)| {
            let kind = kind.to_ascii_lowercase();
            ["dns", "ip", "uri"]
                .contains(&kind.as_str())
                .then_some((kind, value))
        });
        match typed {
            Some((kind, value)) => match kind.as_str() {
                "dns" => dns(value),
                "ip" => value
                    .parse()
                    .map(SanPin::Ip)
                    .map_err(|_| format!("`{value}` after `ip:` is not an IP address")),
                _ if value.is_empty() => Err("nothing after `uri:`".to_owned()),
                _ => Ok(SanPin::Uri(value.to_owned())),
            },
            None => match text.parse() {
                Ok(ip) => Ok(SanPin::Ip(ip)),
                Err(_) if text.contains(':') => Ok(SanPin::Uri(text.to_owned())),
                Err(_) => dns(text),
            },
        }
    }

    /// Whether the certificate `der` carries this name among its SANs of this pin's type.
    pub fn matches(&self, der: &CertificateDer<'_>) -> bool {
        let by_webpki = |name: ServerName<'_>| {
            webpki::EndEntityCert::try_from(der)
                .is_ok_and(|cert| cert.verify_is_valid_for_subject_name(&name).is_ok())
        };
        match self {
            SanPin::Dns(name) => by_webpki(ServerName::DnsName(name.clone())),
            SanPin::Ip(ip) => by_webpki(ServerName::IpAddress((*ip).into())),
            SanPin::Uri(uri) => uri_sans(der).contains(&uri.as_str()),
        }
    }
}

impl std::fmt::Display for SanPin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SanPin::Dns(name) => write!(f, "dns:{}", name.as_ref()),
            SanPin::Ip(ip) => write!(f, "ip:{ip}"),
            SanPin::Uri(uri) => write!(f, "uri:{uri}"),
        }
    }
}

fn dns(name: &str) -> Result<SanPin, String> {
    DnsName::try_from(name.to_owned())
        .map(SanPin::Dns)
        .map_err(|_| format!("`{name}` is not a DNS name (write `uri:` or `ip:` for other types)"))
}

/// A client-certificate verifier that also requires `pin` among the certificate's names.
#[derive(Debug)]
pub struct SanVerifier {
    inner: Arc<dyn ClientCertVerifier>,
    pin: SanPin,
}

impl SanVerifier {
    pub fn new(inner: Arc<dyn ClientCertVerifier>, pin: SanPin) -> SanVerifier {
        SanVerifier { inner, pin }
    }
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
        if self.pin.matches(end_entity) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn dns_pin(name: &str) -> SanPin {
        SanPin::Dns(DnsName::try_from(name.to_owned()).unwrap())
    }

    #[test]
    fn typed_pins_name_their_type() {
        assert_eq!(SanPin::parse("dns:envoy.mesh"), Ok(dns_pin("envoy.mesh")));
        assert_eq!(SanPin::parse("DNS:envoy.mesh"), Ok(dns_pin("envoy.mesh")));
        assert_eq!(
            SanPin::parse("ip:10.0.0.1"),
            Ok(SanPin::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            SanPin::parse("ip:::1"),
            Ok(SanPin::Ip("::1".parse().unwrap()))
        );
        assert_eq!(
            SanPin::parse("uri:spiffe://mesh/ns/a"),
            Ok(SanPin::Uri("spiffe://mesh/ns/a".into()))
        );
        assert_eq!(
            SanPin::parse("uri:dns:odd"),
            Ok(SanPin::Uri("dns:odd".into()))
        );
    }

    #[test]
    fn untyped_pins_keep_their_old_meaning() {
        assert_eq!(SanPin::parse("envoy.mesh"), Ok(dns_pin("envoy.mesh")));
        assert_eq!(
            SanPin::parse("10.0.0.1"),
            Ok(SanPin::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(
            SanPin::parse("fd00::1"),
            Ok(SanPin::Ip("fd00::1".parse().unwrap()))
        );
        assert_eq!(
            SanPin::parse("spiffe://mesh/ns/a"),
            Ok(SanPin::Uri("spiffe://mesh/ns/a".into()))
        );
        assert_eq!(
            SanPin::parse("urn:example:envoy"),
            Ok(SanPin::Uri("urn:example:envoy".into()))
        );
    }

    #[test]
    fn values_that_are_not_of_their_type_are_refused() {
        for bad in [
            "dns:",
            "dns:not a name",
            "ip:envoy.mesh",
            "ip:",
            "uri:",
            "a b",
        ] {
            assert!(SanPin::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn pins_print_with_their_type() {
        for text in ["dns:envoy.mesh", "ip:10.0.0.1", "uri:spiffe://mesh/ns/a"] {
            assert_eq!(SanPin::parse(text).unwrap().to_string(), text);
        }
    }
}
