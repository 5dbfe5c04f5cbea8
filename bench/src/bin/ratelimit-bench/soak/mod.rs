//! Soak: a mixed load on two ratelimitd (the binary beside this one), one on the memory store and
//! one on a redis-server of its own (testkit), for `--duration`, while the configuration is
//! rewritten every `--reload-every` and redis-server is restarted twice (at 1/3 and 2/3 of the run:
//! `SHUTDOWN SAVE` and a start from the dump, so counters survive and over-admission stays
//! checkable).
//!
//! The load, per server, from this tool's load generator in processes of their own, open loop at
//! `--rate` each: requests of all five algorithms at once over 100 counters each (about 15
//! requests per counter and second at the default rate, around the limits of 12-14, so some are
//! denied), and single-descriptor requests on one hot counter. Beside it, one sequential client
//! per server and checked rule on the HTTP `/json` endpoint, at `--check-rate` requests per
//! second (well above every checked limit, so each window reaches its limit), counts the OK
//! answers per window against the limit (see check.rs): zero over-admission is the bar, and the
//! command fails otherwise.
//!
//! Reported, per server: RSS and open descriptors idle, at the start of the load, at its end, their
//! peaks and after it; configuration reloads; each load's counts and latency; and the check.
//! Markdown on stdout, progress on stderr.

mod check;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::Args;
use hyper::Method;
use testkit::ratelimitd::Ratelimitd;
use testkit::redis_server::RedisServer;

use self::check::{CheckResult, HttpConnection, Kind, Rule, Verdict};
use crate::load_process::{LoadProcess, LoadReport};
use crate::procstat::{open_descriptors, vm_rss_kib};
use crate::run_header::header;
use ratelimitd::limiter::Algorithm;

#[derive(Args, Clone, Debug)]
pub struct SoakArgs {
    /// How long the load runs.
    #[arg(long, default_value = "600s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// How often the configuration is rewritten (alternating between two variants).
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub reload_every: Duration,
    /// Requests per second of each load generator (two per server, open loop).
    #[arg(long, default_value_t = 1500)]
    pub rate: u32,
    /// Requests per second of each checker (one per server and checked rule, on a fixed
    /// schedule); above the checked limits, so every window reaches its limit.
    #[arg(long, default_value_t = 200)]
    pub check_rate: u32,
}

/// The rules the checker counts against; they never change across reloads.
const CHECKED: [Rule; 3] = [
    Rule {
        key: "check_fw",
        kind: Kind::FixedWindow,
        limit: 10,
        window_s: 1,
    },
    Rule {
        key: "check_fw_minute",
        kind: Kind::FixedWindow,
        limit: 50,
        window_s: 60,
    },
    Rule {
        key: "check_swl",
        kind: Kind::SlidingWindowLog,
        limit: 20,
        window_s: 2,
    },
];

/// RSS (kB) and open descriptors of a process at one instant.
#[derive(Clone, Copy, Debug, Default)]
struct Sample {
    rss_kib: u64,
    descriptors: u64,
}

fn sample(pid: u32) -> Sample {
    Sample {
        rss_kib: vm_rss_kib(pid).unwrap_or(0),
        descriptors: open_descriptors(pid).unwrap_or(0),
    }
}

/// One ratelimitd under load and what was sampled of it.
struct Server {
    name: &'static str,
    process: Ratelimitd,
    idle: Sample,
    start: Sample,
    end: Sample,
    after: Sample,
    peak_rss_kib: u64,
    peak_descriptors: u64,
}

pub fn run(args: &SoakArgs) -> Result<(), String> {
    if args.duration < Duration::from_secs(10) {
        return Err("--duration must be at least 10s".into());
    }
    if args.reload_every.is_zero() {
        return Err("--reload-every must be more than 0s".into());
    }
    if args.rate == 0 {
        return Err("--rate must be at least 1".into());
    }
    if args.check_rate == 0 {
        return Err("--check-rate must be at least 1".into());
    }
    let mut redis_server = RedisServer::start();
    let mut redis = redis_server.connection();
    println!("{}\n", header("Soak", &mut redis));
    drop(redis);
    let config = redis_server.dir().join("config");
    std::fs::create_dir(&config).map_err(|e| format!("{}: {e}", config.display()))?;
    write_config(&config, 0)?;
    let config_arg = config.to_string_lossy().into_owned();
    let common = ["--config", &config_arg, "--reload-interval", "1s"];
    let url = redis_server.url();
    let mut servers: Vec<Server> = [
        ("memory", Ratelimitd::start(&common)),
        (
            "redis",
            Ratelimitd::start(&[&common[..], &["--redis-url", &url]].concat()),
        ),
    ]
    .into_iter()
    .map(|(name, process)| Server {
        name,
        process,
        idle: Sample::default(),
        start: Sample::default(),
        end: Sample::default(),
        after: Sample::default(),
        peak_rss_kib: 0,
        peak_descriptors: 0,
    })
    .collect();
    for server in &servers {
        eprintln!(
            "[soak] {}: grpc {} http {} (pid {})",
            server.name,
            server.process.grpc_addr(),
            server.process.http_addr(),
            server.process.pid()
        );
    }
    eprintln!("[soak] redis-server on port {}", redis_server.port());

    thread::sleep(Duration::from_secs(1));
    for server in &mut servers {
        server.idle = sample(server.process.pid());
    }

    let seconds = humantime::format_duration(args.duration).to_string();
    let mut loads = Vec::new();
    for server in &servers {
        let addr = server.process.grpc_addr().to_string();
        let common = |connections: &str, concurrency: &str, keys: &str, label: String| {
            [
                "--addr",
                &addr,
                "--domain",
                "soak",
                "--rate",
                &args.rate.to_string(),
                "--connections",
                connections,
                "--concurrency",
                concurrency,
                "--keys",
                keys,
                "--warmup",
                "0s",
                "--duration",
                &seconds,
                "--timeout",
                "2s",
                "--label",
                &label,
            ]
            .map(str::to_string)
            .to_vec()
        };
        let mut mixed = common("2", "32", "100", format!("{} mixed", server.name));
        for algorithm in Algorithm::ALL.map(Algorithm::as_str) {
            mixed.extend(["--descriptor".to_string(), format!("{algorithm}=k{{r}}")]);
        }
        let mut hot = common("1", "16", "1", format!("{} hot", server.name));
        hot.extend(["--key".to_string(), "hot".to_string()]);
        loads.push((server.name, "mixed", LoadProcess::start("mixed", &mixed)?));
        loads.push((server.name, "hot", LoadProcess::start("hot", &hot)?));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let deadline = Instant::now() + args.duration;
    let checks: Vec<_> = servers
        .iter()
        .flat_map(|server| {
            let http = server.process.http_addr();
            let stop = &stop;
            CHECKED.iter().map(move |rule| {
                check::spawn(
                    server.name,
                    http,
                    *rule,
                    args.check_rate,
                    deadline,
                    stop.clone(),
                )
            })
        })
        .collect();
    // The checkers end on an error below too, rather than outlive the servers.
    let _stop_checks = StopOnDrop(stop);

    thread::sleep(Duration::from_secs(2));
    for server in &mut servers {
        server.start = sample(server.process.pid());
        server.end = server.start;
    }
    let redis_server_start = redis_server.pid().map(sample);

    let started = Instant::now();
    let mut next_reload = started + args.reload_every;
    let restart_at = [started + args.duration / 3, started + args.duration * 2 / 3];
    let mut restarts = 0;
    let mut variant = 0;
    let mut rewrites = 0;
    while checks.iter().any(|check| !check.is_finished()) {
        let now = Instant::now();
        if now >= next_reload {
            variant = 1 - variant;
            write_config(&config, variant)?;
            rewrites += 1;
            next_reload = now + args.reload_every;
        }
        if restarts < restart_at.len() && now >= restart_at[restarts] {
            eprintln!(
                "[soak] restarting redis-server ({} of {})",
                restarts + 1,
                restart_at.len()
            );
            redis_server.shutdown_save();
            thread::sleep(Duration::from_secs(1));
            redis_server.restart();
            restarts += 1;
        }
        for server in &mut servers {
            let now = sample(server.process.pid());
            server.peak_rss_kib = server.peak_rss_kib.max(now.rss_kib);
            server.peak_descriptors = server.peak_descriptors.max(now.descriptors);
            server.end = now;
        }
        thread::sleep(Duration::from_secs(1));
    }
    let redis_server_end = redis_server.pid().map(sample);
    let checks: Vec<CheckResult> = checks
        .into_iter()
        .map(|check| check.join().map_err(|_| "a checker panicked".to_string()))
        .collect::<Result<_, _>>()?;
    let mut reports = Vec::new();
    for (server, kind, load) in loads {
        reports.push((server, kind, load.report()?));
    }
    thread::sleep(Duration::from_secs(2));
    for server in &mut servers {
        server.after = sample(server.process.pid());
    }

    println!(
        "{} at {} requests/s per load generator (two per server) and {} requests/s per checker \
         (one per server and checked rule), configuration rewritten {rewrites} times, \
         redis-server restarted {restarts} times.\n",
        seconds, args.rate, args.check_rate
    );
    print_servers(&servers)?;
    if let (Some(start), Some(end)) = (redis_server_start, redis_server_end) {
        println!(
            "\nredis-server: RSS {} kB at the start (first process), {} kB at the end (after \
             {restarts} restarts).",
            start.rss_kib, end.rss_kib
        );
    }
    println!();
    print_loads(&reports);
    println!();
    let over_admitted = print_checks(&checks);
    if over_admitted > 0 {
        return Err(format!("{over_admitted} certain over-admissions"));
    }
    Ok(())
}

/// Sets the flag when dropped.
struct StopOnDrop(Arc<AtomicBool>);

impl Drop for StopOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The rules of domain `soak`. The checked rules never change; a rewrite alternates the others
/// between two variants (limits 12 and 14, and a rule only variant 1 has). Written aside and
/// renamed, so a reload never reads half a file.
fn write_config(dir: &Path, variant: u32) -> Result<(), String> {
    let limit = if variant == 1 { 14 } else { 12 };
    let mut yaml = format!(
        "domain: soak
descriptors:
  - key: fixed_window
    rate_limit: {{unit: second, requests_per_unit: {limit}, algorithm: fixed_window}}
  - key: sliding_window_log
    rate_limit: {{unit: second, requests_per_unit: {limit}, unit_multiplier: 2, algorithm: sliding_window_log}}
  - key: sliding_window_counter
    rate_limit: {{unit: second, requests_per_unit: {limit}, algorithm: sliding_window_counter}}
  - key: token_bucket
    rate_limit: {{unit: second, requests_per_unit: {limit}, algorithm: token_bucket, burst: 20}}
  - key: gcra
    rate_limit: {{unit: second, requests_per_unit: {limit}, algorithm: gcra, burst: 5}}
  - key: hot
    rate_limit: {{unit: second, requests_per_unit: 200, algorithm: gcra}}
"
    );
    for rule in CHECKED {
        yaml.push_str(&format!(
            "  - key: {}\n    rate_limit: {{{}, algorithm: {}}}\n",
            rule.key,
            rule.rate_yaml(),
            rule.kind.name()
        ));
    }
    if variant == 1 {
        yaml.push_str(
            "  - key: extra
    value: only_in_variant_1
    rate_limit: {unit: minute, requests_per_unit: 7}
",
        );
    }
    let temporary = dir.join("soak.yaml.tmp");
    std::fs::write(&temporary, yaml).map_err(|e| format!("{}: {e}", temporary.display()))?;
    std::fs::rename(&temporary, dir.join("soak.yaml"))
        .map_err(|e| format!("{}: {e}", dir.display()))
}

/// The servers' memory, descriptors and reloads.
fn print_servers(servers: &[Server]) -> Result<(), String> {
    println!(
        "| store | RSS kB: idle / load start / load end / peak / after | open descriptors: idle / load start / load end / peak / after | reloads ok / failed |"
    );
    println!("|---|---|---|---|");
    for server in servers {
        let metrics = metrics(server.process.http_addr())?;
        let reloads = |result: &str| {
            testkit::ops_support::sample(
                &metrics,
                "ratelimitd_config_reloads_total",
                &format!("result=\"{result}\""),
            )
            .map_or("?".to_string(), |n| format!("{n}"))
        };
        println!(
            "| {} | {} / {} / {} / {} / {} | {} / {} / {} / {} / {} | {} / {} |",
            server.name,
            server.idle.rss_kib,
            server.start.rss_kib,
            server.end.rss_kib,
            server.peak_rss_kib,
            server.after.rss_kib,
            server.idle.descriptors,
            server.start.descriptors,
            server.end.descriptors,
            server.peak_descriptors,
            server.after.descriptors,
            reloads("success"),
            reloads("failure"),
        );
    }
    Ok(())
}

/// What each load generator counted.
fn print_loads(reports: &[(&str, &str, LoadReport)]) {
    println!("| store | load | requests | req/s | ok | over_limit | errors | p99 µs | max µs |");
    println!("|---|---|---:|---:|---:|---:|---|---:|---:|");
    for (server, kind, report) in reports {
        let errors = if report.errors == 0 {
            "0".to_string()
        } else {
            format!("{} ({})", report.errors, report.error_kinds_text())
        };
        println!(
            "| {server} | {kind} | {} | {:.0} | {} | {} | {errors} | {:.0} | {:.0} |",
            report.requests,
            report.throughput_rps,
            report.ok,
            report.over_limit,
            report.p99_us,
            report.max_us
        );
    }
}

/// The check's table; returns the certain over-admissions.
fn print_checks(checks: &[CheckResult]) -> u64 {
    println!(
        "Admitted against the limit, from the client side (one sequential HTTP client per server and \
         rule, paced; over-admitted: fixed windows with more OK answers than the limit, or runs of limit + 1 \
         OK answers within a sliding window; \"possible\": only if answers straddling a boundary count \
         in both windows, or within the client's timing uncertainty):\n"
    );
    println!(
        "| store | algorithm | key | limit | requests | ok | over_limit | errors | reconnects | windows (at the limit, max ok) | over-admitted: certain | possible |"
    );
    println!("|---|---|---|---|---:|---:|---:|---|---:|---|---:|---:|");
    let mut certain = 0;
    for check in checks {
        let errors = if check.errors == 0 {
            "0".to_string()
        } else {
            let kinds: Vec<String> = check
                .error_kinds
                .iter()
                .map(|(kind, n)| format!("{kind}: {n}"))
                .collect();
            format!("{} ({})", check.errors, kinds.join(", "))
        };
        let windows = match check.verdict {
            Verdict::FixedWindow(v) => {
                format!("{} ({}, {})", v.windows, v.at_limit, v.max_ok_per_window)
            }
            Verdict::SlidingWindowLog(_) => "—".to_string(),
        };
        println!(
            "| {} | {} | {} | {}/{}s | {} | {} | {} | {errors} | {} | {windows} | {} | {} |",
            check.server,
            check.rule.kind.name(),
            check.rule.key,
            check.rule.limit,
            check.rule.window_s,
            check.requests,
            check.ok,
            check.over_limit,
            check.reconnects,
            check.certain(),
            check.possible_only()
        );
        certain += check.certain();
    }
    println!(
        "\nOver-admission: {}",
        if certain == 0 {
            "none".to_string()
        } else {
            certain.to_string()
        }
    );
    certain
}

/// The `/metrics` text of the HTTP port at `addr`.
fn metrics(addr: SocketAddr) -> Result<String, String> {
    let fail = |why: String| format!("GET http://{addr}/metrics: {why}");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| fail(e.to_string()))?;
    runtime.block_on(async {
        let mut connection = HttpConnection::open(addr).await.map_err(fail)?;
        match connection
            .request(Method::GET, "/metrics", Bytes::new())
            .await
        {
            Ok((200, body)) => Ok(String::from_utf8_lossy(&body).into_owned()),
            Ok((status, _)) => Err(fail(format!("status {status}"))),
            Err(_) => Err(fail("no answer".into())),
        }
    })
}
