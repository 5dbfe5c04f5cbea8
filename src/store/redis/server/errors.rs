//! What a Redis error reply means to the store's callers.

use redis::{ErrorKind, RedisError};

use crate::store::StoreError;

/// Whether `error` is `NOSCRIPT`: the server lost the script (restart, failover, `SCRIPT FLUSH`).
pub(in crate::store::redis) fn is_noscript(error: &RedisError) -> bool {
    error.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)
        || error.code() == Some("NOSCRIPT")
}

/// A command-level error: the script or the reply is wrong (protocol) or Redis refuses to serve
/// (out of memory, loading, read-only replica, busy...: unavailable).
pub(in crate::store::redis) fn command_error(error: RedisError) -> StoreError {
    let protocol = matches!(
        error.kind(),
        ErrorKind::Parse | ErrorKind::UnexpectedReturnType
    ) || matches!(error.code(), Some("ERR" | "WRONGTYPE"));
    if protocol {
        StoreError::Protocol(error.to_string())
    } else {
        StoreError::Unavailable(error.to_string())
    }
}
