//! Script calls on one server: the request script deciding a batch, any other script (the
//! refund script), each by the command the server's calling says (`FCALL` or `EVALSHA`, see
//! [`super::calling`]), made ready again and retried once when the server lost it (`NOSCRIPT`, a
//! library found gone), and a server found to be a replica (`READONLY`) dropped at once.

use redis::{RedisError, Value};
use tokio::time::{timeout_at, Instant};

use super::calling::{establish, is_lost, reload};
use super::errors::command_error;
use super::pool::{Lease, Shared};
use crate::store::redis::scripts::reply::CallReply;
use crate::store::redis::scripts::request::{
    CallCommand, Invocation, KeyPlacement, Script, ScriptCall, DECIDE,
};
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
    /// `placement` says, after `ASKING` when `asking`, its reply decoded; when the server lost
    /// the script or the library, it is made ready again and the call retried once (see
    /// [`Shared::evaluate_raw`], whose contract this shares). On a pipelined connection the
    /// command is encoded straight into the connection's output buffer and the reply read in
    /// place.
    pub(in crate::store::redis) async fn decide_raw<'a>(
        &self,
        requests: impl Iterator<Item = &'a Invocation> + Clone + Send,
        placement: KeyPlacement,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<CallReply, RedisError>, StoreError> {
        let checks = || requests.clone().map(Invocation::checks);
        let mut lease = self.lease(deadline).await?;
        let command = self.call_command(&mut lease).await?;
        let mut call = ScriptCall::new(requests.clone(), command, placement);
        self.scripts.sent(call.request_count());
        let mut reply = lease
            .decide(&mut call, checks(), asking, self.wait_replicas)
            .await?;
        if let Err(error) = &reply {
            if is_lost(error, command) {
                let command = self.reload(&mut lease, &DECIDE, command, error).await?;
                call.set_call_command(command);
                self.scripts.sent(call.request_count());
                reply = lease
                    .decide(&mut call, checks(), asking, self.wait_replicas)
                    .await?;
            }
        }
        match &reply {
            Ok(decoded) if answered_readonly(decoded) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }

    /// Runs a call of `script` by `deadline`, its command made by `command` for the way the
    /// server runs scripts (see [`Shared::evaluate_raw`]).
    pub(in crate::store::redis) async fn evaluate(
        &self,
        script: &Script,
        command: impl Fn(CallCommand) -> redis::Cmd,
        deadline: Instant,
    ) -> Result<Value, StoreError> {
        self.evaluate_raw(script, command, false, deadline)
            .await?
            .map_err(command_error)
    }

    /// Runs a call of `script` by `deadline`, after `ASKING` when `asking` (a cluster slot being
    /// imported), its command made by `command` for the way the server runs scripts; when the
    /// server lost the script or the library (`NOSCRIPT`, a function not found), it is made ready
    /// again and the call retried once. With [`crate::store::redis::RedisSettings::wait_replicas`],
    /// the call's writes must also reach that many replicas by the deadline (`WAIT`, in the same
    /// round trip). A connection that answers `READONLY` (the server is a replica now) is dropped
    /// at once. The outer error ends the call; the inner one is the command's own (a cluster
    /// redirection, say), for the caller to inspect.
    pub(in crate::store::redis) async fn evaluate_raw(
        &self,
        script: &Script,
        command: impl Fn(CallCommand) -> redis::Cmd,
        asking: bool,
        deadline: Instant,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        let mut lease = self.lease(deadline).await?;
        let by = self.call_command(&mut lease).await?;
        let mut reply = lease.call(&command(by), asking, self.wait_replicas).await?;
        if let Err(error) = &reply {
            if is_lost(error, by) {
                let by = self.reload(&mut lease, script, by, error).await?;
                reply = lease.call(&command(by), asking, self.wait_replicas).await?;
            }
        }
        match &reply {
            Ok(value) if value_answered_readonly(value) => lease.readonly(),
            Err(error) if error.code() == Some("READONLY") => lease.readonly(),
            _ => {}
        }
        Ok(reply)
    }

    /// The command the server's calls go by, established on `lease`'s connection when no call
    /// has established it yet (a cluster node met after startup).
    async fn call_command(&self, lease: &mut Lease<'_>) -> Result<CallCommand, StoreError> {
        if let Some(command) = self.calling.get() {
            return Ok(command);
        }
        let established = timeout_at(lease.deadline, establish(&mut lease.link, &self.scripts))
            .await
            .map_err(|_| {
                lease.mark_broken();
                StoreError::Timeout(self.timeout)
            })??;
        self.calling.set(established);
        Ok(established)
    }

    /// Makes the server ready again for `script` after a call by `failed` was answered `error`
    /// (it lost what the call runs); the command to retry with.
    async fn reload(
        &self,
        lease: &mut Lease<'_>,
        script: &Script,
        failed: CallCommand,
        error: &RedisError,
    ) -> Result<CallCommand, StoreError> {
        self.scripts.reloaded();
        tracing::info!(%error, "redis lost the ratelimitd scripts; loading them again");
        let reloaded = timeout_at(
            lease.deadline,
            reload(&mut lease.link, script, failed, &self.scripts),
        )
        .await
        .map_err(|_| {
            lease.mark_broken();
            StoreError::Timeout(self.timeout)
        })?;
        match reloaded {
            Ok(command) => {
                self.calling.set(command);
                Ok(command)
            }
            Err(error) => {
                self.calling.forget();
                Err(error)
            }
        }
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
