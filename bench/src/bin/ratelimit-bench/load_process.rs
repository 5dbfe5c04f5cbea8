//! This tool's load as a process of its own (`ratelimit-bench --json ...`, the running executable),
//! its JSON report read back. The measurements that start servers run the load so: a client with
//! its own CPU time (`client_cpu_us_per_request`), pinned to CPUs of its own where asked
//! (`testkit::cpu::pin_command`), and several loads at once each with its own process and
//! threads, as separate load generators would have.

use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// A load running in a child process; killed if dropped before [`LoadProcess::report`].
pub struct LoadProcess {
    child: Option<Child>,
    label: String,
}

/// Runs `ratelimit-bench <args> --json` to its end on `cpus` (empty: wherever the kernel puts
/// it), its stderr passed through: its JSON report. A run with errors in its report is still
/// `Ok` (the caller decides what they mean).
pub fn run(args: &[String], cpus: &[usize]) -> Result<Value, String> {
    let this = std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))?;
    let mut command = Command::new(&this);
    command
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .stderr(Stdio::inherit());
    if !cpus.is_empty() {
        testkit::cpu::pin_command(&mut command, cpus);
    }
    let output = command
        .output()
        .map_err(|e| format!("{}: {e}", this.display()))?;
    if !output.status.success() {
        return Err(format!(
            "the load `{}` ended with {}",
            args.join(" "),
            output.status
        ));
    }
    serde_json::from_slice(&output.stdout)
        .map_err(|e| format!("the load's report is no JSON object: {e}"))
}

impl LoadProcess {
    /// Starts `ratelimit-bench <args> --json`.
    pub fn start(label: &str, args: &[String]) -> Result<LoadProcess, String> {
        let this = std::env::current_exe().map_err(|e| format!("this executable's path: {e}"))?;
        let child = Command::new(&this)
            .args(args)
            .arg("--json")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{}: {e}", this.display()))?;
        Ok(LoadProcess {
            child: Some(child),
            label: label.to_string(),
        })
    }

    /// Waits for the load to end and returns its report.
    pub fn report(mut self) -> Result<LoadReport, String> {
        let child = self.child.take().expect("a load is reported once");
        let output = child
            .wait_with_output()
            .map_err(|e| format!("load {}: {e}", self.label))?;
        let stdout = String::from_utf8_lossy(&output.stdout);
        if !output.status.success() {
            return Err(format!(
                "load {} ended with {}: {}{}",
                self.label,
                output.status,
                stdout,
                String::from_utf8_lossy(&output.stderr)
            ));
        }
        let json: Value = serde_json::from_str(stdout.trim())
            .map_err(|e| format!("load {}: no JSON report ({e}): {stdout}", self.label))?;
        LoadReport::from_json(&json)
            .ok_or_else(|| format!("load {}: unreadable report {json}", self.label))
    }
}

impl Drop for LoadProcess {
    fn drop(&mut self) {
        if let Some(child) = self.child.as_mut() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The figures of a load's JSON report that the measurements read.
#[derive(Clone, Debug)]
pub struct LoadReport {
    pub requests: u64,
    pub warmup_requests: u64,
    pub elapsed_s: f64,
    pub throughput_rps: f64,
    pub ok: u64,
    pub over_limit: u64,
    pub errors: u64,
    /// `kind: count`, as the report names them.
    pub error_kinds: Vec<(String, u64)>,
    pub p99_us: f64,
    pub max_us: f64,
    /// `--server-pid`'s CPU per request, when given.
    pub server_cpu_us_per_request: Option<f64>,
}

impl LoadReport {
    fn from_json(json: &Value) -> Option<LoadReport> {
        let count = |name: &str| json.get(name)?.as_u64();
        let latency = |name: &str| json.get("latency_us")?.get(name)?.as_f64();
        let error_kinds = json
            .get("error_kinds")?
            .as_object()?
            .iter()
            .map(|(kind, count)| Some((kind.clone(), count.as_u64()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(LoadReport {
            requests: count("requests")?,
            warmup_requests: count("warmup_requests")?,
            elapsed_s: json.get("elapsed_s")?.as_f64()?,
            throughput_rps: json.get("throughput_rps")?.as_f64()?,
            ok: count("ok")?,
            over_limit: count("over_limit")?,
            errors: count("errors")?,
            error_kinds,
            p99_us: latency("p99")?,
            max_us: latency("max")?,
            server_cpu_us_per_request: json
                .get("server_cpu_us_per_request")
                .and_then(Value::as_f64),
        })
    }

    /// `UNAVAILABLE: 12, timeout: 3`, or empty.
    pub fn error_kinds_text(&self) -> String {
        self.error_kinds
            .iter()
            .map(|(kind, count)| format!("{kind}: {count}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}
