//! `ratelimit-bench matrix`: ratelimitd's benchmark matrix and its ceilings, in one run on this
//! machine; the markdown tables on stdout, progress on stderr.
//!
//! Starts what it needs: a redis-server of its own (testkit); ratelimitd (the binary beside this
//! one) with the bench configuration (see [`crate::servers::bench_config`]) on the memory store,
//! then on Redis; `rls-ceiling` (beside this one too). Then it runs
//!
//! 1. the matrix store (memory, redis) x algorithm (5) x keys (1 hot, 100000) x descriptors
//!    (1, 3);
//! 2. after the matrix, beside its single-server Redis runs, Redis Cluster: for each M of
//!    `--cluster-masters`, M cluster-enabled redis-servers (testkit's `RedisCluster`, no
//!    replicas), ratelimitd `--redis-cluster` with `--redis-threads` threads, and the matrix load
//!    for gcra and fixed_window (those of `--algorithms`), 100000 keys, 1 and 3 descriptors
//!    (those of `--descriptors`); per cell, the CPU of every master summed and each master's
//!    script calls (EVALSHA and FCALL, `INFO commandstats`, zeroed with `CONFIG RESETSTAT`
//!    before each attempt, so counted over the warmup too: the report divides them by every
//!    request sent, warmup included);
//! 3. the ceilings: (a) transport: rls-ceiling, a default tonic server answering a constant OK,
//!    under the same load; (b) Redis: `redis-benchmark` calling the store's request script as the
//!    store calls it (`FCALL` where the server has Functions, else `EVALSHA`), same keys and
//!    arguments, at the same concurrency, without pipelining ([`redis_ceiling`]);
//! 4. open-loop runs at half of the peak throughput (memory, redis; gcra, 100k keys,
//!    1 descriptor) and the transport ceiling at the memory store's rate (CPU per request at
//!    equal load), and on Redis the time of one request on an idle server (1 connection, 1 RPC in
//!    flight; 1 and 3 descriptors) and, for comparison, the matrix load again with redis-server
//!    on CPU 1 alone and ratelimitd with the load generator on CPU 0 (gcra, 100k keys, 1 and 3
//!    descriptors);
//! 5. the memory store's footprint: RSS growth per key over `--footprint-keys` keys, and release
//!    (`ratelimit-bench footprint`, one process per algorithm);
//!
//! and prints the tables ([`crate::report`]) with every figure and ratio.
//!
//! The load: `--connections` HTTP/2 connections x `--concurrency` RPCs in flight each (the Redis
//! ceiling runs that many redis-benchmark clients), this executable's `load` mode as a child
//! process ([`crate::load_child`]). Memory-store and transport-ceiling runs pin the server to
//! CPU 0 and the load generator to CPU 1 (with at least 2 CPUs), so server CPU per request is
//! measured without the two fighting over a core; Redis runs are not pinned (three processes),
//! and ratelimitd gets `--redis-threads` serving threads: redis-server and the load generator use
//! about one of the two CPUs, and more serving threads than free CPUs only add context switches
//! (measured on 2 CPUs: 1 thread 67-72k req/s, p99 at half peak ~1.0 ms; 2 threads 57-63k,
//! 1.2-2 ms).
//!
//! Descriptor i of a request is `<algorithm>=d<i>-<r>`, r uniform in 0..keys: with 1 key, 3
//! descriptors are 3 distinct hot counters.
//!
//! `--repeat N` runs each cell N times and keeps the least disturbed (on a machine shared with
//! other work): in closed loop the attempt with the highest throughput, in open loop (every
//! attempt meets the offered rate) the one with the lowest p99; the Redis ceiling likewise by
//! throughput. The descriptor counts of one row take turns within each round (1, 3, 1, 3, ...),
//! so that both meet the same phases of the machine. Every attempt is logged on stderr.

mod redis_ceiling;

use std::collections::HashMap;
use std::fmt::Display;
use std::fs::File;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use ratelimitd::limiter::Algorithm;
use testkit::redis_cluster::{ClusterOptions, RedisCluster};
use testkit::redis_server::RedisServer;

use crate::load_child::{this_executable, LoadRun, Measured};
use crate::report;
use crate::run_header::{commit, machine, redis_server, today};
use crate::servers::{self, RlsCeiling};

#[derive(Args, Clone, Debug)]
pub struct MatrixArgs {
    /// Measured time per cell.
    #[arg(long, default_value = "3s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Load sent before measuring, per cell.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// HTTP/2 connections of the load.
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// RPCs in flight per connection (the Redis ceiling: connections x concurrency clients).
    #[arg(long, default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..))]
    pub concurrency: u32,
    /// The stores of the matrix, in this order: memory, redis.
    #[arg(long, value_delimiter = ',', default_value = "memory,redis")]
    pub stores: Vec<String>,
    /// The algorithms of the matrix, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed_window,sliding_window_log,sliding_window_counter,token_bucket,gcra"
    )]
    pub algorithms: Vec<String>,
    /// Key cardinalities (1: one hot counter per descriptor).
    #[arg(long, value_delimiter = ',', default_value = "1,100000", value_parser = clap::value_parser!(u64).range(1..))]
    pub keys: Vec<u64>,
    /// Descriptors per request.
    #[arg(long, value_delimiter = ',', default_value = "1,3", value_parser = clap::value_parser!(u32).range(1..))]
    pub descriptors: Vec<u32>,
    /// Runs per cell; the least disturbed is kept (closed loop: the highest throughput; open
    /// loop: the lowest p99).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// ratelimitd's --threads in the Redis runs (one server and cluster).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub redis_threads: u32,
    /// Load ratelimitd's RLS port (`--rls-addr`, its own HTTP/2 server) instead of its gRPC
    /// port.
    #[arg(long)]
    pub rls_port: bool,
    /// Skip the ceilings (rls-ceiling, redis-benchmark).
    #[arg(long)]
    pub no_ceilings: bool,
    /// Skip the open-loop runs at half of the peak.
    #[arg(long)]
    pub no_half_peak: bool,
    /// Skip the Redis Cluster runs.
    #[arg(long)]
    pub no_cluster: bool,
    /// The masters of each Redis Cluster run.
    #[arg(long, value_delimiter = ',', default_value = "1,3", value_parser = clap::value_parser!(u32).range(1..))]
    pub cluster_masters: Vec<u32>,
    /// Keys of the memory store's footprint (0 skips it).
    #[arg(long, default_value_t = 1_000_000)]
    pub footprint_keys: u64,
    /// Where the JSON lines go (kept; default: a new file in the temporary directory, its path
    /// printed on stderr).
    #[arg(long)]
    pub results: Option<PathBuf>,
}

/// One progress line on stderr.
fn log(message: impl Display) {
    eprintln!("[bench] {message}");
}

/// Where a load generator runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pin {
    /// CPU 1, the server being on CPU 0.
    Client,
    /// CPU 0, beside the server.
    Beside,
    /// Wherever the kernel puts it.
    Free,
}

/// What backs the server of a cell: reset before each attempt, and read after it.
enum Backing<'a> {
    /// Nothing to reset (the memory store, rls-ceiling).
    Plain,
    /// One redis-server: `FLUSHALL` before each attempt.
    Redis(&'a RedisServer),
    /// A cluster: every node `FLUSHALL` and `CONFIG RESETSTAT` before each attempt, each
    /// node's script calls after it.
    Cluster(&'a RedisCluster),
}

impl Backing<'_> {
    fn reset(&self) -> Result<(), String> {
        let flush = |mut connection: redis::Connection, what: &str| {
            redis::cmd("FLUSHALL")
                .exec(&mut connection)
                .map_err(|e| format!("FLUSHALL on {what}: {e}"))
        };
        match self {
            Backing::Plain => Ok(()),
            Backing::Redis(server) => flush(server.connection(), "redis-server"),
            Backing::Cluster(cluster) => {
                for port in cluster.ports() {
                    flush(cluster.connection(port), &format!("cluster node {port}"))?;
                }
                cluster.reset_commandstats();
                Ok(())
            }
        }
    }

    /// The processes whose CPU time counts as the store's.
    fn pids(&self) -> Vec<u32> {
        match self {
            Backing::Plain => Vec::new(),
            Backing::Redis(server) => server.pid().into_iter().collect(),
            Backing::Cluster(cluster) => cluster
                .ports()
                .into_iter()
                .filter_map(|port| cluster.node(port).pid())
                .collect(),
        }
    }

    /// A cluster attempt's line with each node's script calls since [`Backing::reset`] added
    /// (`"script_calls":[...]`, in node order).
    fn annotate(&self, measured: Measured) -> Result<Measured, String> {
        let Backing::Cluster(cluster) = self else {
            return Ok(measured);
        };
        let calls: Vec<String> = cluster
            .ports()
            .into_iter()
            .map(|port| cluster.script_calls(port).to_string())
            .collect();
        let body = measured
            .line
            .strip_suffix('}')
            .ok_or_else(|| format!("not a JSON object: {}", measured.line))?;
        let line = format!("{body},\"script_calls\":[{}]}}", calls.join(","));
        let value = serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
        Ok(Measured { line, value })
    }
}

/// A row of cells: one server, one load shape, each descriptor count of `counts`.
struct Cell<'a> {
    kind: &'a str,
    store: &'a str,
    /// Empty for the ceilings, whose load sends the gcra rule's descriptors.
    algorithm: &'a str,
    keys: u64,
    counts: &'a [u32],
    pin: Pin,
    rate: Option<u64>,
    /// Connections and RPCs in flight on each.
    in_flight: (u32, u32),
    /// Tags after kind, store, algorithm and attempts.
    tags: Vec<(String, String)>,
}

/// The server a cell loads.
struct Target {
    addr: String,
    pid: u32,
}

struct Bench<'a> {
    args: &'a MatrixArgs,
    results: File,
    /// At least 2 CPUs: servers on CPU 0, load generators on CPU 1.
    pinned: bool,
}

impl Bench<'_> {
    fn cpus(&self, pin: Pin) -> Vec<usize> {
        match (self.pinned, pin) {
            (true, Pin::Client) => vec![1],
            (true, Pin::Beside) => vec![0],
            _ => Vec::new(),
        }
    }

    /// The CPUs of a pinned server.
    fn server_cpus(&self) -> Vec<usize> {
        if self.pinned {
            vec![0]
        } else {
            Vec::new()
        }
    }

    fn record(&mut self, line: &str) -> Result<(), String> {
        writeln!(self.results, "{line}").map_err(|e| format!("writing the results: {e}"))
    }

    /// Runs the load of `cell` against `target` `--repeat` times for each descriptor count, the
    /// counts taking turns within each round; records each count's kept attempt and returns
    /// them in `cell.counts`' order.
    fn measure(
        &mut self,
        cell: &Cell,
        target: &Target,
        backing: &Backing,
    ) -> Result<Vec<Measured>, String> {
        let repeat = self.args.repeat;
        let mut tags = vec![
            ("kind".to_string(), cell.kind.to_string()),
            ("store".to_string(), cell.store.to_string()),
            ("algorithm".to_string(), cell.algorithm.to_string()),
            ("attempts".to_string(), repeat.to_string()),
        ];
        tags.extend(cell.tags.iter().cloned());
        let mut best: Vec<Option<(f64, Measured)>> = vec![None; cell.counts.len()];
        for attempt in 1..=repeat {
            for (slot, &descriptors) in cell.counts.iter().enumerate() {
                backing.reset()?;
                let run = LoadRun {
                    addr: target.addr.clone(),
                    connections: cell.in_flight.0,
                    concurrency: cell.in_flight.1,
                    key: if cell.algorithm.is_empty() {
                        "gcra".to_string()
                    } else {
                        cell.algorithm.to_string()
                    },
                    keys: cell.keys,
                    descriptors,
                    duration: self.args.duration,
                    warmup: self.args.warmup,
                    rate: cell.rate,
                    server_pid: Some(target.pid),
                    store_pids: backing.pids(),
                    tags: tags.clone(),
                    cpus: self.cpus(cell.pin),
                };
                let measured = backing.annotate(run.run()?)?;
                // The least disturbed attempt: closed loop, the highest throughput; open loop
                // (every attempt meets the offered rate), the lowest p99.
                let score = match cell.rate {
                    Some(_) => -measured.p99().unwrap_or(f64::INFINITY),
                    None => measured.num("throughput_rps").unwrap_or(0.0),
                };
                if repeat > 1 {
                    log(format!(
                        "  attempt {attempt} of {repeat}, desc={descriptors}: {}",
                        measured.summary()
                    ));
                }
                if best[slot].as_ref().is_none_or(|(kept, _)| score > *kept) {
                    best[slot] = Some((score, measured));
                }
            }
        }
        let mut kept = Vec::with_capacity(best.len());
        for (_, measured) in best.into_iter().flatten() {
            self.record(&measured.line)?;
            kept.push(measured);
        }
        Ok(kept)
    }
}

/// The peak throughputs seen, by `<store>/<algorithm>/<keys>/<descriptors>` and
/// `ceiling/<descriptors>`.
type Peaks = HashMap<String, f64>;

pub fn run(args: &MatrixArgs) -> Result<(), String> {
    for store in &args.stores {
        if store != "memory" && store != "redis" {
            return Err(format!("unknown store `{store}` (memory or redis)"));
        }
    }
    for algorithm in &args.algorithms {
        Algorithm::parse(algorithm).ok_or_else(|| format!("unknown algorithm `{algorithm}`"))?;
    }
    let has = |algorithm: &str| args.algorithms.iter().any(|a| a == algorithm);
    let hundred_k = args.keys.contains(&100_000);

    let cpus = testkit::cpu::available();
    // Other work on the machine skews every figure: say so.
    let load_start = load_average();
    if load_start
        .split_whitespace()
        .next()
        .and_then(|one| one.parse::<f64>().ok())
        .is_some_and(|one| one > 0.5)
    {
        log(format!(
            "WARNING: load average {load_start} before starting: other processes will skew the figures"
        ));
    }
    let work = std::env::temp_dir().join(format!("ratelimitd-bench.{}", std::process::id()));
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let results_path = args
        .results
        .clone()
        .unwrap_or_else(|| work.join("results.jsonl"));
    let results =
        File::create(&results_path).map_err(|e| format!("{}: {e}", results_path.display()))?;
    let config = work.join("bench.yaml");
    std::fs::write(
        &config,
        servers::bench_config(&Algorithm::ALL.map(Algorithm::as_str)),
    )
    .map_err(|e| format!("{}: {e}", config.display()))?;
    let config = config.to_string_lossy().into_owned();
    let mut bench = Bench {
        args,
        results,
        pinned: cpus >= 2,
    };
    let in_flight = (args.connections, args.concurrency);
    let mut peaks = Peaks::new();

    // ---- 1. The matrix
    let redis = (args.stores.iter().any(|s| s == "redis") || !args.no_ceilings).then(|| {
        let server = RedisServer::start();
        log(format!(
            "{} on port {} (pid {})",
            redis_server(&mut server.connection()),
            server.port(),
            server.pid().unwrap_or(0)
        ));
        server
    });
    let redis_threads = args.redis_threads.to_string();
    let port_args: Vec<String> = if args.rls_port {
        vec!["--rls-addr".into(), "127.0.0.1:0".into()]
    } else {
        Vec::new()
    };
    for store in &args.stores {
        let (server, pin, backing) = match (store.as_str(), &redis) {
            ("memory", _) => (
                servers::ratelimitd(
                    None,
                    &[&["--config".into(), config.clone()][..], &port_args].concat(),
                    &bench.server_cpus(),
                ),
                Pin::Client,
                Backing::Plain,
            ),
            (_, Some(redis)) => (
                servers::ratelimitd(
                    None,
                    &[
                        "--config".into(),
                        config.clone(),
                        "--threads".into(),
                        redis_threads.clone(),
                        "--redis-url".into(),
                        redis.url(),
                    ]
                    .into_iter()
                    .chain(port_args.iter().cloned())
                    .collect::<Vec<_>>(),
                    &[],
                ),
                Pin::Free,
                Backing::Redis(redis),
            ),
            (_, None) => unreachable!("redis-server runs for the redis store"),
        };
        let addr = if args.rls_port {
            server.rls_addr()
        } else {
            server.grpc_addr()
        };
        let target = Target {
            addr: addr.to_string(),
            pid: server.pid(),
        };
        log(format!(
            "ratelimitd ({store} store) on {} (pid {})",
            target.addr, target.pid
        ));
        for algorithm in &args.algorithms {
            for &keys in &args.keys {
                let cell = Cell {
                    kind: "matrix",
                    store,
                    algorithm,
                    keys,
                    counts: &args.descriptors,
                    pin,
                    rate: None,
                    in_flight,
                    tags: Vec::new(),
                };
                for measured in bench.measure(&cell, &target, &backing)? {
                    let descriptors = measured.num("descriptors").unwrap_or(0.0) as u64;
                    peaks.insert(
                        format!("{store}/{algorithm}/{keys}/{descriptors}"),
                        measured.num("throughput_rps").unwrap_or(0.0),
                    );
                    log(format!(
                        "{store} {algorithm} keys={keys} desc={descriptors}: {}",
                        measured.summary()
                    ));
                }
            }
        }
        if !args.no_half_peak && has("gcra") && hundred_k && args.descriptors.contains(&1) {
            let peak = peaks
                .get(&format!("{store}/gcra/100000/1"))
                .copied()
                .unwrap_or(0.0);
            let rate = (peak / 2.0) as u64;
            if rate > 0 {
                let cell = Cell {
                    kind: "half_peak",
                    store,
                    algorithm: "gcra",
                    keys: 100_000,
                    counts: &[1],
                    pin,
                    rate: Some(rate),
                    in_flight,
                    tags: Vec::new(),
                };
                for measured in bench.measure(&cell, &target, &backing)? {
                    log(format!(
                        "{store} gcra keys=100000 desc=1 at half peak ({rate} req/s): {}",
                        measured.summary()
                    ));
                }
            }
        }
        if store == "redis" && has("gcra") && hundred_k {
            // The time of one request on an idle server: one connection, one RPC in flight.
            let cell = Cell {
                kind: "unloaded",
                store,
                algorithm: "gcra",
                keys: 100_000,
                counts: &args.descriptors,
                pin,
                rate: None,
                in_flight: (1, 1),
                tags: Vec::new(),
            };
            for measured in bench.measure(&cell, &target, &backing)? {
                log(format!(
                    "{store} gcra keys=100000 desc={} unloaded: {}",
                    measured.num("descriptors").unwrap_or(0.0) as u64,
                    measured.summary()
                ));
            }
        }
        if let (Backing::Redis(redis), true) = (&backing, bench.pinned && has("gcra") && hundred_k)
        {
            // Beside the matrix, not instead of it: redis-server on a CPU of its own (as on a
            // host of its own in production), ratelimitd and the load generator on the other,
            // same load.
            let redis_pid = redis.pid().ok_or("redis-server is not running")?;
            let pin = |pid: u32, cpus: &[usize], what: &str| {
                testkit::cpu::pin_process(pid, cpus)
                    .map_err(|e| format!("pinning {what} (pid {pid}) to CPUs {cpus:?}: {e}"))
            };
            pin(redis_pid, &[1], "redis-server")?;
            pin(target.pid, &[0], "ratelimitd")?;
            let cell = Cell {
                kind: "redis_own_cpu",
                store,
                algorithm: "gcra",
                keys: 100_000,
                counts: &args.descriptors,
                pin: Pin::Beside,
                rate: None,
                in_flight,
                tags: Vec::new(),
            };
            let measured = bench.measure(&cell, &target, &backing);
            pin(redis_pid, &(0..cpus).collect::<Vec<_>>(), "redis-server")?;
            for measured in measured? {
                log(format!(
                    "{store} gcra keys=100000 desc={}, redis-server on CPU 1 alone: {}",
                    measured.num("descriptors").unwrap_or(0.0) as u64,
                    measured.summary()
                ));
            }
        }
        drop(server);
    }

    // ---- 2. Redis Cluster, beside the single server: the same load, counters spread over M
    // masters.
    let cluster_algorithms: Vec<&str> = ["gcra", "fixed_window"]
        .into_iter()
        .filter(|a| has(a))
        .collect();
    let cluster_descriptors: Vec<u32> = [1, 3]
        .into_iter()
        .filter(|d| args.descriptors.contains(d))
        .collect();
    if !args.no_cluster && !cluster_algorithms.is_empty() && !cluster_descriptors.is_empty() {
        for &masters in &args.cluster_masters {
            cluster_runs(
                &mut bench,
                masters,
                &config,
                &cluster_algorithms,
                &cluster_descriptors,
            )?;
        }
    }

    // ---- 3. Ceilings
    if !args.no_ceilings {
        // (a) Transport: rls-ceiling under the same load, pinned like the memory store.
        let ceiling = RlsCeiling::start(&bench.server_cpus())?;
        let target = Target {
            addr: ceiling.addr().to_string(),
            pid: ceiling.pid(),
        };
        log(format!(
            "rls-ceiling on {} (pid {})",
            target.addr, target.pid
        ));
        let cell = Cell {
            kind: "transport_ceiling",
            store: "ceiling",
            algorithm: "",
            keys: 100_000,
            counts: &args.descriptors,
            pin: Pin::Client,
            rate: None,
            in_flight,
            tags: Vec::new(),
        };
        for measured in bench.measure(&cell, &target, &Backing::Plain)? {
            let descriptors = measured.num("descriptors").unwrap_or(0.0) as u64;
            peaks.insert(
                format!("ceiling/{descriptors}"),
                measured.num("throughput_rps").unwrap_or(0.0),
            );
            log(format!(
                "transport ceiling desc={descriptors}: {}",
                measured.summary()
            ));
        }
        // The same offered load as the memory store's half-peak run (CPU per request falls as
        // load rises, since more responses share each syscall: compare at equal load), else
        // half its own.
        if let (false, Some(&own)) = (args.no_half_peak, peaks.get("ceiling/1")) {
            let peak = peaks.get("memory/gcra/100000/1").copied().unwrap_or(own);
            let rate = (peak / 2.0) as u64;
            let cell = Cell {
                kind: "half_peak",
                store: "transport",
                algorithm: "",
                keys: 100_000,
                counts: &[1],
                pin: Pin::Client,
                rate: Some(rate),
                in_flight,
                tags: Vec::new(),
            };
            for measured in bench.measure(&cell, &target, &Backing::Plain)? {
                log(format!(
                    "transport ceiling desc=1 open loop at {rate} req/s: {}",
                    measured.summary()
                ));
            }
        }
        drop(ceiling);
        // (b) Redis: redis-benchmark calling the store's request script.
        if let Some(redis) = &redis {
            redis_ceiling::run(&mut bench, redis)?;
        }
    }

    // ---- 4. Memory-store footprint
    if args.footprint_keys > 0 {
        let this = this_executable()?;
        for algorithm in [
            "fixed_window",
            "sliding_window_counter",
            "token_bucket",
            "gcra",
        ] {
            let output = Command::new(&this)
                .args(["footprint", "--keys", &args.footprint_keys.to_string()])
                .args(["--algorithm", algorithm, "--json"])
                .stderr(Stdio::inherit())
                .output()
                .map_err(|e| format!("{}: {e}", this.display()))?;
            if !output.status.success() {
                return Err(format!(
                    "the footprint of {algorithm} ended with {}",
                    output.status
                ));
            }
            let line = String::from_utf8_lossy(&output.stdout).trim().to_string();
            let value: serde_json::Value =
                serde_json::from_str(&line).map_err(|e| format!("{e}: {line}"))?;
            bench.record(&line)?;
            log(format!(
                "footprint {algorithm}: {} bytes/key",
                value
                    .get("bytes_per_key")
                    .and_then(serde_json::Value::as_f64)
                    .map_or("-".into(), |b| format!("{b:.1}"))
            ));
        }
    }

    // ---- Report
    bench
        .results
        .flush()
        .map_err(|e| format!("writing the results: {e}"))?;
    log(format!("results: {}", results_path.display()));
    let redis_version = redis
        .as_ref()
        .map(|server| redis_server(&mut server.connection()));
    println!(
        "### Benchmark: {} on {}, ratelimitd {}\n",
        today(),
        machine(),
        commit()
    );
    let pinning = if bench.pinned {
        "memory store and transport ceiling pinned (server CPU 0, load generator CPU 1)"
    } else {
        "nothing pinned (one CPU)"
    };
    println!(
        "`{}`: {} HTTP/2 connections x {} RPCs in flight ({}), closed loop, {} measured per cell after {} warmup; {pinning}{}. Load average before the run: {load_start}.\n",
        crate::run_header::command_line(),
        args.connections,
        args.concurrency,
        args.connections * args.concurrency,
        humantime::format_duration(args.duration),
        humantime::format_duration(args.warmup),
        redis_version.map_or(String::new(), |server| format!("; {server}")),
    );
    let records = report::read(&[results_path])?;
    print!("{}", report::render(&records));
    Ok(())
}

/// The cluster cells of `masters` masters.
fn cluster_runs(
    bench: &mut Bench,
    masters: u32,
    config: &str,
    algorithms: &[&str],
    descriptors: &[u32],
) -> Result<(), String> {
    // A node that misses pings this long counts as failing: 2 s, not testkit's 1 s, so that a
    // busy machine's stall is no failure.
    let options = ClusterOptions {
        node_timeout_ms: 2000,
        ..ClusterOptions::default()
    };
    let cluster = RedisCluster::start_with(masters as usize, 0, &options);
    let backing = Backing::Cluster(&cluster);
    log(format!(
        "redis cluster of {masters} master(s) on ports {:?} (pids {:?})",
        cluster.ports(),
        backing.pids()
    ));
    let server = servers::ratelimitd(
        None,
        &[
            "--config".into(),
            config.into(),
            "--threads".into(),
            bench.args.redis_threads.to_string(),
            "--redis-cluster".into(),
            cluster.seeds(),
        ],
        &[],
    );
    let target = Target {
        addr: server.grpc_addr().to_string(),
        pid: server.pid(),
    };
    log(format!(
        "ratelimitd (redis cluster store) on {} (pid {})",
        target.addr, target.pid
    ));
    for algorithm in algorithms {
        let cell = Cell {
            kind: "cluster",
            store: "cluster",
            algorithm,
            keys: 100_000,
            counts: descriptors,
            pin: Pin::Free,
            rate: None,
            in_flight: (bench.args.connections, bench.args.concurrency),
            tags: vec![("masters".to_string(), masters.to_string())],
        };
        for measured in bench.measure(&cell, &target, &backing)? {
            let calls = measured
                .value
                .get("script_calls")
                .map_or(String::new(), ToString::to_string);
            log(format!(
                "cluster masters={masters} {algorithm} keys=100000 desc={}, script calls per master {calls}: {}",
                measured.num("descriptors").unwrap_or(0.0) as u64,
                measured.summary()
            ));
        }
    }
    Ok(())
}

/// The first three fields of `/proc/loadavg`.
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|text| {
            text.split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_else(|_| "?".into())
}
