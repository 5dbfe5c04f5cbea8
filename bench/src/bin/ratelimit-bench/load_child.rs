//! The load of the matrix and the tracing cost, by its parameters: this executable's `load`
//! mode run as a process of its own ([`crate::load_process::run`]) on the CPUs given, so that a
//! pinned load generator has its own CPU set and CPU time and runs as it does alone: one load
//! thread per CPU it may use.

use std::path::PathBuf;
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
        let mut arguments: Vec<String> = vec![
            "load".into(),
            "--addr".into(),
            self.addr.clone(),
            "--connections".into(),
            self.connections.to_string(),
            "--concurrency".into(),
            self.concurrency.to_string(),
            "--domain".into(),
            "bench".into(),
            "--key".into(),
            self.key.clone(),
            "--keys".into(),
            self.keys.to_string(),
            "--descriptors".into(),
            self.descriptors.to_string(),
            "--duration".into(),
            humantime::format_duration(self.duration).to_string(),
            "--warmup".into(),
            humantime::format_duration(self.warmup).to_string(),
        ];
        if let Some(rate) = self.rate {
            arguments.extend(["--rate".into(), rate.to_string()]);
        }
        if let Some(pid) = self.server_pid {
            arguments.extend(["--server-pid".into(), pid.to_string()]);
        }
        for pid in &self.store_pids {
            arguments.extend(["--store-pid".into(), pid.to_string()]);
        }
        for (name, value) in &self.tags {
            arguments.extend(["--tag".into(), format!("{name}={value}")]);
        }
        let value = crate::load_process::run(&arguments, &self.cpus)
            .map_err(|error| format!("the load against {}: {error}", self.addr))?;
        let line = value.to_string();
        Ok(Measured { line, value })
    }
}
