//! Why the server could not start or keep running.

use super::lanes;
use super::tls::TlsError;
use crate::config::ConfigErrors;
use crate::store::StoreError;

/// Why the server could not start or keep running.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("invalid configuration: {}", .0.one_line())]
    Config(#[from] ConfigErrors),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Settings(String),
    #[error("gRPC server failed: {0}")]
    Lanes(#[from] lanes::LaneStopped),
    #[error("gRPC reflection setup failed: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("socket error: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Tls(#[from] TlsError),
}
