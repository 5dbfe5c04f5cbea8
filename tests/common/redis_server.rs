//! A real `redis-server` for tests: started on a free loopback port, never the one on 6379, and
//! killed when dropped.
//!
//! `RedisServer::start()` runs `redis-server --bind 127.0.0.1 --port <free> --save "" --appendonly
//! no` in a temporary directory and waits until it answers `PING`. If `redis-server` is not on
//! `PATH` it panics with a clear message: these tests need a real Redis and never skip.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl RedisServer {
    /// Starts a server on a free port of 127.0.0.1 and waits until it answers PING.
    pub fn start() -> RedisServer {
        let dir = tempfile::tempdir().expect("temporary directory for redis-server");
        let mut server = RedisServer {
            port: 0,
            child: None,
            dir,
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

    /// `redis://127.0.0.1:<port>/`
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// A client for direct commands (`client().get_connection()` for a synchronous connection).
    pub fn client(&self) -> redis::Client {
        redis::Client::open(self.url()).expect("redis url")
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

    fn spawn(&mut self) -> Result<(), String> {
        let log = self.log_path();
        let _ = std::fs::remove_file(&log);
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--port"])
            .arg(self.port.to_string())
            .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .arg("--logfile")
            .arg(&log)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
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
            if ping(self.port) {
                return Ok(());
            }
            if !self.is_running() {
                self.child = None;
                let log = std::fs::read_to_string(&log).unwrap_or_default();
                return Err(format!("redis-server exited on port {}: {log}", self.port));
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

/// Whether a Redis answers PING on 127.0.0.1:`port` (raw RESP, no client library involved).
fn ping(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    let ok = stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n";
    let _ = stream.shutdown(Shutdown::Both);
    ok
}
