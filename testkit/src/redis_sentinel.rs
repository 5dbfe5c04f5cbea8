//! A real Redis Sentinel setup for tests: one master, one replica and three Sentinels on free
//! loopback ports, killed when dropped.
//!
//! Sentinel support is tested against real failovers, not a mock:
//! `RedisSentinel::start("mymaster")` starts a master, a replica (`replicaof` the master) and,
//! once the replica is in sync, three `redis-server <sentinel.conf> --sentinel` processes that
//! monitor the master with quorum 2, `down-after-milliseconds 1000`, `failover-timeout 3000` and
//! `parallel-syncs 1`. It waits until every Sentinel reports the master, knows the replica with
//! its link up, and knows the two other Sentinels. [`RedisSentinel::start_with`] adds a data
//! password, a Sentinel password or TLS ([`SentinelOptions`]).
//!
//! Every process runs with a config file in its own temporary directory, as deployed ones do:
//! Sentinel saves its state in `sentinel.conf`, and sends `REPLICAOF` together with
//! `CONFIG REWRITE` to the data nodes, so a restarted node comes back with the role Sentinel gave
//! it. A master killed and restarted comes back as a master (nothing rewrote its file) until a
//! Sentinel turns it into a replica; Sentinel does that only after the node has reported the
//! wrong role for 8 s, at its next `INFO` poll (every 10 s), so about ten seconds, and the same
//! holds for the old master after [`RedisSentinel::failover`]: [`RedisSentinel::wait_replica`]
//! waits for it. Until then there are two masters.
//!
//! Sentinel stops acting for 30 s (TILT mode) when its timer ran more than 2 s late, as it does
//! when a busy test machine leaves the process unscheduled for a moment; a test would then time
//! out. The helper moves that to 10 s late and 3 s of TILT (`SENTINEL DEBUG tilt-trigger 10000
//! tilt-period 3000`, on every start and restart); the other Sentinel timings keep their
//! defaults.
//!
//! Every wait is bounded and panics with what each Sentinel and data node reports. A missing
//! `redis-server` fails the tests with a clear message: they never skip. Sentinel mode is
//! `redis-server --sentinel` (Debian's `redis-sentinel` package only adds a symlink and a
//! system service).

use std::collections::HashMap;
use std::time::Duration;

use super::redis_server::{wait_for, Auth, RedisServer, Role, ServerOptions, TlsFiles};

/// How long the setup may take to form, and the bound of [`RedisSentinel::failover`].
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// The Sentinels' quorum: how many must agree that the master is down.
const QUORUM: usize = 2;

/// `SENTINEL DEBUG` settings of every Sentinel (milliseconds): TILT mode only after the timer
/// ran 10 s late (not 2 s), and for 3 s (not 30 s).
const SENTINEL_DEBUG: [(&str, &str); 2] = [("tilt-trigger", "10000"), ("tilt-period", "3000")];

/// What [`RedisSentinel::start_with`] sets up beyond a plain setup.
#[derive(Clone, Debug, Default)]
pub struct SentinelOptions {
    /// The data nodes' password (`requirepass` and `masterauth` on both); the Sentinels use it
    /// for them (`sentinel auth-pass`).
    pub password: Option<String>,
    /// The Sentinels' own password (`requirepass`), which they also use with each other
    /// (`sentinel sentinel-pass`).
    pub sentinel_password: Option<String>,
    /// Serve TLS only on every process (`--port 0 --tls-port <port>`), with
    /// `tls-replication yes` (replicas and Sentinels connect to data nodes, and Sentinels to
    /// each other, over TLS), using these files.
    pub tls: Option<TlsFiles>,
    /// More options appended to every process's command line, data nodes and Sentinels
    /// (`--tls-auth-clients yes`, ...).
    pub extra: Vec<String>,
}

pub struct RedisSentinel {
    master_name: String,
    /// The initial master, then the initial replica.
    data: Vec<RedisServer>,
    sentinels: Vec<RedisServer>,
    options: SentinelOptions,
}

impl RedisSentinel {
    /// Starts a master, its replica and three Sentinels monitoring it as `master_name`, and
    /// waits until the Sentinels know the whole setup.
    pub fn start(master_name: &str) -> RedisSentinel {
        RedisSentinel::start_with(master_name, &SentinelOptions::default())
    }

    /// [`RedisSentinel::start`] with passwords or TLS ([`SentinelOptions`]).
    pub fn start_with(master_name: &str, options: &SentinelOptions) -> RedisSentinel {
        assert!(
            !master_name.is_empty() && !master_name.contains(char::is_whitespace),
            "a master name is one word, not {master_name:?}"
        );
        let mut data_args: Vec<String> = vec!["--repl-diskless-sync-delay".into(), "0".into()];
        if let Some(password) = &options.password {
            data_args
                .extend(["--requirepass", password, "--masterauth", password].map(String::from));
        }
        if options.tls.is_some() {
            data_args.extend(["--tls-replication", "yes"].map(String::from));
        }
        data_args.extend(options.extra.iter().cloned());
        let data_node = |config: String| {
            RedisServer::start_options(ServerOptions {
                extra: data_args.clone(),
                tls: options.tls.clone(),
                config_file: Some(config),
                ..ServerOptions::default()
            })
        };
        let master = data_node(String::new());
        let master_port = master.port();
        let replica = data_node(format!("replicaof 127.0.0.1 {master_port}\n"));
        let mut setup = RedisSentinel {
            master_name: master_name.to_string(),
            data: vec![master, replica],
            sentinels: Vec::new(),
            options: options.clone(),
        };
        let replica_port = setup.data[1].port();
        // Sentinels learn of replicas from the master's INFO, polled every 10 s: start them once
        // the replica is attached, so that their first INFO lists it.
        setup.wait_replica(replica_port, WAIT_TIMEOUT);

        let mut config = format!(
            "sentinel monitor {master_name} 127.0.0.1 {master_port} {QUORUM}\n\
             sentinel down-after-milliseconds {master_name} 1000\n\
             sentinel failover-timeout {master_name} 3000\n\
             sentinel parallel-syncs {master_name} 1\n"
        );
        if let Some(password) = &options.password {
            config.push_str(&format!("sentinel auth-pass {master_name} {password}\n"));
        }
        if let Some(password) = &options.sentinel_password {
            config.push_str(&format!(
                "requirepass {password}\nsentinel sentinel-pass {password}\n"
            ));
        }
        let mut sentinel_args = Vec::new();
        if options.tls.is_some() {
            sentinel_args.extend(["--tls-replication", "yes"].map(String::from));
        }
        sentinel_args.extend(options.extra.iter().cloned());
        for _ in 0..3 {
            let sentinel = RedisServer::start_options(ServerOptions {
                extra: sentinel_args.clone(),
                tls: options.tls.clone(),
                config_file: Some(config.clone()),
                sentinel: true,
                ..ServerOptions::default()
            });
            setup.tune(&sentinel);
            setup.sentinels.push(sentinel);
        }
        wait_for(WAIT_TIMEOUT, "the Sentinels to know the setup", || {
            for sentinel in &setup.sentinels {
                setup.check_sentinel_knows(sentinel, master_port, replica_port)?;
            }
            Ok(())
        });
        setup
    }

    /// Applies [`SENTINEL_DEBUG`] to `sentinel`.
    fn tune(&self, sentinel: &RedisServer) {
        let mut command = redis::cmd("SENTINEL");
        command.arg("DEBUG");
        for (name, value) in SENTINEL_DEBUG {
            command.arg(name).arg(value);
        }
        if let Err(error) = self.sentinel_query::<String>(sentinel, &command) {
            panic!("SENTINEL DEBUG on Sentinel {}: {error}", sentinel.port());
        }
    }

    fn check_sentinel_knows(
        &self,
        sentinel: &RedisServer,
        master_port: u16,
        replica_port: u16,
    ) -> Result<(), String> {
        let port = sentinel.port();
        let reported = self.try_master_from(sentinel)?;
        if reported != Some(master_port) {
            return Err(format!(
                "Sentinel {port} reports master {reported:?}, not {master_port}\n{}",
                self.describe()
            ));
        }
        let master = pairs(self.sentinel_query(
            sentinel,
            redis::cmd("SENTINEL").arg("MASTER").arg(&self.master_name),
        )?);
        let others = master.get("num-other-sentinels").map(String::as_str);
        if master.get("flags").map(String::as_str) != Some("master") || others != Some("2") {
            return Err(format!("Sentinel {port}: {master:?}"));
        }
        let replicas: Vec<Vec<String>> = self.sentinel_query(
            sentinel,
            redis::cmd("SENTINEL")
                .arg("REPLICAS")
                .arg(&self.master_name),
        )?;
        let replicas: Vec<HashMap<String, String>> = replicas.into_iter().map(pairs).collect();
        let known = replicas.iter().any(|replica| {
            replica.get("port") == Some(&replica_port.to_string())
                && replica.get("flags").map(String::as_str) == Some("slave")
                && replica.get("master-link-status").map(String::as_str) == Some("ok")
        });
        if !known {
            return Err(format!(
                "Sentinel {port} does not know replica {replica_port} as linked: {replicas:?}"
            ));
        }
        Ok(())
    }

    /// `127.0.0.1:S1,127.0.0.1:S2,127.0.0.1:S3`: the Sentinels' addresses.
    pub fn sentinel_addrs(&self) -> String {
        self.sentinel_ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The Sentinels' ports.
    pub fn sentinel_ports(&self) -> Vec<u16> {
        self.sentinels.iter().map(RedisServer::port).collect()
    }

    /// The name the Sentinels monitor the master as.
    pub fn master_name(&self) -> &str {
        &self.master_name
    }

    /// The data nodes' ports: the initial master, then the initial replica.
    pub fn data_ports(&self) -> Vec<u16> {
        self.data.iter().map(RedisServer::port).collect()
    }

    /// The options the setup was started with.
    pub fn options(&self) -> &SentinelOptions {
        &self.options
    }

    /// The data nodes' credentials.
    pub fn data_auth(&self) -> Auth {
        match &self.options.password {
            Some(password) => Auth::password(password),
            None => Auth::none(),
        }
    }

    /// The Sentinels' credentials.
    pub fn sentinel_auth(&self) -> Auth {
        match &self.options.sentinel_password {
            Some(password) => Auth::password(password),
            None => Auth::none(),
        }
    }

    /// The data node or Sentinel on `port`.
    pub fn node(&self, port: u16) -> &RedisServer {
        self.data
            .iter()
            .chain(&self.sentinels)
            .find(|node| node.port() == port)
            .unwrap_or_else(|| {
                panic!(
                    "no node of this Sentinel setup on port {port} (data: {:?}, sentinels: {:?})",
                    self.data_ports(),
                    self.sentinel_ports()
                )
            })
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        let (data, sentinels) = (self.data_ports(), self.sentinel_ports());
        self.data
            .iter_mut()
            .chain(&mut self.sentinels)
            .find(|node| node.port() == port)
            .unwrap_or_else(|| {
                panic!(
                    "no node of this Sentinel setup on port {port} (data: {data:?}, sentinels: \
                     {sentinels:?})"
                )
            })
    }

    /// The credentials of the node on `port`.
    pub fn auth_for(&self, port: u16) -> Auth {
        if self.sentinel_ports().contains(&port) {
            self.sentinel_auth()
        } else {
            self.data_auth()
        }
    }

    /// `redis://[credentials@]127.0.0.1:<port>/` (`rediss://` with TLS) for a data node or
    /// Sentinel.
    pub fn url(&self, port: u16) -> String {
        self.node(port).url_as(&self.auth_for(port))
    }

    /// A synchronous connection to a data node or Sentinel, authenticated and over TLS as
    /// configured.
    pub fn connection(&self, port: u16) -> redis::Connection {
        self.node(port).connection_as(&self.auth_for(port))
    }

    fn sentinel_query<T: redis::FromRedisValue>(
        &self,
        sentinel: &RedisServer,
        command: &redis::Cmd,
    ) -> Result<T, String> {
        sentinel.query_as(&self.sentinel_auth(), command)
    }

    /// The master's port as `sentinel` reports it (`SENTINEL GET-MASTER-ADDR-BY-NAME`).
    fn try_master_from(&self, sentinel: &RedisServer) -> Result<Option<u16>, String> {
        let address: Option<(String, u16)> = self.sentinel_query(
            sentinel,
            redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&self.master_name),
        )?;
        Ok(address.map(|(_, port)| port))
    }

    /// The master's port, asked from the first live Sentinel that answers.
    pub fn master_port(&self) -> u16 {
        self.try_master_port()
            .unwrap_or_else(|error| panic!("{error}"))
    }

    fn try_master_port(&self) -> Result<u16, String> {
        let mut errors = Vec::new();
        for sentinel in self.sentinels.iter().filter(|node| node.is_live()) {
            match self.try_master_from(sentinel) {
                Ok(Some(port)) => return Ok(port),
                Ok(None) => errors.push(format!("{}: unknown master", sentinel.port())),
                Err(error) => errors.push(error),
            }
        }
        Err(format!(
            "no live Sentinel reported master {}: {errors:?}",
            self.master_name
        ))
    }

    /// The role the data node on `port` reports.
    pub fn role(&self, port: u16) -> Role {
        self.node(port)
            .role_as(&self.data_auth())
            .unwrap_or_else(|error| panic!("role of data node {port}: {error}"))
    }

    /// `SENTINEL FAILOVER`, then waits (30 s at most) until every live Sentinel reports the
    /// other data node as master and it reports itself master; returns its port. The old master
    /// becomes a replica only about ten seconds later ([`RedisSentinel::wait_replica`]).
    pub fn failover(&self) -> u16 {
        let old = self.master_port();
        let sentinel = self
            .sentinels
            .iter()
            .find(|node| node.is_live())
            .expect("a live Sentinel");
        // NOGOODSLAVE or INPROG while the Sentinel's view of the replica is stale.
        wait_for(WAIT_TIMEOUT, "SENTINEL FAILOVER to be accepted", || {
            self.sentinel_query::<String>(
                sentinel,
                redis::cmd("SENTINEL")
                    .arg("FAILOVER")
                    .arg(&self.master_name),
            )
        });
        self.wait_master_changed(old, WAIT_TIMEOUT)
    }

    /// Kills the data node the Sentinels report as master (SIGKILL); returns its port.
    pub fn kill_master(&mut self) -> u16 {
        let port = self.master_port();
        self.kill(port);
        port
    }

    /// Kills a data node or Sentinel (SIGKILL) and waits for it to exit.
    pub fn kill(&mut self, port: u16) {
        self.node_mut(port).kill();
    }

    /// Starts a killed (or running) data node or Sentinel again on the same port and config
    /// file, and waits until it answers PING. A data node comes back with the role its config
    /// file last recorded; its data is gone (no persistence).
    pub fn restart(&mut self, port: u16) {
        self.node_mut(port).restart();
        if self.sentinel_ports().contains(&port) {
            self.tune(self.node(port));
        }
    }

    /// Waits until every live Sentinel reports the same master, not `old_port`, and that node
    /// reports itself master; returns its port.
    pub fn wait_master_changed(&self, old_port: u16, timeout: Duration) -> u16 {
        wait_for(
            timeout,
            &format!("the Sentinels to replace master {old_port}"),
            || {
                let mut reported = Vec::new();
                for sentinel in self.sentinels.iter().filter(|node| node.is_live()) {
                    reported.push(self.try_master_from(sentinel)?);
                }
                let new = match reported.first() {
                    Some(&Some(new))
                        if new != old_port && reported.iter().all(|&port| port == Some(new)) =>
                    {
                        new
                    }
                    _ => {
                        return Err(format!(
                            "Sentinels report {reported:?}\n{}",
                            self.describe()
                        ))
                    }
                };
                match self.node(new).role_as(&self.data_auth())? {
                    Role::Master => Ok(new),
                    role => Err(format!("new master {new} reports {role:?}")),
                }
            },
        )
    }

    /// Waits until the Sentinels agree on a master that reports itself one and every other data
    /// node is its replica with the link up, whichever node that master is (on a loaded machine
    /// the Sentinels may fail over more than once); returns (master, replicas).
    pub fn wait_settled(&self, timeout: Duration) -> (u16, Vec<u16>) {
        wait_for(timeout, "one master and its synced replicas", || {
            let master = self.try_master_port()?;
            match self.node(master).role_as(&self.data_auth())? {
                Role::Master => {}
                role => return Err(format!("master {master} reports {role:?}")),
            }
            let replicas: Vec<u16> = self
                .data_ports()
                .into_iter()
                .filter(|&port| port != master)
                .collect();
            for &port in &replicas {
                match self.node(port).role_as(&self.data_auth())? {
                    Role::Replica {
                        master_port,
                        link_up: true,
                    } if master_port == master => {}
                    role => {
                        return Err(format!(
                            "node {port} is {role:?}, the master is {master}\n{}",
                            self.describe()
                        ))
                    }
                }
            }
            Ok((master, replicas))
        })
    }

    /// Waits until the data node on `port` reports itself a replica, with its link up, of the
    /// master the Sentinels report; returns the master's port.
    pub fn wait_replica(&self, port: u16, timeout: Duration) -> u16 {
        wait_for(
            timeout,
            &format!("data node {port} to be a synced replica of the master"),
            || {
                let role = self.node(port).role_as(&self.data_auth())?;
                let expected = if self.sentinels.iter().any(RedisServer::is_live) {
                    Some(self.try_master_port()?)
                } else {
                    // While starting up, before the Sentinels: any master will do.
                    None
                };
                match role {
                    Role::Replica {
                        master_port,
                        link_up: true,
                    } if expected.is_none() || expected == Some(master_port) => Ok(master_port),
                    role => Err(format!(
                        "node {port} is {role:?}, the Sentinels report master {expected:?}\n{}",
                        self.describe()
                    )),
                }
            },
        )
    }

    /// What every Sentinel reports of the master and every data node of its role, for failure
    /// messages.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for sentinel in &self.sentinels {
            let port = sentinel.port();
            if !sentinel.is_live() {
                text.push_str(&format!("--- Sentinel {port}: down or paused\n"));
                continue;
            }
            let master = self
                .sentinel_query::<Vec<String>>(
                    sentinel,
                    redis::cmd("SENTINEL").arg("MASTER").arg(&self.master_name),
                )
                .map(|fields| format!("{:?}", pairs(fields)))
                .unwrap_or_else(|error| error);
            let tilt = self
                .sentinel_query::<String>(sentinel, redis::cmd("INFO").arg("sentinel"))
                .map(|info| {
                    info.lines()
                        .filter(|line| line.starts_with("sentinel_tilt"))
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|error| error);
            text.push_str(&format!("--- Sentinel {port} ({tilt}): {master}\n"));
        }
        for node in &self.data {
            let port = node.port();
            let role = if node.is_live() {
                format!("{:?}", node.role_as(&self.data_auth()))
            } else {
                "down or paused".to_string()
            };
            text.push_str(&format!("--- data node {port}: {role}\n"));
        }
        text
    }
}

impl Drop for RedisSentinel {
    fn drop(&mut self) {
        // The Sentinels first, so that none reacts to the data nodes going away.
        for node in self.sentinels.iter_mut().chain(&mut self.data) {
            node.kill();
        }
    }
}

/// A Sentinel reply of alternating names and values (`SENTINEL MASTER`) as a map.
fn pairs(fields: Vec<String>) -> HashMap<String, String> {
    let mut map = HashMap::new();
    let mut fields = fields.into_iter();
    while let (Some(name), Some(value)) = (fields.next(), fields.next()) {
        map.insert(name, value);
    }
    map
}
