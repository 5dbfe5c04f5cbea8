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

/// Whether `error`, the answer to an `FCALL`, says the call never ran because the server cannot
/// run the library's function now: the library is gone (restart, failover to a server without
/// it, `FUNCTION FLUSH`: "Function not found"), the server has no Functions (a Redis 6 in its
/// place: "unknown command"), or this user may no longer call it (`NOPERM`). Each comes before
/// the function runs, so the call may be sent again once the server's calling is established
/// anew.
pub(in crate::store::redis) fn is_function_unavailable(error: &RedisError) -> bool {
    let text = error.to_string();
    error.code() == Some("NOPERM")
        || text.contains("Function not found")
        || text.contains("unknown command")
}
