//! A real Redis Cluster for tests: `redis-server --cluster-enabled yes` nodes on free loopback
//! ports, joined by `redis-cli --cluster create`, killed when dropped.
//!
//! Cluster support is tested against the real thing (slot redirections, failovers, resharding),
//! not a mock: `RedisCluster::start(3, 1)` starts six nodes, each a [`RedisServer`] in its own
//! temporary directory (so `nodes.conf`, and with it the node's identity, survives a restart),
//! creates the cluster with three masters and one replica each, and waits until every node
//! reports `cluster_state:ok`, every node agrees on the slot map and every replica's link to its
//! master is up. Fewer than three masters, which `redis-cli --cluster create` refuses, are joined
//! by hand and without replicas (`RedisCluster::start(1, 0)`: one node serving every slot). [`RedisCluster::start_with`] adds a password, an ACL user, TLS or a different
//! `cluster-require-full-coverage` ([`ClusterOptions`]).
//!
//! The nodes fail over fast: `cluster-node-timeout` is 1000 ms and
//! `cluster-replica-validity-factor 0` lets a replica take over however long its link was down,
//! so a killed master's replica is promoted within about three seconds. Replica migration is off
//! (`cluster-allow-replica-migration no`): roles change only through failovers. Full syncs start
//! at once (`repl-diskless-sync-delay 0`, instead of Redis's five-second wait for more replicas).
//! Masters ping their replicas every second (`repl-ping-replica-period 1`, not 10): Redis 7.0's
//! `CLUSTER SLOTS` leaves out a replica whose replication offset is still 0, which on a cluster
//! without writes would hide every replica from clients for ten seconds.
//!
//! The nodes start with a 5 s node timeout, set to the configured one (`CONFIG SET`, again after
//! every restart) once every node knows every other: nodes forget a peer whose handshake takes
//! longer than the node timeout, and `redis-cli --cluster create` does not notice a replica left
//! out that way; with 1 s, a busy machine's scheduling hiccup during the handshake can do it.
//!
//! Roles are read live (`INFO replication`, `CLUSTER SLOTS`) since failovers change them; every
//! wait is bounded and panics with each node's `CLUSTER INFO`, `CLUSTER NODES` and log tail.
//! Missing `redis-server` or `redis-cli` binaries fail the tests with a clear message: they never
//! skip.

use std::collections::{BTreeSet, HashMap};
use std::io::Read;
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use super::redis_server::{
    commandstats_calls, info_field, wait_for, Auth, RedisServer, Role, ServerOptions, TlsFiles,
};

/// The number of hash slots of a Redis Cluster.
pub const SLOTS: u32 = 16384;

/// How long a cluster may take to form, and the default bound of the waits below.
const WAIT_TIMEOUT: Duration = Duration::from_secs(30);

/// `cluster-node-timeout` while the cluster forms, at least.
const CREATE_NODE_TIMEOUT_MS: u32 = 5000;

/// How long a `redis-cli --cluster` command may run.
const CLI_TIMEOUT: Duration = Duration::from_secs(60);

/// What [`RedisCluster::start_with`] sets up beyond a plain cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// The default user's password on every node (`requirepass`); replicas authenticate to
    /// their masters with it (`masterauth`) unless `user` is set.
    pub password: Option<String>,
    /// An ACL user and password on every node (`user <name> on ><password> ~* &* +@all`, from
    /// the command line, so it survives restarts). The helper's own connections, `redis-cli` and
    /// replication (`masteruser`/`masterauth`) authenticate as this user. Without a `password`
    /// the default user is turned off, so nothing gets in without this user's credentials.
    pub user: Option<(String, String)>,
    /// Serve TLS only on every node: `--port 0 --tls-port <port>`, with `tls-cluster yes` (the
    /// cluster bus) and `tls-replication yes`, using these files.
    pub tls: Option<TlsFiles>,
    /// `cluster-require-full-coverage` (Redis's default, `true`: a node refuses every key while
    /// some slot has no live master).
    pub require_full_coverage: bool,
    /// `cluster-node-timeout` in milliseconds: how long a node may be unreachable before it
    /// counts as failing. The cluster forms with at least 5000, then switches to this.
    pub node_timeout_ms: u32,
    /// More options appended to every node's command line.
    pub extra: Vec<String>,
}

impl Default for ClusterOptions {
    fn default() -> ClusterOptions {
        ClusterOptions {
            password: None,
            user: None,
            tls: None,
            require_full_coverage: true,
            node_timeout_ms: 1000,
            extra: Vec::new(),
        }
    }
}

/// One row of `CLUSTER SLOTS`: slots `start..=end` served by `master`, replicated to `replicas`
/// (ports on 127.0.0.1, replicas sorted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SlotRange {
    pub start: u16,
    pub end: u16,
    pub master: u16,
    pub replicas: Vec<u16>,
}

impl SlotRange {
    /// How many slots the range holds: at least one (`CLUSTER SLOTS` lists no empty range).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> u32 {
        u32::from(self.end) - u32::from(self.start) + 1
    }
}

pub struct RedisCluster {
    nodes: Vec<RedisServer>,
    options: ClusterOptions,
    /// The replicas a master had when [`RedisCluster::kill`] killed it.
    replicas_at_kill: HashMap<u16, Vec<u16>>,
}

impl RedisCluster {
    /// Starts `masters` masters with `replicas_per_master` replicas each and waits until the
    /// cluster is ok, agreed and replicated. With replicas, Redis needs at least three masters;
    /// without, one or two are joined by hand ([`RedisCluster::start_with`]).
    pub fn start(masters: usize, replicas_per_master: usize) -> RedisCluster {
        RedisCluster::start_with(masters, replicas_per_master, &ClusterOptions::default())
    }

    /// [`RedisCluster::start`] with a password, an ACL user, TLS... ([`ClusterOptions`]). Three
    /// masters or more are joined by `redis-cli --cluster create`; one or two (no replicas) by
    /// hand, as it refuses them: an even split of the slots (`CLUSTER ADDSLOTSRANGE`, or
    /// `ADDSLOTS` before Redis 7.0), and the first node meeting the other (`CLUSTER MEET`).
    pub fn start_with(
        masters: usize,
        replicas_per_master: usize,
        options: &ClusterOptions,
    ) -> RedisCluster {
        assert!(
            masters >= 3 || (masters >= 1 && replicas_per_master == 0),
            "redis-cli --cluster create needs at least 3 masters, not {masters}; fewer are joined \
             by hand, without replicas"
        );
        let node_options = ServerOptions {
            extra: node_args(options),
            tls: options.tls.clone(),
            config_file: None,
            sentinel: false,
            cluster_bus: true,
            ..ServerOptions::default()
        };
        let count = masters * (1 + replicas_per_master);
        let nodes = (0..count)
            .map(|_| RedisServer::start_options(node_options.clone()))
            .collect();
        let cluster = RedisCluster {
            nodes,
            options: options.clone(),
            replicas_at_kill: HashMap::new(),
        };
        let said = if masters >= 3 {
            let mut create = cluster.cli();
            create.args(["--cluster", "create"]);
            for port in cluster.ports() {
                create.arg(format!("127.0.0.1:{port}"));
            }
            create
                .args(["--cluster-replicas", &replicas_per_master.to_string()])
                .arg("--cluster-yes");
            let created = run_bounded(create, CLI_TIMEOUT).unwrap_or_else(|error| {
                panic!(
                    "redis-cli --cluster create failed: {error}\n{}",
                    cluster.describe()
                )
            });
            format!("(redis-cli --cluster create said:\n{created})")
        } else {
            cluster.join_by_hand();
            "(joined by hand)".to_string()
        };
        wait_for(
            WAIT_TIMEOUT,
            &format!("every node to know every other {said}"),
            || cluster.check_known(),
        );
        for port in cluster.ports() {
            cluster.apply_node_timeout(port);
        }
        wait_for(
            WAIT_TIMEOUT,
            &format!("the new cluster to be stable {said}"),
            || {
                cluster.check_ok()?;
                cluster.check_links()
            },
        );
        let roles = cluster.masters().len();
        assert_eq!(
            roles,
            masters,
            "the new cluster has {roles} masters, not {masters}\n{}",
            cluster.describe()
        );
        cluster
    }

    /// Joins the nodes, all masters, as `redis-cli --cluster create` would: an even split of the
    /// slots, node i owning slots `SLOTS * i / n ..= SLOTS * (i + 1) / n - 1`, and every node met
    /// by the first.
    fn join_by_hand(&self) {
        let ports = self.ports();
        let count = ports.len() as u32;
        for (i, &port) in ports.iter().enumerate() {
            let i = i as u32;
            let (first, last) = (SLOTS * i / count, SLOTS * (i + 1) / count - 1);
            let range = redis::cmd("CLUSTER")
                .arg("ADDSLOTSRANGE")
                .arg(first)
                .arg(last)
                .clone();
            if self.try_query::<String>(port, &range).is_err() {
                // Before Redis 7.0 there is no ADDSLOTSRANGE: every slot named.
                let _: String = self.query(
                    port,
                    redis::cmd("CLUSTER")
                        .arg("ADDSLOTS")
                        .arg((first..=last).collect::<Vec<u32>>()),
                );
            }
            if i > 0 {
                let _: String = self.query(
                    ports[0],
                    redis::cmd("CLUSTER").arg("MEET").arg("127.0.0.1").arg(port),
                );
            }
        }
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,...`: every node, as a seed list.
    pub fn seeds(&self) -> String {
        self.ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Every node's port, in start order (killed nodes included).
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(RedisServer::port).collect()
    }

    /// The options the cluster was started with.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The credentials the helper uses: the ACL user if any, else the password, else none.
    pub fn auth(&self) -> Auth {
        match (&self.options.user, &self.options.password) {
            (Some((user, password)), _) => Auth::user(user, password),
            (None, Some(password)) => Auth::password(password),
            (None, None) => Auth::none(),
        }
    }

    /// `redis://[credentials@]127.0.0.1:<port>/` (`rediss://` with TLS) for one node.
    pub fn url(&self, port: u16) -> String {
        self.node(port).url_as(&self.auth())
    }

    /// The node on `port` itself (its directory, log, client...).
    pub fn node(&self, port: u16) -> &RedisServer {
        self.nodes
            .iter()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port} (nodes: {:?})", self.ports()))
    }

    fn node_mut(&mut self, port: u16) -> &mut RedisServer {
        let ports = self.ports();
        self.nodes
            .iter_mut()
            .find(|node| node.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port} (nodes: {ports:?})"))
    }

    /// The nodes that should answer: not killed, not paused.
    fn live(&self) -> impl Iterator<Item = &RedisServer> {
        self.nodes.iter().filter(|node| node.is_live())
    }

    /// A synchronous connection to one node, authenticated and over TLS as configured. It
    /// talks to that node only (no redirections followed).
    pub fn connection(&self, port: u16) -> redis::Connection {
        self.node(port).connection_as(&self.auth())
    }

    /// Runs `command` on the node on `port`; panics with the error.
    fn query<T: redis::FromRedisValue>(&self, port: u16, command: &redis::Cmd) -> T {
        self.try_query(port, command)
            .unwrap_or_else(|error| panic!("{command:?} on cluster node {port}: {error}"))
    }

    fn try_query<T: redis::FromRedisValue>(
        &self,
        port: u16,
        command: &redis::Cmd,
    ) -> Result<T, String> {
        self.node(port).query_as(&self.auth(), command)
    }

    /// Runs `command` on the first live node that answers.
    fn query_any<T: redis::FromRedisValue>(&self, command: &redis::Cmd) -> T {
        let mut errors = Vec::new();
        for node in self.live() {
            match self.try_query(node.port(), command) {
                Ok(value) => return value,
                Err(error) => errors.push(error),
            }
        }
        panic!("no live cluster node answered {command:?}: {errors:?}");
    }

    /// The role the node on `port` reports.
    pub fn role(&self, port: u16) -> Role {
        self.node(port)
            .role_as(&self.auth())
            .unwrap_or_else(|error| panic!("role of cluster node {port}: {error}"))
    }

    /// The live nodes that report themselves masters, sorted by port.
    pub fn masters(&self) -> Vec<u16> {
        self.live()
            .filter(|node| node.role_as(&self.auth()) == Ok(Role::Master))
            .map(RedisServer::port)
            .collect()
    }

    /// The live nodes that report themselves replicas of `master`, sorted by port.
    pub fn replicas_of(&self, master: u16) -> Vec<u16> {
        self.live()
            .filter(|node| {
                matches!(node.role_as(&self.auth()),
                    Ok(Role::Replica { master_port, .. }) if master_port == master)
            })
            .map(RedisServer::port)
            .collect()
    }

    /// The node's ID (`CLUSTER MYID`).
    pub fn node_id(&self, port: u16) -> String {
        self.query(port, redis::cmd("CLUSTER").arg("MYID"))
    }

    /// The slot of `key` (`CLUSTER KEYSLOT`, asked from a live node).
    pub fn slot_of(&self, key: &str) -> u16 {
        self.query_any(redis::cmd("CLUSTER").arg("KEYSLOT").arg(key))
    }

    /// `CLUSTER SLOTS` as the node on `port` sees it, sorted by first slot.
    pub fn cluster_slots(&self, port: u16) -> Vec<SlotRange> {
        self.try_cluster_slots(port)
            .unwrap_or_else(|error| panic!("CLUSTER SLOTS on node {port}: {error}"))
    }

    fn try_cluster_slots(&self, port: u16) -> Result<Vec<SlotRange>, String> {
        let value: redis::Value = self.try_query(port, redis::cmd("CLUSTER").arg("SLOTS"))?;
        parse_cluster_slots(&value).map_err(|error| format!("node {port}: {error}"))
    }

    /// The master of `slot` in the slot map of the first live node that answers. After a
    /// topology change, call [`RedisCluster::wait_ok`] first so that every node agrees.
    pub fn master_of_slot(&self, slot: u16) -> u16 {
        let mut errors = Vec::new();
        for node in self.live() {
            match self.try_cluster_slots(node.port()) {
                Ok(ranges) => {
                    return ranges
                        .iter()
                        .find(|range| (range.start..=range.end).contains(&slot))
                        .map(|range| range.master)
                        .unwrap_or_else(|| {
                            panic!(
                                "slot {slot} has no master in node {}'s CLUSTER SLOTS: {ranges:?}",
                                node.port()
                            )
                        })
                }
                Err(error) => errors.push(error),
            }
        }
        panic!("no live cluster node answered CLUSTER SLOTS: {errors:?}");
    }

    /// The master of `key`'s slot.
    pub fn master_of_key(&self, key: &str) -> u16 {
        self.master_of_slot(self.slot_of(key))
    }

    /// How many slots the node on `port` serves as a master (by the first live node's map).
    pub fn slot_count(&self, port: u16) -> u32 {
        let Some(view) = self.live().next().map(RedisServer::port) else {
            panic!("no live cluster node");
        };
        self.cluster_slots(view)
            .iter()
            .filter(|range| range.master == port)
            .map(SlotRange::len)
            .sum()
    }

    /// Kills the node (SIGKILL) and waits for it to exit. A master's replicas at that moment
    /// are remembered for [`RedisCluster::wait_promoted_after_kill`].
    pub fn kill(&mut self, port: u16) {
        if self.node(port).is_live() && self.node(port).role_as(&self.auth()) == Ok(Role::Master) {
            let replicas = self.replicas_of(port);
            self.replicas_at_kill.insert(port, replicas);
        }
        self.node_mut(port).kill();
    }

    /// Starts a killed (or running) node again on the same port and directory, so it keeps
    /// its node ID and its view of the cluster from `nodes.conf`, and waits until it answers
    /// PING. Its data is gone (no persistence); a master that was failed over meanwhile
    /// rejoins as a replica of its successor ([`RedisCluster::wait_replica`] waits for that).
    pub fn restart(&mut self, port: u16) {
        self.node_mut(port).restart();
        self.apply_node_timeout(port);
    }

    /// The configured `cluster-node-timeout` on the node on `port`, which started with
    /// [`CREATE_NODE_TIMEOUT_MS`].
    fn apply_node_timeout(&self, port: u16) {
        let _: String = self.query(
            port,
            redis::cmd("CONFIG")
                .arg("SET")
                .arg("cluster-node-timeout")
                .arg(self.options.node_timeout_ms),
        );
    }

    /// Freezes the node (SIGSTOP): its connections stay open and nothing answers. The waits
    /// here treat it as down until [`RedisCluster::resume`].
    pub fn pause(&mut self, port: u16) {
        self.node_mut(port).pause();
    }

    /// Thaws a node frozen by [`RedisCluster::pause`] (SIGCONT).
    pub fn resume(&mut self, port: u16) {
        self.node_mut(port).resume();
    }

    /// A manual failover: `CLUSTER FAILOVER` on the replica on `replica_port`, then waits until
    /// it reports itself master and the cluster is ok again ([`RedisCluster::wait_ok`]). Its
    /// old master becomes its replica.
    pub fn failover(&self, replica_port: u16) {
        let role = self.role(replica_port);
        assert!(
            matches!(role, Role::Replica { .. }),
            "failover({replica_port}): that node is not a replica but {role:?}"
        );
        let _: String = self.query(replica_port, redis::cmd("CLUSTER").arg("FAILOVER"));
        wait_for(
            WAIT_TIMEOUT,
            &format!("node {replica_port} to become master after CLUSTER FAILOVER"),
            || match self.node(replica_port).role_as(&self.auth())? {
                Role::Master => Ok(()),
                role => Err(format!("still {role:?}\n{}", self.describe())),
            },
        );
        self.wait_ok(WAIT_TIMEOUT);
    }

    /// Waits until a replica of the master killed on `killed_master_port` (one it had when
    /// [`RedisCluster::kill`] killed it) reports itself master and the cluster is ok again;
    /// returns that replica's port. Bounded by 30 s.
    pub fn wait_promoted_after_kill(&self, killed_master_port: u16) -> u16 {
        let candidates = self
            .replicas_at_kill
            .get(&killed_master_port)
            .unwrap_or_else(|| {
                panic!(
                    "wait_promoted_after_kill({killed_master_port}): RedisCluster::kill did not \
                     kill a master on that port"
                )
            })
            .clone();
        assert!(
            !candidates.is_empty(),
            "the master on port {killed_master_port} had no replica when it was killed"
        );
        let promoted = wait_for(
            WAIT_TIMEOUT,
            &format!(
                "a replica of killed master {killed_master_port} ({candidates:?}) to be promoted"
            ),
            || {
                candidates
                    .iter()
                    .copied()
                    .find(|&port| {
                        self.node(port).is_live()
                            && self.node(port).role_as(&self.auth()) == Ok(Role::Master)
                    })
                    .ok_or_else(|| self.describe())
            },
        );
        self.wait_ok(WAIT_TIMEOUT);
        promoted
    }

    /// Waits until the node on `port` reports itself a replica whose link to its master is up,
    /// and that master a master; returns the master's port.
    pub fn wait_replica(&self, port: u16, timeout: Duration) -> u16 {
        wait_for(
            timeout,
            &format!("cluster node {port} to be a synced replica"),
            || match self.node(port).role_as(&self.auth())? {
                Role::Replica {
                    master_port,
                    link_up: true,
                } if self.node(master_port).role_as(&self.auth()) == Ok(Role::Master) => {
                    Ok(master_port)
                }
                role => Err(format!("node {port} is {role:?}\n{}", self.describe())),
            },
        )
    }

    /// Waits until every live node reports `cluster_state:ok`, all of them agree on the slot
    /// map, and every slot is served by a live node that reports itself master. Panics after
    /// `timeout` with every node's `CLUSTER INFO` and `CLUSTER NODES`.
    pub fn wait_ok(&self, timeout: Duration) {
        wait_for(timeout, "the cluster to be ok", || self.check_ok());
    }

    /// [`RedisCluster::wait_ok`], and also: every live node knows every other live node as
    /// connected and not failing, and every live replica's link to its master is up.
    pub fn wait_stable(&self, timeout: Duration) {
        wait_for(timeout, "the cluster to be stable", || {
            self.check_ok()?;
            self.check_links()
        });
    }

    fn check_ok(&self) -> Result<(), String> {
        // The first node's port and its (start, end, master) slot map.
        type SlotMap = Vec<(u16, u16, u16)>;
        let mut agreed: Option<(u16, SlotMap)> = None;
        for node in self.live() {
            let port = node.port();
            let info: String = self.try_query(port, redis::cmd("CLUSTER").arg("INFO"))?;
            if info_field(&info, "cluster_state") != Some("ok") {
                return Err(format!("node {port} is not ok\n{}", self.describe()));
            }
            let map: Vec<(u16, u16, u16)> = self
                .try_cluster_slots(port)?
                .iter()
                .map(|range| (range.start, range.end, range.master))
                .collect();
            match &agreed {
                None => agreed = Some((port, map)),
                Some((first, first_map)) if *first_map != map => {
                    return Err(format!(
                        "nodes {first} and {port} disagree on the slot map: {first_map:?} vs \
                         {map:?}\n{}",
                        self.describe()
                    ))
                }
                Some(_) => {}
            }
        }
        let Some((_, map)) = agreed else {
            return Err("no live node".to_string());
        };
        let covered: u32 = map
            .iter()
            .map(|&(start, end, _)| u32::from(end) - u32::from(start) + 1)
            .sum();
        if covered != SLOTS {
            return Err(format!("{covered} of {SLOTS} slots are served: {map:?}"));
        }
        let masters: BTreeSet<u16> = map.iter().map(|&(_, _, master)| master).collect();
        for master in masters {
            let node = self
                .nodes
                .iter()
                .find(|node| node.port() == master)
                .ok_or_else(|| format!("slot master {master} is not a node of this cluster"))?;
            if !node.is_live() || node.role_as(&self.auth()) != Ok(Role::Master) {
                return Err(format!(
                    "slot master {master} is down or no master\n{}",
                    self.describe()
                ));
            }
        }
        Ok(())
    }

    /// Every live node lists every other live node, handshake done.
    fn check_known(&self) -> Result<(), String> {
        let live: Vec<u16> = self.live().map(RedisServer::port).collect();
        for &port in &live {
            let nodes: String = self.try_query(port, redis::cmd("CLUSTER").arg("NODES"))?;
            for &other in &live {
                let known = nodes.lines().any(|line| {
                    node_line_port(line) == Some(other)
                        && line.split(' ').nth(2).is_some_and(|flags| {
                            !flags.contains("handshake") && !flags.contains("noaddr")
                        })
                });
                if !known {
                    return Err(format!(
                        "node {port} does not know node {other}:\n{nodes}\n{}",
                        self.describe()
                    ));
                }
            }
        }
        Ok(())
    }

    fn check_links(&self) -> Result<(), String> {
        self.check_links_quietly()
            .map_err(|error| format!("{error}\n{}", self.describe()))
    }

    fn check_links_quietly(&self) -> Result<(), String> {
        let live: Vec<u16> = self.live().map(RedisServer::port).collect();
        // Each live node's own word on its role and ID, then every view against them.
        let mut roles = HashMap::new();
        let mut views = HashMap::new();
        let mut ids = HashMap::new();
        for &port in &live {
            let role = self.node(port).role_as(&self.auth())?;
            if let Role::Replica {
                master_port,
                link_up: false,
            } = role
            {
                return Err(format!("replica {port}'s link to {master_port} is down"));
            }
            roles.insert(port, role);
            let nodes: String = self.try_query(port, redis::cmd("CLUSTER").arg("NODES"))?;
            let id = nodes
                .lines()
                .find(|line| {
                    line.split(' ')
                        .nth(2)
                        .is_some_and(|flags| flags.contains("myself"))
                })
                .and_then(|line| line.split(' ').next())
                .ok_or_else(|| format!("no myself line in node {port}'s CLUSTER NODES:\n{nodes}"))?
                .to_string();
            ids.insert(port, id);
            views.insert(port, nodes);
        }
        for &port in &live {
            let nodes = &views[&port];
            for &other in &live {
                let line = nodes
                    .lines()
                    .find(|line| node_line_port(line) == Some(other))
                    .ok_or_else(|| format!("node {port} does not know node {other}:\n{nodes}"))?;
                let fields: Vec<&str> = line.split(' ').collect();
                let flags: Vec<&str> = fields.get(2).copied().unwrap_or("").split(',').collect();
                if flags
                    .iter()
                    .any(|flag| ["fail", "fail?", "handshake", "noaddr"].contains(flag))
                {
                    return Err(format!(
                        "node {port} flags node {other} {flags:?}:\n{nodes}"
                    ));
                }
                if fields.get(7) != Some(&"connected") {
                    return Err(format!("node {port} is not connected to {other}:\n{nodes}"));
                }
                let agrees = match roles[&other] {
                    Role::Master => flags.contains(&"master"),
                    Role::Replica { master_port, .. } => {
                        flags.contains(&"slave")
                            && ids.get(&master_port).map(String::as_str) == fields.get(3).copied()
                    }
                };
                if !agrees {
                    return Err(format!(
                        "node {port} does not see node {other} as {:?}:\n{nodes}",
                        roles[&other]
                    ));
                }
            }
            // CLUSTER SLOTS is answered from a cache in Redis 7.0: check it too.
            for range in self.try_cluster_slots(port)? {
                let listed: Vec<u16> = range
                    .replicas
                    .iter()
                    .copied()
                    .filter(|replica| live.contains(replica))
                    .collect();
                let expected: Vec<u16> = live
                    .iter()
                    .copied()
                    .filter(|replica| match roles[replica] {
                        Role::Replica { master_port, .. } => master_port == range.master,
                        Role::Master => false,
                    })
                    .collect();
                if listed != expected {
                    return Err(format!(
                        "node {port}'s CLUSTER SLOTS lists replicas {listed:?} for master {}, not \
                         {expected:?}",
                        range.master
                    ));
                }
            }
        }
        Ok(())
    }

    /// A `redis-cli --cluster reshard` moving `slots` slots from the master on `from_port` to
    /// the master on `to_port`, then waits until the cluster is ok and agreed again. It takes
    /// `&self`, so other threads may send traffic meanwhile (`std::thread::scope`), or use
    /// [`RedisCluster::spawn_reshard`].
    pub fn reshard(&self, from_port: u16, to_port: u16, slots: u16) {
        self.reshard_command(from_port, to_port, slots)();
        self.wait_ok(WAIT_TIMEOUT);
    }

    /// [`RedisCluster::reshard`]'s `redis-cli` run on a background thread; `join()` it (it
    /// re-raises a failure as a panic), then [`RedisCluster::wait_ok`].
    pub fn spawn_reshard(
        &self,
        from_port: u16,
        to_port: u16,
        slots: u16,
    ) -> thread::JoinHandle<()> {
        thread::spawn(self.reshard_command(from_port, to_port, slots))
    }

    fn reshard_command(&self, from_port: u16, to_port: u16, slots: u16) -> impl FnOnce() + Send {
        let from = self.node_id(from_port);
        let to = self.node_id(to_port);
        let mut reshard = self.cli();
        reshard
            .args(["--cluster", "reshard"])
            .arg(format!("127.0.0.1:{from_port}"))
            .args(["--cluster-from", &from, "--cluster-to", &to])
            .args(["--cluster-slots", &slots.to_string()])
            .arg("--cluster-yes");
        move || {
            if let Err(error) = run_bounded(reshard, CLI_TIMEOUT) {
                panic!(
                    "redis-cli --cluster reshard {from_port} -> {to_port} ({slots} slots) \
                     failed: {error}"
                );
            }
        }
    }

    /// How many times the node on `port` ran the command `name` (`cmdstat_<name>:calls=N` in
    /// `INFO commandstats`, 0 if never); subcommands read `cluster|info`.
    pub fn command_calls(&self, port: u16, name: &str) -> u64 {
        let stats: String = self.query(port, redis::cmd("INFO").arg("commandstats"));
        commandstats_calls(&stats, name)
    }

    /// Script calls (`EVALSHA` and `FCALL` together) of the node on `port`.
    pub fn script_calls(&self, port: u16) -> u64 {
        self.command_calls(port, "evalsha") + self.command_calls(port, "fcall")
    }

    /// `CONFIG RESETSTAT` on every live node (zeroes `INFO commandstats`).
    pub fn reset_commandstats(&self) {
        for node in self.live() {
            let _: String = self.query(node.port(), redis::cmd("CONFIG").arg("RESETSTAT"));
        }
    }

    /// `SCRIPT FLUSH` on the node on `port` (its scripts cache; replicas have their own), and
    /// `FUNCTION FLUSH` where it has Functions (replicated to its replicas).
    pub fn script_flush(&self, port: u16) {
        let _: String = self.query(port, redis::cmd("SCRIPT").arg("FLUSH"));
        if self.node(port).has_functions_as(&self.auth()) {
            let _: String = self.query(port, redis::cmd("FUNCTION").arg("FLUSH"));
        }
    }

    /// `redis-cli` with the cluster's credentials and TLS flags.
    fn cli(&self) -> Command {
        let mut command = Command::new("redis-cli");
        match (&self.options.user, &self.options.password) {
            (Some((user, password)), _) => {
                command.args(["--user", user, "--pass", password]);
            }
            (None, Some(password)) => {
                command.args(["-a", password]);
            }
            (None, None) => {}
        }
        command.arg("--no-auth-warning");
        if let Some(tls) = &self.options.tls {
            command
                .arg("--tls")
                .arg("--cacert")
                .arg(&tls.ca)
                .arg("--cert")
                .arg(&tls.cert)
                .arg("--key")
                .arg(&tls.key);
        }
        command
    }

    /// Every node's `CLUSTER INFO` state and `CLUSTER NODES`, for failure messages.
    pub fn describe(&self) -> String {
        let mut text = String::new();
        for node in &self.nodes {
            let port = node.port();
            if !node.is_live() {
                text.push_str(&format!("--- node {port}: down or paused\n"));
                continue;
            }
            let info = self
                .try_query::<String>(port, redis::cmd("CLUSTER").arg("INFO"))
                .map(|info| {
                    info.lines()
                        .filter(|line| {
                            line.starts_with("cluster_state") || line.starts_with("cluster_slots")
                        })
                        .collect::<Vec<_>>()
                        .join(" ")
                })
                .unwrap_or_else(|error| error);
            let nodes = self
                .try_query::<String>(port, redis::cmd("CLUSTER").arg("NODES"))
                .unwrap_or_else(|error| error);
            let log = node.log();
            let tail: Vec<&str> = log.lines().rev().take(5).collect();
            text.push_str(&format!("--- node {port}: {info}\n{nodes}"));
            for line in tail.iter().rev() {
                text.push_str(&format!("    log: {line}\n"));
            }
        }
        text
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            node.kill();
        }
    }
}

/// The command-line options of every node of a cluster with `options`.
fn node_args(options: &ClusterOptions) -> Vec<String> {
    let mut args: Vec<String> = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
        // The node's own address in CLUSTER NODES/SLOTS from the start, not learnt from peers.
        "--cluster-announce-ip",
        "127.0.0.1",
        // A replica may take over however long its link was down.
        "--cluster-replica-validity-factor",
        "0",
        "--cluster-allow-replica-migration",
        "no",
        "--repl-diskless-sync-delay",
        "0",
        // CLUSTER SLOTS leaves out replicas whose replication offset is still 0; a fresh
        // master's replication stream moves only with writes or its pings to replicas.
        "--repl-ping-replica-period",
        "1",
    ]
    .iter()
    .map(|arg| arg.to_string())
    .collect();
    args.extend([
        "--cluster-node-timeout".to_string(),
        options
            .node_timeout_ms
            .max(CREATE_NODE_TIMEOUT_MS)
            .to_string(),
        "--cluster-require-full-coverage".to_string(),
        if options.require_full_coverage {
            "yes"
        } else {
            "no"
        }
        .to_string(),
    ]);
    if let Some(password) = &options.password {
        args.extend(["--requirepass".to_string(), password.clone()]);
    }
    match (&options.user, &options.password) {
        (Some((user, password)), default_password) => {
            // `--user a b c` becomes the config line `user a b c`.
            args.extend(
                [
                    "--user",
                    user,
                    "on",
                    &format!(">{password}"),
                    "~*",
                    "&*",
                    "+@all",
                ]
                .map(String::from),
            );
            if default_password.is_none() {
                args.extend(["--user", "default", "off"].map(String::from));
            }
            args.extend(["--masteruser", user, "--masterauth", password].map(String::from));
        }
        (None, Some(password)) => {
            args.extend(["--masterauth".to_string(), password.clone()]);
        }
        (None, None) => {}
    }
    if options.tls.is_some() {
        args.extend(["--tls-cluster", "yes", "--tls-replication", "yes"].map(String::from));
    }
    args.extend(options.extra.iter().cloned());
    args
}

/// The client port of a `CLUSTER NODES` line (`<id> 127.0.0.1:<port>@<bus>[,<hostname>] ...`).
fn node_line_port(line: &str) -> Option<u16> {
    let address = line.split(' ').nth(1)?;
    let host_port = address.split('@').next()?;
    host_port.rsplit(':').next()?.parse().ok()
}

/// Parses `CLUSTER SLOTS`: `[[start, end, [ip, port, id, ...], [replica ip, port, ...]...]...]`.
fn parse_cluster_slots(value: &redis::Value) -> Result<Vec<SlotRange>, String> {
    use redis::Value;
    let int = |value: &Value| -> Result<i64, String> {
        match value {
            Value::Int(number) => Ok(*number),
            other => Err(format!(
                "expected an integer in CLUSTER SLOTS, got {other:?}"
            )),
        }
    };
    let node_port = |value: &Value| -> Result<u16, String> {
        match value {
            Value::Array(fields) if fields.len() >= 2 => u16::try_from(int(&fields[1])?)
                .map_err(|error| format!("bad port in CLUSTER SLOTS: {error}")),
            other => Err(format!("expected a node in CLUSTER SLOTS, got {other:?}")),
        }
    };
    let Value::Array(rows) = value else {
        return Err(format!("CLUSTER SLOTS is not an array: {value:?}"));
    };
    let mut ranges = Vec::new();
    for row in rows {
        let Value::Array(fields) = row else {
            return Err(format!("CLUSTER SLOTS row is not an array: {row:?}"));
        };
        if fields.len() < 3 {
            return Err(format!("short CLUSTER SLOTS row: {row:?}"));
        }
        let slot = |value: &Value| -> Result<u16, String> {
            u16::try_from(int(value)?).map_err(|error| format!("bad slot: {error}"))
        };
        let mut replicas = fields[3..]
            .iter()
            .map(node_port)
            .collect::<Result<Vec<u16>, String>>()?;
        replicas.sort_unstable();
        ranges.push(SlotRange {
            start: slot(&fields[0])?,
            end: slot(&fields[1])?,
            master: node_port(&fields[2])?,
            replicas,
        });
    }
    ranges.sort_by_key(|range| range.start);
    Ok(ranges)
}

/// Runs `command` to its end, for at most `timeout` (then kills it); `Err` with its output if it
/// fails. Panics if the program is missing: the cluster tests need `redis-cli` and never skip.
fn run_bounded(mut command: Command, timeout: Duration) -> Result<String, String> {
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => panic!(
            "{program} is not on PATH: the Redis Cluster tests need a real redis-cli (install it, \
             e.g. `apt-get install redis-tools`); they never skip"
        ),
        Err(error) => panic!("cannot run {program}: {error}"),
    };
    let drain = |mut pipe: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            text
        })
    };
    let stdout = drain(Box::new(child.stdout.take().expect("piped stdout")));
    let stderr = drain(Box::new(child.stderr.take().expect("piped stderr")));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break Some(status),
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
        }
    };
    let output = format!(
        "{}{}",
        stdout.join().unwrap_or_default(),
        stderr.join().unwrap_or_default()
    );
    match status {
        Some(status) if status.success() => Ok(output),
        Some(status) => Err(format!("{program} exited with {status}:\n{output}")),
        None => Err(format!(
            "{program} still ran after {timeout:?}, killed:\n{output}"
        )),
    }
}
