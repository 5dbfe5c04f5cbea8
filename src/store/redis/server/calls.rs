//! Script calls on one server: the request script deciding a batch, any other script (the
//! refund script), each reloaded and retried once on `NOSCRIPT`, and a server found to be a
//! replica (`READONLY`) dropped at once.

use redis::{RedisError, Value};
use tokio::time::Instant;

use super::errors::{command_error, is_noscript};
use super::load::check_loaded_sha;
use super::pool::Shared;
use crate::store::redis::scripts::reply::CallReply;
use crate::store::redis::scripts::request::{EvalSha, Invocation, KeyPlacement, Script, DECIDE};
use crate::store::StoreError;

impl Shared {
    /// One call of the request script deciding `requests` by `deadline` (see
    /// [`Shared::decide_raw`]).
    pub(in crate::store::redis) async fn decide<'a>(
        &self,
        requests: impl Iterator<Item = &'a Invocation> + Clone + Send,
        deadline: Instant,
    ) -> Result<CallReply, StoreError> {
        self.decide_raw(requests, KeyPlacement::Declared, false, deadline)
            .await?
            .map_err(command_error)
    }

    /// One call of the request script deciding `requests` by `deadline`, its keys placed as
    /// `placement` says, after `ASKING` when `asking`, its reply decoded; on `NOSCRIPT` the
    /// script is reloaded and the call retried once (see [`Shared::evaluate_raw`], whose
    /// contract this shares). On a pipelined connection the command is encoded straight into
    /// the connection's output buffer and the reply read in place.
    pub(in crate::store::redis) async fn decide_raw<'a>(
        &self,
        requests: impl Iterator<Item = &'a Invocation> + Clone + Send,
        placement: KeyPlacement,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<CallReply, RedisError>, StoreError> {
        let mut call = EvalSha::new(requests.clone(), placement);
        let checks = || requests.clone().map(Invocation::checks);
        let mut lease = self.lease(deadline).await?;
        self.scripts.sent(call.request_count());
        let mut reply = lease
            .decide(&mut call, checks(), asking, self.wait_replicas)
            .await?;
        if matches!(&reply, Err(error) if is_noscript(error)) {
            self.scripts.reloaded();
            tracing::info!("redis lost a ratelimitd script (NOSCRIPT); reloading it");
            let loaded = lease
                .query(&DECIDE.load_command())
                .await?
                .map_err(command_error)?;
            check_loaded_sha(&loaded, &DECIDE)?;
            self.scripts.sent(call.request_count());
            reply = lease
                .decide(&mut call, checks(), asking, self.wait_replicas)
                .await?;
        }
        match &reply {
            Ok(decoded) if answered_readonly(decoded) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }

    /// Runs a call of `script` by `deadline` (see [`Shared::evaluate_raw`]).
    pub(in crate::store::redis) async fn evaluate(
        &self,
        script: &Script,
        command: &redis::Cmd,
        deadline: Instant,
    ) -> Result<Value, StoreError> {
        self.evaluate_raw(script, command, false, deadline)
            .await?
            .map_err(command_error)
    }

    /// Runs a call of `script` by `deadline`, after `ASKING` when `asking` (a cluster slot being
    /// imported); on `NOSCRIPT` reloads the script and retries it once. With
    /// [`crate::store::redis::RedisSettings::wait_replicas`], the call's writes must also reach that many replicas by
    /// the deadline (`WAIT`, in the same round trip). A connection that answers `READONLY` (the
    /// server is a replica now) is dropped at once. The outer error ends the call; the inner one
    /// is the command's own (a cluster redirection, say), for the caller to inspect.
    pub(in crate::store::redis) async fn evaluate_raw(
        &self,
        script: &Script,
        command: &redis::Cmd,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        let mut lease = self.lease(deadline).await?;
        let mut reply = lease.call(command, asking, self.wait_replicas).await?;
        if matches!(&reply, Err(error) if is_noscript(error)) {
            self.scripts.reloaded();
            tracing::info!("redis lost a ratelimitd script (NOSCRIPT); reloading it");
            let loaded = lease
                .query(&script.load_command())
                .await?
                .map_err(command_error)?;
            check_loaded_sha(&loaded, script)?;
            reply = lease.call(command, asking, self.wait_replicas).await?;
        }
        match &reply {
            Ok(value) if value_answered_readonly(value) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }
}

/// Whether a script's reply holds a request's `READONLY` error: it ran on a replica.
fn answered_readonly(reply: &CallReply) -> bool {
    reply.answers.iter().any(|answer| {
        matches!(answer, Err(StoreError::Unavailable(message)) if message.starts_with("READONLY"))
    })
}

/// [`answered_readonly`] of a reply the redis crate parsed.
fn value_answered_readonly(reply: &Value) -> bool {
    let Value::Array(values) = reply else {
        return false;
    };
    values.iter().any(|value| match value {
        Value::BulkString(text) => text.starts_with(b"READONLY"),
        Value::SimpleString(text) => text.starts_with("READONLY"),
        _ => false,
    })
}
