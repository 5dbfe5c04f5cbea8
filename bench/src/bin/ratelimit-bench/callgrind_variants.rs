//! What tracing costs, in instructions: ratelimitd under callgrind ([`crate::callgrind`]),
//! memory store, a rule `gcra` of domain `bench`, this tool's load (closed loop), in variants:
//!
//! - `no-otel`: a build without the `otel` cargo feature (no span code at all), the binary
//!   `--no-otel-ratelimitd` names;
//! - `off`: the default build, tracing off;
//! - `on-<ratio>` (`on-0.01`, `on-1`): `--tracing --tracing-sampling-ratio <ratio>`, exporting
//!   OTLP HTTP/protobuf to a collector in this process (testkit's), which answers 200.
//!
//! Each run: ratelimitd starts under `valgrind --tool=callgrind --instr-atstart=no`, the warm-up
//! requests are sent, counting is switched on, the measured requests are sent, and ratelimitd is
//! stopped with SIGTERM (so the traced variants' last export is counted too). Instructions per
//! decision = every thread's instructions from the switch to the exit / requests answered;
//! "handler" is the inclusive count of the ShouldRateLimit handler's future (not h2, prost or the
//! exporter). Arguments after `--` go to every variant's `ratelimitd serve` (`-- --top-max-rules
//! 100`). Markdown on stdout (the median of `--repeat` runs), progress on stderr.

use std::path::PathBuf;

use clap::Args;
use testkit::otlp_collector::OtlpCollector;

use crate::callgrind::{
    gcra_load, per_decision, require_tools, Attribution, Profiled, GCRA_CONFIG,
};
use crate::run_header::callgrind_header;

#[derive(Args, Clone, Debug)]
pub struct CallgrindArgs {
    /// Runs of each variant (the table shows their median, and every run).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// Measured requests per run.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub requests: u64,
    /// Requests sent before counting starts.
    #[arg(long, default_value_t = 3_000)]
    pub warmup_requests: u64,
    /// HTTP/2 connections of the load.
    #[arg(long, default_value_t = 2)]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Key cardinality of the load.
    #[arg(long, default_value_t = 100_000)]
    pub keys: u64,
    /// Descriptors per request.
    #[arg(long, default_value_t = 1)]
    pub descriptors: u32,
    /// The variants, in this order (the first is the one the others are divided by):
    /// `no-otel`, `off`, `on-<sampling ratio>`.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "no-otel,off,on-0.01,on-1"
    )]
    pub variants: Vec<String>,
    /// The default build of ratelimitd (default: the one beside this executable).
    #[arg(long)]
    pub ratelimitd: Option<PathBuf>,
    /// The build without the `otel` feature (default: `ratelimitd-no-otel` beside this
    /// executable; `cargo build --release --no-default-features --bin ratelimitd` makes it as
    /// target/release/ratelimitd, to be copied aside before the default build).
    #[arg(long)]
    pub no_otel_ratelimitd: Option<PathBuf>,
    /// Arguments for `ratelimitd serve` in every variant (after `--`).
    #[arg(last = true)]
    pub server_args: Vec<String>,
}

/// The ShouldRateLimit handler's future, as callgrind_annotate names it.
const HANDLER: &str = "RateLimitService>::should_rate_limit::{{closure}}";

/// A variant: the binary and the arguments it adds.
struct Variant {
    name: String,
    binary: PathBuf,
    args: Vec<String>,
}

pub fn run(args: &CallgrindArgs) -> Result<(), String> {
    require_tools()?;
    let beside = |name: &str| -> Result<PathBuf, String> {
        let this = std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))?;
        Ok(this.with_file_name(name))
    };
    let default_build = match &args.ratelimitd {
        Some(path) => path.clone(),
        None => testkit::ratelimitd::bin().to_path_buf(),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the OTLP collector: {e}"))?;
    let collector = runtime.block_on(OtlpCollector::http());
    let endpoint = format!("{}/v1/traces", collector.url());
    eprintln!("[callgrind] OTLP collector at {endpoint}");

    let mut variants = Vec::new();
    for name in &args.variants {
        let (binary, extra) = match name.as_str() {
            "no-otel" => {
                let path = match &args.no_otel_ratelimitd {
                    Some(path) => path.clone(),
                    None => beside("ratelimitd-no-otel")?,
                };
                if !path.is_file() {
                    return Err(format!(
                        "no build without the otel feature at {}: `cargo build --release \
                         --no-default-features --bin ratelimitd`, copy target/release/ratelimitd \
                         there, then build the default one again (or pass --no-otel-ratelimitd)",
                        path.display()
                    ));
                }
                (path, vec![])
            }
            "off" => (default_build.clone(), vec![]),
            other => {
                let ratio = other
                    .strip_prefix("on-")
                    .filter(|ratio| ratio.parse::<f64>().is_ok_and(|r| (0.0..=1.0).contains(&r)))
                    .ok_or_else(|| {
                        format!("unknown variant `{other}` (no-otel, off, on-<ratio 0 to 1>)")
                    })?;
                let extra = ["--tracing", "--tracing-endpoint", &endpoint]
                    .into_iter()
                    .chain(["--tracing-sampling-ratio", ratio])
                    .map(String::from)
                    .collect();
                (default_build.clone(), extra)
            }
        };
        variants.push(Variant {
            name: name.clone(),
            binary,
            args: extra,
        });
    }

    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let config = dir.path().join("bench.yaml");
    std::fs::write(&config, GCRA_CONFIG).map_err(|e| format!("{}: {e}", config.display()))?;
    // The load's own default per-call timeout.
    let load = gcra_load(
        args.connections,
        args.concurrency,
        args.keys,
        args.descriptors,
        "10s",
    );

    // (instructions, handler) per decision of every run, by variant.
    let mut runs: Vec<Vec<(f64, f64)>> = vec![Vec::new(); variants.len()];
    for n in 1..=args.repeat {
        for (variant, results) in variants.iter().zip(&mut runs) {
            let mut serve = vec!["--config".to_string(), config.display().to_string()];
            serve.extend(variant.args.iter().cloned());
            serve.extend(args.server_args.iter().cloned());
            let server = Profiled::ratelimitd(&variant.binary, &serve)?;
            let measured = per_decision(
                server,
                &load,
                args.warmup_requests,
                args.requests,
                Attribution::Inclusive,
            )?;
            let (total, handler) = (measured.total(), measured.inclusive_max_containing(HANDLER));
            eprintln!(
                "[callgrind] run {n} {}: {total:.0} instructions per decision, handler {handler:.0}",
                variant.name
            );
            results.push((total, handler));
        }
    }
    drop(collector);

    println!("{}\n", callgrind_header());
    println!(
        "| variant | instructions per decision (median of {}) | ÷ {} | handler per decision | every run |",
        args.repeat, variants[0].name
    );
    println!("|---|---:|---:|---:|---|");
    let base = median(runs[0].iter().map(|run| run.0).collect());
    for (variant, results) in variants.iter().zip(&runs) {
        let total = median(results.iter().map(|run| run.0).collect());
        let handler = median(results.iter().map(|run| run.1).collect());
        let every: Vec<String> = results.iter().map(|run| format!("{:.0}", run.0)).collect();
        println!(
            "| {} | {total:.0} | {:.4} | {handler:.0} | {} |",
            variant.name,
            total / base,
            every.join(" ")
        );
    }
    Ok(())
}

/// The middle value (the mean of the two middle ones for an even count).
fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::median;

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
        assert!(median(vec![]).is_nan());
    }
}
