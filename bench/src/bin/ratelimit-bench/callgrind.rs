//! Instruction counts of a server under valgrind's callgrind: the machinery of `callgrind`,
//! `scrape-callgrind` and the profile of `redis-cpu`.
//!
//! A server starts under `valgrind --tool=callgrind --instr-atstart=no` ([`wrapper`]; testkit
//! runs it: [`Profiled::ratelimitd`] for ratelimitd, `ServerOptions::wrapper` for redis-server),
//! so nothing is counted until `callgrind_control -i on` ([`instrument`]): startup and warm-up
//! stay out. What is counted is every thread's instructions from that switch until it is turned
//! off or the process exits ([`Profiled::stop`]: SIGTERM, so what the server does on its way out,
//! such as a last trace export, is counted too), or until a dump (`callgrind_control -d`,
//! [`dump`]) of a server that keeps running. [`Counts::read`] reads a dump through
//! `callgrind_annotate --inclusive=yes`: the program's total and the inclusive count of every
//! function. Instruction counts do not depend on the machine's load, unlike CPU time.
//!
//! [`per_decision`] is the measurement of a gRPC server's instructions per decision: warm-up
//! requests, counting on, the measured requests (this tool's load, closed loop), stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use testkit::ratelimitd::{command_under, Ratelimitd};

use crate::servers::RlsCeiling;

/// The programs these measurements run (Debian: `apt-get install valgrind`).
const TOOLS: [&str; 3] = ["valgrind", "callgrind_control", "callgrind_annotate"];

/// How long a server under callgrind may take to start, and to exit after SIGTERM (it writes its
/// counts on the way out).
const SLOW: Duration = Duration::from_secs(300);

/// An error naming the first of valgrind's programs that is not on `PATH`.
pub fn require_tools() -> Result<(), String> {
    for tool in TOOLS {
        // callgrind_annotate --version exits non-zero: only whether it runs tells.
        if Command::new(tool).arg("--version").output().is_err() {
            return Err(format!("{tool} not found (apt-get install valgrind)"));
        }
    }
    Ok(())
}

/// `valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=<out>
/// --log-file=<log>`: the command a server runs under, its counts written to `out` (a `%p` in
/// it becomes the pid; a dump adds `.<n>`), valgrind's own messages to `log`.
pub fn wrapper(out: &Path, log: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "--instr-atstart=no".into(),
        format!("--callgrind-out-file={}", out.display()),
        format!("--log-file={}", log.display()),
    ]
}

/// `callgrind_control <args> <pid>`.
fn control(pid: u32, args: &[&str]) -> Result<(), String> {
    let output = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .map_err(|e| format!("callgrind_control: {e}"))?;
    if output.status.success() {
        Ok(())
    } else {
        Err(format!(
            "callgrind_control {} {pid} failed: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ))
    }
}

/// Counting on or off in the process `pid` (`callgrind_control -i on|off`).
pub fn instrument(pid: u32, on: bool) -> Result<(), String> {
    control(pid, &["-i", if on { "on" } else { "off" }])
}

/// Zeroes the counts of `pid` (`callgrind_control -z`).
pub fn zero(pid: u32) -> Result<(), String> {
    control(pid, &["-z"])
}

/// Writes the counts of `pid` since the last dump or zeroing to a new file beside its output file
/// (`callgrind_control -d`).
pub fn dump(pid: u32) -> Result<(), String> {
    control(pid, &["-d"])
}

/// The newest file in `dir` whose name starts with `prefix` (the dump just written).
pub fn newest_dump(dir: &Path, prefix: &str) -> Result<PathBuf, String> {
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    entries
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().starts_with(prefix))
        .filter_map(|entry| Some((entry.metadata().ok()?.modified().ok()?, entry.path())))
        .max()
        .map(|(_, path)| path)
        .ok_or_else(|| format!("no {prefix}* in {}", dir.display()))
}

/// What a dump counted: the program's total and every function's inclusive count, as
/// `callgrind_annotate --inclusive=yes --threshold=100` prints them.
pub struct Counts {
    pub total: u64,
    /// (inclusive instructions, the rest of the line: `file:function [object]`).
    functions: Vec<(u64, String)>,
}

impl Counts {
    /// Reads the dump at `path`, every function's count inclusive of what it calls.
    pub fn read(path: &Path) -> Result<Counts, String> {
        Counts::read_as(path, true)
    }

    /// Reads the dump at `path`, every function's count its own instructions only (what
    /// [`Counts::exclusive`] lists).
    pub fn read_exclusive(path: &Path) -> Result<Counts, String> {
        Counts::read_as(path, false)
    }

    fn read_as(path: &Path, inclusive: bool) -> Result<Counts, String> {
        let output = Command::new("callgrind_annotate")
            .arg(format!(
                "--inclusive={}",
                if inclusive { "yes" } else { "no" }
            ))
            .arg("--threshold=100")
            .arg(path)
            .output()
            .map_err(|e| format!("callgrind_annotate: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "callgrind_annotate {} failed: {}",
                path.display(),
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        Counts::parse(&String::from_utf8_lossy(&output.stdout))
            .ok_or_else(|| format!("no PROGRAM TOTALS in the annotation of {}", path.display()))
    }

    /// Parses `callgrind_annotate`'s lines `1,234 (12.5%)  file:function [object]`.
    fn parse(text: &str) -> Option<Counts> {
        let mut total = None;
        let mut functions = Vec::new();
        for line in text.lines() {
            let line = line.trim_start();
            let digits = line
                .find(|c: char| !(c.is_ascii_digit() || c == ','))
                .unwrap_or(line.len());
            let Ok(count) = line[..digits].replace(',', "").parse::<u64>() else {
                continue;
            };
            let rest = line[digits..].trim_start();
            let Some(rest) = rest
                .strip_prefix('(')
                .and_then(|rest| rest.split_once("%)"))
                .map(|(_, rest)| rest.trim())
            else {
                continue;
            };
            if rest.starts_with("PROGRAM TOTALS") {
                total = Some(count);
            } else {
                functions.push((count, rest.to_string()));
            }
        }
        Some(Counts {
            total: total?,
            functions,
        })
    }

    /// The inclusive count of the functions named `name` (a C function of redis-server:
    /// `readQueryFromClient`), summed over the lines that name it; 0 if none does.
    pub fn inclusive(&self, name: &str) -> u64 {
        self.functions
            .iter()
            .filter(|(_, text)| short_name(text) == name)
            .map(|(count, _)| count)
            .sum()
    }

    /// Every line's (count, symbol, object) as the dump was read (exclusive counts after
    /// [`Counts::read_exclusive`]): `???:<h2::proto::X as Y>::poll [/x/ratelimitd]` gives the
    /// symbol `<h2::proto::X as Y>::poll` and the object `/x/ratelimitd`.
    pub fn exclusive(&self) -> impl Iterator<Item = (u64, &str, &str)> {
        self.functions.iter().map(|(count, text)| {
            let (symbol, object) = symbol_and_object(text);
            (*count, symbol, object)
        })
    }

    /// The distinct names [`Counts::inclusive`] knows, sorted.
    pub fn function_names(&self) -> Vec<String> {
        let names: std::collections::BTreeSet<&str> = self
            .functions
            .iter()
            .map(|(_, text)| short_name(text))
            .collect();
        names.into_iter().map(String::from).collect()
    }

    /// The largest inclusive count of a line naming something that contains `pattern` (the
    /// outermost of a Rust future's nested closures: `should_rate_limit::{{closure}}`); 0 if none.
    pub fn inclusive_max_containing(&self, pattern: &str) -> u64 {
        self.functions
            .iter()
            .filter(|(_, text)| text.contains(pattern))
            .map(|(count, _)| *count)
            .max()
            .unwrap_or(0)
    }
}

/// A line's function without its file: `???:call [/usr/bin/redis-server]` names `call`.
fn short_name(text: &str) -> &str {
    let (symbol, _) = symbol_and_object(text);
    symbol.rsplit(':').next().unwrap_or(symbol)
}

/// A line's symbol and object: `src/x.rs:<a::B as C>::f [/x/ratelimitd]` gives `<a::B as C>::f`
/// (which may hold spaces) and `/x/ratelimitd`.
fn symbol_and_object(text: &str) -> (&str, &str) {
    let (place, object) = match text.rsplit_once(" [") {
        Some((place, object)) => (place, object.trim_end_matches(']')),
        None => (text, ""),
    };
    let symbol = place.split_once(':').map_or(place, |(_, symbol)| symbol);
    (symbol, object)
}

/// A server under callgrind, counting off until [`instrument`] turns it on.
pub struct Profiled {
    server: Server,
    out: PathBuf,
    dir: tempfile::TempDir,
}

/// The servers a profile runs.
enum Server {
    /// ratelimitd, loaded on its RLS port when `rls_port` (it was given `--rls-addr`).
    Ratelimitd { server: Ratelimitd, rls_port: bool },
    /// The transport ceiling, a default tonic server answering a constant OK.
    Ceiling(RlsCeiling),
}

impl Profiled {
    /// Starts `binary serve --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 <args>` under
    /// callgrind (testkit's ratelimitd, its environment cleaned), and waits for it to listen.
    pub fn ratelimitd(binary: &Path, args: &[String]) -> Result<Profiled, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let out = dir.path().join("callgrind.out");
        let mut command = command_under(&wrapper(&out, &dir.path().join("valgrind.log")), binary);
        command
            .args(["serve", "--grpc-addr", "127.0.0.1:0"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args(args);
        let server = Server::Ratelimitd {
            server: Ratelimitd::spawn_within(command, SLOW),
            rls_port: args.iter().any(|arg| arg == "--rls-addr"),
        };
        Ok(Profiled { server, out, dir })
    }

    /// Starts `rls-ceiling` (beside this executable) under callgrind and waits for it to listen.
    pub fn rls_ceiling() -> Result<Profiled, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("a temporary directory: {e}"))?;
        let out = dir.path().join("callgrind.out");
        let wrapper = wrapper(&out, &dir.path().join("valgrind.log"));
        let server = Server::Ceiling(RlsCeiling::start_under(&wrapper, &[], SLOW)?);
        Ok(Profiled { server, out, dir })
    }

    pub fn pid(&self) -> u32 {
        match &self.server {
            Server::Ratelimitd { server, .. } => server.pid(),
            Server::Ceiling(server) => server.pid(),
        }
    }

    /// Where the load goes: the RLS port when the server has one (`--rls-addr`), else the gRPC
    /// port.
    pub fn load_addr(&self) -> SocketAddr {
        match &self.server {
            Server::Ratelimitd {
                server,
                rls_port: true,
            } => server.rls_addr(),
            Server::Ratelimitd { server, .. } => server.grpc_addr(),
            Server::Ceiling(server) => server.addr(),
        }
    }

    /// The HTTP port of a ratelimitd (none for the ceiling).
    pub fn http_addr(&self) -> Option<SocketAddr> {
        match &self.server {
            Server::Ratelimitd { server, .. } => Some(server.http_addr()),
            Server::Ceiling(_) => None,
        }
    }

    /// Stops the server with SIGTERM, waits for it to exit, and reads what it counted, each
    /// function's count as `attribution` says.
    pub fn stop(mut self, attribution: Attribution) -> Result<Counts, String> {
        let exited = match &mut self.server {
            Server::Ratelimitd { server, .. } => {
                server.terminate();
                server.wait_exit(SLOW).is_some()
            }
            Server::Ceiling(server) => server.terminate(SLOW),
        };
        if !exited {
            return Err(format!(
                "the server under callgrind did not exit within {SLOW:?} of SIGTERM"
            ));
        }
        if !self.out.is_file() {
            let log =
                std::fs::read_to_string(self.dir.path().join("valgrind.log")).unwrap_or_default();
            let said = match &self.server {
                Server::Ratelimitd { server, .. } => server.output(),
                Server::Ceiling(_) => String::new(),
            };
            return Err(format!(
                "callgrind wrote no {}; valgrind said:\n{log}\nthe server said:\n{said}",
                self.out.display()
            ));
        }
        match attribution {
            Attribution::Inclusive => Counts::read(&self.out),
            Attribution::Exclusive => Counts::read_exclusive(&self.out),
        }
    }
}

/// What a function's count holds.
#[derive(Clone, Copy, Debug)]
pub enum Attribution {
    /// Its own instructions and those of everything it calls.
    Inclusive,
    /// Its own instructions only: the counts add up to the total.
    Exclusive,
}

/// A load of this tool: its flags but `--addr`, `--requests`, `--warmup` and `--json`.
pub type Load = Vec<String>;

/// The configuration the instruction counts run: domain `bench`, one gcra rule that never denies.
pub const GCRA_CONFIG: &str = "domain: bench
descriptors:
  - key: gcra
    rate_limit: {unit: second, requests_per_unit: 1000000, algorithm: gcra}
";

/// The load on [`GCRA_CONFIG`]: `connections` × `concurrency` RPCs in flight, `descriptors` per
/// request over `keys` values, each call allowed `timeout` (a server under valgrind is slow).
pub fn gcra_load(
    connections: u32,
    concurrency: u32,
    keys: u64,
    descriptors: u32,
    timeout: &str,
) -> Load {
    [
        "--connections",
        &connections.to_string(),
        "--concurrency",
        &concurrency.to_string(),
    ]
    .into_iter()
    .chain(["--domain", "bench", "--key", "gcra"])
    .chain(["--keys", &keys.to_string()])
    .chain(["--descriptors", &descriptors.to_string()])
    .chain(["--timeout", timeout])
    .map(String::from)
    .collect()
}

/// What [`per_decision`] measured.
pub struct PerDecision {
    /// Requests answered in the measured load.
    pub requests: u64,
    pub counts: Counts,
}

impl PerDecision {
    /// Every thread's instructions per decision.
    pub fn total(&self) -> f64 {
        self.counts.total as f64 / self.requests as f64
    }

    /// The inclusive instructions per decision of the largest function containing `pattern`.
    pub fn inclusive_max_containing(&self, pattern: &str) -> f64 {
        self.counts.inclusive_max_containing(pattern) as f64 / self.requests as f64
    }
}

/// Instructions per decision of `server`: `warmup` requests of `load`, counting on, `requests`
/// requests of `load`, then the server is stopped (the counts run to its exit) and its counts
/// read as `attribution` says. An error if a measured request failed.
pub fn per_decision(
    server: Profiled,
    load: &Load,
    warmup: u64,
    requests: u64,
    attribution: Attribution,
) -> Result<PerDecision, String> {
    let run = |n: u64| {
        let mut args = vec!["--addr".into(), server.load_addr().to_string()];
        args.extend(load.iter().cloned());
        args.extend([
            "--requests".into(),
            n.to_string(),
            "--warmup".into(),
            "0s".into(),
        ]);
        crate::load_process::run(&args, &[])
    };
    if warmup > 0 {
        run(warmup)?;
    }
    instrument(server.pid(), true)?;
    let report = run(requests)?;
    let counts = server.stop(attribution)?;
    let errors = report["errors"].as_u64().unwrap_or(0);
    if errors > 0 {
        return Err(format!("{errors} errors in the measured load"));
    }
    let requests = report["requests"]
        .as_u64()
        .filter(|&n| n > 0)
        .ok_or("the load answered no request")?;
    Ok(PerDecision { requests, counts })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_totals_and_inclusive_counts_as_callgrind_annotate_prints_them() {
        let text = "\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
1,000,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir                 file:function
--------------------------------------------------------------------------------
  600,000 (60.00%)  ???:readQueryFromClient [/usr/bin/redis-server]
  250,000 (25.00%)  ???:call [/usr/bin/redis-server]
   50,000 ( 5.00%)  /src/networking.c:call [/usr/bin/redis-server]
  400,000 (40.00%)  src/service.rs:<ratelimitd::Service as RateLimitService>::should_rate_limit::{{closure}} [/x/ratelimitd]
  300,000 (30.00%)  src/service.rs:<ratelimitd::Service as RateLimitService>::should_rate_limit::{{closure}}::{{closure}} [/x/ratelimitd]
";
        let counts = Counts::parse(text).expect("totals");
        assert_eq!(counts.total, 1_000_000);
        assert_eq!(counts.inclusive("readQueryFromClient"), 600_000);
        assert_eq!(counts.inclusive("call"), 300_000);
        assert_eq!(counts.inclusive("lua_pcall"), 0);
        assert!(counts
            .function_names()
            .contains(&"readQueryFromClient".to_string()));
        assert_eq!(
            counts.inclusive_max_containing("RateLimitService>::should_rate_limit::{{closure}}"),
            400_000
        );
        assert!(counts.exclusive().any(|line| line
            == (
                400_000,
                "<ratelimitd::Service as RateLimitService>::should_rate_limit::{{closure}}",
                "/x/ratelimitd"
            )));
        assert!(Counts::parse("no totals\n").is_none());
    }
}
