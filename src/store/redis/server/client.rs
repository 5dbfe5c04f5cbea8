//! The redis client of a server (the address and credentials a connection is opened with): from
//! a URL (plain `redis://`, TLS `rediss://`, a unix socket), or from an address and the
//! credentials every server of a cluster or a Sentinel setup shares. Over TLS the store makes the
//! connection itself (see [`crate::store::redis::tls`]).

use redis::IntoConnectionInfo;

use crate::store::redis::settings::topology::{HostPort, ServerAuth};
use crate::store::StoreError;

/// The redis client for `url`. Errors name the problem but never echo the URL (it may hold a
/// password).
pub fn client(url: &str) -> Result<redis::Client, StoreError> {
    let info = url
        .into_connection_info()
        .map_err(|e| StoreError::Unavailable(format!("invalid redis url: {e}")))?;
    client_for_info(info)
}

/// The redis client for `info`.
pub fn client_for_info(info: redis::ConnectionInfo) -> Result<redis::Client, StoreError> {
    // rustls needs a process-wide crypto provider; installing it again is a harmless no-op.
    let _ = rustls::crypto::ring::default_provider().install_default();
    redis::Client::open(info)
        .map_err(|e| StoreError::Unavailable(format!("invalid redis url: {e}")))
}

/// Whether connections to `client`'s server speak TLS.
pub fn uses_tls(client: &redis::Client) -> bool {
    matches!(
        client.get_connection_info().addr(),
        redis::ConnectionAddr::TcpTls { .. }
    )
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

/// A client for the server at `address`.
pub fn server_client(address: &HostPort, auth: &ServerAuth) -> Result<redis::Client, StoreError> {
    client_for_info(connection_info(address, auth)?)
}
