//! ratelimitd on a real Redis Cluster (three masters, one replica each, started by the test):
//! exact admission through two processes for every algorithm, requests spanning three masters
//! decided all or nothing, and faults under a bounded load (a master killed, a manual failover,
//! `SCRIPT FLUSH`), after which service resumes by itself and no window admits more than its
//! limit; plus the credentials and TLS a deployment uses, and health under a lost shard.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::Entry;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::store::redis::scripts::keys::hash_tag;
use testkit::fault_load::*;
use testkit::ratelimitd::*;
use testkit::redis_cluster::{ClusterOptions, RedisCluster};
use testkit::redis_server::TlsFiles;

/// The master of `key=value` in the `concurrency` domain.
fn master_of(cluster: &RedisCluster, key: &str, value: &str) -> u16 {
    let counter = CounterKey::new(
        "concurrency",
        &[Entry {
            key: key.into(),
            value: value.into(),
        }],
    );
    cluster.master_of_key(&format!("{{{}}}", hash_tag(&counter)))
}

/// A value for which `algorithm`, `algorithm_b` and `algorithm_c` live on three masters.
fn value_on_three_masters(cluster: &RedisCluster, algorithm: &str) -> String {
    (0..10_000)
        .map(|i| format!("three-{i}"))
        .find(|value| {
            let masters: BTreeSet<u16> = [
                algorithm.to_string(),
                format!("{algorithm}_b"),
                format!("{algorithm}_c"),
            ]
            .iter()
            .map(|key| master_of(cluster, key, value))
            .collect();
            masters.len() == 3
        })
        .expect("a value spreading three keys over three masters")
}

fn serve(cluster: &RedisCluster, extra: &[&str]) -> Ratelimitd {
    let config = fixture("serve/concurrency.yaml");
    let seeds = cluster.seeds();
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--redis-cluster",
        &seeds,
        "--threads",
        "2",
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

/// 300 concurrent requests of three descriptors each (`algorithm` 50, `algorithm_b` 80,
/// `algorithm_c` 120 per hour) whose keys live on three masters, then one request at a time until
/// the first limit is exhausted. Each node decides its check; a request denied anywhere is
/// refunded where it was admitted. Until then its reservation is held, so the burst may admit
/// fewer than 50 (concurrent requests see it for one round trip), never more; in all exactly 50
/// are admitted, and the denied requests charged nothing on the other masters (30 and 70 remain).
async fn assert_all_or_nothing_across_masters(addrs: &[SocketAddr], algorithm: &str, value: &str) {
    wait_for_window_room(3600, 30);
    let b = format!("{algorithm}_b");
    let c = format!("{algorithm}_c");
    let three = || {
        request(
            "concurrency",
            &[&[(algorithm, value)], &[(&b, value)], &[(&c, value)]],
            0,
        )
    };
    let burst = hammer(addrs, 6, 300, |_| three()).await;
    let in_burst = burst
        .iter()
        .filter(|r| r.overall_code == Code::Ok as i32)
        .count();
    assert!(
        (1..=50).contains(&in_burst),
        "{algorithm}: {in_burst} of 300 concurrent requests admitted at a limit of 50"
    );
    let mut client = client(addrs[0]).await;
    let mut admitted = in_burst;
    for _ in 0..60 {
        let resp = should(&mut client, three()).await;
        admitted += usize::from(resp.overall_code == Code::Ok as i32);
    }
    assert_eq!(admitted, 50, "{algorithm}: admitted in all");
    for (key, left) in [(algorithm, 0), (b.as_str(), 30), (c.as_str(), 70)] {
        assert_eq!(
            remaining_of(addrs[0], "concurrency", &[(key, value)]).await,
            left,
            "{key}: charged exactly by the 50 admitted requests"
        );
    }
}

/// Two processes, 300 concurrent requests per scenario, every algorithm: exactly the limit
/// admitted on one key, and all or nothing across three masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 8)]
async fn two_processes_admit_exactly_the_limit_for_every_algorithm() {
    let cluster = RedisCluster::start(3, 1);
    // Exactness, not latency: a debug build answering 300 simultaneous calls on a small machine.
    let a = serve(&cluster, &["--redis-timeout", "5s"]);
    let b = serve(&cluster, &["--redis-timeout", "5s"]);
    let addrs = [a.grpc_addr(), b.grpc_addr()];
    for algorithm in [
        "fixed_window",
        "sliding_window_log",
        "sliding_window_counter",
        "token_bucket",
        "gcra",
    ] {
        assert_exact_admission(&addrs, algorithm, "one-key").await;
        let value = value_on_three_masters(&cluster, algorithm);
        assert_all_or_nothing_across_masters(&addrs, algorithm, &value).await;
    }
}

/// A killed master: its replica is promoted, ratelimitd follows without a restart, and the old
/// master restarted as a replica changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_is_followed_to_its_promoted_replica() {
    let mut cluster = RedisCluster::start(3, 1);
    let mut server = serve(&cluster, &["--redis-timeout", "500ms"]);
    let victim = cluster.masters()[0];
    fault_under_load(
        &server,
        || {
            cluster.kill(victim);
            cluster.wait_promoted_after_kill(victim);
        },
        Duration::from_secs(3),
        Duration::from_secs(5),
    )
    .await;
    cluster.restart(victim);
    cluster.wait_replica(victim, Duration::from_secs(30));
    assert_window_exact(server.grpc_addr(), "after-restart").await;
    assert!(server.is_running(), "ratelimitd stays up");
}

/// `CLUSTER FAILOVER` on a replica: the old master turns replica under the load.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_manual_failover_is_followed() {
    let cluster = RedisCluster::start(3, 1);
    let server = serve(&cluster, &["--redis-timeout", "500ms"]);
    let master = cluster.masters()[1];
    let replica = cluster.replicas_of(master)[0];
    fault_under_load(
        &server,
        || cluster.failover(replica),
        Duration::from_secs(2),
        Duration::from_secs(3),
    )
    .await;
}

/// `SCRIPT FLUSH` on one node: the scripts are reloaded there, and no request fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_script_flush_on_one_node_fails_no_request() {
    let cluster = RedisCluster::start(3, 0);
    let server = serve(&cluster, &["--redis-timeout", "2s"]);
    let node = cluster.masters()[2];
    let answers = fault_under_load(
        &server,
        || cluster.script_flush(node),
        Duration::ZERO,
        Duration::from_secs(1),
    )
    .await;
    assert!(
        answers.iter().all(|(_, a)| *a != Answer::Unavailable),
        "no request fails across SCRIPT FLUSH"
    );
}

/// With `--redis-wait-replicas 1`, hits admitted before a master is killed are still counted on
/// its promoted replica: the window admits only what was left. The promoted replica has no
/// replica of its own until the old master rejoins, and until then no write can be acknowledged
/// by one: calls fail with the store-error policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_wait_replicas_admitted_hits_survive_a_failover() {
    let mut cluster = RedisCluster::start(3, 1);
    let server = serve(
        &cluster,
        &["--redis-timeout", "1s", "--redis-wait-replicas", "1"],
    );
    let value = "durable";
    let mut c = client(server.grpc_addr()).await;
    for _ in 0..30 {
        let resp = should(
            &mut c,
            request("concurrency", &[&[("fixed_window", value)]], 0),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok);
    }
    let victim = master_of(&cluster, "fixed_window", value);
    tokio::task::block_in_place(|| {
        cluster.kill(victim);
        cluster.wait_promoted_after_kill(victim);
    });
    let resp = c
        .should_rate_limit(request("concurrency", &[&[("fixed_window", value)]], 0))
        .await;
    assert_eq!(
        resp.map(|_| ()).map_err(|status| status.code()),
        Err(tonic::Code::Unavailable),
        "no replica acknowledges the writes of the promoted master"
    );
    tokio::task::block_in_place(|| {
        cluster.restart(victim);
        cluster.wait_replica(victim, Duration::from_secs(30));
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut ok = 0;
    let mut over = 0;
    while ok + over < 30 {
        assert!(Instant::now() < deadline, "service did not resume");
        match c
            .should_rate_limit(request("concurrency", &[&[("fixed_window", value)]], 0))
            .await
        {
            Ok(resp) if resp.get_ref().overall_code == Code::Ok as i32 => ok += 1,
            Ok(_) => over += 1,
            Err(status) => {
                assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
    assert_eq!(
        (ok, over),
        (20, 10),
        "the 30 hits admitted before the failover still count"
    );
}

/// While a master is down (before its replica takes over), requests on the other shards are
/// still answered; requests on its shard get the store-error policy within the timeout; health
/// is NOT_SERVING; after the promotion everything is served again, without a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_shard_fails_only_its_requests_until_its_replica_takes_over() {
    let mut cluster = RedisCluster::start_with(
        3,
        1,
        &ClusterOptions {
            require_full_coverage: false,
            // Long enough to observe the outage before the promotion.
            node_timeout_ms: 4_000,
            ..ClusterOptions::default()
        },
    );
    let server = serve(
        &cluster,
        &["--redis-timeout", "300ms", "--on-store-error", "deny"],
    );
    let victim = cluster.masters()[0];
    let on = |pick_victim: bool| {
        (0..10_000)
            .map(|i| format!("shard-{i}"))
            .find(|value| (master_of(&cluster, "fixed_window", value) == victim) == pick_victim)
            .expect("a value")
    };
    let (lost, kept) = (on(true), on(false));
    let mut c = client(server.grpc_addr()).await;
    let mut health = server.health_client().await;
    assert_eq!(overall_health(&mut health).await, 1, "SERVING");

    cluster.kill(victim);
    let started = Instant::now();
    let mut saw_not_serving = false;
    while started.elapsed() < Duration::from_secs(2) {
        let resp = should(
            &mut c,
            request("concurrency", &[&[("fixed_window", &kept)]], 0),
        )
        .await;
        assert_eq!(overall(&resp), Code::Ok, "a healthy shard's request");
        let asked = Instant::now();
        let resp = should(
            &mut c,
            request("concurrency", &[&[("fixed_window", &lost)]], 0),
        )
        .await;
        assert_eq!(
            overall(&resp),
            Code::OverLimit,
            "the lost shard: --on-store-error deny"
        );
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "answered within the timeout"
        );
        saw_not_serving |= overall_health(&mut health).await != 1;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        saw_not_serving,
        "health turns NOT_SERVING while a slot has no reachable master"
    );

    tokio::task::block_in_place(|| {
        cluster.wait_promoted_after_kill(victim);
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let resp = should(
            &mut c,
            request("concurrency", &[&[("fixed_window", &lost)]], 0),
        )
        .await;
        if overall(&resp) == Code::Ok && overall_health(&mut health).await == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the shard is served again after the promotion"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A cluster whose nodes need an ACL user's password, and one that speaks TLS only.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acl_users_passwords_and_tls_work_on_a_cluster() {
    let cluster = RedisCluster::start_with(
        3,
        0,
        &ClusterOptions {
            user: Some(("limiter".into(), "s3cret".into())),
            ..ClusterOptions::default()
        },
    );
    let server = serve(
        &cluster,
        &["--redis-user", "limiter", "--redis-password", "s3cret"],
    );
    assert_window_exact(server.grpc_addr(), "acl").await;

    let password = RedisCluster::start_with(
        3,
        0,
        &ClusterOptions {
            password: Some("only-a-password".into()),
            ..ClusterOptions::default()
        },
    );
    let server = serve(&password, &["--redis-password", "only-a-password"]);
    assert_window_exact(server.grpc_addr(), "password").await;
    // A wrong password fails at startup, by name.
    let config = fixture("serve/concurrency.yaml");
    let (status, stdout, stderr) = run_to_end(
        {
            let mut cmd = command();
            cmd.args([
                "serve",
                "--config",
                config.to_str().unwrap(),
                "--grpc-addr",
                "127.0.0.1:0",
                "--http-addr",
                "127.0.0.1:0",
                "--redis-cluster",
                &password.seeds(),
                "--redis-password",
                "wrong",
            ]);
            cmd
        },
        Duration::from_secs(20),
    );
    assert!(!status.success());
    assert!(
        stdout.contains("cluster node") || stderr.contains("cluster node"),
        "{stdout}{stderr}"
    );

    let tls = TlsFiles::generate();
    let secure = RedisCluster::start_with(
        3,
        0,
        &ClusterOptions {
            tls: Some(tls.clone()),
            ..ClusterOptions::default()
        },
    );
    let ca = tls.ca.clone();
    let server = serve(
        &secure,
        &["--redis-tls", "--redis-tls-ca", ca.to_str().unwrap()],
    );
    assert_window_exact(server.grpc_addr(), "tls").await;
}
