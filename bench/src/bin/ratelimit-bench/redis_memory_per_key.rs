//! Redis memory per tracked key, by algorithm: ratelimitd (default settings, the binary beside
//! this one) on a redis-server of its own (testkit), `keys` requests of 1 descriptor each on
//! distinct counters (a value drawn from 10^12, so collisions are a handful; `DBSIZE` counts the
//! keys written). The rules are per hour so no key expires during the run: 1 000 000 for the
//! window algorithms, 10 for token_bucket and gcra (whose keys live only until the bucket is full
//! again: 6 minutes after 1 hit of 10 per hour). Per algorithm: `FLUSHALL`, the requests (this
//! tool's load, closed loop), then
//!
//! - `INFO memory`: (used_memory after - before) / keys, what the keyspace costs, dict and expiry
//!   entries included;
//! - `MEMORY USAGE` of 100 sampled keys (`SAMPLES 0`): the key's value and its dict entry alone;
//! - the value as stored (one sample, and its `OBJECT ENCODING`).
//!
//! Markdown on stdout, progress on stderr.

use std::process::{Command, Stdio};

use clap::Args;
use ratelimitd::limiter::Algorithm;
use redis::Connection;
use testkit::ratelimitd::Ratelimitd;
use testkit::redis_server::{info_field, RedisServer};

use crate::run_header::header;

#[derive(Args, Clone, Debug)]
pub struct RedisMemoryPerKeyArgs {
    /// Requests per algorithm, each on a counter of its own.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// The algorithms to measure, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed_window,sliding_window_log,sliding_window_counter,token_bucket,gcra"
    )]
    pub algorithms: Vec<String>,
}

/// Keys sampled with `MEMORY USAGE` per algorithm.
const SAMPLED_KEYS: u32 = 100;

/// The range distinct counters are drawn from.
const COUNTER_VALUES: u64 = 1_000_000_000_000;

pub fn run(args: &RedisMemoryPerKeyArgs) -> Result<(), String> {
    for name in &args.algorithms {
        Algorithm::parse(name).ok_or_else(|| format!("unknown algorithm `{name}`"))?;
    }
    let server = RedisServer::start();
    let config = server.dir().join("memory.yaml");
    std::fs::write(&config, configuration(&args.algorithms))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let config = config.to_string_lossy().into_owned();
    let ratelimitd = Ratelimitd::start(&["--config", &config, "--redis-url", &server.url()]);
    let mut redis = server.connection();
    let this = std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))?;

    println!("{}\n", header("Redis memory per key", &mut redis));
    println!(
        "| algorithm | keys | INFO used_memory bytes / key | MEMORY USAGE bytes / key (mean of {SAMPLED_KEYS}) | encoding | a value as stored |"
    );
    println!("|---|---:|---:|---:|---|---|");
    for algorithm in &args.algorithms {
        eprintln!(
            "[redis-memory] {algorithm}: {} requests on distinct counters",
            args.keys
        );
        query::<()>(&mut redis, &redis::cmd("FLUSHALL"))?;
        let before = used_memory(&mut redis)?;
        let status = Command::new(&this)
            .args(["--addr", &ratelimitd.grpc_addr().to_string()])
            .args(["--domain", "memory"])
            .args(["--descriptor", &format!("{algorithm}=m{{r}}")])
            .args(["--keys", &COUNTER_VALUES.to_string()])
            .args(["--requests", &args.keys.to_string()])
            .args(["--warmup", "0s", "--json"])
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("{}: {e}", this.display()))?;
        if !status.success() {
            return Err(format!("the load on {algorithm} ended with {status}"));
        }
        let after = used_memory(&mut redis)?;
        let keys: u64 = query(&mut redis, &redis::cmd("DBSIZE"))?;
        if keys == 0 {
            return Err(format!(
                "{algorithm}: no key written; ratelimitd said:\n{}",
                ratelimitd.output()
            ));
        }
        let sample = sample_keys(&mut redis)?;
        println!(
            "| {algorithm} | {keys} | {:.0} | {:.0} | {} | `{}` (key `{}`) |",
            (after as f64 - before as f64) / keys as f64,
            sample.usage_total as f64 / f64::from(sample.sampled),
            sample.encoding,
            sample.value,
            sample.key
        );
    }
    Ok(())
}

/// The configuration: domain `memory`, a rule per algorithm keyed by its name.
fn configuration(algorithms: &[String]) -> String {
    let mut yaml = String::from("domain: memory\ndescriptors:\n");
    for algorithm in algorithms {
        let limit = match algorithm.as_str() {
            "token_bucket" | "gcra" => 10,
            _ => 1_000_000,
        };
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    rate_limit: {{unit: hour, requests_per_unit: {limit}, algorithm: {algorithm}}}\n"
        ));
    }
    yaml
}

/// What the sampled keys hold.
struct Sample {
    sampled: u32,
    usage_total: u64,
    key: String,
    encoding: String,
    value: String,
}

/// `MEMORY USAGE ... SAMPLES 0` of [`SAMPLED_KEYS`] random keys; the last one's encoding and value.
fn sample_keys(redis: &mut Connection) -> Result<Sample, String> {
    let mut sampled = 0;
    let mut usage_total = 0;
    let mut key = String::new();
    for _ in 0..SAMPLED_KEYS {
        let Some(random) = query::<Option<String>>(redis, &redis::cmd("RANDOMKEY"))? else {
            continue;
        };
        let usage: u64 = query(
            redis,
            redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&random)
                .arg("SAMPLES")
                .arg(0),
        )?;
        usage_total += usage;
        sampled += 1;
        key = random;
    }
    if sampled == 0 {
        return Err("RANDOMKEY found no key".into());
    }
    let encoding: String = query(redis, redis::cmd("OBJECT").arg("ENCODING").arg(&key))?;
    let kind: String = query(redis, redis::cmd("TYPE").arg(&key))?;
    let value = match kind.as_str() {
        "string" => query(redis, redis::cmd("GET").arg(&key))?,
        "zset" => {
            let members: Vec<String> = query(
                redis,
                redis::cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )?;
            format!("zset: {}", members.join(" "))
        }
        _ => "?".into(),
    };
    Ok(Sample {
        sampled,
        usage_total,
        key,
        encoding,
        value,
    })
}

/// `used_memory` of `INFO memory`.
fn used_memory(redis: &mut Connection) -> Result<u64, String> {
    let info: String = query(redis, redis::cmd("INFO").arg("memory"))?;
    info_field(&info, "used_memory")
        .and_then(|value| value.parse().ok())
        .ok_or_else(|| "INFO memory has no used_memory".into())
}

/// `command`'s reply, or its error as text.
fn query<T: redis::FromRedisValue>(
    redis: &mut Connection,
    command: &redis::Cmd,
) -> Result<T, String> {
    command
        .query(redis)
        .map_err(|e| format!("{command:?}: {e}"))
}
