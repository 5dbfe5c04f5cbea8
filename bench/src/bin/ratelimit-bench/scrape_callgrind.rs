//! What one scrape of `/metrics` costs, in instructions: ratelimitd under callgrind
//! ([`crate::callgrind`]) with `--rules` rules configured (each a series of the five per-rule
//! families: 5000, the default `--metrics-max-rule-series`, shows them all), counting on only
//! while `--scrapes` scrapes are made one after the other (after one uncounted), each an HTTP/1.1
//! GET on a connection of its own. Instructions per scrape = every thread's instructions over that
//! span / scrapes (the HTTP server's share included). Markdown on stdout.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;

use crate::callgrind::{instrument, require_tools, Attribution, Profiled};
use crate::run_header::callgrind_header;

#[derive(Args, Clone, Debug)]
pub struct ScrapeCallgrindArgs {
    /// Rules configured, one series of each per-rule family each.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub rules: u32,
    /// Scrapes counted.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub scrapes: u64,
    /// The ratelimitd binary (default: the one beside this executable).
    #[arg(long)]
    pub ratelimitd: Option<PathBuf>,
    /// A file to keep the last scrape's text in.
    #[arg(long)]
    pub save: Option<PathBuf>,
}

pub fn run(args: &ScrapeCallgrindArgs) -> Result<(), String> {
    require_tools()?;
    let binary = match &args.ratelimitd {
        Some(path) => path.clone(),
        None => testkit::ratelimitd::bin().to_path_buf(),
    };
    let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
    let config = dir.path().join("rules.yaml");
    std::fs::write(&config, configuration(args.rules))
        .map_err(|e| format!("{}: {e}", config.display()))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("a runtime for the scrapes: {e}"))?;

    eprintln!(
        "[scrape-callgrind] ratelimitd under callgrind, {} rules",
        args.rules
    );
    let server = Profiled::ratelimitd(&binary, &["--config".into(), config.display().to_string()])?;
    let scrape = |addr: SocketAddr| -> Result<String, String> {
        let (status, body) = runtime.block_on(testkit::ratelimitd::http_get(addr, "/metrics"));
        if status == 200 {
            Ok(body)
        } else {
            Err(format!("GET /metrics answered {status}"))
        }
    };
    let http = server.http_addr().ok_or("ratelimitd said no HTTP port")?;
    let mut text = scrape(http)?;
    instrument(server.pid(), true)?;
    for _ in 0..args.scrapes {
        text = scrape(http)?;
    }
    instrument(server.pid(), false)?;
    let counts = server.stop(Attribution::Inclusive)?;
    if let Some(path) = &args.save {
        std::fs::write(path, &text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let series = text
        .lines()
        .filter(|line| line.starts_with("ratelimitd_total_hits_total{"))
        .count();
    println!("{}\n", callgrind_header());
    println!("| rules | scrapes | bytes of a scrape | rule series | instructions per scrape |");
    println!("|---:|---:|---:|---:|---:|");
    println!(
        "| {} | {} | {} | {series} | {} |",
        args.rules,
        args.scrapes,
        text.len(),
        counts.total / args.scrapes
    );
    Ok(())
}

/// Domain `scrape`: keys `k1` to `k<rules>`, 100 per second each.
fn configuration(rules: u32) -> String {
    let mut yaml = String::from("domain: scrape\ndescriptors:\n");
    for i in 1..=rules {
        yaml.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: second, requests_per_unit: 100}}\n"
        ));
    }
    yaml
}
