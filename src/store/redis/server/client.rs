//! The redis client of a server: from a URL (plain `redis://`, or TLS, `rediss://`, with rustls,
//! verifying the server against the bundled Mozilla roots or, when given, only the CA file of the
//! settings), or from an address and the credentials every server of a cluster or a Sentinel
//! setup shares.

use std::path::Path;

use redis::{ConnectionAddr, IntoConnectionInfo, RedisError, TlsCertificates};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use crate::regular_file::{self, MAX_PEM_FILE_BYTES};
use crate::store::redis::settings::topology::{HostPort, ServerAuth};
use crate::store::StoreError;

/// The redis client for `url`. With `tls_ca` (a PEM file of one or more CA certificates; only
/// with a `rediss://` URL), the server certificate must chain to one of those CAs, and the bundled
/// public roots are not used. Errors name the problem but never echo the URL (it may hold a
/// password).
pub fn client(url: &str, tls_ca: Option<&Path>) -> Result<redis::Client, StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| StoreError::Unavailable(format!("invalid redis url: {e}")))?;
    client_for_info(info, tls_ca)
}

/// The redis client for `info`, trusting only the CAs of `tls_ca` when given (see [`client`]).
pub fn client_for_info(
    info: redis::ConnectionInfo,
    tls_ca: Option<&Path>,
) -> Result<redis::Client, StoreError> {
    // rustls needs a process-wide crypto provider; installing it again is a harmless no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let invalid = |e: RedisError| StoreError::Unavailable(format!("invalid redis url: {e}"));
    let Some(ca_path) = tls_ca else {
        return redis::Client::open(info).map_err(invalid);
    };
    if !matches!(info.addr(), ConnectionAddr::TcpTls { .. }) {
        return Err(StoreError::Unavailable(format!(
            "a redis TLS CA file ({}) needs TLS (a rediss:// url, or --redis-tls)",
            ca_path.display()
        )));
    }
    let pem = read_ca(ca_path)?;
    redis::Client::build_with_tls(
        info,
        TlsCertificates {
            client_tls: None,
            root_cert: Some(pem),
        },
    )
    .map_err(|e| {
        StoreError::Unavailable(format!(
            "cannot use the redis TLS CA file {}: {e}",
            ca_path.display()
        ))
    })
}

/// The PEM bytes of a CA file, checked to hold at least one certificate. The file is read as
/// [`regular_file::read`] does: a regular file of at most [`MAX_PEM_FILE_BYTES`], opened
/// without blocking (a FIFO is refused, not waited on).
pub fn read_ca(ca_path: &Path) -> Result<Vec<u8>, StoreError> {
    let (pem, _) = regular_file::read(ca_path, MAX_PEM_FILE_BYTES).map_err(|e| {
        StoreError::Unavailable(format!("the redis TLS CA file {}: {e}", ca_path.display()))
    })?;
    let certificates = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| {
            StoreError::Unavailable(format!(
                "the redis TLS CA file {} is not valid PEM: {e}",
                ca_path.display()
            ))
        })?;
    if certificates.is_empty() {
        return Err(StoreError::Unavailable(format!(
            "the redis TLS CA file {} holds no PEM certificate",
            ca_path.display()
        )));
    }
    Ok(pem)
}

/// The connection info of the server at `address` with `auth`.
pub fn connection_info(
    address: &HostPort,
    auth: &ServerAuth,
) -> Result<redis::ConnectionInfo, StoreError> {
    let addr = if auth.tls {
        redis::ConnectionAddr::TcpTls {
            host: address.host.clone(),
            port: address.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        redis::ConnectionAddr::Tcp(address.host.clone(), address.port)
    };
    let mut redis_settings = redis::RedisConnectionInfo::default();
    if let Some(user) = &auth.user {
        redis_settings = redis_settings.set_username(user);
    }
    if let Some(password) = &auth.password {
        redis_settings = redis_settings.set_password(password);
    }
    let info = addr
        .into_connection_info()
        .map_err(|e| StoreError::Unavailable(format!("invalid redis address {address}: {e}")))?;
    Ok(info.set_redis_settings(redis_settings))
}

/// A client for the server at `address`, trusting only the CA in `tls_ca` when given.
pub fn server_client(
    address: &HostPort,
    auth: &ServerAuth,
    tls_ca: Option<&std::path::Path>,
) -> Result<redis::Client, StoreError> {
    client_for_info(connection_info(address, auth)?, tls_ca)
}
