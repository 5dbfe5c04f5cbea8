//! The servers the measurement subcommands load: ratelimitd (testkit's, on the CPUs given) with
//! the bench configuration, and the transport ceiling `rls-ceiling` (the binary beside this one).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use testkit::ratelimitd::{log_field, Ratelimitd};

use crate::load_child::beside_this;

/// The bench configuration: domain `bench`, one key-only rule per algorithm, keyed by its name
/// (every value has its own counter): 1 000 000 per second for each algorithm but
/// sliding_window_log, never reached by this load; 1 000 per second for sliding_window_log,
/// whose state holds one entry per admitted request (with a hot key most of its requests are
/// OVER_LIMIT and the log stays at 1 000 entries; with 100k keys all are OK).
pub fn bench_config(algorithms: &[&str]) -> String {
    let mut yaml = String::from("domain: bench\ndescriptors:\n");
    for algorithm in algorithms {
        yaml.push_str(&format!(
            "  - key: {algorithm}\n    rate_limit: {{unit: second, requests_per_unit: {}, algorithm: {algorithm}}}\n",
            limit_of(algorithm)
        ));
    }
    yaml
}

/// The limit per second of an algorithm's rule in [`bench_config`].
pub fn limit_of(algorithm: &str) -> u64 {
    match algorithm {
        "sliding_window_log" => 1_000,
        _ => 1_000_000,
    }
}

/// `ratelimitd serve` on free loopback ports (the build at `binary`, else the one beside this
/// executable) with `args`, on `cpus` (empty: any).
pub fn ratelimitd(binary: Option<&Path>, args: &[String], cpus: &[usize]) -> Ratelimitd {
    let mut command = match binary {
        Some(binary) => testkit::ratelimitd::command_under(&[], binary),
        None => testkit::ratelimitd::command(),
    };
    command
        .args(["serve", "--grpc-addr", "127.0.0.1:0"])
        .args(["--http-addr", "127.0.0.1:0"])
        .args(args);
    if !cpus.is_empty() {
        testkit::cpu::pin_command(&mut command, cpus);
    }
    Ratelimitd::spawn(command)
}

/// How long rls-ceiling may take to say where it listens.
const CEILING_START_TIMEOUT: Duration = Duration::from_secs(30);

/// A running `rls-ceiling`; killed when dropped.
pub struct RlsCeiling {
    child: Child,
    addr: SocketAddr,
}

impl RlsCeiling {
    /// Starts `rls-ceiling --grpc-addr 127.0.0.1:0` on `cpus` (empty: any) and waits for its
    /// `grpc_addr=` line.
    pub fn start(cpus: &[usize]) -> Result<RlsCeiling, String> {
        RlsCeiling::start_under(&[], cpus, CEILING_START_TIMEOUT)
    }

    /// [`RlsCeiling::start`] under `wrapper` (`valgrind --tool=callgrind ...`: the process is the
    /// wrapper's), waiting up to `timeout` for its `grpc_addr=` line.
    pub fn start_under(
        wrapper: &[String],
        cpus: &[usize],
        timeout: Duration,
    ) -> Result<RlsCeiling, String> {
        let binary = beside_this("rls-ceiling")?;
        let mut command = match wrapper.split_first() {
            None => Command::new(&binary),
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
        };
        command
            .args(["--grpc-addr", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        if !cpus.is_empty() {
            testkit::cpu::pin_command(&mut command, cpus);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("{}: {e}", binary.display()))?;
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, rx) = mpsc::channel();
        // Reads every line to the end, so the child never blocks on a full pipe.
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some(addr) = log_field(&line, "grpc_addr") {
                    let _ = tx.send(addr);
                }
            }
        });
        match rx.recv_timeout(timeout) {
            Ok(addr) => Ok(RlsCeiling { child, addr }),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                Err(format!(
                    "{} printed no grpc_addr= line within {timeout:?}",
                    binary.display()
                ))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGTERM and waits up to `timeout` for the process to exit; false if it did not.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        // SAFETY: kill(2) on the pid of a child not yet waited for.
        unsafe { libc::kill(self.child.id() as libc::pid_t, libc::SIGTERM) };
        let deadline = std::time::Instant::now() + timeout;
        while std::time::Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        false
    }
}

impl Drop for RlsCeiling {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
