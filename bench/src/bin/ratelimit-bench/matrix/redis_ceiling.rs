//! The Redis ceiling: `redis-benchmark` (an external tool, run as a process) calling the store's
//! request script on the matrix's redis-server as the store calls it: the Functions library with
//! `FCALL` where the server has Functions, else the script with `EVALSHA` (both as
//! `ratelimitd::store::redis::scripts` builds them), one request per call, no pipelining, as many
//! clients as the load has RPCs in flight. The keys are written as the store writes them,
//! `rl1:{<tag>}:<algorithm>:<window_us>:bench:<algorithm>=d<i>-<r>` (r from redis-benchmark's
//! `-r`, a fixed tag per descriptor), and the arguments are one request's: the rule's rate, then
//! one spec per check (`<rate>` alone, or `<rate>:1:0:<checks>` and `+<rate>` for each further
//! check), on Redis's clock. One call is checked first: a call the script refuses would otherwise
//! be measured as fast errors. A short run (also the warmup) sizes the measured one to about
//! `--duration`; redis-server's CPU comes from `/proc/PID/stat` around each attempt.

use std::process::{Command, Stdio};

use ratelimitd::store::redis::scripts::library::library;
use ratelimitd::store::redis::scripts::request::DECIDE;
use redis::Value;
use serde_json::json;
use testkit::redis_server::RedisServer;

use super::{log, Bench};
use crate::procstat::cpu_us;
use crate::servers::limit_of;

/// Requests of the sizing run, and the fewest of a measured one.
const PROBE_REQUESTS: u64 = 20_000;

/// The rules' window, µs.
const WINDOW_US: u64 = 1_000_000;

/// The algorithm's code in the script's rate table (see `lua/request.lua`).
fn code_of(algorithm: &str) -> u8 {
    match algorithm {
        "fixed_window" => 0,
        "sliding_window_log" => 1,
        "sliding_window_counter" => 2,
        "token_bucket" => 3,
        _ => 4, // gcra
    }
}

/// One request of `descriptors` checks on `algorithm`'s rule, after the command and its target;
/// `value` is each key's random part.
fn call_arguments(algorithm: &str, descriptors: u32, value: &str) -> Vec<String> {
    let limit = limit_of(algorithm);
    let mut args = vec![descriptors.to_string()];
    for i in 0..descriptors {
        args.push(format!(
            "rl1:{{{i:016}}}:{algorithm}:{WINDOW_US}:bench:{algorithm}=d{i}-{value}"
        ));
    }
    // The rate table: one rate (code, L, W, B, T).
    args.extend([
        "1".to_string(),
        code_of(algorithm).to_string(),
        limit.to_string(),
        WINDOW_US.to_string(),
        limit.to_string(),
        WINDOW_US.div_ceil(limit).to_string(),
    ]);
    if descriptors == 1 {
        args.push("1".to_string());
    } else {
        args.push(format!("1:1:0:{descriptors}"));
        args.extend((1..descriptors).map(|_| "+1".to_string()));
    }
    args
}

/// What a redis-benchmark `--csv` run reported: requests per second, p50 and p99 in ms.
struct Csv {
    rps: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// The last line of redis-benchmark `--csv`: `"test","rps","avg_latency_ms","min_latency_ms",
/// "p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"`, read from the end (the
/// test's name is the command).
fn parse_csv(output: &str) -> Option<Csv> {
    let line = output.lines().rev().find(|line| !line.trim().is_empty())?;
    let fields: Vec<f64> = line
        .rsplit(',')
        .take(7)
        .map(|field| field.trim().trim_matches('"').parse::<f64>())
        .collect::<Result<_, _>>()
        .ok()?;
    // fields[0] is max, then p99, p95, p50, min, avg, rps.
    Some(Csv {
        rps: fields[6],
        p50_ms: fields[3],
        p99_ms: fields[1],
    })
}

/// The ceilings of every algorithm x keys x descriptors cell of the matrix.
pub(super) fn run(bench: &mut Bench, redis: &RedisServer) -> Result<(), String> {
    let args = bench.args;
    let mut connection = redis.connection();
    let redis_pid = redis.pid().ok_or("redis-server is not running")?;
    let (command, target) = if redis.has_functions() {
        let library = library();
        let listed: Vec<Value> = redis::cmd("FUNCTION")
            .arg("LIST")
            .arg("LIBRARYNAME")
            .arg(library.name())
            .query(&mut connection)
            .map_err(|e| format!("FUNCTION LIST: {e}"))?;
        if listed.is_empty() {
            library
                .load_command()
                .exec(&mut connection)
                .map_err(|e| format!("FUNCTION LOAD: {e}"))?;
        }
        ("FCALL", library.function(&DECIDE).to_string())
    } else {
        let sha: String = DECIDE
            .load_command()
            .query(&mut connection)
            .map_err(|e| format!("SCRIPT LOAD: {e}"))?;
        ("EVALSHA", sha)
    };
    log(format!("redis ceiling: {command} {target}"));
    let in_flight = args.connections * args.concurrency;
    for algorithm in &args.algorithms {
        for &keys in &args.keys {
            for &descriptors in &args.descriptors {
                let flush = |connection: &mut redis::Connection| {
                    redis::cmd("FLUSHALL")
                        .exec(connection)
                        .map_err(|e| format!("FLUSHALL: {e}"))
                };
                flush(&mut connection)?;
                check_call(&mut connection, command, &target, algorithm, descriptors)?;
                let value = if keys > 1 { "__rand_int__" } else { "0" };
                let mut benchmark = vec![
                    "-p".to_string(),
                    redis.port().to_string(),
                    "-c".to_string(),
                    in_flight.to_string(),
                ];
                if keys > 1 {
                    benchmark.extend(["-r".to_string(), keys.to_string()]);
                }
                benchmark.push("--csv".to_string());
                let mut call = vec![command.to_string(), target.clone()];
                call.extend(call_arguments(algorithm, descriptors, value));
                flush(&mut connection)?;
                // A short run (also the warmup) sizes the measured one to about --duration.
                let probe = redis_benchmark(&benchmark, PROBE_REQUESTS, &call)?;
                let requests =
                    ((probe.rps * args.duration.as_secs_f64()) as u64).max(PROBE_REQUESTS);
                let mut best: Option<(Csv, u64)> = None;
                for _ in 0..args.repeat {
                    flush(&mut connection)?;
                    let before = cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
                    let csv = redis_benchmark(&benchmark, requests, &call)?;
                    let after = cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
                    if best.as_ref().is_none_or(|(kept, _)| csv.rps > kept.rps) {
                        best = Some((csv, after.saturating_sub(before)));
                    }
                }
                let (csv, cpu) = best.ok_or("no attempt")?;
                let line = json!({
                    "tags": {
                        "kind": "redis_ceiling",
                        "store": "redis",
                        "algorithm": algorithm,
                        "command": command,
                    },
                    "keys": keys,
                    "descriptors": descriptors,
                    "in_flight": in_flight,
                    "requests": requests,
                    "throughput_rps": csv.rps,
                    "latency_us": {"p50": csv.p50_ms * 1000.0, "p99": csv.p99_ms * 1000.0},
                    "store_cpu_us_per_request": cpu as f64 / requests as f64,
                })
                .to_string();
                bench.record(&line)?;
                log(format!(
                    "redis ceiling {algorithm} keys={keys} desc={descriptors}: {:.0} req/s, redis {:.2} µs/req",
                    csv.rps,
                    cpu as f64 / requests as f64
                ));
            }
        }
    }
    Ok(())
}

/// One call as redis-benchmark will send it, through the client library: its reply must be the
/// call's clock and the request's verdicts (3 integers per check), not an error.
fn check_call(
    connection: &mut redis::Connection,
    command: &str,
    target: &str,
    algorithm: &str,
    descriptors: u32,
) -> Result<(), String> {
    let mut call = redis::cmd(command);
    call.arg(target)
        .arg(call_arguments(algorithm, descriptors, "000000000000"));
    let reply: Value = call
        .query(connection)
        .map_err(|e| format!("{command} of the Redis ceiling ({algorithm}): {e}"))?;
    let verdicts_ok = match &reply {
        Value::Array(values) => {
            values.len() == 1 + 3 * descriptors as usize
                && values.iter().all(|v| matches!(v, Value::Int(_)))
        }
        _ => false,
    };
    if verdicts_ok {
        Ok(())
    } else {
        Err(format!(
            "the request script answered the Redis ceiling's call ({algorithm}, {descriptors} \
             descriptors) with {reply:?}, not a verdict per check"
        ))
    }
}

/// Runs `redis-benchmark <options> -n <requests> <call>` to its end.
fn redis_benchmark(options: &[String], requests: u64, call: &[String]) -> Result<Csv, String> {
    let output = Command::new("redis-benchmark")
        .args(options)
        .args(["-n", &requests.to_string()])
        .args(call)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            format!(
                "redis-benchmark: {e} (the Redis ceiling needs it: apt-get install redis-tools)"
            )
        })?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    if !output.status.success() {
        return Err(format!(
            "redis-benchmark ended with {}: {}{}",
            output.status,
            stdout,
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    parse_csv(&stdout).ok_or_else(|| format!("redis-benchmark printed no CSV line: {stdout}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_of_three_checks_has_three_keys_one_rate_and_three_specs() {
        assert_eq!(
            call_arguments("gcra", 3, "__rand_int__"),
            [
                "3",
                "rl1:{0000000000000000}:gcra:1000000:bench:gcra=d0-__rand_int__",
                "rl1:{0000000000000001}:gcra:1000000:bench:gcra=d1-__rand_int__",
                "rl1:{0000000000000002}:gcra:1000000:bench:gcra=d2-__rand_int__",
                "1",
                "4",
                "1000000",
                "1000000",
                "1000000",
                "1",
                "1:1:0:3",
                "+1",
                "+1",
            ]
        );
        let one = call_arguments("sliding_window_log", 1, "0");
        assert_eq!(one[2..], ["1", "1", "1000", "1000000", "1000", "1000", "1"]);
    }

    #[test]
    fn the_csv_line_is_read_from_its_end() {
        let csv = "\"test\",\"rps\",\"avg_latency_ms\",\"min_latency_ms\",\"p50_latency_ms\",\"p95_latency_ms\",\"p99_latency_ms\",\"max_latency_ms\"\n\
                   \"FCALL f 1 k,x 1\",\"41234.50\",\"0.700\",\"0.100\",\"0.650\",\"1.100\",\"1.500\",\"3.000\"\n";
        let parsed = parse_csv(csv).expect("a CSV line");
        assert_eq!(parsed.rps, 41234.5);
        assert_eq!(parsed.p50_ms, 0.65);
        assert_eq!(parsed.p99_ms, 1.5);
    }
}
