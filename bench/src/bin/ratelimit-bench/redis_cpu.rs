//! redis-server's cost per ratelimitd decision, beside envoyproxy/ratelimit's INCRBY + EXPIRE
//! pipeline, in one run on this machine. Markdown on stdout, progress on stderr.
//!
//! 1. CPU: one redis-server of its own (testkit: no persistence; `--redis-server` names another
//!    binary, such as Valkey's `valkey-server`), ratelimitd (the binary beside this one) at its
//!    default settings (serving lanes, pool, batching) on it, and this tool's load (`--connections`
//!    HTTP/2 connections x `--concurrency` RPCs in flight, `--keys` keys, closed loop) for each
//!    algorithm and number of descriptors. redis-server CPU per decision (request) is its utime +
//!    stime over the measured seconds (`/proc/PID/stat`, the load's `--store-pid`) / requests;
//!    script calls are `INFO commandstats`' FCALL and EVALSHA counts (zeroed by `CONFIG RESETSTAT`
//!    before each cell, so counted over the warm-up too: decisions per call = every request sent /
//!    calls). Each cell runs once per way of calling the scripts in `--calls`: `fcall` (ratelimitd
//!    connected as the default user: the Functions library, where the server has Functions) and
//!    `evalsha` (connected as an ACL user without +function and +fcall, which ratelimitd serves
//!    with EVALSHA), one after the other on the same redis-server, so the two compare within one
//!    run. Then the baseline on the same redis-server: `redis-benchmark -P 16` with
//!    `--baseline-clients` clients, INCRBY on `--keys` random keys and EXPIRE on the same keys,
//!    `--baseline-requests` each; per decision = the CPU of both runs / requests (one INCRBY and
//!    one EXPIRE per descriptor, as upstream pipelines them).
//! 2. Profile (unless `--no-profile`): the same, with redis-server under `valgrind
//!    --tool=callgrind --instr-atstart=no` ([`crate::callgrind`]); per cell `--profile-warmup`
//!    requests, counting on, `--profile-requests` requests, counting off, dump. Instruction counts
//!    are deterministic (the batches are not: under valgrind redis-server is ~50x slower, so calls
//!    carry more requests than in part 1). Instructions are grouped by where they go, from
//!    inclusive counts of redis-server's exported functions (the binary is stripped: Lua's
//!    internals are attributed through lua_pcall):
//!    - read+parse: readQueryFromClient without the command run (RESP parsing, argv objects);
//!    - dispatch: call() without the script or command it runs;
//!    - lua entry: evalGenericCommand / fcallCommand without luaCallFunction (script or function
//!      lookup, run context);
//!    - KEYS/ARGV+reply: luaCallFunction without lua_pcall (arrays of Lua strings, the script's
//!      flat reply);
//!    - lua VM: lua_pcall without redis.call (the script's own work: parsing, arithmetic, string
//!      formatting and matching, tables, closures);
//!    - redis.call: scriptCall without the commands it runs (argv objects, lookup, ACL, flags);
//!    - read cmds, write cmds: the commands redis.call ran (GET, TIME... / SET, ...);
//!    - INCRBY/EXPIRE: the baseline's commands, sent as commands;
//!    - write: writeToClient (socket write, user side);
//!    - other: the rest (event loop, cron, expiry, allocator).
//!
//!    Kernel time (syscalls) is not in callgrind's counts; part 1's CPU includes it.
//!
//! Arguments after `--` go to `ratelimitd serve` (`-- --threads 1`).

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use clap::Args;
use ratelimitd::limiter::Algorithm;
use serde_json::Value;
use testkit::ratelimitd::Ratelimitd;
use testkit::redis_server::{Auth, RedisServer, ServerOptions};

use crate::callgrind::{self, Counts};
use crate::procstat;
use crate::run_header::header;

#[derive(Args, Clone, Debug)]
pub struct RedisCpuArgs {
    /// Measured duration of each CPU cell.
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub duration: Duration,
    /// Load before each CPU cell's measurement.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub warmup: Duration,
    /// HTTP/2 connections of the load.
    #[arg(long, default_value_t = 4)]
    pub connections: u32,
    /// RPCs in flight per connection.
    #[arg(long, default_value_t = 16)]
    pub concurrency: u32,
    /// Keys of the load, and of the baseline's random keys.
    #[arg(long, default_value_t = 10_000)]
    pub keys: u64,
    /// The algorithms measured, in this order.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "fixed_window,sliding_window_log,sliding_window_counter,token_bucket,gcra"
    )]
    pub algorithms: Vec<String>,
    /// Descriptors per request, one cell each.
    #[arg(long, value_delimiter = ',', default_value = "1,3")]
    pub descriptors: Vec<u32>,
    /// The ways of calling the scripts measured: `fcall` (skipped, with a note, on a server
    /// without Functions), `evalsha`.
    #[arg(long, value_delimiter = ',', default_value = "fcall,evalsha")]
    pub calls: Vec<String>,
    /// Requests of each baseline command (INCRBY, EXPIRE).
    #[arg(long, default_value_t = 1_000_000)]
    pub baseline_requests: u64,
    /// Clients of redis-benchmark in the baseline.
    #[arg(long, default_value_t = 50)]
    pub baseline_clients: u32,
    /// The p99 at this rate, open loop, gcra, 1 descriptor, with the first way of calling (0: none).
    #[arg(long, default_value_t = 5_000.0)]
    pub open_loop_rate: f64,
    /// Skip part 2, the callgrind profile.
    #[arg(long)]
    pub no_profile: bool,
    /// Measured requests of each profile cell.
    #[arg(long, default_value_t = 4_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub profile_requests: u64,
    /// Requests before each profile cell's counting.
    #[arg(long, default_value_t = 1_000)]
    pub profile_warmup: u64,
    /// The server binary (default: redis-server on PATH, or testkit's
    /// RATELIMITD_TEST_REDIS_SERVER); redis-benchmark stays the one on PATH, which speaks to it
    /// alike.
    #[arg(long)]
    pub redis_server: Option<PathBuf>,
    /// Keep the work folder (configuration, callgrind dumps) and say where.
    #[arg(long)]
    pub keep: bool,
    /// Arguments for `ratelimitd serve` (after `--`).
    #[arg(last = true)]
    pub server_args: Vec<String>,
}

/// The configuration: domain `bench`, a rule per algorithm keyed by its name, none denying.
const CONFIG: &str = "domain: bench
descriptors:
  - key: fixed_window
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: fixed_window}
  - key: sliding_window_log
    rate_limit: {unit: second, requests_per_unit: 1000, algorithm: sliding_window_log}
  - key: sliding_window_counter
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: sliding_window_counter}
  - key: token_bucket
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: token_bucket}
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: gcra}
";

/// The ACL user ratelimitd connects as for `evalsha` (password the same): everything but FUNCTION
/// and FCALL (a user refused only FUNCTION LOAD still calls a library another user loaded).
const EVALSHA_USER: &str = "evalsha";

/// The baseline's commands, as redis-benchmark takes them.
const BASELINE: [[&str; 3]; 2] = [
    ["INCRBY", "rl:__rand_int__", "1"],
    ["EXPIRE", "rl:__rand_int__", "60"],
];

fn log(message: &str) {
    eprintln!("[redis-cpu] {message}");
}

/// One CPU cell: its way of calling, algorithm, descriptors, script calls and the load's report.
struct CpuCell {
    calls: String,
    algorithm: String,
    descriptors: u32,
    script_calls: u64,
    report: Value,
}

/// A baseline command: redis-server CPU µs per request and requests per second.
struct BaselineRun {
    command: &'static str,
    cpu_us_per_request: f64,
    per_second: f64,
}

/// One profile cell: its name, decisions, script calls and the dump's counts.
struct ProfileCell {
    name: String,
    decisions: u64,
    script_calls: u64,
    counts: Counts,
}

pub fn run(args: &RedisCpuArgs) -> Result<(), String> {
    for name in &args.algorithms {
        Algorithm::parse(name).ok_or_else(|| format!("unknown algorithm `{name}`"))?;
    }
    for calls in &args.calls {
        if calls != "fcall" && calls != "evalsha" {
            return Err(format!("unknown way of calling `{calls}` (fcall, evalsha)"));
        }
    }
    if args.descriptors.contains(&0) {
        return Err("--descriptors takes counts from 1".into());
    }
    require("redis-benchmark", &["--version"])?;
    if !args.no_profile {
        callgrind::require_tools()?;
    }
    let work = tempfile::Builder::new()
        .prefix("redis-cpu.")
        .tempdir()
        .map_err(|e| format!("a work folder: {e}"))?;
    let config = work.path().join("bench.yaml");
    std::fs::write(&config, CONFIG).map_err(|e| format!("{}: {e}", config.display()))?;
    let config = config.display().to_string();
    let this = Run { args, config };

    // 1. CPU per decision.
    let redis = this.start_redis(vec![])?;
    let redis_pid = redis.pid().ok_or("redis-server is not running")?;
    let title = header("redis-server per decision", &mut redis.connection());
    let mut modes = Vec::new();
    for calls in &args.calls {
        if calls == "fcall" && !redis.has_functions() {
            log("no Functions on this server: fcall skipped");
            continue;
        }
        modes.push(calls.clone());
    }
    let mut cpu = Vec::new();
    let mut open_loop = None;
    for calls in &modes {
        let server = this.start_ratelimitd(&redis, calls);
        log(&format!(
            "redis-server {redis_pid} on {}, ratelimitd {} on {} ({calls})",
            redis.port(),
            server.pid(),
            server.grpc_addr()
        ));
        let pids = [
            "--server-pid".to_string(),
            server.pid().to_string(),
            "--store-pid".into(),
            redis_pid.to_string(),
        ];
        let timed = [
            "--duration".to_string(),
            format!("{}s", args.duration.as_secs_f64()),
            "--warmup".into(),
            format!("{}s", args.warmup.as_secs_f64()),
        ];
        for algorithm in &args.algorithms {
            for &descriptors in &args.descriptors {
                redis.reset_stats();
                log(&format!(
                    "cpu: {calls}, {algorithm}, {descriptors} descriptor(s)"
                ));
                let mut load = this.load(&server, algorithm, descriptors);
                load.extend(timed.iter().cloned());
                load.extend(pids.iter().cloned());
                let report = crate::load_process::run(&load, &[])?;
                cpu.push(CpuCell {
                    calls: calls.clone(),
                    algorithm: algorithm.clone(),
                    descriptors,
                    script_calls: redis.script_calls(),
                    report,
                });
            }
        }
        if args.open_loop_rate > 0.0 && open_loop.is_none() {
            log(&format!(
                "open loop: {calls}, gcra, 1 descriptor, {}/s",
                args.open_loop_rate
            ));
            let mut load = this.load(&server, "gcra", 1);
            load.extend(timed.iter().cloned());
            load.extend(["--rate".into(), args.open_loop_rate.to_string()]);
            load.extend(pids.iter().cloned());
            open_loop = Some((calls.clone(), crate::load_process::run(&load, &[])?));
        }
    }
    let mut baseline = Vec::new();
    for command in BASELINE {
        log(&format!(
            "baseline: {}, -P 16, {} clients",
            command.join(" "),
            args.baseline_clients
        ));
        let before = procstat::cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
        let start = Instant::now();
        this.redis_benchmark(&redis, args.baseline_requests, &command)?;
        let seconds = start.elapsed().as_secs_f64();
        let after = procstat::cpu_us(redis_pid).ok_or("redis-server's CPU time")?;
        baseline.push(BaselineRun {
            command: command[0],
            cpu_us_per_request: (after - before) as f64 / args.baseline_requests as f64,
            per_second: args.baseline_requests as f64 / seconds,
        });
    }
    drop(redis);

    // 2. Profile.
    let mut profile = Vec::new();
    if !args.no_profile {
        let dumps = work.path().join("callgrind");
        std::fs::create_dir(&dumps).map_err(|e| format!("{}: {e}", dumps.display()))?;
        let wrapper = callgrind::wrapper(
            &dumps.join("callgrind.%p"),
            &work.path().join("valgrind.log"),
        );
        let redis = this.start_redis(wrapper)?;
        let pid = redis.pid().ok_or("redis-server is not running")?;
        log(&format!("profile: redis-server under callgrind ({pid})"));
        let cell = |name: String, load: &dyn Fn(u64) -> Result<(), String>| {
            load(args.profile_warmup)?;
            redis.reset_stats();
            callgrind::zero(pid)?;
            callgrind::instrument(pid, true)?;
            load(args.profile_requests)?;
            callgrind::instrument(pid, false)?;
            let script_calls = redis.script_calls();
            callgrind::dump(pid)?;
            let dump = callgrind::newest_dump(&dumps, "callgrind.")?;
            Ok::<_, String>(ProfileCell {
                name,
                decisions: args.profile_requests,
                script_calls,
                counts: Counts::read(&dump)?,
            })
        };
        for calls in &modes {
            let server = this.start_ratelimitd(&redis, calls);
            for algorithm in &args.algorithms {
                for &descriptors in &args.descriptors {
                    log(&format!(
                        "profile: {calls}, {algorithm}, {descriptors} descriptor(s)"
                    ));
                    let load = |requests: u64| {
                        let mut load = this.load(&server, algorithm, descriptors);
                        load.extend(["--requests".into(), requests.to_string()]);
                        load.extend(["--warmup".into(), "0s".into()]);
                        load.extend(["--timeout".into(), "60s".into()]);
                        crate::load_process::run(&load, &[]).map(drop)
                    };
                    profile.push(cell(format!("{calls} {algorithm}/{descriptors}"), &load)?);
                }
            }
        }
        log("profile: INCRBY + EXPIRE pipeline");
        let load = |requests: u64| {
            for command in BASELINE {
                this.redis_benchmark(&redis, requests, &command)?;
            }
            Ok::<(), String>(())
        };
        profile.push(cell("INCRBY+EXPIRE/1".into(), &load)?);
    }

    println!("{title}\n");
    print_cpu(args, &cpu, &baseline, open_loop.as_ref());
    if !profile.is_empty() {
        print_profile(&profile);
    }
    if args.keep {
        let kept = work.keep();
        log(&format!("kept {}", kept.display()));
    }
    Ok(())
}

/// An error naming `program` unless it runs.
fn require(program: &str, args: &[&str]) -> Result<(), String> {
    Command::new(program)
        .args(args)
        .output()
        .map(drop)
        .map_err(|e| format!("{program}: {e}"))
}

/// What every part of a run shares.
struct Run<'a> {
    args: &'a RedisCpuArgs,
    config: String,
}

impl Run<'_> {
    /// A redis-server of its own (under `wrapper` when it names a program), with the ACL user
    /// of `evalsha`.
    fn start_redis(&self, wrapper: Vec<String>) -> Result<RedisServer, String> {
        let redis = RedisServer::start_options(ServerOptions {
            binary: self.args.redis_server.clone(),
            wrapper,
            ..ServerOptions::default()
        });
        let mut connection = redis.connection();
        let user = |exclusions: &[&str]| {
            let mut command = redis::cmd("ACL");
            command
                .arg("SETUSER")
                .arg(EVALSHA_USER)
                .arg("on")
                .arg(format!(">{EVALSHA_USER}"))
                .arg("~*")
                .arg("&*")
                .arg("+@all")
                .arg(exclusions);
            command
        };
        let full: Result<(), _> =
            user(&["-function", "-fcall", "-fcall_ro"]).query(&mut connection);
        if let Err(error) = full {
            // A server without Functions knows no FUNCTION or FCALL to refuse.
            if redis.has_functions() {
                return Err(format!("ACL SETUSER {EVALSHA_USER}: {error}"));
            }
            user(&[])
                .query::<()>(&mut connection)
                .map_err(|e| format!("ACL SETUSER {EVALSHA_USER}: {e}"))?;
        }
        Ok(redis)
    }

    /// ratelimitd on `redis`, calling the scripts as `calls` says.
    fn start_ratelimitd(&self, redis: &RedisServer, calls: &str) -> Ratelimitd {
        let url = match calls {
            "evalsha" => redis.url_as(&Auth::user(EVALSHA_USER, EVALSHA_USER)),
            _ => redis.url(),
        };
        let mut command = testkit::ratelimitd::command();
        command
            .args(["serve", "--grpc-addr", "127.0.0.1:0"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args(["--config", &self.config, "--redis-url", &url])
            .args(&self.args.server_args);
        // Its start loads the scripts into a redis-server that may run under valgrind.
        Ratelimitd::spawn_within(command, Duration::from_secs(120))
    }

    /// The load's flags on `server` for `algorithm` and `descriptors`, without its length.
    fn load(&self, server: &Ratelimitd, algorithm: &str, descriptors: u32) -> Vec<String> {
        [
            "--addr".to_string(),
            server.grpc_addr().to_string(),
            "--connections".into(),
            self.args.connections.to_string(),
            "--concurrency".into(),
            self.args.concurrency.to_string(),
            "--key".into(),
            algorithm.to_string(),
            "--keys".into(),
            self.args.keys.to_string(),
            "--descriptors".into(),
            descriptors.to_string(),
        ]
        .into()
    }

    /// `redis-benchmark -P 16` of `command`, `requests` times on `--keys` random keys.
    fn redis_benchmark(
        &self,
        redis: &RedisServer,
        requests: u64,
        command: &[&str],
    ) -> Result<(), String> {
        let status = Command::new("redis-benchmark")
            .args(["-p", &redis.port().to_string(), "-P", "16"])
            .args(["-c", &self.args.baseline_clients.to_string()])
            .args(["-n", &requests.to_string()])
            .args(["-r", &self.args.keys.to_string(), "-q"])
            .args(command)
            .stdout(Stdio::null())
            .status()
            .map_err(|e| format!("redis-benchmark: {e}"))?;
        if status.success() {
            Ok(())
        } else {
            Err(format!(
                "redis-benchmark {} ended with {status}",
                command.join(" ")
            ))
        }
    }
}

/// A number of the report, or NaN.
fn number(report: &Value, path: &[&str]) -> f64 {
    path.iter()
        .fold(report, |value, key| &value[*key])
        .as_f64()
        .unwrap_or(f64::NAN)
}

/// Part 1's tables: CPU per decision against the baseline, FCALL against EVALSHA, the open loop.
fn print_cpu(
    args: &RedisCpuArgs,
    cpu: &[CpuCell],
    baseline: &[BaselineRun],
    open_loop: Option<&(String, Value)>,
) {
    let baseline_us: f64 = baseline.iter().map(|run| run.cpu_us_per_request).sum();
    println!("| client of the same redis-server | calls | descriptors | redis-server CPU µs / decision | x baseline | decisions / script call | redis-server µs / call | decisions/s | ratelimitd CPU µs / decision | p99 ms |");
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for cell in cpu {
        let r = &cell.report;
        let store = number(r, &["store_cpu_us_per_request"]);
        let sent = number(r, &["requests"]) + number(r, &["warmup_requests"]);
        let per_call = if cell.script_calls > 0 {
            sent / cell.script_calls as f64
        } else {
            f64::NAN
        };
        println!(
            "| ratelimitd {} | {} | {} | {store:.2} | {:.2} | {per_call:.1} | {:.1} | {:.0} | {:.1} | {:.2} |",
            cell.algorithm,
            cell.calls.to_uppercase(),
            cell.descriptors,
            store / baseline_us,
            store * per_call,
            number(r, &["throughput_rps"]),
            number(r, &["server_cpu_us_per_request"]),
            number(r, &["latency_us", "p99"]) / 1000.0
        );
    }
    let rate = |command: &str| {
        baseline
            .iter()
            .find(|run| run.command == command)
            .map_or(f64::NAN, |run| run.per_second)
    };
    println!(
        "| INCRBY + EXPIRE pipelined (redis-benchmark -P 16, {} clients) | — | 1 | {baseline_us:.2} | 1.00 | — | — | INCRBY {:.0}/s, EXPIRE {:.0}/s | — | — |",
        args.baseline_clients,
        rate("INCRBY"),
        rate("EXPIRE")
    );
    println!();

    let per_decision = |calls: &str, algorithm: &str, descriptors: u32| {
        cpu.iter()
            .find(|c| c.calls == calls && c.algorithm == algorithm && c.descriptors == descriptors)
            .map(|c| number(&c.report, &["store_cpu_us_per_request"]))
    };
    let pairs: Vec<(&str, u32, f64, f64)> = cpu
        .iter()
        .filter(|c| c.calls == "fcall")
        .filter_map(|c| {
            let f = per_decision("fcall", &c.algorithm, c.descriptors)?;
            let e = per_decision("evalsha", &c.algorithm, c.descriptors)?;
            Some((c.algorithm.as_str(), c.descriptors, f, e))
        })
        .collect();
    if !pairs.is_empty() {
        println!("| algorithm | descriptors | FCALL µs / decision | EVALSHA µs / decision | FCALL against EVALSHA |");
        println!("|---|---:|---:|---:|---:|");
        for (algorithm, descriptors, f, e) in pairs {
            println!(
                "| {algorithm} | {descriptors} | {f:.2} | {e:.2} | {:+.1} % |",
                100.0 * (f - e) / e
            );
        }
        println!();
    }
    if let Some((calls, r)) = open_loop {
        println!(
            "Open loop, {}, gcra, 1 descriptor, {:.0}/s: p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms; redis-server {:.1} µs / decision; errors {}.",
            calls.to_uppercase(),
            number(r, &["rate"]),
            number(r, &["latency_us", "p50"]) / 1000.0,
            number(r, &["latency_us", "p99"]) / 1000.0,
            number(r, &["latency_us", "p999"]) / 1000.0,
            number(r, &["store_cpu_us_per_request"]),
            r["errors"].as_u64().unwrap_or(0)
        );
        println!();
    }
}

/// The groups of [`group`], in the table's order.
const GROUPS: [&str; 11] = [
    "read+parse",
    "dispatch",
    "lua entry",
    "KEYS/ARGV+reply",
    "lua VM",
    "redis.call",
    "read cmds",
    "write cmds",
    "INCRBY/EXPIRE",
    "write",
    "other",
];

/// Commands that are no command a script ran: the entry points, and the harness's own.
const NOT_SCRIPT_COMMANDS: [&str; 21] = [
    "processCommand",
    "lookupCommand",
    "lookupCommandOrOriginal",
    "evalCommand",
    "evalShaCommand",
    "evalRoCommand",
    "evalShaRoCommand",
    "fcallCommand",
    "fcallroCommand",
    "functionLoadCommand",
    "scriptCommand",
    "incrDecrCommand",
    "infoCommand",
    "configCommand",
    "configSetCommand",
    "configResetStatCommand",
    "pingCommand",
    "commandCommand",
    "helloCommand",
    "clientCommand",
    "clientSetNameCommand",
];

/// The commands scripts run that only read.
const READ_COMMANDS: [&str; 14] = [
    "getCommand",
    "timeCommand",
    "zcardCommand",
    "zrangeCommand",
    "zrangeGenericCommand",
    "zcountCommand",
    "hgetCommand",
    "hmgetCommand",
    "hgetallCommand",
    "pttlCommand",
    "ttlCommand",
    "existsCommand",
    "mgetCommand",
    "zscoreCommand",
];

/// The functions whose inclusive counts the last table shows.
const KEY_FUNCTIONS: [&str; 29] = [
    "readQueryFromClient",
    "processCommand",
    "call",
    "evalGenericCommand",
    "fcallCommand",
    "luaCallFunction",
    "lua_pcall",
    "scriptCall",
    "getCommand",
    "timeCommand",
    "setCommand",
    "setExpire",
    "removeExpire",
    "lookupKeyRead",
    "lookupKeyWrite",
    "createStringObject",
    "lookupCommand",
    "ACLCheckAllPerm",
    "alsoPropagate",
    "incrbyCommand",
    "expireCommand",
    "handleClientsWithPendingWrites",
    "addReplyBulk",
    "addReplyLongLong",
    "addReplyArrayLen",
    "lua_gc",
    "zmalloc",
    "zfree",
    "sdsnewlen",
];

/// Inclusive instructions of the commands redis.call ran, reads and writes apart (a helper that
/// commands share, such as incrDecrCommand under INCRBY and DECRBY, is not counted again).
fn script_commands(counts: &Counts) -> (u64, u64) {
    let (mut reads, mut writes) = (0, 0);
    for name in counts.function_names() {
        if name.ends_with("Command")
            && !name.ends_with("GenericCommand")
            && !NOT_SCRIPT_COMMANDS.contains(&name.as_str())
        {
            let count = counts.inclusive(&name);
            if READ_COMMANDS.contains(&name.as_str()) {
                reads += count;
            } else {
                writes += count;
            }
        }
    }
    (reads, writes)
}

/// The instructions of [`GROUPS`], in that order.
fn group(counts: &Counts) -> [i128; 11] {
    let i = |name: &str| i128::from(counts.inclusive(name));
    let scripted = i("scriptCall") > 0;
    let (reads, writes) = if scripted {
        script_commands(counts)
    } else {
        (0, 0)
    };
    let (reads, writes) = (i128::from(reads), i128::from(writes));
    // INCRBY and EXPIRE sent as commands (the baseline); under scripts they are write cmds.
    let direct = if scripted {
        0
    } else {
        i("incrbyCommand") + i("expireCommand")
    };
    [
        i("readQueryFromClient") - i("call"),
        i("call") - i("evalGenericCommand") - i("fcallCommand") - direct,
        i("evalGenericCommand") + i("fcallCommand") - i("luaCallFunction"),
        i("luaCallFunction") - i("lua_pcall"),
        i("lua_pcall") - i("scriptCall"),
        i("scriptCall") - reads - writes,
        reads,
        writes,
        direct,
        i("writeToClient"),
        i128::from(counts.total) - i("readQueryFromClient") - i("writeToClient"),
    ]
}

/// `1,234,567`: `value` rounded, with thousands separators.
fn thousands(value: f64) -> String {
    let rounded = value.round();
    let digits = format!("{:.0}", rounded.abs());
    let mut out = String::new();
    for (i, digit) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(digit);
    }
    if rounded < 0.0 {
        out.insert(0, '-');
    }
    out
}

/// Part 2's tables: the groups per decision, and the inclusive counts of [`KEY_FUNCTIONS`].
fn print_profile(cells: &[ProfileCell]) {
    println!("#### Where redis-server's instructions go (callgrind; instructions per decision)");
    println!();
    println!(
        "| load | decisions / call | total / decision | / call | {} |",
        GROUPS.join(" | ")
    );
    println!("|---|---:|---:|---:|{}", "---:|".repeat(GROUPS.len()));
    for cell in cells {
        let n = cell.decisions as f64;
        let calls = if cell.script_calls > 0 {
            cell.script_calls as f64
        } else {
            n
        };
        let groups: Vec<String> = group(&cell.counts)
            .iter()
            .map(|&g| thousands(g as f64 / n))
            .collect();
        println!(
            "| {} | {:.1} | {} | {} | {} |",
            cell.name,
            n / calls,
            thousands(cell.counts.total as f64 / n),
            thousands(cell.counts.total as f64 / calls),
            groups.join(" | ")
        );
    }
    println!();
    println!("Inclusive instructions per decision of the functions the groups are made of:");
    println!();
    let names: Vec<&str> = cells.iter().map(|cell| cell.name.as_str()).collect();
    println!("| function | {} |", names.join(" | "));
    println!("|---|{}", "---:|".repeat(cells.len()));
    for function in KEY_FUNCTIONS {
        let values: Vec<String> = cells
            .iter()
            .map(|cell| thousands(cell.counts.inclusive(function) as f64 / cell.decisions as f64))
            .collect();
        println!("| {function} | {} |", values.join(" | "));
    }
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_groups_digits_by_three() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1234.5), "1,235");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-12_345.0), "-12,345");
    }
}
