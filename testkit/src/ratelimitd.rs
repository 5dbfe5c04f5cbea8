//! The real `ratelimitd` binary as a test fixture: started on free ports, spoken to over gRPC and
//! HTTP, signalled, and killed when the test ends.
//!
//! `Ratelimitd::start(&["--config", path])` runs `ratelimitd serve --grpc-addr 127.0.0.1:0
//! --http-addr 127.0.0.1:0 --config path`, waits for the log line that carries `grpc_addr=` (or
//! `grpc_uds=` for a server given `--grpc-uds`) and `http_addr=`, and keeps draining the child's stdout and stderr in background threads so the
//! child never blocks on a full pipe. Extra arguments (`--redis-url ...`) pass straight through.

use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ratelimitd::proto::common::rate_limit_descriptor::Entry;
use ratelimitd::proto::common::RateLimitDescriptor;
use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use ratelimitd::proto::rls::rate_limit_service_client::RateLimitServiceClient;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use tonic::transport::{Channel, Endpoint};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Path of the binary under test. Cargo builds it for the root package's integration tests and
/// names it in `CARGO_BIN_EXE_ratelimitd` at compile time of those tests only, not of this crate:
/// so it is read at run time, where cargo sets it too, else found where cargo puts it: beside the
/// running executable (a tool such as `target/<profile>/ratelimit-bench` runs
/// `target/<profile>/ratelimitd`), else next to its directory (`target/<profile>/deps/it-<hash>`
/// runs `target/<profile>/ratelimitd`).
pub fn bin() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("CARGO_BIN_EXE_ratelimitd") {
            Some(path) => PathBuf::from(path),
            None => {
                let running = std::env::current_exe().expect("the running executable's path");
                let beside = running
                    .parent()
                    .expect("an executable lives in a directory")
                    .join("ratelimitd");
                if beside.is_file() {
                    beside
                } else {
                    running
                        .parent()
                        .and_then(Path::parent)
                        .expect("the test executable lives in target/<profile>/deps")
                        .join("ratelimitd")
                }
            }
        };
        assert!(
            bin.is_file(),
            "no ratelimitd binary at {} (run the tests with cargo test)",
            bin.display()
        );
        bin
    })
}

/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The gRPC client type the tests use.
pub type Client = RateLimitServiceClient<Channel>;

/// A file of `tests/fixtures/`.
pub fn fixture(name: &str) -> PathBuf {
    crate::repo_root().join("tests/fixtures").join(name)
}

/// A file of `tests/fixtures/compat/`: configurations in envoyproxy/ratelimit's schema, one for
/// each kind of file in envoyproxy/ratelimit's own fixtures (`valid/`, `invalid/`, `later/`).
pub fn compat(name: &str) -> PathBuf {
    fixture("compat").join(name)
}

/// A `Command` for the binary with an environment that cannot leak into the test: no
/// `RATELIMITD_*` variables, none of envoyproxy/ratelimit's (`PORT`, `REDIS_URL`,
/// `DOG_STATSD_MOGRIFIER_*`, ...), no Datadog `DD_*` or OpenTelemetry `OTEL_*` ones and no
/// `RUST_LOG` from the caller's shell, no colours.
pub fn command() -> Command {
    command_under(&[], bin())
}

/// [`command`] for the ratelimitd binary at `binary` (another build of it), run under `wrapper`
/// when it names a program: `["valgrind", "--tool=callgrind"]` runs `valgrind --tool=callgrind
/// <binary> ...`, whose process (and pid) is the server's. The same clean environment.
pub fn command_under(wrapper: &[String], binary: &Path) -> Command {
    let mut cmd = match wrapper.split_first() {
        None => Command::new(binary),
        Some((program, args)) => {
            let mut cmd = Command::new(program);
            cmd.args(args).arg(binary);
            cmd
        }
    };
    for (name, _) in std::env::vars_os() {
        let name_str = name.to_string_lossy();
        if name_str.starts_with("RATELIMITD_")
            || name_str.starts_with("OTEL_")
            || name_str.starts_with("DOG_STATSD_MOGRIFIER_")
            || name_str.starts_with("DD_")
            || name_str == "RUST_LOG"
            || ratelimitd::envoyproxy_env::VARIABLES.contains(&name_str.as_ref())
        {
            cmd.env_remove(&name);
        }
    }
    cmd.env("NO_COLOR", "1").env("RUST_BACKTRACE", "1");
    cmd
}

/// Runs the binary to completion with a timeout; returns (exit status, stdout, stderr).
pub fn run_to_end(mut cmd: Command, timeout: Duration) -> (ExitStatus, String, String) {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn ratelimitd");
    let out = drain(child.stdout.take().unwrap());
    let err = drain(child.stderr.take().unwrap());
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "ratelimitd {:?} did not exit within {timeout:?}\nstdout:\n{}\nstderr:\n{}",
                cmd.get_args().collect::<Vec<_>>(),
                out.join().unwrap(),
                err.join().unwrap()
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    (status, out.join().unwrap(), err.join().unwrap())
}

fn drain<R: Read + Send + 'static>(mut reader: R) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = reader.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

/// A running `ratelimitd serve`.
pub struct Ratelimitd {
    child: Child,
    grpc_addr: Option<SocketAddr>,
    grpc_uds: Option<PathBuf>,
    http_addr: SocketAddr,
    log: Arc<Mutex<String>>,
    status: Option<ExitStatus>,
}

impl Ratelimitd {
    /// Starts `ratelimitd serve` on free loopback ports with `args` appended.
    pub fn start(args: &[&str]) -> Ratelimitd {
        Ratelimitd::start_with_env(args, &[])
    }

    /// Like [`Ratelimitd::start`], with extra environment variables.
    pub fn start_with_env(args: &[&str], envs: &[(&str, &str)]) -> Ratelimitd {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(args);
        for (name, value) in envs {
            cmd.env(name, value);
        }
        Ratelimitd::spawn(cmd)
    }

    /// Like [`Ratelimitd::start`], its gRPC port at `grpc_addr` (a port a restart can take
    /// again).
    pub fn start_on<S: AsRef<std::ffi::OsStr>>(grpc_addr: &str, args: &[S]) -> Ratelimitd {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--grpc-addr",
            grpc_addr,
            "--http-addr",
            "127.0.0.1:0",
        ])
        .args(args);
        Ratelimitd::spawn(cmd)
    }

    /// Starts `cmd` (a `serve` command) and waits for its listening line.
    pub fn spawn(cmd: Command) -> Ratelimitd {
        Ratelimitd::spawn_within(cmd, START_TIMEOUT)
    }

    /// [`Ratelimitd::spawn`], waiting up to `timeout` for the listening line (a server run under
    /// valgrind takes many times longer to start).
    pub fn spawn_within(mut cmd: Command, timeout: Duration) -> Ratelimitd {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn ratelimitd");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel::<String>();
        pump(child.stdout.take().unwrap(), log.clone(), tx.clone());
        pump(child.stderr.take().unwrap(), log.clone(), tx);

        let deadline = Instant::now() + timeout;
        let mut grpc = None;
        let mut uds = None;
        let mut http = None;
        while (grpc.is_none() && uds.is_none()) || http.is_none() {
            match rx.recv_timeout(Duration::from_millis(50)) {
                Ok(line) => {
                    grpc = grpc.or_else(|| log_field(&line, "grpc_addr"));
                    uds = uds.or_else(|| log_text_field(&line, "grpc_uds").map(PathBuf::from));
                    http = http.or_else(|| log_field(&line, "http_addr"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    thread::sleep(Duration::from_millis(50));
                }
            }
            if let Some(status) = child.try_wait().expect("try_wait") {
                thread::sleep(Duration::from_millis(100));
                panic!(
                    "ratelimitd exited with {status} before listening; args {:?}; output:\n{}",
                    cmd.get_args().collect::<Vec<_>>(),
                    log.lock().unwrap()
                );
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "ratelimitd printed no `grpc_addr=` (or `grpc_uds=`) / `http_addr=` line within {timeout:?}; output:\n{}",
                    log.lock().unwrap()
                );
            }
        }
        Ratelimitd {
            child,
            grpc_addr: grpc,
            grpc_uds: uds,
            http_addr: http.unwrap(),
            log,
            status: None,
        }
    }

    /// The gRPC port's TCP address; panics for a server on a unix socket.
    pub fn grpc_addr(&self) -> SocketAddr {
        self.grpc_addr.unwrap_or_else(|| {
            panic!(
                "ratelimitd serves gRPC on the unix socket {:?}, not on TCP",
                self.grpc_uds
            )
        })
    }

    /// The unix socket gRPC is served on (`--grpc-uds`), as the startup line says it.
    pub fn grpc_uds(&self) -> &Path {
        self.grpc_uds
            .as_deref()
            .expect("ratelimitd serves gRPC on TCP, not on a unix socket")
    }

    pub fn http_addr(&self) -> SocketAddr {
        self.http_addr
    }

    /// The RLS port's address (`--rls-addr`), as its startup line says it.
    pub fn rls_addr(&self) -> SocketAddr {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            let output = self.output();
            let found = output.lines().find_map(|line| {
                let at = line.find("rls_addr=")? + "rls_addr=".len();
                line[at..].split_whitespace().next()?.parse().ok()
            });
            if let Some(addr) = found {
                return addr;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "ratelimitd printed no `rls_addr=` line; output:\n{output}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the process wrote so far (stdout and stderr, interleaved by line).
    pub fn output(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    /// A new HTTP/2 connection to the gRPC port.
    pub async fn channel(&self) -> Channel {
        channel(self.grpc_addr()).await
    }

    /// A RateLimitService client on its own HTTP/2 connection.
    pub async fn client(&self) -> Client {
        client(self.grpc_addr()).await
    }

    /// A grpc.health.v1 client on its own HTTP/2 connection.
    pub async fn health_client(&self) -> HealthClient<Channel> {
        HealthClient::new(self.channel().await)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal("TERM");
    }

    /// Sends a signal by name (`TERM`, `INT`, ...) with `kill`.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.pid().to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{name} {} failed", self.pid());
    }

    /// Waits up to `timeout` for the process to exit; `None` if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.status.is_some() {
            return self.status;
        }
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.status = Some(status);
                // Let the pump threads collect the last lines.
                thread::sleep(Duration::from_millis(50));
                return self.status;
            }
            if Instant::now() > deadline {
                return None;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Like [`Ratelimitd::wait_exit`], but sleeps on the async runtime between polls, so the
    /// test's own connections keep being driven (answering the server's GOAWAY / PING while it
    /// drains) instead of freezing with a blocked thread.
    pub async fn exited(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.wait_exit(Duration::ZERO) {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.wait_exit(Duration::ZERO).is_none()
    }
}

/// The overall health status (service `""`) answered on `health`, as the proto's integer (compare
/// with `ServingStatus::Serving as i32`); panics if the call fails.
pub async fn overall_health(health: &mut HealthClient<Channel>) -> i32 {
    health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status
}

/// envoyproxy/ratelimit's variables for loopback ports the kernel picks, with statsd off (nothing
/// listens on its default localhost:8125 here): an upstream Deployment's listeners, for tests.
pub const UPSTREAM_LOOPBACK: [(&str, &str); 7] = [
    ("GRPC_HOST", "127.0.0.1"),
    ("GRPC_PORT", "0"),
    ("HOST", "127.0.0.1"),
    ("PORT", "0"),
    ("DEBUG_HOST", "127.0.0.1"),
    ("DEBUG_PORT", "0"),
    ("USE_STATSD", "false"),
];

/// The overall health (service `""`) of the server at `addr`; panics if the call fails.
pub async fn serving_status(addr: SocketAddr) -> ServingStatus {
    let mut health = HealthClient::new(channel(addr).await);
    ServingStatus::try_from(overall_health(&mut health).await).expect("a serving status")
}

impl Drop for Ratelimitd {
    fn drop(&mut self) {
        if self.status.is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Copies every line of `reader` into `log` and to `tx` (while anyone listens), until EOF.
fn pump<R: Read + Send + 'static>(reader: R, log: Arc<Mutex<String>>, tx: mpsc::Sender<String>) {
    thread::spawn(move || {
        let mut reader = BufReader::new(reader);
        let mut buf = Vec::new();
        loop {
            buf.clear();
            match reader.read_until(b'\n', &mut buf) {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let line = strip_ansi(&String::from_utf8_lossy(&buf));
                    log.lock().unwrap().push_str(&line);
                    if !line.ends_with('\n') {
                        log.lock().unwrap().push('\n');
                    }
                    let _ = tx.send(line);
                }
            }
        }
    });
}

/// Removes ANSI escape sequences (colours), in case the logger emits them into a pipe.
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for c in chars.by_ref() {
                    if c.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// Finds `name=ADDR` (text logs) or `"name":"ADDR"` (JSON logs) in a log line.
pub fn log_field(line: &str, name: &str) -> Option<SocketAddr> {
    for pattern in [format!("{name}="), format!("\"{name}\":")] {
        if let Some(at) = line.find(&pattern) {
            let rest = &line[at + pattern.len()..];
            let rest = rest.trim_start_matches(['"', ' ']);
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '}')
                .unwrap_or(rest.len());
            if let Ok(addr) = rest[..end].parse() {
                return Some(addr);
            }
        }
    }
    None
}

/// The value of `name=VALUE` (text logs) or `"name":"VALUE"` (JSON logs) in a log line: up to
/// the next space, quote, comma or brace.
pub fn log_text_field<'a>(line: &'a str, name: &str) -> Option<&'a str> {
    for pattern in [format!("{name}="), format!("\"{name}\":")] {
        if let Some(at) = line.find(&pattern) {
            let rest = &line[at + pattern.len()..];
            let rest = rest.trim_start_matches(['"', ' ']);
            let end = rest
                .find(|c: char| c.is_whitespace() || c == '"' || c == ',' || c == '}')
                .unwrap_or(rest.len());
            if end > 0 {
                return Some(&rest[..end]);
            }
        }
    }
    None
}

/// A new HTTP/2 connection to `addr`.
pub async fn channel(addr: SocketAddr) -> Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"))
}

/// A RateLimitService client on a new HTTP/2 connection to `addr`.
pub async fn client(addr: SocketAddr) -> Client {
    RateLimitServiceClient::new(channel(addr).await)
        .max_decoding_message_size(64 << 20)
        .max_encoding_message_size(64 << 20)
}

// ---------------------------------------------------------------------------------------------
// Requests and responses
// ---------------------------------------------------------------------------------------------

/// A descriptor of `(key, value)` entries, without override or hits.
pub fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(key, value)| Entry {
                key: key.to_string(),
                value: value.to_string(),
            })
            .collect(),
        limit: None,
        hits_addend: None,
        is_negative_hits: false,
    }
}

/// A request for `domain` with one descriptor per slice and the request-level `hits_addend`
/// (0 = unset).
pub fn request(
    domain: &str,
    descriptors: &[&[(&str, &str)]],
    hits_addend: u32,
) -> RateLimitRequest {
    RateLimitRequest {
        domain: domain.to_string(),
        descriptors: descriptors.iter().map(|d| descriptor(d)).collect(),
        hits_addend,
    }
}

/// Sends `req` and returns the response, checking the invariants every answer must keep:
/// `overall_code` is never UNKNOWN, there is one status per descriptor, no status is UNKNOWN,
/// and a non-OK overall code has at least one OVER_LIMIT status.
pub async fn should(client: &mut Client, req: RateLimitRequest) -> RateLimitResponse {
    let descriptors = req.descriptors.len();
    let resp = client
        .should_rate_limit(req)
        .await
        .unwrap_or_else(|status| panic!("ShouldRateLimit failed: {status:?}"))
        .into_inner();
    check_invariants(&resp, descriptors);
    resp
}

/// The invariants of [`should`], for responses obtained otherwise.
pub fn check_invariants(resp: &RateLimitResponse, descriptors: usize) {
    assert_ne!(
        resp.overall_code,
        Code::Unknown as i32,
        "overall_code UNKNOWN: {resp:?}"
    );
    assert_eq!(
        resp.statuses.len(),
        descriptors,
        "one status per descriptor: {resp:?}"
    );
    for status in &resp.statuses {
        assert_ne!(
            status.code,
            Code::Unknown as i32,
            "status UNKNOWN: {resp:?}"
        );
    }
    if resp.overall_code == Code::OverLimit as i32 {
        assert!(
            resp.statuses
                .iter()
                .any(|s| s.code == Code::OverLimit as i32),
            "OVER_LIMIT overall without an OVER_LIMIT status: {resp:?}"
        );
    }
}

pub fn overall(resp: &RateLimitResponse) -> Code {
    Code::try_from(resp.overall_code).expect("valid overall code")
}

pub fn code(status: &DescriptorStatus) -> Code {
    Code::try_from(status.code).expect("valid status code")
}

/// `(requests_per_unit, unit)` of the status's `current_limit`, if any.
pub fn limit(status: &DescriptorStatus) -> Option<(u32, Unit)> {
    status
        .current_limit
        .as_ref()
        .map(|l| (l.requests_per_unit, Unit::try_from(l.unit).expect("unit")))
}

/// `duration_until_reset` in seconds (0 when absent).
pub fn reset_secs(status: &DescriptorStatus) -> f64 {
    status
        .duration_until_reset
        .as_ref()
        .map(|d| d.seconds as f64 + f64::from(d.nanos) / 1e9)
        .unwrap_or(0.0)
}

/// Asserts `actual` is within `tolerance` seconds of `expected`.
#[track_caller]
pub fn assert_secs(actual: f64, expected: f64, tolerance: f64, what: &str) {
    assert!(
        (actual - expected).abs() <= tolerance,
        "{what}: duration_until_reset {actual} s, expected {expected} ± {tolerance} s"
    );
}

/// Unix time in seconds.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Seconds from now to the end of the current epoch-aligned window of `window` seconds.
pub fn to_window_end(window: u64) -> f64 {
    let w = window as f64;
    w - unix_now() % w
}

/// Sleeps, if needed, until at least `room` seconds remain in the current epoch-aligned window
/// of `window` seconds, so a test that needs one window is not split by a boundary.
pub fn wait_for_window_room(window: u64, room: u64) {
    let left = to_window_end(window);
    if left < room as f64 {
        thread::sleep(Duration::from_secs_f64(left + 0.05));
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/// A plain HTTP/1.1 GET; returns (status code, body).
pub async fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let (code, _, body) = http_request(addr, "GET", path, &[]).await;
    (code, body)
}

/// An HTTP/1.1 request of `method` with `headers` and no body; returns (status code, head,
/// body), the head being the status line and the headers.
pub async fn http_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, String, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if method == "POST" {
        req.push_str("Content-Length: 0\r\n");
    }
    for (name, value) in headers {
        req.push_str(&format!("{name}: {value}\r\n"));
    }
    req.push_str("\r\n");
    stream.write_all(req.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("HTTP response within 10 s")
        .expect("read HTTP response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("malformed HTTP response: {text:?}"));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status code in {head:?}"));
    let chunked = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("transfer-encoding: chunked")
    });
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    (code, head.to_owned(), body)
}

/// The body of an HTTP/1.1 response sent with `Transfer-Encoding: chunked`, joined.
pub fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Concurrency (shared by the memory and Redis suites; see tests/fixtures/serve/concurrency.yaml)
// ---------------------------------------------------------------------------------------------

/// Codes of `requests` concurrent calls, spread over `connections` HTTP/2 connections that are
/// themselves spread round-robin over `addrs` (one or several ratelimitd processes). Every task
/// waits at a barrier so the calls really overlap. `make(i)` builds the i-th request.
pub async fn hammer(
    addrs: &[SocketAddr],
    connections: usize,
    requests: usize,
    make: impl Fn(usize) -> RateLimitRequest,
) -> Vec<RateLimitResponse> {
    let mut clients = Vec::new();
    for i in 0..connections {
        clients.push(client(addrs[i % addrs.len()]).await);
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(requests));
    let mut tasks = Vec::with_capacity(requests);
    for i in 0..requests {
        let mut c = clients[i % connections].clone();
        let req = make(i);
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let descriptors = req.descriptors.len();
            barrier.wait().await;
            let resp = c
                .should_rate_limit(req)
                .await
                .unwrap_or_else(|s| panic!("concurrent call {i} failed: {s:?}"))
                .into_inner();
            check_invariants(&resp, descriptors);
            resp
        }));
    }
    let mut out = Vec::with_capacity(requests);
    for task in tasks {
        out.push(task.await.expect("request task"));
    }
    out
}

/// `limit_remaining` of `entries` without charging (descriptor hits_addend 0).
pub async fn remaining_of(addr: SocketAddr, domain: &str, entries: &[(&str, &str)]) -> u32 {
    let mut d = descriptor(entries);
    d.hits_addend = Some(0);
    let req = RateLimitRequest {
        domain: domain.into(),
        descriptors: vec![d],
        hits_addend: 0,
    };
    let mut c = client(addr).await;
    should(&mut c, req).await.statuses[0].limit_remaining
}

/// 300 concurrent requests on one key of `algorithm` (50 per hour in concurrency.yaml) through
/// `addrs`: exactly 50 are admitted, and nothing remains.
pub async fn assert_exact_admission(addrs: &[SocketAddr], algorithm: &str, value: &str) {
    wait_for_window_room(3600, 30);
    let resps = hammer(addrs, 6, 300, |_| {
        request("concurrency", &[&[(algorithm, value)]], 0)
    })
    .await;
    let ok = resps
        .iter()
        .filter(|r| r.overall_code == Code::Ok as i32)
        .count();
    let over = resps
        .iter()
        .filter(|r| r.overall_code == Code::OverLimit as i32)
        .count();
    assert_eq!(
        (ok, over),
        (50, 250),
        "{algorithm}: admitted / denied of 300"
    );
    let mut remaining: Vec<u32> = resps
        .iter()
        .filter(|r| r.overall_code == Code::Ok as i32)
        .map(|r| r.statuses[0].limit_remaining)
        .collect();
    remaining.sort_unstable();
    assert_eq!(
        remaining,
        (0..50).collect::<Vec<u32>>(),
        "{algorithm}: each admitted request saw its own remaining"
    );
    assert_eq!(
        remaining_of(addrs[0], "concurrency", &[(algorithm, value)]).await,
        0,
        "{algorithm}: nothing left"
    );
}

/// 300 concurrent requests of three descriptors each (`algorithm` 50, `algorithm_b` 80,
/// `algorithm_c` 120 per hour): exactly 50 admitted, and the denied 250 charged nothing at the
/// bigger limits (30 and 70 remain).
pub async fn assert_exact_admission_three_descriptors(
    addrs: &[SocketAddr],
    algorithm: &str,
    value: &str,
) {
    wait_for_window_room(3600, 30);
    let b = format!("{algorithm}_b");
    let c = format!("{algorithm}_c");
    let resps = hammer(addrs, 6, 300, |_| {
        request(
            "concurrency",
            &[&[(algorithm, value)], &[(&b, value)], &[(&c, value)]],
            0,
        )
    })
    .await;
    let ok = resps
        .iter()
        .filter(|r| r.overall_code == Code::Ok as i32)
        .count();
    assert_eq!(
        ok, 50,
        "{algorithm}: admitted of 300 three-descriptor requests"
    );
    assert_eq!(
        remaining_of(addrs[0], "concurrency", &[(algorithm, value)]).await,
        0,
        "{algorithm}: first limit exhausted"
    );
    assert_eq!(
        remaining_of(addrs[0], "concurrency", &[(&b, value)]).await,
        30,
        "{algorithm}_b: charged exactly by the 50 admitted requests"
    );
    assert_eq!(
        remaining_of(addrs[0], "concurrency", &[(&c, value)]).await,
        70,
        "{algorithm}_c: charged exactly by the 50 admitted requests"
    );
}

/// Runs `serve` on free loopback ports with `args` and `env`; it must refuse to start: exit 1
/// within 10 s (refused at once, not after waiting). Returns its stdout and stderr together.
pub fn refused_start(args: &[&str], env: &[(&str, &str)]) -> String {
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ])
    .args(args);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let started = Instant::now();
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
    let text = format!("{stdout}{stderr}");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused at once, not after waiting: {text}"
    );
    text
}

/// Three hits of `key=value` in `domain` (a limit of 2 per hour): OK, OK, OVER_LIMIT, the
/// overall code each time the descriptor's own.
pub async fn assert_two_then_over(server: &Ratelimitd, domain: &str, key: &str, value: &str) {
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let response = should(&mut client, request(domain, &[&[(key, value)]], 1)).await;
        assert_eq!(overall(&response), code(&response.statuses[0]));
        codes.push(overall(&response));
    }
    assert_eq!(
        codes,
        [Code::Ok, Code::Ok, Code::OverLimit],
        "{}",
        server.output()
    );
}
