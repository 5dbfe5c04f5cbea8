//! ratelimitd on a real Sentinel setup (a master, a replica and three sentinels, started by the
//! test): the master found through the sentinels, `SENTINEL FAILOVER` and a killed master
//! followed under a bounded load without a restart, with no window admitting more than its limit
//! afterwards; data and sentinel passwords, and TLS.

use std::time::Duration;

use testkit::fault_load::*;
use testkit::ratelimitd::*;
use testkit::redis_sentinel::{RedisSentinel, SentinelOptions};
use testkit::redis_server::TlsFiles;

fn serve(setup: &RedisSentinel, extra: &[&str]) -> Ratelimitd {
    let config = fixture("serve/concurrency.yaml");
    let target = format!("{}@{}", setup.master_name(), setup.sentinel_addrs());
    let mut args = vec![
        "--config",
        config.to_str().unwrap(),
        "--redis-sentinel",
        &target,
        "--threads",
        "2",
    ];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

/// The hits of a key as the current master holds them (fixed window: `<start>:<count>`).
fn stored_counts(setup: &RedisSentinel) -> usize {
    let mut master = setup.connection(setup.master_port());
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("rl1:*")
        .query(&mut master)
        .expect("KEYS");
    keys.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_master_is_found_through_the_sentinels_and_followed_across_a_failover() {
    let setup = RedisSentinel::start("limits");
    let server = serve(&setup, &["--redis-timeout", "500ms"]);
    assert_window_exact(server.grpc_addr(), "before").await;
    assert!(
        stored_counts(&setup) > 0,
        "counters live on the master the sentinels name"
    );
    let old = setup.master_port();
    fault_under_load(
        &server,
        || {
            let new = setup.failover();
            assert_ne!(new, old);
        },
        Duration::from_secs(3),
        Duration::from_secs(4),
    )
    .await;
    assert_ne!(setup.master_port(), old);
    assert!(
        stored_counts(&setup) > 0,
        "counters are written to the new master"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_killed_master_is_replaced_by_the_replica_the_sentinels_promote() {
    let mut setup = RedisSentinel::start("limits");
    let mut server = serve(&setup, &["--redis-timeout", "500ms"]);
    fault_under_load(
        &server,
        || {
            let old = setup.kill_master();
            setup.wait_master_changed(old, Duration::from_secs(30));
        },
        Duration::from_secs(4),
        Duration::from_secs(5),
    )
    .await;
    assert!(server.is_running(), "ratelimitd stays up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn data_and_sentinel_passwords_and_tls_work() {
    let setup = RedisSentinel::start_with(
        "secured",
        &SentinelOptions {
            password: Some("data-pw".into()),
            sentinel_password: Some("sentinel-pw".into()),
            ..SentinelOptions::default()
        },
    );
    let server = serve(
        &setup,
        &[
            "--redis-password",
            "data-pw",
            "--redis-sentinel-password",
            "sentinel-pw",
        ],
    );
    assert_window_exact(server.grpc_addr(), "passwords").await;

    let tls = TlsFiles::generate();
    let secure = RedisSentinel::start_with(
        "encrypted",
        &SentinelOptions {
            tls: Some(tls.clone()),
            ..SentinelOptions::default()
        },
    );
    let ca = tls.ca.clone();
    let server = serve(
        &secure,
        &["--redis-tls", "--redis-tls-ca", ca.to_str().unwrap()],
    );
    assert_window_exact(server.grpc_addr(), "tls").await;
}
