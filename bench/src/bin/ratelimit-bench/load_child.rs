//! The load as a child process: this executable's `load` mode with `--json`, on the CPUs given
//! (`testkit::cpu::pin_command`). The measurement subcommands run it so because a pinned load
//! generator has to be a process of its own (its CPU set, and its own CPU time in
//! `/proc/self/stat`, which is what `client_cpu_us_per_request` reports), and so that it runs as
//! it does alone: one load thread per CPU it may use.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

/// One run of the load.
#[derive(Clone, Debug)]
pub struct LoadRun {
    /// `IP:PORT` of the server.
    pub addr: String,
    pub connections: u32,
    pub concurrency: u32,
    /// Descriptor key of the default template (`KEY=d{i}-{r}`).
    pub key: String,
    pub keys: u64,
    pub descriptors: u32,
    pub duration: Duration,
    pub warmup: Duration,
    /// Open loop at this many requests per second.
    pub rate: Option<u64>,
    pub server_pid: Option<u32>,
    pub store_pids: Vec<u32>,
    /// `--tag NAME=VALUE`, in order.
    pub tags: Vec<(String, String)>,
    /// Run on these CPUs only; empty: wherever the kernel puts it.
    pub cpus: Vec<usize>,
}

/// What a run printed: its JSON line, as printed and parsed.
#[derive(Clone, Debug)]
pub struct Measured {
    pub line: String,
    pub value: Value,
}

impl Measured {
    /// A top-level number of the line.
    pub fn num(&self, name: &str) -> Option<f64> {
        self.value.get(name).and_then(Value::as_f64)
    }

    pub fn p99(&self) -> Option<f64> {
        self.value
            .get("latency_us")
            .and_then(|latency| latency.get("p99"))
            .and_then(Value::as_f64)
    }

    /// `<req/s> req/s, p99 <µs> µs, server <µs> µs/req, errors <n>`: a progress line's figures.
    pub fn summary(&self) -> String {
        let show = |value: Option<f64>, decimals: usize| {
            value.map_or("-".to_string(), |v| format!("{v:.decimals$}"))
        };
        format!(
            "{} req/s, p99 {} µs, server {} µs/req, errors {}",
            show(self.num("throughput_rps"), 0),
            show(self.p99(), 0),
            show(self.num("server_cpu_us_per_request"), 2),
            show(self.num("errors"), 0)
        )
    }
}

/// This executable, which runs the load.
pub fn this_executable() -> Result<PathBuf, String> {
    std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))
}

/// A file beside this executable (`rls-ceiling`, `ratelimitd-no-otel`).
pub fn beside_this(name: &str) -> Result<PathBuf, String> {
    let this = this_executable()?;
    Ok(this
        .parent()
        .map_or_else(|| PathBuf::from(name), |dir| dir.join(name)))
}

impl LoadRun {
    /// Runs the load to its end; its stderr passes through.
    pub fn run(&self) -> Result<Measured, String> {
        let this = this_executable()?;
        let mut command = Command::new(&this);
        command
            .arg("load")
            .args(["--addr", &self.addr])
            .args(["--connections", &self.connections.to_string()])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--domain", "bench", "--key", &self.key])
            .args(["--keys", &self.keys.to_string()])
            .args(["--descriptors", &self.descriptors.to_string()])
            .args([
                "--duration",
                &humantime::format_duration(self.duration).to_string(),
            ])
            .args([
                "--warmup",
                &humantime::format_duration(self.warmup).to_string(),
            ]);
        if let Some(rate) = self.rate {
            command.args(["--rate", &rate.to_string()]);
        }
        if let Some(pid) = self.server_pid {
            command.args(["--server-pid", &pid.to_string()]);
        }
        for pid in &self.store_pids {
            command.args(["--store-pid", &pid.to_string()]);
        }
        for (name, value) in &self.tags {
            command.args(["--tag", &format!("{name}={value}")]);
        }
        command
            .arg("--json")
            .stdin(Stdio::null())
            .stderr(Stdio::inherit());
        if !self.cpus.is_empty() {
            testkit::cpu::pin_command(&mut command, &self.cpus);
        }
        let output = command
            .output()
            .map_err(|e| format!("{}: {e}", this.display()))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "the load against {} ended with {}",
                self.addr, output.status
            ));
        }
        let line = stdout.trim().to_string();
        let value = serde_json::from_str(&line)
            .map_err(|e| format!("the load printed no JSON line ({e}): {line}"))?;
        Ok(Measured { line, value })
    }
}
