//! One hot key decided by several ratelimitd replicas (the binary beside this one): exact and
//! leased consistency on one redis-server of its own (testkit), beside the same replicas each on
//! its own memory store, in one run.
//!
//! For each algorithm and each load (`under`: the replicas together offer half the limit; `10x`:
//! ten times it), `--replicas` replicas (`--threads 1`) each take `--rate` requests per second,
//! open loop, from a load generator of their own (this tool's load in a process of its own: 1
//! connection, 16 in flight, one descriptor, one key), for `--duration` after `--warmup`. The
//! limit is per second. Reported per cell:
//!
//! - decisions/s: every replica's answered requests per second, summed;
//! - admitted/s: the OK answers per second, summed; `vs exact` is this over exact's, same load;
//! - calls/dec: script calls (`INFO commandstats` FCALL + EVALSHA, reset before each cell, so the
//!   warmup counts too) per request sent (warmup included);
//! - redis µs/dec: redis-server CPU (utime + stime over the cell) per request sent;
//! - ratelimitd µs/dec: the replicas' CPU per request (each measured by its load generator), mean;
//!   `vs memory` is this over the memory store's, same load.
//!
//! Markdown on stdout, progress on stderr.

use clap::Args;
use ratelimitd::limiter::Algorithm;
use testkit::ratelimitd::Ratelimitd;
use testkit::redis_server::RedisServer;

use crate::load_process::{LoadProcess, LoadReport};
use crate::procstat::cpu_us;
use crate::run_header::header;

#[derive(Args, Clone, Debug)]
pub struct LeaseArgs {
    /// ratelimitd replicas sharing the key.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..))]
    pub replicas: u64,
    /// Requests per second each replica takes.
    #[arg(long, default_value_t = 4000, value_parser = clap::value_parser!(u64).range(1..))]
    pub rate: u64,
    /// Measured duration of each cell.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: std::time::Duration,
    /// Load sent before each cell's measurement starts.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: std::time::Duration,
    /// The algorithms, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed_window,sliding_window_counter,token_bucket,gcra"
    )]
    pub algorithms: Vec<String>,
    /// The loads, in this order: `under` (the replicas together offer half the limit) and `10x`
    /// (ten times it).
    #[arg(long, value_delimiter = ',', default_value = "under,10x")]
    pub loads: Vec<String>,
}

/// The stores of a cell, in the table's order.
const MODES: [&str; 3] = ["memory", "exact", "leased"];

/// One cell's figures.
struct Row {
    algorithm: String,
    load: String,
    limit: u64,
    mode: &'static str,
    decisions_per_s: f64,
    admitted_per_s: f64,
    errors: u64,
    calls_per_decision: f64,
    redis_us_per_decision: f64,
    ratelimitd_us_per_decision: f64,
    p99_us: f64,
}

pub fn run(args: &LeaseArgs) -> Result<(), String> {
    for name in &args.algorithms {
        Algorithm::parse(name).ok_or_else(|| format!("unknown algorithm `{name}`"))?;
    }
    let total = args.replicas * args.rate;
    let limits: Vec<(String, u64)> = args
        .loads
        .iter()
        .map(|load| match load.as_str() {
            "under" => Ok((load.clone(), 2 * total)),
            "10x" => Ok((load.clone(), total / 10)),
            _ => Err(format!("unknown load `{load}` (under, 10x)")),
        })
        .collect::<Result<_, _>>()?;
    let server = RedisServer::start();
    let mut redis = server.connection();
    println!("{}\n", header("Leased consistency", &mut redis));
    let mut rows = Vec::new();
    for algorithm in &args.algorithms {
        for (load, limit) in &limits {
            for mode in MODES {
                eprintln!("[lease] {algorithm}, {load} (limit {limit}/s), {mode}");
                rows.push(cell(
                    args, &server, &mut redis, algorithm, load, *limit, mode,
                )?);
            }
        }
    }
    print_table(&rows);
    Ok(())
}

/// Runs one cell: fresh replicas of `mode` on a flushed redis-server, their loads at once.
fn cell(
    args: &LeaseArgs,
    server: &RedisServer,
    redis: &mut redis::Connection,
    algorithm: &str,
    load: &str,
    limit: u64,
    mode: &'static str,
) -> Result<Row, String> {
    let config = server.dir().join("bench.yaml");
    std::fs::write(
        &config,
        format!(
            "domain: bench\ndescriptors:\n  - key: hot\n    rate_limit: {{unit: second, requests_per_unit: {limit}, algorithm: {algorithm}}}\n"
        ),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    let config = config.to_string_lossy().into_owned();
    let url = server.url();
    let mut serve = vec!["--config", &config, "--threads", "1"];
    match mode {
        "exact" => serve.extend(["--redis-url", &url]),
        "leased" => serve.extend(["--redis-url", &url, "--consistency", "leased"]),
        _ => {}
    }
    redis::cmd("FLUSHALL")
        .exec(redis)
        .map_err(|e| format!("FLUSHALL: {e}"))?;
    let replicas: Vec<Ratelimitd> = (0..args.replicas)
        .map(|_| Ratelimitd::start(&serve))
        .collect();
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(redis)
        .map_err(|e| format!("CONFIG RESETSTAT: {e}"))?;
    let redis_pid = server.pid().ok_or("redis-server is not running")?;
    let redis_before = cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
    let duration = humantime::format_duration(args.duration).to_string();
    let warmup = humantime::format_duration(args.warmup).to_string();
    let loads = replicas
        .iter()
        .map(|replica| {
            let load: Vec<String> = [
                "--addr",
                &replica.grpc_addr().to_string(),
                "--rate",
                &args.rate.to_string(),
                "--connections",
                "1",
                "--concurrency",
                "16",
                "--threads",
                "1",
                "--key",
                "hot",
                "--keys",
                "1",
                "--duration",
                &duration,
                "--warmup",
                &warmup,
                "--server-pid",
                &replica.pid().to_string(),
            ]
            .map(str::to_string)
            .to_vec();
            LoadProcess::start(&format!("replica {}", replica.pid()), &load)
        })
        .collect::<Result<Vec<_>, _>>()?;
    let runs: Vec<LoadReport> = loads
        .into_iter()
        .map(LoadProcess::report)
        .collect::<Result<_, _>>()?;
    let redis_after = cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
    let calls = server.script_calls();
    drop(replicas);

    let sent: u64 = runs.iter().map(|r| r.requests + r.warmup_requests).sum();
    let sent = sent.max(1) as f64;
    let per_second = |count: fn(&LoadReport) -> u64| -> f64 {
        runs.iter()
            .map(|r| count(r) as f64 / r.elapsed_s.max(1e-9))
            .sum()
    };
    let server_cpu: Vec<f64> = runs
        .iter()
        .map(|r| {
            r.server_cpu_us_per_request
                .ok_or("no server CPU per request")
        })
        .collect::<Result<_, _>>()?;
    Ok(Row {
        algorithm: algorithm.to_string(),
        load: load.to_string(),
        limit,
        mode,
        decisions_per_s: per_second(|r| r.requests),
        admitted_per_s: per_second(|r| r.ok),
        errors: runs.iter().map(|r| r.errors).sum(),
        calls_per_decision: calls as f64 / sent,
        redis_us_per_decision: redis_after.saturating_sub(redis_before) as f64 / sent,
        ratelimitd_us_per_decision: server_cpu.iter().sum::<f64>() / server_cpu.len() as f64,
        p99_us: runs.iter().map(|r| r.p99_us).fold(0.0, f64::max),
    })
}

fn print_table(rows: &[Row]) {
    println!(
        "| algorithm | load | limit/s | store | decisions/s | admitted/s | vs exact | calls/dec \
         | redis µs/dec | ratelimitd µs/dec | vs memory | p99 ms | errors |"
    );
    println!("|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    let same_cell = |row: &Row, mode: &str| {
        rows.iter()
            .find(|r| r.algorithm == row.algorithm && r.load == row.load && r.mode == mode)
    };
    for row in rows {
        let exact = same_cell(row, "exact").map_or(f64::NAN, |r| r.admitted_per_s);
        let memory = same_cell(row, "memory").map_or(f64::NAN, |r| r.ratelimitd_us_per_decision);
        let (calls, redis) = if row.mode == "memory" {
            ("—".to_string(), "—".to_string())
        } else {
            (
                format!("{:.4}", row.calls_per_decision),
                format!("{:.2}", row.redis_us_per_decision),
            )
        };
        println!(
            "| {} | {} | {} | {} | {:.0} | {:.0} | {:.3} | {calls} | {redis} | {:.1} | {:.2} | {:.2} | {} |",
            row.algorithm,
            row.load,
            row.limit,
            row.mode,
            row.decisions_per_s,
            row.admitted_per_s,
            row.admitted_per_s / exact.max(1e-9),
            row.ratelimitd_us_per_decision,
            row.ratelimitd_us_per_decision / memory.max(1e-9),
            row.p99_us / 1000.0,
            row.errors
        );
    }
}
