//! A real `redis-server` for tests: started on a free loopback port, never the one on 6379, and
//! killed when dropped.
//!
//! `RedisServer::start()` runs `redis-server --bind 127.0.0.1 --port <free> --save "" --appendonly
//! no` in a temporary directory and waits until it answers `PING`. If `redis-server` is not on
//! `PATH` it panics with a clear message: these tests need a real Redis and never skip.
//!
//! `RedisServer::start_with(&["--requirepass", "secret"])` appends server options.
//! `RedisServer::start_tls(&TlsFiles::generate(), &[])` serves TLS only (`--port 0 --tls-port
//! <free>`), with a throwaway CA and server certificate made by the `openssl` CLI; its `url()` is
//! `rediss://` and its `client()` trusts that CA. A redis-server built without TLS, or a missing
//! `openssl`, fails these tests with a clear message: they never skip either.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Options appended to the command line.
    extra: Vec<String>,
    /// Serve TLS only, with these files.
    tls: Option<TlsFiles>,
}

impl RedisServer {
    /// Starts a server on a free port of 127.0.0.1 and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] with `extra` options appended (`--requirepass secret`, ...). A
    /// server that requires a password counts as up when it answers PING with `NOAUTH`.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, None)
    }

    /// A server that speaks TLS only (`--port 0 --tls-port <free>`), with the certificate and key
    /// of `tls` and no client certificates required, plus `extra` options. Panics with a clear
    /// message if redis-server lacks TLS support.
    pub fn start_tls(tls: &TlsFiles, extra: &[&str]) -> RedisServer {
        RedisServer::launch(extra, Some(tls.clone()))
    }

    fn launch(extra: &[&str], tls: Option<TlsFiles>) -> RedisServer {
        let dir = tempfile::tempdir().expect("temporary directory for redis-server");
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
            tls,
        };
        // A port just released by the OS may be taken by someone else before redis binds it:
        // try a few.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port();
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://127.0.0.1:<port>/` for a TLS server.
    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://127.0.0.1:{}/", self.port)
    }

    /// The TLS files of a server started with [`RedisServer::start_tls`].
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.tls.as_ref()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A client for direct commands (`client().get_connection()` for a synchronous connection);
    /// over TLS for a TLS server, trusting its test CA.
    pub fn client(&self) -> redis::Client {
        self.client_for(&self.url())
    }

    /// A client for `url` (credentials, database...), trusting the test CA of a TLS server.
    pub fn client_for(&self, url: &str) -> redis::Client {
        match &self.tls {
            Some(tls) => tls.client(url),
            None => redis::Client::open(url).expect("redis url"),
        }
    }

    /// A synchronous connection for direct commands.
    pub fn connection(&self) -> redis::Connection {
        self.client()
            .get_connection()
            .expect("connect to the test redis-server")
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Its data is gone (no persistence).
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts a fresh one on the same port.
    pub fn restart(&mut self) {
        self.kill();
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            match self.spawn() {
                Ok(()) => return,
                // The old socket may linger a moment.
                Err(error) if Instant::now() < deadline => {
                    eprintln!(
                        "redis-server restart on port {} failed, retrying: {error}",
                        self.port
                    );
                    thread::sleep(Duration::from_millis(100));
                }
                Err(error) => panic!("could not restart redis-server: {error}"),
            }
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing answers.
    pub fn pause(&mut self) {
        self.signal("-STOP");
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
    }

    fn signal(&mut self, signal: &str) {
        let pid = self.child.as_ref().expect("redis-server is running").id();
        let status = Command::new("kill")
            .arg(signal)
            .arg(pid.to_string())
            .status()
            .expect("run kill");
        assert!(status.success(), "kill {signal} {pid} failed");
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        match self.child.as_mut() {
            Some(child) => child.try_wait().map(|s| s.is_none()).unwrap_or(false),
            None => false,
        }
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("redis.log")
    }

    /// What redis-server printed before its log file took over (fatal configuration errors).
    fn stderr_path(&self) -> PathBuf {
        self.dir.path().join("redis.stderr")
    }

    fn spawn(&mut self) -> Result<(), String> {
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        let stderr = std::fs::File::create(self.stderr_path()).expect("redis-server stderr file");
        let mut command = Command::new("redis-server");
        command.args(["--bind", "127.0.0.1"]);
        match &self.tls {
            None => {
                command.arg("--port").arg(self.port.to_string());
            }
            Some(tls) => {
                command
                    .args(["--port", "0", "--tls-port"])
                    .arg(self.port.to_string())
                    .arg("--tls-cert-file")
                    .arg(&tls.cert)
                    .arg("--tls-key-file")
                    .arg(&tls.key)
                    .arg("--tls-ca-cert-file")
                    .arg(&tls.ca)
                    .args(["--tls-auth-clients", "no"]);
            }
        }
        let child = command
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "redis-server is not on PATH: the Redis tests need a real redis-server \
                 (install it, e.g. `apt-get install redis-server`); they never skip"
            ),
            Err(error) => panic!("cannot run redis-server: {error}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let up = match &self.tls {
                None => ping(self.port),
                Some(tls) => tls_ping(tls, self.port),
            };
            if up {
                return Ok(());
            }
            if !self.is_running() {
                self.child = None;
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                let stderr = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
                if self.tls.is_some() && stderr.contains("tls-port") {
                    panic!(
                        "redis-server does not support TLS (it rejects --tls-port): the TLS tests \
                         need a redis-server built with TLS, such as Debian's redis-server 7; \
                         they never skip.\n{stderr}"
                    );
                }
                return Err(format!(
                    "redis-server exited on port {}: {stderr}{log}",
                    self.port
                ));
            }
            if Instant::now() > deadline {
                self.kill();
                return Err(format!(
                    "redis-server on port {} never answered PING",
                    self.port
                ));
            }
            thread::sleep(Duration::from_millis(5));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a paused (SIGSTOPped) server.
        self.kill();
    }
}

fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
        let port = listener.local_addr().expect("local address").port();
        if port != 6379 {
            return port;
        }
    }
}

/// Whether a Redis answers PING on 127.0.0.1:`port` (raw RESP, no client library involved):
/// `+PONG`, or `-NOAUTH` from a server that requires a password.
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = Vec::new();
    let mut byte = [0u8; 1];
    while reply.len() < 256 && !reply.ends_with(b"\r\n") {
        if stream.read_exact(&mut byte).is_err() {
            break;
        }
        reply.push(byte[0]);
    }
    let _ = stream.shutdown(Shutdown::Both);
    reply == b"+PONG\r\n" || reply.starts_with(b"-NOAUTH")
}

/// Whether a TLS Redis answers PING on 127.0.0.1:`port`, through a TLS handshake that verifies
/// the server against the test CA. `NOAUTH` counts as an answer.
fn tls_ping(tls: &TlsFiles, port: u16) -> bool {
    let client = tls.client(&format!("rediss://127.0.0.1:{port}/"));
    let Ok(mut connection) = client.get_connection_with_timeout(Duration::from_millis(500)) else {
        return false;
    };
    match redis::cmd("PING").query::<String>(&mut connection) {
        Ok(pong) => pong == "PONG",
        Err(error) => error.code() == Some("NOAUTH"),
    }
}

/// A throwaway PKI made with the `openssl` CLI: a CA, and a server certificate it signs for
/// `127.0.0.1` and `localhost`. The files live as long as any clone.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate (PEM), for IP 127.0.0.1 and DNS localhost.
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    _dir: std::sync::Arc<tempfile::TempDir>,
}

/// OpenSSL configuration for [`TlsFiles::generate`]: no dependence on the system's openssl.cnf.
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no

[dn]
CN = unused

[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash

[server]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature, keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

impl TlsFiles {
    /// Generates a fresh CA and server certificate (ECDSA P-256, valid two days) in a temporary
    /// directory. Panics if `openssl` is not on `PATH`.
    pub fn generate() -> TlsFiles {
        let dir = tempfile::tempdir().expect("temporary directory for TLS files");
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("openssl.cnf"), OPENSSL_CNF).expect("write openssl.cnf");
        let cnf = path("openssl.cnf");
        // A name of its own, so two test CAs are two issuers (as two deployments' CAs would be).
        let ca_subject = format!(
            "/CN=ratelimitd test CA {}",
            dir.path().file_name().unwrap().to_string_lossy()
        );
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &[
                &["req", "-x509", "-new", "-days", "2", "-sha256"][..],
                &ec,
                &["-subj", &ca_subject, "-extensions", "ca"],
            ]
            .concat(),
            &[
                ("-config", &cnf),
                ("-keyout", &path("ca.key")),
                ("-out", &path("ca.crt")),
            ],
        );
        openssl(
            &[&["req", "-new"][..], &ec, &["-subj", "/CN=localhost"]].concat(),
            &[
                ("-config", &cnf),
                ("-keyout", &path("server.key")),
                ("-out", &path("server.csr")),
            ],
        );
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-sha256",
                "-set_serial",
                "2",
                "-extensions",
                "server",
            ],
            &[
                ("-in", &path("server.csr")),
                ("-CA", &path("ca.crt")),
                ("-CAkey", &path("ca.key")),
                ("-extfile", &cnf),
                ("-out", &path("server.crt")),
            ],
        );
        TlsFiles {
            ca: path("ca.crt"),
            cert: path("server.crt"),
            key: path("server.key"),
            _dir: std::sync::Arc::new(dir),
        }
    }

    /// A redis-rs client for `url` (`rediss://...`) that trusts only this CA.
    pub fn client(&self, url: &str) -> redis::Client {
        // The test process needs a rustls crypto provider too; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let ca = std::fs::read(&self.ca).expect("read the test CA");
        redis::Client::build_with_tls(
            url,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(ca),
            },
        )
        .expect("TLS client for the test redis-server")
    }
}

/// Runs `openssl args... name path...`; panics with its output if it fails or is missing.
fn openssl(args: &[&str], paths: &[(&str, &Path)]) {
    let mut command = Command::new("openssl");
    command.args(args);
    for (name, path) in paths {
        command.arg(name).arg(path);
    }
    let output = match command.output() {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
            "openssl is not on PATH: the TLS tests make their certificates with the openssl CLI \
             (install it, e.g. `apt-get install openssl`); they never skip"
        ),
        Err(error) => panic!("cannot run openssl: {error}"),
    };
    assert!(
        output.status.success(),
        "openssl {args:?} failed: {}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}
