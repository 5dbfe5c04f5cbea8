//! The request script: `lua/` concatenated into one Lua chunk, its SHA1, argument encoding and
//! reply decoding.

use std::collections::HashMap;
use std::sync::OnceLock;

use redis::Value;

use crate::limiter::algorithm::Verdict;
use crate::limiter::rate::{Algorithm, Rate};
use crate::store::{Check, StoreError};

use super::keys::redis_key;

/// The library files both scripts start with, in order, each followed by a newline: helpers, the
/// five algorithms, the rate table. Redis cannot call one script from another, so every script
/// carries them (see `lua/common.lua`).
macro_rules! library_source {
    () => {
        concat!(
            include_str!("../../../lua/common.lua"),
            "\n",
            include_str!("../../../lua/fixed_window.lua"),
            "\n",
            include_str!("../../../lua/sliding_window_log.lua"),
            "\n",
            include_str!("../../../lua/sliding_window_counter.lua"),
            "\n",
            include_str!("../../../lua/token_bucket.lua"),
            "\n",
            include_str!("../../../lua/gcra.lua"),
            "\n",
            include_str!("../../../lua/rates.lua"),
            "\n",
        )
    };
}
pub(crate) use library_source;

/// The whole request script: the library files, then the request-level entry point (see
/// `lua/request.lua`).
pub const SOURCE: &str = concat!(library_source!(), include_str!("../../../lua/request.lua"));

/// Values per rate in the call's rate table (see the header of `lua/request.lua`).
pub const FIELDS_PER_RATE: usize = 5;

/// Values per check after a request's check count and time (see the header of `lua/request.lua`).
pub const FIELDS_PER_CHECK: usize = 3;

/// The `now` argument that makes the script read Redis's own clock (`TIME`).
pub const REDIS_TIME: &str = "-";

/// Hits sent to the script are clamped to this: above every rate's `burst + 1`, so each check
/// decides exactly as with `algorithm::clamp_hits`, while the script's cumulative sums (doubles)
/// stay exact. Clamping with each check's own rate instead would change the sum seen by a later
/// check of the same counter with a larger burst.
pub const MAX_HITS_SENT: u64 = u32::MAX as u64 + 1;

/// A Lua script the store calls by SHA1 (`EVALSHA`), loaded on each server it calls (`SCRIPT
/// LOAD`) and reloaded there after `NOSCRIPT`. The hash is computed once per process, at first use.
pub struct Script {
    source: &'static str,
    sha1: OnceLock<String>,
}

impl Script {
    pub const fn new(source: &'static str) -> Script {
        Script {
            source,
            sha1: OnceLock::new(),
        }
    }

    /// The SHA1 of the source (hex).
    pub fn sha1(&self) -> &str {
        self.sha1
            .get_or_init(|| redis::Script::new(self.source).get_hash().into())
    }

    /// `SCRIPT LOAD <source>`
    pub fn load_command(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(self.source);
        cmd
    }
}

/// The request script, [`SOURCE`].
pub static DECIDE: Script = Script::new(SOURCE);

/// SHA1 of [`SOURCE`] (hex).
pub fn sha1() -> &'static str {
    DECIDE.sha1()
}

/// The algorithm's code in the script's ARGV.
pub fn algorithm_code(algorithm: Algorithm) -> u8 {
    match algorithm {
        Algorithm::FixedWindow => 0,
        Algorithm::SlidingWindowLog => 1,
        Algorithm::SlidingWindowCounter => 2,
        Algorithm::TokenBucket => 3,
        Algorithm::Gcra => 4,
    }
}

/// One request's part of a script call: its keys (one per check), its time, and each check's
/// rate, hits and shadow flag.
#[derive(Debug)]
pub struct Invocation {
    keys: Vec<String>,
    pinned_now_us: Option<u64>,
    checks: Vec<(Rate, u64, bool)>,
}

impl Invocation {
    /// The part of `checks`; `pinned_now_us` replaces Redis's clock (tests only).
    pub fn new(checks: &[Check], pinned_now_us: Option<u64>) -> Invocation {
        Invocation {
            keys: checks
                .iter()
                .map(|check| redis_key(&check.key, &check.rate))
                .collect(),
            pinned_now_us,
            checks: checks
                .iter()
                .map(|check| (check.rate, check.hits.min(MAX_HITS_SENT), check.shadow))
                .collect(),
        }
    }

    /// Number of checks (and keys).
    pub fn checks(&self) -> usize {
        self.keys.len()
    }

    /// Each check's key, in order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Check `index`: its rate, the hits sent and whether it is a shadow check.
    pub fn check(&self, index: usize) -> Option<(Rate, u64, bool)> {
        self.checks.get(index).copied()
    }

    /// The pinned time, if any (tests only).
    pub fn pinned_now_us(&self) -> Option<u64> {
        self.pinned_now_us
    }

    /// The invocation of the checks at `indices` alone, in that order (a request's checks on one
    /// cluster node).
    pub fn part(&self, indices: &[usize]) -> Invocation {
        Invocation {
            keys: indices
                .iter()
                .filter_map(|&i| self.keys.get(i).cloned())
                .collect(),
            pinned_now_us: self.pinned_now_us,
            checks: indices
                .iter()
                .filter_map(|&i| self.checks.get(i).copied())
                .collect(),
        }
    }
}

/// Where a call's keys travel (see `keys_and_arguments` in `lua/common.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyPlacement {
    /// Declared, as `EVALSHA`'s keys: a single server.
    Declared,
    /// Leading ARGV, after their count, with no key declared: a Redis Cluster node, which refuses
    /// declared keys of several slots (CROSSSLOT) but lets the script access keys of every slot
    /// it owns.
    InArguments,
}

/// The distinct rates of one script call, in order of first use: each travels once, at the head
/// of ARGV (R, then [`FIELDS_PER_RATE`] values per rate; see `lua/request.lua`), and the checks or
/// refunds of the call point into it by position: fewer arguments for Redis to turn into Lua
/// strings and for the script to parse. The request and the refund script read the same table.
#[derive(Debug, Default)]
pub struct RateTable {
    positions: HashMap<Rate, usize>,
    rates: Vec<Rate>,
}

impl RateTable {
    /// The position (1-based) of `rate`, added at the end when new.
    pub fn position(&mut self, rate: Rate) -> usize {
        *self.positions.entry(rate).or_insert_with(|| {
            self.rates.push(rate);
            self.rates.len()
        })
    }

    /// Appends the table to `cmd`.
    pub fn write_to(&self, cmd: &mut redis::Cmd) {
        cmd.arg(self.rates.len());
        for rate in &self.rates {
            cmd.arg(u64::from(algorithm_code(rate.algorithm())))
                .arg(rate.limit())
                .arg(rate.window_us())
                .arg(rate.burst())
                .arg(rate.emission_interval_us());
        }
    }
}

/// `EVALSHA <sha> <keys> keys... rates... requests...` deciding `requests` in order, in one call.
pub fn evalsha<'a>(requests: impl Iterator<Item = &'a Invocation> + Clone) -> redis::Cmd {
    evalsha_placed(requests, KeyPlacement::Declared)
}

/// [`evalsha`] with the keys placed as `placement` says.
pub fn evalsha_placed<'a>(
    requests: impl Iterator<Item = &'a Invocation> + Clone,
    placement: KeyPlacement,
) -> redis::Cmd {
    let mut table = RateTable::default();
    let mut checks = Vec::new();
    for request in requests.clone() {
        for &(rate, hits, shadow) in &request.checks {
            checks.push([table.position(rate) as u64, hits, u64::from(shadow)]);
        }
    }

    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(sha1());
    match placement {
        KeyPlacement::Declared => cmd.arg(checks.len()),
        KeyPlacement::InArguments => cmd.arg(0).arg(checks.len()),
    };
    for request in requests.clone() {
        for key in &request.keys {
            cmd.arg(key.as_str());
        }
    }
    table.write_to(&mut cmd);
    let mut values = checks.iter();
    for request in requests {
        cmd.arg(request.checks());
        match request.pinned_now_us {
            Some(now) => cmd.arg(now),
            None => cmd.arg(REDIS_TIME),
        };
        for check in values.by_ref().take(request.checks()) {
            cmd.arg(&check[..]);
        }
    }
    cmd
}

/// `SCRIPT LOAD <source>` of the request script.
pub fn script_load() -> redis::Cmd {
    DECIDE.load_command()
}

fn protocol(what: impl std::fmt::Display) -> StoreError {
    StoreError::Protocol(what.to_string())
}

fn integer(value: &Value) -> Result<i64, StoreError> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(protocol(format_args!("expected an integer, got {other:?}"))),
    }
}

/// A u64: an integer reply, or decimal digits for values of 2^63 and more (see `lua/request.lua`).
fn unsigned(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) => u64::try_from(*n).ok(),
        Value::BulkString(digits) => std::str::from_utf8(digits)
            .ok()
            .and_then(|text| text.parse().ok()),
        _ => None,
    }
    .ok_or_else(|| protocol(format_args!("expected a u64, got {value:?}")))
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
    checks: impl ExactSizeIterator<Item = usize>,
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
    checks: impl ExactSizeIterator<Item = usize>,
) -> Result<CallReply, StoreError> {
    let Value::Array(values) = value else {
        return Err(protocol(format_args!(
            "expected an array of verdict values, got {value:?}"
        )));
    };
    let Some((clock, mut rest)) = values.split_first() else {
        return Err(protocol("an empty reply"));
    };
    let clock_us = unsigned(clock)?;
    let mut replies = Vec::with_capacity(checks.len());
    for expected in checks {
        let reply = match rest.first() {
            Some(Value::BulkString(message)) => {
                rest = &rest[1..];
                Err(request_error(&String::from_utf8_lossy(message)))
            }
            Some(Value::SimpleString(message)) => {
                rest = &rest[1..];
                Err(request_error(message))
            }
            _ => {
                let len = expected * VALUES_PER_VERDICT;
                let Some(fields) = rest.get(..len) else {
                    return Err(protocol(format_args!(
                        "reply ends within request {} ({} values left, {len} expected)",
                        replies.len() + 1,
                        rest.len()
                    )));
                };
                rest = &rest[len..];
                Ok(decode_verdicts(fields)?)
            }
        };
        replies.push(reply);
    }
    if !rest.is_empty() {
        return Err(protocol(format_args!(
            "{} values after the last request's verdicts",
            rest.len()
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

/// Decodes consecutive verdicts, 3 values each (`fields.len()` a multiple of 3).
fn decode_verdicts(fields: &[Value]) -> Result<Vec<Verdict>, StoreError> {
    fields
        .chunks_exact(VALUES_PER_VERDICT)
        .map(|verdict| {
            let [admitted, remaining, reset] = verdict else {
                return Err(protocol("a verdict of other than 3 values"));
            };
            let admitted = match integer(admitted)? {
                0 => false,
                1 => true,
                other => return Err(protocol(format_args!("admitted flag {other}"))),
            };
            let remaining = u32::try_from(integer(remaining)?)
                .map_err(|_| protocol(format_args!("remaining out of range: {remaining:?}")))?;
            let reset_after_us = unsigned(reset)?;
            Ok(Verdict {
                admitted,
                remaining,
                reset_after_us,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_is_stable_and_hex() {
        assert_eq!(sha1().len(), 40);
        assert!(sha1().bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(sha1(), redis::Script::new(SOURCE).get_hash());
    }

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
