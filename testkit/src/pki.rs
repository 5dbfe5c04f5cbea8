//! Throwaway PKIs for the gRPC TLS tests, made with the `openssl` CLI (ECDSA P-256, valid two
//! days): CAs, server certificates for `127.0.0.1` and `localhost`, and client certificates with
//! the Subject Alternative Names a test asks for. Without `openssl` the tests fail with a clear
//! message: they never skip.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::redis_server::openssl;

/// A directory of CAs and the certificates they issue; removed when the last clone is dropped.
#[derive(Clone)]
pub struct Pki {
    dir: Arc<tempfile::TempDir>,
}

/// A CA: its certificate (what `--grpc-tls-client-ca` or a client's trust store is given).
#[derive(Clone)]
pub struct Ca {
    pki: Pki,
    name: String,
    /// The CA certificate (PEM).
    pub cert: PathBuf,
    key: PathBuf,
}

/// A certificate and its private key (PEM files).
#[derive(Clone, Debug)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

impl Default for Pki {
    fn default() -> Pki {
        Pki::new()
    }
}

impl Pki {
    pub fn new() -> Pki {
        Pki {
            dir: Arc::new(tempfile::tempdir().expect("temporary directory for the PKI")),
        }
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// A new CA named `name` (its subject says the directory too, so two PKIs never share a
    /// CA name).
    pub fn ca(&self, name: &str) -> Ca {
        let cnf = self.path(&format!("{name}-ca.cnf"));
        std::fs::write(
            &cnf,
            "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = unused\n\
             [ca]\nbasicConstraints = critical, CA:TRUE\nkeyUsage = critical, keyCertSign, cRLSign\n\
             subjectKeyIdentifier = hash\n",
        )
        .expect("write the CA's openssl config");
        let subject = format!(
            "/CN=ratelimitd test CA {name} {}",
            self.dir.path().file_name().unwrap().to_string_lossy()
        );
        let ca = Ca {
            pki: self.clone(),
            name: name.to_owned(),
            cert: self.path(&format!("{name}-ca.crt")),
            key: self.path(&format!("{name}-ca.key")),
        };
        openssl(
            &[
                &["req", "-x509", "-new", "-days", "2", "-sha256"][..],
                &EC_KEY,
                &["-subj", &subject, "-extensions", "ca"],
            ]
            .concat(),
            &[("-config", &cnf), ("-keyout", &ca.key), ("-out", &ca.cert)],
        );
        ca
    }
}

impl Ca {
    /// A server certificate `name` (common name `cn`, serial `serial`) for IP 127.0.0.1 and DNS
    /// localhost.
    pub fn server(&self, name: &str, cn: &str, serial: u32) -> Issued {
        self.issue(
            name,
            cn,
            serial,
            "serverAuth",
            "IP:127.0.0.1, DNS:localhost",
        )
    }

    /// A client certificate `name` with the Subject Alternative Names `sans` (openssl syntax,
    /// e.g. `DNS:envoy.test, URI:spiffe://test/envoy`).
    pub fn client(&self, name: &str, sans: &str) -> Issued {
        self.issue(name, name, 100, "clientAuth", sans)
    }

    /// A client certificate `name` whose extended key usage is `usage` (openssl syntax, e.g.
    /// `serverAuth`), or which has no extendedKeyUsage extension at all (`None`).
    pub fn client_with_usage(&self, name: &str, usage: Option<&str>, sans: &str) -> Issued {
        self.issue_with(name, name, 100, usage, sans)
    }

    fn issue(&self, name: &str, cn: &str, serial: u32, usage: &str, sans: &str) -> Issued {
        self.issue_with(name, cn, serial, Some(usage), sans)
    }

    fn issue_with(
        &self,
        name: &str,
        cn: &str,
        serial: u32,
        usage: Option<&str>,
        sans: &str,
    ) -> Issued {
        let usage = usage
            .map(|usage| format!("extendedKeyUsage = {usage}\n"))
            .unwrap_or_default();
        let pki = &self.pki;
        let ext = pki.path(&format!("{name}.ext"));
        std::fs::write(
            &ext,
            format!(
                "[req]\ndistinguished_name = dn\nprompt = no\n[dn]\nCN = unused\n\
                 [leaf]\nbasicConstraints = critical, CA:FALSE\n\
                 keyUsage = critical, digitalSignature, keyEncipherment\n\
                 {usage}subjectAltName = {sans}\n\
                 subjectKeyIdentifier = hash\nauthorityKeyIdentifier = keyid\n"
            ),
        )
        .expect("write the certificate's openssl config");
        let issued = Issued {
            cert: pki.path(&format!("{name}.crt")),
            key: pki.path(&format!("{name}.key")),
        };
        let csr = pki.path(&format!("{name}.csr"));
        openssl(
            &[
                &["req", "-new"][..],
                &EC_KEY,
                &["-subj", &format!("/CN={cn}")],
            ]
            .concat(),
            &[("-config", &ext), ("-keyout", &issued.key), ("-out", &csr)],
        );
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-sha256",
                "-set_serial",
                &serial.to_string(),
                "-extensions",
                "leaf",
            ],
            &[
                ("-in", &csr),
                ("-CA", &self.cert),
                ("-CAkey", &self.key),
                ("-extfile", &ext),
                ("-out", &issued.cert),
            ],
        );
        issued
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// The DER of the first certificate of a PEM file.
pub fn certificate_der(path: &Path) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_file_iter(path)
        .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
        .next()
        .unwrap_or_else(|| panic!("no certificate in {}", path.display()))
        .unwrap_or_else(|e| panic!("bad certificate in {}: {e}", path.display()))
        .to_vec()
}
