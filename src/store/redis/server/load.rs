//! Loading a script on a server (`SCRIPT LOAD`) and checking the SHA1 it answers; what a failed
//! load means.

use redis::{RedisError, Value};

use super::connection::is_connection_error;
use super::errors::command_error;
use crate::store::redis::scripts::script::Script;
use crate::store::redis::wire::link::Link;
use crate::store::StoreError;

/// The error unless `value`, a `SCRIPT LOAD` reply, is the SHA1 of `script`.
pub(super) fn check_loaded_sha(value: &Value, script: &Script) -> Result<(), StoreError> {
    let loaded = match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(text) => text.clone(),
        other => {
            return Err(StoreError::Protocol(format!(
                "SCRIPT LOAD answered {other:?}"
            )))
        }
    };
    if loaded.eq_ignore_ascii_case(script.sha1()) {
        Ok(())
    } else {
        Err(StoreError::Protocol(format!(
            "SCRIPT LOAD returned sha1 {loaded}, expected {}",
            script.sha1()
        )))
    }
}

/// Loads the script on a fresh connection, at startup: among the first commands after the
/// handshake, so its errors also tell about missing credentials or permissions.
pub(super) async fn load_script(conn: &mut Link, script: &Script) -> Result<String, StoreError> {
    let value = script
        .load_command()
        .query_async::<Value>(conn)
        .await
        .map_err(load_error)?;
    check_loaded_sha(&value, script)?;
    Ok(script.sha1().to_owned())
}

/// What an error answering a load (or the first command on a connection) means to the caller.
pub(super) fn load_error(e: RedisError) -> StoreError {
    let text = e.to_string();
    if e.code() == Some("NOAUTH") || text.contains("unauthenticated") {
        // Redis 7 answers a large unauthenticated argument (the script) with
        // "Protocol error: unauthenticated bulk length" rather than NOAUTH.
        StoreError::Unavailable(format!(
            "redis requires authentication: put the user and password in the url \
             (redis://[user]:password@host:port): {text}"
        ))
    } else if is_connection_error(&e) {
        StoreError::Unavailable(format!("cannot load the rate-limit script: {text}"))
    } else {
        match command_error(e) {
            StoreError::Protocol(m) => {
                StoreError::Protocol(format!("cannot load the rate-limit script: {m}"))
            }
            StoreError::Unavailable(m) => {
                StoreError::Unavailable(format!("cannot load the rate-limit script: {m}"))
            }
            other => other,
        }
    }
}
