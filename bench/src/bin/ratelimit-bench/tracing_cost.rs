//! `ratelimit-bench tracing-cost`: what tracing costs, as ratelimitd's CPU per decision (memory
//! store, gcra, 1 000 000 per second, never reached), in four variants:
//!
//! - `no-otel`: a build without the `otel` cargo feature (no span code at all), `--no-otel-bin`;
//! - `off`: the default build (the `ratelimitd` beside this executable), tracing off;
//! - `on-0.01`: `--tracing --tracing-sampling-ratio 0.01`;
//! - `on-1`: `--tracing --tracing-sampling-ratio 1`.
//!
//! The traced variants export over OTLP HTTP/protobuf to a sink in this process that answers 200
//! to every export and keeps nothing (testkit's `OtlpCollector::http_sink`). Each round runs the
//! four variants in turn, starting one further along each round (so they meet the same phases of
//! a shared machine, and none always runs first); the table gives each variant's median over the
//! rounds. The server is pinned to CPU 0 and the load generator (this executable's `load` mode, a
//! child process) to CPU 1, as the memory rows of `ratelimit-bench matrix`.
//!
//! stdout: a markdown table (header: date, commit, machine, command); progress goes to stderr.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use testkit::otlp_collector::OtlpCollector;

use crate::load_child::{beside_this, LoadRun};
use crate::run_header::{command_line, commit, machine, today};
use crate::servers;

/// The variants, in the table's order.
const VARIANTS: [&str; 4] = ["no-otel", "off", "on-0.01", "on-1"];

#[derive(Args, Clone, Debug)]
pub struct TracingCostArgs {
    /// Rounds of the four variants.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Measured time per run.
    #[arg(long, default_value = "4s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Load sent before measuring, per run.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// HTTP/2 connections of the load.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// Key cardinality.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: u64,
    /// Descriptors per request.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub descriptors: u32,
    /// ratelimitd built without the `otel` feature (default: `ratelimitd-no-otel` beside this
    /// executable; `cargo build --release --no-default-features --bin ratelimitd`, copied there,
    /// then the default build again).
    #[arg(long)]
    pub no_otel_bin: Option<PathBuf>,
}

/// One variant's runs: server CPU µs per request and requests per second, round after round.
#[derive(Default)]
struct Runs {
    cpu: Vec<f64>,
    rps: Vec<f64>,
}

pub fn run(args: &TracingCostArgs) -> Result<(), String> {
    let no_otel = match &args.no_otel_bin {
        Some(path) => path.clone(),
        None => beside_this("ratelimitd-no-otel")?,
    };
    if !no_otel.is_file() {
        return Err(format!(
            "no ratelimitd without the otel feature at {} (cargo build --release \
             --no-default-features --bin ratelimitd, copy target/release/ratelimitd there, then \
             cargo build --release --workspace --bins again; or name one with --no-otel-bin)",
            no_otel.display()
        ));
    }
    let pinned = testkit::cpu::available() >= 2;
    let (server_cpus, load_cpus) = if pinned {
        (vec![0], vec![1])
    } else {
        (Vec::new(), Vec::new())
    };
    let work = std::env::temp_dir().join(format!("ratelimitd-tracing-cost.{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let config = work.join("bench.yaml");
    std::fs::write(&config, servers::bench_config(&["gcra"]))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let config = config.to_string_lossy().into_owned();

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let sink = runtime.block_on(OtlpCollector::http_sink());
    let endpoint = format!("{}/v1/traces", sink.url());
    eprintln!("tracing-cost: OTLP sink at {endpoint}");

    let mut runs: Vec<Runs> = VARIANTS.iter().map(|_| Runs::default()).collect();
    for round in 1..=args.rounds as usize {
        for step in 0..VARIANTS.len() {
            let at = (round + step) % VARIANTS.len();
            let variant = VARIANTS[at];
            let mut serve = vec!["--config".to_string(), config.clone()];
            let ratio = match variant {
                "on-0.01" => Some("0.01"),
                "on-1" => Some("1"),
                _ => None,
            };
            if let Some(ratio) = ratio {
                serve.extend(
                    ["--tracing", "--tracing-endpoint", &endpoint]
                        .map(String::from)
                        .into_iter()
                        .chain(["--tracing-sampling-ratio".to_string(), ratio.to_string()]),
                );
            }
            let binary = (variant == "no-otel").then_some(no_otel.as_path());
            let server = servers::ratelimitd(binary, &serve, &server_cpus);
            let measured = LoadRun {
                addr: server.grpc_addr().to_string(),
                connections: args.connections,
                concurrency: args.concurrency,
                key: "gcra".into(),
                keys: args.keys,
                descriptors: args.descriptors,
                duration: args.duration,
                warmup: args.warmup,
                rate: None,
                server_pid: Some(server.pid()),
                store_pids: Vec::new(),
                tags: Vec::new(),
                cpus: load_cpus.clone(),
            }
            .run()?;
            drop(server);
            let cpu = measured
                .num("server_cpu_us_per_request")
                .ok_or("the load measured no server CPU")?;
            let rps = measured.num("throughput_rps").unwrap_or(0.0);
            eprintln!("tracing-cost: round {round} {variant}: {cpu:.2} µs/req, {rps:.0} req/s");
            runs[at].cpu.push(cpu);
            runs[at].rps.push(rps);
        }
    }
    drop(sink);

    println!(
        "**{} · ratelimitd {} · {} · `{}`**\n",
        today(),
        commit(),
        machine(),
        command_line()
    );
    println!(
        "| variant | server CPU µs/req (median of {}) | ÷ no-otel | req/s (median) | every round, µs/req |",
        args.rounds
    );
    println!("|---|---:|---:|---:|---|");
    let base = median(&runs[0].cpu);
    for (variant, runs) in VARIANTS.iter().zip(&runs) {
        let cpu = median(&runs.cpu);
        let every: Vec<String> = runs.cpu.iter().map(|c| format!("{c:.2}")).collect();
        println!(
            "| {variant} | {cpu:.2} | {:.3} | {:.0} | {} |",
            cpu / base,
            median(&runs.rps),
            every.join(" ")
        );
    }
    Ok(())
}

/// The median of `values` (the mean of the middle two of an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    match sorted.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => sorted[n / 2],
        n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0,
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
