//! The request script's reply: one flat array for the whole call (see `lua/request.lua`), read
//! from a redis crate value or in place from its RESP frame, into each request's verdicts or its
//! own error.

use redis::Value;

use crate::limiter::algorithm::Verdict;
use crate::store::redis::wire::resp::{ArrayReader, Element};
use crate::store::StoreError;

fn protocol(what: impl std::fmt::Display) -> StoreError {
    StoreError::Protocol(what.to_string())
}

/// One value of a script reply, whichever way the reply was read.
enum Item<'a> {
    Int(i64),
    Bulk(&'a [u8]),
    Simple(&'a [u8]),
    /// Anything else, described for the error message.
    Other(String),
}

impl std::fmt::Debug for Item<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Item::Int(n) => write!(f, "Int({n})"),
            Item::Bulk(bytes) => write!(f, "BulkString({:?})", String::from_utf8_lossy(bytes)),
            Item::Simple(text) => write!(f, "SimpleString({:?})", String::from_utf8_lossy(text)),
            Item::Other(described) => f.write_str(described),
        }
    }
}

/// The values of a script reply: a redis crate array, or an array read in place from its RESP
/// frame.
enum Items<'a> {
    Values(std::slice::Iter<'a, Value>),
    Frame(ArrayReader<'a>),
}

impl<'a> Items<'a> {
    fn len(&self) -> usize {
        match self {
            Items::Values(values) => values.len(),
            Items::Frame(reader) => reader.len(),
        }
    }

    #[inline]
    fn next(&mut self) -> Result<Option<Item<'a>>, StoreError> {
        Ok(Some(match self {
            Items::Values(values) => match values.next() {
                None => return Ok(None),
                Some(Value::Int(n)) => Item::Int(*n),
                Some(Value::BulkString(bytes)) => Item::Bulk(bytes),
                Some(Value::SimpleString(text)) => Item::Simple(text.as_bytes()),
                Some(other) => Item::Other(format!("{other:?}")),
            },
            Items::Frame(reader) => match reader.next_element() {
                None => return Ok(None),
                Some(Err(error)) => return Err(protocol(error)),
                Some(Ok(Element::Int(n))) => Item::Int(n),
                Some(Ok(Element::Bulk(bytes))) => Item::Bulk(bytes),
                Some(Ok(Element::Simple(text))) => Item::Simple(text),
                Some(Ok(other)) => Item::Other(format!("{other:?}")),
            },
        }))
    }

    /// The next value, which must be there.
    fn take(&mut self) -> Result<Item<'a>, StoreError> {
        self.next()?
            .ok_or_else(|| protocol("a reply shorter than its length"))
    }
}

fn integer(item: &Item<'_>) -> Result<i64, StoreError> {
    match item {
        Item::Int(n) => Ok(*n),
        other => Err(protocol(format_args!("expected an integer, got {other:?}"))),
    }
}

/// A u64: an integer reply, or decimal digits for values of 2^63 and more (see `lua/request.lua`).
fn unsigned(item: &Item<'_>) -> Result<u64, StoreError> {
    match item {
        Item::Int(n) => u64::try_from(*n).ok(),
        Item::Bulk(digits) => std::str::from_utf8(digits)
            .ok()
            .and_then(|text| text.parse().ok()),
        _ => None,
    }
    .ok_or_else(|| protocol(format_args!("expected a u64, got {item:?}")))
}

/// What one script call answered.
#[derive(Debug)]
pub struct CallReply {
    /// The Redis clock the call read (µs), 0 when every request pinned its time: the instant of
    /// the call's writes, which a refund names.
    pub clock_us: u64,
    /// Each request's verdicts or its own error, in call order.
    pub answers: Vec<Result<Vec<Verdict>, StoreError>>,
}

/// [`decode_call_reply`]'s answers alone.
pub fn decode_batch_reply(
    value: Value,
    checks: impl Iterator<Item = usize>,
) -> Result<Vec<Result<Vec<Verdict>, StoreError>>, StoreError> {
    decode_call_reply(value, checks).map(|reply| reply.answers)
}

/// Decodes the reply of a call deciding requests of `checks[i]` checks each: the outer error
/// fails the whole call. The reply is one flat array (see `lua/request.lua`): the call's clock,
/// then each request's verdicts as 3 values each, or, in their place, its own error as a single
/// plain string (its first element is otherwise the integer admitted flag, so the two cannot be
/// confused).
pub fn decode_call_reply(
    value: Value,
    checks: impl Iterator<Item = usize>,
) -> Result<CallReply, StoreError> {
    let Value::Array(values) = &value else {
        return Err(protocol(format_args!(
            "expected an array of verdict values, got {value:?}"
        )));
    };
    decode_items(Items::Values(values.iter()), checks)
}

/// [`decode_call_reply`] of a reply read in place from its RESP `frame` (a whole reply, not an
/// error reply).
pub fn decode_call_frame(
    frame: &[u8],
    checks: impl Iterator<Item = usize>,
) -> Result<CallReply, StoreError> {
    match ArrayReader::new(frame).map_err(protocol)? {
        Some(reader) => decode_items(Items::Frame(reader), checks),
        None => Err(protocol(format_args!(
            "expected an array of verdict values, got {:?}",
            String::from_utf8_lossy(&frame[..frame.len().min(64)])
        ))),
    }
}

fn decode_items(
    mut items: Items<'_>,
    checks: impl Iterator<Item = usize>,
) -> Result<CallReply, StoreError> {
    let Some(clock) = items.next()? else {
        return Err(protocol("an empty reply"));
    };
    let clock_us = unsigned(&clock)?;
    let mut replies = Vec::with_capacity(checks.size_hint().0);
    for expected in checks {
        if expected == 0 {
            replies.push(Ok(Vec::new()));
            continue;
        }
        let len = expected * VALUES_PER_VERDICT;
        let reply = match items.next()? {
            Some(Item::Bulk(message)) => Err(request_error(&String::from_utf8_lossy(message))),
            Some(Item::Simple(message)) => Err(request_error(&String::from_utf8_lossy(message))),
            Some(first) if items.len() + 1 >= len => {
                Ok(decode_verdicts(first, expected, &mut items)?)
            }
            first => {
                return Err(protocol(format_args!(
                    "reply ends within request {} ({} values left, {len} expected)",
                    replies.len() + 1,
                    items.len() + usize::from(first.is_some())
                )))
            }
        };
        replies.push(reply);
    }
    if items.len() > 0 {
        return Err(protocol(format_args!(
            "{} values after the last request's verdicts",
            items.len()
        )));
    }
    Ok(CallReply {
        clock_us,
        answers: replies,
    })
}

/// One request's error, `<CODE> <text>` as the script reports it: Redis refusing to serve
/// (out of memory, loading, read-only replica, busy...) is unavailability; anything else means
/// the script or the data is wrong.
fn request_error(message: &str) -> StoreError {
    const UNAVAILABLE: [&str; 9] = [
        "OOM",
        "LOADING",
        "READONLY",
        "BUSY",
        "MASTERDOWN",
        "NOREPLICAS",
        "TRYAGAIN",
        "CLUSTERDOWN",
        "MISCONF",
    ];
    let code = message.split_whitespace().next().unwrap_or("");
    if UNAVAILABLE.contains(&code) {
        StoreError::Unavailable(message.to_owned())
    } else {
        StoreError::Protocol(message.to_owned())
    }
}

/// Values per verdict in the script's reply: admitted 0/1, remaining, reset_after_us.
const VALUES_PER_VERDICT: usize = 3;

/// Decodes `count` consecutive verdicts, 3 values each, the first value already taken (`first`).
fn decode_verdicts(
    first: Item<'_>,
    count: usize,
    items: &mut Items<'_>,
) -> Result<Vec<Verdict>, StoreError> {
    let mut verdicts = Vec::with_capacity(count);
    let mut admitted = Some(first);
    for _ in 0..count {
        let flag = match admitted.take() {
            Some(first) => first,
            None => items.take()?,
        };
        let admitted = match integer(&flag)? {
            0 => false,
            1 => true,
            other => return Err(protocol(format_args!("admitted flag {other}"))),
        };
        let remaining = items.take()?;
        let remaining = u32::try_from(integer(&remaining)?)
            .map_err(|_| protocol(format_args!("remaining out of range: {remaining:?}")))?;
        let reset_after_us = unsigned(&items.take()?)?;
        verdicts.push(Verdict {
            admitted,
            remaining,
            reset_after_us,
            counted_when_vetoed: false,
        });
    }
    Ok(verdicts)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(n: i64) -> Value {
        Value::Int(n)
    }

    #[test]
    fn decodes_verdicts_and_rejects_garbage() {
        let reply = Value::Array(vec![
            int(9),
            int(1),
            int(4),
            int(1_000),
            int(0),
            int(0),
            int(7),
        ]);
        let decoded = decode_call_reply(reply, [2].into_iter()).unwrap();
        assert_eq!(decoded.clock_us, 9);
        let answers = decoded.answers;
        let verdicts = answers[0].as_ref().unwrap();
        assert!(verdicts[0].admitted && !verdicts[1].admitted);
        assert_eq!(verdicts[0].remaining, 4);
        assert_eq!(verdicts[1].reset_after_us, 7);

        let huge = Value::Array(vec![
            int(0),
            int(0),
            int(0),
            Value::BulkString(b"18446744073709551615".to_vec()),
        ]);
        let answers = decode_batch_reply(huge, [1].into_iter()).unwrap();
        assert_eq!(answers[0].as_ref().unwrap()[0].reset_after_us, u64::MAX);

        let garbage = [
            Value::Okay,
            Value::Array(vec![]),
            Value::Array(vec![int(-1), int(1), int(0), int(0)]),
            Value::Array(vec![int(0), int(1), int(4)]),
            Value::Array(vec![int(0), int(1), int(-1), int(0)]),
            Value::Array(vec![int(0), int(2), int(0), int(0)]),
            Value::Array(vec![int(0), int(1), int(0), int(0), int(1)]),
            Value::Array(vec![int(0), Value::Array(vec![int(1), int(0), int(0)])]),
        ];
        for reply in garbage {
            assert!(
                decode_batch_reply(reply.clone(), [1].into_iter()).is_err(),
                "{reply:?}"
            );
        }
    }

    #[test]
    fn a_batch_reply_answers_each_request_on_its_own() {
        let reply = Value::Array(vec![
            int(1_700_000_000_000_000),
            int(1),
            int(4),
            int(9),
            Value::BulkString(b"WRONGTYPE Operation against a key".to_vec()),
            Value::BulkString(b"OOM command not allowed".to_vec()),
            int(1),
            int(4),
            int(9),
            int(0),
            int(0),
            int(3),
        ]);
        let answers = decode_batch_reply(reply, [1, 1, 1, 2].into_iter()).unwrap();
        assert_eq!(answers[0].as_ref().unwrap().len(), 1);
        assert!(
            matches!(answers[1], Err(StoreError::Protocol(ref m)) if m.starts_with("WRONGTYPE"))
        );
        assert!(matches!(answers[2], Err(StoreError::Unavailable(_))));
        let last = answers[3].as_ref().unwrap();
        assert_eq!(last.len(), 2);
        assert!(last[0].admitted && !last[1].admitted);
        assert_eq!(last[1].reset_after_us, 3);
    }
}
