//! The Redis side of a sliding-window-log decision on a full key: redis-server's own µs per call
//! (`INFO commandstats`) of the request script and of each command it calls, on a key holding N
//! hits (a limit of N per hour, used up) against a key holding one.
//!
//! Starts its own redis-server (testkit), loads the request script exactly as the store builds it
//! (`DECIDE`'s script form: the library files, then `lua/request.lua`), fills the keys as the
//! script writes them (one member `<ts>:0` per hit, score ts) and sends the calls pipelined, each
//! one request of one check of 1 hit at a pinned instant.

use clap::Args;
use ratelimitd::store::redis::scripts::request::DECIDE;
use redis::{Connection, Value};
use testkit::redis_server::RedisServer;

use crate::run_header::header;

#[derive(Args, Clone, Debug)]
pub struct SwlRedisCostArgs {
    /// Hits on the full key, which is also the limit per hour.
    #[arg(long, default_value_t = 100_000)]
    pub hits: u64,
    /// Script calls per case.
    #[arg(long, default_value_t = 2_000)]
    pub calls: u64,
}

/// The rule's window: an hour, in µs.
const WINDOW_US: u64 = 3_600_000_000;

/// The first hit's instant, µs.
const T0_US: u64 = 1_700_000_000_000_000;

/// Members per ZADD when filling a key.
const ZADD_MEMBERS: u64 = 1_000;

/// Commands per pipeline.
const PIPELINE_COMMANDS: u64 = 1_000;

/// The sliding-window-log algorithm's code in the script's rate table.
const SLIDING_WINDOW_LOG_CODE: u8 = 1;

pub fn run(args: &SwlRedisCostArgs) -> Result<(), String> {
    if args.hits == 0 || args.hits > WINDOW_US {
        return Err(format!("--hits must be 1 to {WINDOW_US}"));
    }
    if args.calls == 0 {
        return Err("--calls must be at least 1".into());
    }
    let server = RedisServer::start();
    let mut redis = server.connection();
    println!(
        "{}\n",
        header("Sliding-window-log cost in Redis", &mut redis)
    );
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg(DECIDE.source())
        .query(&mut redis)
        .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
    let step = WINDOW_US / args.hits;
    let full = format!("rl1:{{full}}:sliding_window_log:{WINDOW_US}:full");
    let one = format!("rl1:{{one}}:sliding_window_log:{WINDOW_US}:one");
    fill(&mut redis, &full, args.hits, step)?;
    fill(&mut redis, &one, 1, step)?;
    let held: u64 = redis::cmd("ZCARD")
        .arg(&full)
        .query(&mut redis)
        .map_err(|e| format!("ZCARD: {e}"))?;
    println!("keys: full holds {held} hits, one holds 1");
    let last = T0_US + args.hits * step;
    let calls = Calls {
        sha: &sha,
        limit: args.hits,
        count: args.calls,
    };
    let hits = args.hits;
    calls.measure(
        &mut redis,
        &format!("full key of {hits}, denied"),
        &full,
        last + 1,
        0,
    )?;
    calls.measure(
        &mut redis,
        &format!("full key of {hits}, at the limit (the oldest hit leaves before each call)"),
        &full,
        last + step,
        step,
    )?;
    calls.measure(&mut redis, "key of 1 hit, admitted", &one, last + 1, 0)
}

/// `hits` hits on `key`, `step` µs apart from `T0_US + step`, as the script records them.
fn fill(redis: &mut Connection, key: &str, hits: u64, step: u64) -> Result<(), String> {
    let mut pipe = redis::pipe();
    let mut queued = 0;
    let mut first = 1;
    while first <= hits {
        let last = (first + ZADD_MEMBERS - 1).min(hits);
        let zadd = pipe.cmd("ZADD").arg(key);
        for i in first..=last {
            let ts = T0_US + i * step;
            zadd.arg(ts).arg(format!("{ts}:0"));
        }
        zadd.ignore();
        queued += 1;
        if queued == PIPELINE_COMMANDS || last == hits {
            pipe.exec(redis).map_err(|e| format!("ZADD {key}: {e}"))?;
            pipe.clear();
            queued = 0;
        }
        first = last + 1;
    }
    Ok(())
}

/// The calls of one case: `count` requests of 1 hit on a limit of `limit` per hour.
struct Calls<'a> {
    sha: &'a str,
    limit: u64,
    count: u64,
}

impl Calls<'_> {
    /// Resets the command statistics, sends the calls on `key` at the pinned instants `first`,
    /// `first + step`, ..., and prints how many were admitted and the µs per call of `EVALSHA` and
    /// of the commands the script ran.
    fn measure(
        &self,
        redis: &mut Connection,
        name: &str,
        key: &str,
        first: u64,
        step: u64,
    ) -> Result<(), String> {
        redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .exec(redis)
            .map_err(|e| format!("CONFIG RESETSTAT: {e}"))?;
        let mut admitted = 0u64;
        let mut sent = 0;
        while sent < self.count {
            let batch = (self.count - sent).min(PIPELINE_COMMANDS);
            let mut pipe = redis::pipe();
            for i in sent..sent + batch {
                let spec = format!("1:1:0:1:{}", first + i * step);
                pipe.cmd("EVALSHA")
                    .arg(self.sha)
                    .arg(1)
                    .arg(key)
                    .arg(1)
                    .arg(SLIDING_WINDOW_LOG_CODE)
                    .arg(self.limit)
                    .arg(WINDOW_US)
                    .arg(self.limit)
                    .arg(WINDOW_US / self.limit)
                    .arg(spec);
            }
            let replies: Vec<Vec<Value>> = pipe
                .query(redis)
                .map_err(|e| format!("EVALSHA on {key}: {e}"))?;
            for reply in &replies {
                match reply.get(1) {
                    Some(Value::Int(1)) => admitted += 1,
                    Some(Value::Int(0)) => {}
                    _ => return Err(format!("unexpected reply of the request script: {reply:?}")),
                }
            }
            sent += batch;
        }
        println!("== {name}: {} calls, {admitted} admitted", self.count);
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(redis)
            .map_err(|e| format!("INFO commandstats: {e}"))?;
        for line in script_command_stats(&stats) {
            println!("   {line}");
        }
        Ok(())
    }
}

/// `<command>: <calls> calls, <µs> µs per call` for `EVALSHA` and the sorted-set and `PEXPIRE`
/// commands of an `INFO commandstats` text, in its order.
fn script_command_stats(stats: &str) -> Vec<String> {
    stats
        .lines()
        .filter_map(|line| line.trim_end().strip_prefix("cmdstat_"))
        .filter_map(|line| line.split_once(':'))
        .filter(|(command, _)| {
            *command == "evalsha" || command.starts_with('z') || *command == "pexpire"
        })
        .map(|(command, fields)| {
            let field = |name: &str| {
                fields
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(name)?.strip_prefix('='))
                    .unwrap_or("?")
            };
            format!(
                "{command}: {} calls, {} µs per call",
                field("calls"),
                field("usec_per_call")
            )
        })
        .collect()
}
