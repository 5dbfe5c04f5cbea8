//! How one server runs the store's scripts ([`CallCommand`]): as functions of the store's library
//! (`FCALL`) where the server has Redis Functions (Redis 7.0 and later, Valkey) and lets this user
//! load and call them, else as scripts of their own (`EVALSHA`: Redis 6.x, or a user whose ACL
//! refuses `FUNCTION LOAD` or `FCALL`, as some managed services set them). Chosen from what the
//! server answers when the store first reaches it ([`establish`]), and again when a call finds the
//! library gone ([`reload`]). Both forms answer alike (see `scripts::library`).

use std::sync::atomic::{AtomicU8, Ordering};

use redis::{RedisError, Value};

use super::connection::is_connection_error;
use super::errors::{is_function_unavailable, is_noscript};
use super::load::{check_loaded_sha, load_error, load_script};
use super::script_counters::ScriptCounters;
use crate::store::redis::scripts::library::{library, SCRIPTS};
use crate::store::redis::scripts::script::{CallCommand, Script};
use crate::store::redis::wire::link::Link;
use crate::store::StoreError;

const UNKNOWN: u8 = 0;
const FCALL: u8 = 1;
const EVALSHA: u8 = 2;

/// The command a server's calls go by, shared by every pool to that server: unknown until
/// [`establish`] has run on one of its connections.
#[derive(Debug, Default)]
pub(in crate::store::redis) struct Calling(AtomicU8);

impl Calling {
    /// The command established, if any.
    pub(in crate::store::redis) fn get(&self) -> Option<CallCommand> {
        match self.0.load(Ordering::Relaxed) {
            FCALL => Some(CallCommand::Fcall),
            EVALSHA => Some(CallCommand::Evalsha),
            _ => None,
        }
    }

    pub(in crate::store::redis) fn set(&self, command: CallCommand) {
        let code = match command {
            CallCommand::Fcall => FCALL,
            CallCommand::Evalsha => EVALSHA,
        };
        self.0.store(code, Ordering::Relaxed);
    }

    /// Forgets the command: the next call establishes it again.
    pub(in crate::store::redis) fn forget(&self) {
        self.0.store(UNKNOWN, Ordering::Relaxed);
    }
}

/// What a server answered to the library.
enum Functions {
    /// Loaded and callable.
    Callable,
    /// The server has no Functions (Redis 6.x).
    Absent,
    /// The server has them but does not let this user load or call the library (or fails to
    /// load it): why.
    Refused(String),
}

/// Chooses how the server behind `link` runs the scripts, and makes it ready: the library's probe
/// called (`FCALL`), the library loaded where the server answers it is not; where the server
/// has no Functions, or refuses them, every script loaded (`SCRIPT LOAD`). A refusal is logged
/// once per store (`counters`), with the server's reason. Errors: no connection, no
/// authentication, or a script the server fails to load.
pub(in crate::store::redis) async fn establish(
    link: &mut Link,
    counters: &ScriptCounters,
) -> Result<CallCommand, StoreError> {
    match functions(link).await? {
        Functions::Callable => return Ok(CallCommand::Fcall),
        Functions::Absent => {
            tracing::debug!("redis has no Functions (before 7.0): scripts run with EVALSHA");
        }
        Functions::Refused(reason) => {
            if counters.note_functions_refused() {
                tracing::warn!(
                    library = library().name(),
                    %reason,
                    "redis refuses the ratelimitd Functions library to this user: scripts run \
                     with EVALSHA"
                );
            }
        }
    }
    for script in SCRIPTS {
        load_script(link, script).await?;
    }
    Ok(CallCommand::Evalsha)
}

/// Whether the library can be called on the server behind `link`, loading it there if needed.
async fn functions(link: &mut Link) -> Result<Functions, StoreError> {
    let library = library();
    let unavailable = |error: RedisError| -> Result<Functions, StoreError> {
        if is_connection_error(&error) || error.code() == Some("NOAUTH") {
            return Err(load_error(error));
        }
        let text = error.to_string();
        if text.contains("unknown command") {
            Ok(Functions::Absent)
        } else {
            // NOPERM (an ACL without +function or +fcall), or a load the server failed.
            Ok(Functions::Refused(text))
        }
    };
    match query(link, &library.probe_command()).await {
        Ok(_) => return Ok(Functions::Callable),
        Err(error) if error.to_string().contains("Function not found") => {}
        Err(error) => return unavailable(error),
    }
    match query(link, &library.load_command()).await {
        Ok(_) => {}
        // Another ratelimitd of this version loaded it meanwhile.
        Err(error) if error.to_string().contains("already exists") => {}
        Err(error) => return unavailable(error),
    }
    // Loaded: this user may still be refused FCALL.
    match query(link, &library.probe_command()).await {
        Ok(_) => Ok(Functions::Callable),
        Err(error) => unavailable(error),
    }
}

async fn query(link: &mut Link, cmd: &redis::Cmd) -> Result<Value, RedisError> {
    cmd.query_async::<Value>(link).await
}

/// Makes the server behind `link` ready again for `script` after a call by `failed` was answered
/// `error` (see [`is_lost`]): the script loaded again (`SCRIPT LOAD`) after `NOSCRIPT`, or the
/// server's calling established anew after `FCALL` found the library gone (which may turn it to
/// `EVALSHA`). The command the call goes by from now on.
pub(in crate::store::redis) async fn reload(
    link: &mut Link,
    script: &Script,
    failed: CallCommand,
    counters: &ScriptCounters,
) -> Result<CallCommand, StoreError> {
    match failed {
        CallCommand::Evalsha => {
            let loaded = query(link, &script.load_command())
                .await
                .map_err(load_error)?;
            check_loaded_sha(&loaded, script)?;
            Ok(CallCommand::Evalsha)
        }
        CallCommand::Fcall => establish(link, counters).await,
    }
}

/// Whether `error`, the answer to a call by `command`, says the server lost what the call runs
/// (and so never ran it): `NOSCRIPT` for `EVALSHA`; for `FCALL`, a library that is gone or a
/// server that no longer lets it be called (see [`is_function_unavailable`]).
pub(in crate::store::redis) fn is_lost(error: &RedisError, command: CallCommand) -> bool {
    match command {
        CallCommand::Evalsha => is_noscript(error),
        CallCommand::Fcall => is_function_unavailable(error),
    }
}
