//! One round trip of a call on a leased connection: `ASKING` before it when the slot is being
//! imported, `WAIT` after it when replicas must acknowledge its writes, all sent together. On the
//! store's pipelined connection a script call is encoded into the connection's output buffer and
//! its replies read in place; on the redis crate's connection its command and value carry it.

use redis::{ErrorKind, RedisError, Value};
use tokio::time::{timeout_at, Instant};

use super::pool::Lease;
use crate::store::redis::scripts::reply::{decode_call_frame, decode_call_reply, CallReply};
use crate::store::redis::scripts::request::{Invocation, ScriptCall};
use crate::store::redis::wire::link::Link;
use crate::store::redis::wire::pipe::CallError;
use crate::store::redis::wire::resp;
use crate::store::StoreError;

/// The redis crate's error for the error reply `frame` (`-<CODE> <text>`): the error its own
/// connections report (code, kind, redirection target).
fn error_reply(frame: &[u8]) -> RedisError {
    match redis::parse_redis_value(frame).and_then(Value::extract_error) {
        Err(error) => error,
        Ok(other) => RedisError::from((
            ErrorKind::Parse,
            "expected an error reply",
            format!("{other:?}"),
        )),
    }
}

/// The `left` replies of one call, back to back as the pipe delimited them, taken one at a
/// time (the last is what remains).
struct Frames<'a> {
    rest: &'a [u8],
    left: usize,
}

impl<'a> Frames<'a> {
    fn next(&mut self) -> Result<&'a [u8], StoreError> {
        let len = match self.left {
            0 => return Err(StoreError::Protocol("a redis reply is missing".into())),
            1 => self.rest.len(),
            _ => resp::frame_len(self.rest)
                .map_err(|error| StoreError::Protocol(error.to_string()))?
                .ok_or_else(|| StoreError::Protocol("a redis reply ended early".into()))?,
        };
        let (frame, rest) = self.rest.split_at(len);
        self.rest = rest;
        self.left -= 1;
        Ok(frame)
    }
}

impl Lease<'_> {
    /// Runs `call` as [`Lease::call`] runs a command, its reply decoded for requests of
    /// `checks` checks each. On a pipelined connection the commands (`ASKING`, the call, `WAIT`)
    /// are encoded into the connection's output buffer and the replies read in place; else the
    /// redis crate's command and value carry them.
    pub(super) async fn decide<'a, I: Iterator<Item = &'a Invocation> + Clone>(
        &mut self,
        call: &mut ScriptCall<I>,
        checks: impl Iterator<Item = usize>,
        asking: bool,
        replicas: u32,
    ) -> Result<Result<CallReply, RedisError>, StoreError> {
        let pipe = match &self.link {
            Link::Pipe(pipe) => pipe.clone(),
            Link::Mux(_) => {
                let command = call.command();
                return match self.call(&command, asking, replicas).await? {
                    Ok(value) => Ok(Ok(decode_call_reply(value, checks)?)),
                    Err(error) => Ok(Err(error)),
                };
            }
        };
        let left_ms = self
            .deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1) as u64;
        let frames = 1 + usize::from(asking) + usize::from(replicas > 0);
        let sent = pipe.call(frames, Some(self.deadline), |output| {
            if asking {
                resp::push_args(output, &[b"ASKING"]);
            }
            call.encode(output);
            if replicas > 0 {
                resp::push_command(output, 3);
                resp::push_bulk(output, b"WAIT");
                resp::push_bulk_u64(output, u64::from(replicas));
                resp::push_bulk_u64(output, left_ms);
            }
        });
        let replies = match sent.await {
            Ok(replies) => replies,
            Err(CallError::TimedOut) => {
                self.mark_broken();
                return Err(StoreError::Timeout(self.shared.timeout));
            }
            Err(CallError::Closed(closed)) => {
                self.mark_broken();
                return Err(StoreError::Unavailable(
                    RedisError::from(closed).to_string(),
                ));
            }
        };
        let mut frames = Frames {
            rest: &replies,
            left: frames,
        };
        if asking {
            let asked = frames.next()?;
            if asked.first() == Some(&b'-') {
                return Ok(Err(error_reply(asked)));
            }
        }
        let reply = frames.next()?;
        if reply.first() == Some(&b'-') {
            return Ok(Err(error_reply(reply)));
        }
        if replicas > 0 {
            let acknowledged = frames.next()?;
            match redis::parse_redis_value(acknowledged).and_then(Value::extract_error) {
                Ok(Value::Int(count)) if count >= i64::from(replicas) => {}
                Ok(Value::Int(count)) => {
                    return Err(StoreError::Unavailable(format!(
                        "only {count} of {replicas} redis replicas acknowledged the writes in time"
                    )))
                }
                Ok(other) => return Err(StoreError::Protocol(format!("WAIT answered {other:?}"))),
                Err(error) => return Ok(Err(error)),
            }
        }
        Ok(Ok(decode_call_frame(reply, checks)?))
    }

    /// Runs `cmd`, after `ASKING` when `asking`, and followed in the same round trip by `WAIT
    /// replicas <ms left>` when `replicas` is not 0; the command's reply, or a store failure when
    /// fewer replicas acknowledged.
    pub(super) async fn call(
        &mut self,
        cmd: &redis::Cmd,
        asking: bool,
        replicas: u32,
    ) -> Result<Result<Value, RedisError>, StoreError> {
        if replicas == 0 && !asking {
            return self.query(cmd).await;
        }
        let mut pipeline = redis::pipe();
        if asking {
            pipeline.cmd("ASKING").ignore();
        }
        pipeline.add_command(cmd.clone());
        if replicas == 0 {
            let result = timeout_at(
                self.deadline,
                pipeline.query_async::<(Value,)>(&mut self.link),
            )
            .await;
            return Ok(self.settle(result)?.map(|(reply,)| reply));
        }
        let left_ms = self
            .deadline
            .saturating_duration_since(Instant::now())
            .as_millis()
            .max(1);
        pipeline.cmd("WAIT").arg(replicas).arg(left_ms as u64);
        let result = timeout_at(
            self.deadline,
            pipeline.query_async::<Vec<Value>>(&mut self.link),
        )
        .await;
        let replies = match self.settle(result)? {
            Ok(replies) => replies,
            Err(error) => return Ok(Err(error)),
        };
        let mut replies = replies.into_iter();
        let (Some(reply), Some(acknowledged)) = (replies.next(), replies.next()) else {
            return Err(StoreError::Protocol("WAIT pipeline answered short".into()));
        };
        match acknowledged {
            Value::Int(count) if count >= i64::from(replicas) => Ok(Ok(reply)),
            Value::Int(count) => Err(StoreError::Unavailable(format!(
                "only {count} of {replicas} redis replicas acknowledged the writes in time"
            ))),
            other => Err(StoreError::Protocol(format!("WAIT answered {other:?}"))),
        }
    }
}
