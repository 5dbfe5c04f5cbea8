//! The Redis Cluster and Sentinel test helpers against themselves: the cluster and Sentinel tests
//! of the product trust `testkit/src/redis_cluster.rs` and `testkit/src/redis_sentinel.rs` to
//! start what they claim and to really fail over, reshard and authenticate, so that is proven
//! here with real redis-server processes.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use testkit::redis_cluster::{ClusterOptions, RedisCluster, SLOTS};
use testkit::redis_sentinel::{RedisSentinel, SentinelOptions};
use testkit::redis_server::{Auth, Role, TlsFiles};

const WAIT: Duration = Duration::from_secs(30);

/// `count` keys spread over all masters.
fn keys(count: usize) -> Vec<String> {
    (0..count).map(|i| format!("harness:key:{i}")).collect()
}

/// The error of a command that must fail.
fn error_of(result: redis::RedisResult<redis::Value>) -> redis::RedisError {
    match result {
        Ok(value) => panic!("expected an error, got {value:?}"),
        Err(error) => error,
    }
}

#[test]
fn cluster_has_three_masters_with_a_replica_each_and_routes_keys_by_slot() {
    let cluster = RedisCluster::start(3, 1);
    let ports = cluster.ports();
    assert_eq!(ports.len(), 6);
    assert_eq!(cluster.seeds().split(',').count(), 6);
    let masters = cluster.masters();
    assert_eq!(masters.len(), 3, "{}", cluster.describe());
    let mut replicas = BTreeSet::new();
    for &master in &masters {
        let of = cluster.replicas_of(master);
        assert_eq!(of.len(), 1, "master {master}: {}", cluster.describe());
        assert_eq!(
            cluster.role(of[0]),
            Role::Replica {
                master_port: master,
                link_up: true
            }
        );
        replicas.extend(of);
    }
    assert_eq!(replicas.len() + masters.len(), 6);

    // Every node's CLUSTER SLOTS covers all slots with exactly these masters and replicas.
    for &port in &ports {
        let ranges = cluster.cluster_slots(port);
        let covered: u32 = ranges.iter().map(|range| range.len()).sum();
        assert_eq!(covered, SLOTS, "node {port}: {ranges:?}");
        let slot_masters: BTreeSet<u16> = ranges.iter().map(|range| range.master).collect();
        assert_eq!(
            slot_masters,
            masters.iter().copied().collect(),
            "node {port}"
        );
        for range in &ranges {
            assert_eq!(range.replicas, cluster.replicas_of(range.master));
        }
    }

    let ranges = cluster.cluster_slots(masters[0]);
    for key in keys(30) {
        let slot = cluster.slot_of(&key);
        let expected = ranges
            .iter()
            .find(|range| (range.start..=range.end).contains(&slot))
            .map(|range| range.master)
            .unwrap();
        assert_eq!(cluster.master_of_slot(slot), expected, "slot {slot}");
        let master = cluster.master_of_key(&key);
        assert_eq!(master, expected, "{key}");

        let mut connection = cluster.connection(master);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg("v")
            .query(&mut connection)
            .unwrap();
        let value: String = redis::cmd("GET")
            .arg(&key)
            .query(&mut cluster.connection(expected))
            .unwrap();
        assert_eq!(value, "v");
        // Any other master redirects to it.
        let other = *masters.iter().find(|&&port| port != master).unwrap();
        let error = error_of(
            redis::cmd("GET")
                .arg(&key)
                .query(&mut cluster.connection(other)),
        );
        assert_eq!(error.code(), Some("MOVED"), "{error}");
        assert!(
            error
                .to_string()
                .contains(&format!("{slot} 127.0.0.1:{master}")),
            "{error}"
        );
    }

    // Command statistics and the scripts cache, per node.
    let master = masters[0];
    let mut connection = cluster.connection(master);
    let sha: String = redis::cmd("SCRIPT")
        .arg("LOAD")
        .arg("return 1")
        .query(&mut connection)
        .unwrap();
    cluster.reset_commandstats();
    assert_eq!(cluster.command_calls(master, "evalsha"), 0);
    for _ in 0..3 {
        let one: i64 = redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(0)
            .query(&mut connection)
            .unwrap();
        assert_eq!(one, 1);
    }
    assert_eq!(cluster.command_calls(master, "evalsha"), 3);
    assert_eq!(cluster.command_calls(master, "EVALSHA"), 3);
    assert_eq!(cluster.command_calls(masters[1], "evalsha"), 0);
    cluster.script_flush(master);
    let error = error_of(
        redis::cmd("EVALSHA")
            .arg(&sha)
            .arg(0)
            .query(&mut connection),
    );
    assert_eq!(error.code(), Some("NOSCRIPT"), "{error}");
}

#[test]
fn cluster_promotes_the_replica_of_a_killed_master_and_takes_the_master_back_as_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let master = cluster.masters()[0];
    let replica = cluster.replicas_of(master)[0];
    let slots = cluster.slot_count(master);
    let key = keys(100)
        .into_iter()
        .find(|key| cluster.master_of_key(key) == master)
        .unwrap();
    let mut connection = cluster.connection(master);
    let _: () = redis::cmd("SET")
        .arg(&key)
        .arg("kept")
        .query(&mut connection)
        .unwrap();
    let synced: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut connection)
        .unwrap();
    assert_eq!(synced, 1);

    cluster.kill(master);
    let promoted = cluster.wait_promoted_after_kill(master);
    assert_eq!(promoted, replica);
    assert_eq!(cluster.role(promoted), Role::Master);
    assert!(!cluster.masters().contains(&master));
    assert!(cluster.masters().contains(&promoted));
    assert_eq!(cluster.slot_count(promoted), slots);
    assert_eq!(cluster.master_of_key(&key), promoted);
    let value: String = redis::cmd("GET")
        .arg(&key)
        .query(&mut cluster.connection(promoted))
        .unwrap();
    assert_eq!(value, "kept");

    cluster.restart(master);
    assert_eq!(cluster.wait_replica(master, WAIT), promoted);
    cluster.wait_stable(WAIT);
    assert_eq!(cluster.replicas_of(promoted), vec![master]);
    assert_eq!(cluster.masters().len(), 3);
}

#[test]
fn cluster_manual_failover_swaps_master_and_replica() {
    let cluster = RedisCluster::start(3, 1);
    let master = cluster.masters()[1];
    let replica = cluster.replicas_of(master)[0];
    let slots = cluster.slot_count(master);
    cluster.failover(replica);
    assert_eq!(cluster.role(replica), Role::Master);
    assert_eq!(cluster.slot_count(replica), slots);
    assert_eq!(cluster.wait_replica(master, WAIT), replica);
}

#[test]
fn cluster_reshard_moves_slots_and_their_keys_while_traffic_flows() {
    let cluster = RedisCluster::start(3, 1);
    let masters = cluster.masters();
    let (from, to) = (masters[0], masters[2]);
    let (from_slots, to_slots) = (cluster.slot_count(from), cluster.slot_count(to));
    let keys = keys(300);
    for key in &keys {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(key)
            .query(&mut cluster.connection(cluster.master_of_key(key)))
            .unwrap();
    }

    let on_from: Vec<&String> = keys
        .iter()
        .filter(|key| cluster.master_of_key(key) == from)
        .collect();

    let stop = AtomicBool::new(false);
    let answered = AtomicU64::new(0);
    std::thread::scope(|scope| {
        // Traffic on the source master while its slots move: values, or MOVED/ASK redirections.
        scope.spawn(|| {
            let mut connection = cluster.connection(from);
            while !stop.load(Ordering::Relaxed) {
                for key in &keys {
                    match redis::cmd("GET")
                        .arg(key)
                        .query::<Option<String>>(&mut connection)
                    {
                        Ok(_) => {}
                        Err(error) if matches!(error.code(), Some("MOVED" | "ASK")) => {}
                        Err(error) => panic!("GET {key} on {from} during the reshard: {error}"),
                    }
                    answered.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
        let reshard = cluster.spawn_reshard(from, to, 100);
        let result = reshard.join();
        stop.store(true, Ordering::Relaxed);
        if let Err(panic) = result {
            std::panic::resume_unwind(panic);
        }
    });
    cluster.wait_ok(WAIT);
    assert!(answered.load(Ordering::Relaxed) > 0);

    for &port in &cluster.ports() {
        let moved: u32 = cluster
            .cluster_slots(port)
            .iter()
            .filter(|range| range.master == from)
            .map(|range| range.len())
            .sum();
        assert_eq!(moved, from_slots - 100, "node {port}'s view");
    }
    assert_eq!(cluster.slot_count(to), to_slots + 100);
    for key in &keys {
        let master = cluster.master_of_key(key);
        let value: String = redis::cmd("GET")
            .arg(key)
            .query(&mut cluster.connection(master))
            .unwrap();
        assert_eq!(&value, key);
    }
    let moved_keys = on_from
        .iter()
        .filter(|key| cluster.master_of_key(key) == to)
        .count();
    assert!(moved_keys > 0, "no key lived in the moved slots");

    // The synchronous form, back again.
    cluster.reshard(to, from, 10);
    assert_eq!(cluster.slot_count(from), from_slots - 90);
}

#[test]
fn cluster_with_a_password_needs_it() {
    let options = ClusterOptions {
        password: Some("cluster-secret".to_string()),
        ..ClusterOptions::default()
    };
    let cluster = RedisCluster::start_with(3, 1, &options);
    assert_eq!(cluster.masters().len(), 3);
    let port = cluster.masters()[0];
    let pong: String = redis::cmd("PING")
        .query(&mut cluster.connection(port))
        .unwrap();
    assert_eq!(pong, "PONG");
    let anonymous = cluster.node(port).try_connection_as(&Auth::none()).unwrap();
    let mut anonymous = anonymous;
    let error = error_of(redis::cmd("GET").arg("k").query(&mut anonymous));
    assert_eq!(error.code(), Some("NOAUTH"), "{error}");
    assert!(cluster
        .node(port)
        .try_connection_as(&Auth::password("wrong"))
        .is_err());
}

#[test]
fn cluster_over_tls_with_an_acl_user() {
    let tls = TlsFiles::generate();
    let options = ClusterOptions {
        user: Some(("limiter".to_string(), "limiter-secret".to_string())),
        tls: Some(tls),
        ..ClusterOptions::default()
    };
    let cluster = RedisCluster::start_with(3, 1, &options);
    let port = cluster.masters()[0];
    assert!(cluster
        .url(port)
        .starts_with("rediss://limiter:limiter-secret@127.0.0.1:"));
    let whoami: String = redis::cmd("ACL")
        .arg("WHOAMI")
        .query(&mut cluster.connection(port))
        .unwrap();
    assert_eq!(whoami, "limiter");
    // The default user is off: no way in without the user's credentials.
    let mut anonymous = cluster.node(port).try_connection_as(&Auth::none()).unwrap();
    let error = error_of(redis::cmd("GET").arg("k").query(&mut anonymous));
    assert_eq!(error.code(), Some("NOAUTH"), "{error}");
    // No plain TCP on the TLS port.
    let plain = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let answer = plain
        .get_connection_with_timeout(Duration::from_secs(2))
        .and_then(|mut connection| {
            connection.set_read_timeout(Some(Duration::from_secs(2)))?;
            redis::cmd("PING").query::<String>(&mut connection)
        });
    assert!(answer.is_err(), "plain PING answered: {answer:?}");
}

#[test]
fn sentinel_reports_the_master_and_fails_over_to_the_replica() {
    let sentinel = RedisSentinel::start("harness-master");
    let [first, second] = sentinel.data_ports()[..] else {
        panic!("two data nodes");
    };
    assert_eq!(sentinel.master_name(), "harness-master");
    assert_eq!(sentinel.sentinel_addrs().split(',').count(), 3);
    assert_eq!(sentinel.master_port(), first);
    assert_eq!(
        sentinel.role(second),
        Role::Replica {
            master_port: first,
            link_up: true
        }
    );

    assert_eq!(sentinel.failover(), second);
    assert_eq!(sentinel.role(second), Role::Master);
    for port in sentinel.sentinel_ports() {
        let address: (String, u16) = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg("harness-master")
            .query(&mut sentinel.connection(port))
            .unwrap();
        assert_eq!(address, ("127.0.0.1".to_string(), second));
    }
    assert_eq!(sentinel.wait_replica(first, WAIT), second);
}

#[test]
fn sentinel_with_passwords_replaces_a_killed_master() {
    let options = SentinelOptions {
        password: Some("data-secret".to_string()),
        sentinel_password: Some("sentinel-secret".to_string()),
        ..SentinelOptions::default()
    };
    let mut sentinel = RedisSentinel::start_with("guarded", &options);
    let [first, second] = sentinel.data_ports()[..] else {
        panic!("two data nodes");
    };
    for port in [first, sentinel.sentinel_ports()[0]] {
        let pong: String = redis::cmd("PING")
            .query(&mut sentinel.connection(port))
            .unwrap();
        assert_eq!(pong, "PONG");
        let mut anonymous = sentinel
            .node(port)
            .try_connection_as(&Auth::none())
            .unwrap();
        let error = error_of(redis::cmd("INFO").query(&mut anonymous));
        assert_eq!(error.code(), Some("NOAUTH"), "port {port}: {error}");
    }

    // Objective down needs the Sentinels to talk to each other, with the Sentinel password.
    assert_eq!(sentinel.kill_master(), first);
    assert_eq!(sentinel.wait_master_changed(first, WAIT), second);
    sentinel.restart(first);
    // The restarted node rejoins: as the new master's replica or, where a loaded machine made the
    // Sentinels fail over once more (a second without answers counts as down), as the master the
    // other node follows. Either way both serve again, one synced to the other.
    let (master, replicas) = sentinel.wait_settled(WAIT);
    let mut nodes = vec![master];
    nodes.extend(replicas);
    nodes.sort_unstable();
    let mut expected = vec![first, second];
    expected.sort_unstable();
    assert_eq!(nodes, expected);
}

#[test]
fn sentinel_over_tls() {
    let options = SentinelOptions {
        tls: Some(TlsFiles::generate()),
        ..SentinelOptions::default()
    };
    let sentinel = RedisSentinel::start_with("tls-master", &options);
    let master = sentinel.master_port();
    assert_eq!(master, sentinel.data_ports()[0]);
    let sentinel_port = sentinel.sentinel_ports()[0];
    assert!(sentinel.url(sentinel_port).starts_with("rediss://"));
    let address: (String, u16) = redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg("tls-master")
        .query(&mut sentinel.connection(sentinel_port))
        .unwrap();
    assert_eq!(address.1, master);
    let mut connection = sentinel.connection(master);
    let _: () = redis::cmd("SET")
        .arg("k")
        .arg("v")
        .query(&mut connection)
        .unwrap();
    let synced: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut connection)
        .unwrap();
    assert_eq!(synced, 1, "the replica syncs over TLS");
}
