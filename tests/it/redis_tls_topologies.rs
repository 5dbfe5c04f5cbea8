//! Mutual TLS to a Redis Cluster and to a Sentinel setup whose every process requires client
//! certificates (`--tls-auth-clients yes`): ratelimitd presents `--redis-tls-client-cert` on
//! every connection (the nodes the slot map names; the sentinels and the master they name) and
//! decides exactly; without it, startup stops saying that a client certificate is required.

use std::time::Duration;

use testkit::fault_load::assert_window_exact;
use testkit::ratelimitd::{command, fixture, run_to_end, Ratelimitd};
use testkit::redis_cluster::{ClusterOptions, RedisCluster};
use testkit::redis_sentinel::{RedisSentinel, SentinelOptions};
use testkit::redis_server::TlsFiles;

fn require_client_certificates() -> Vec<String> {
    vec!["--tls-auth-clients".into(), "yes".into()]
}

/// `serve`'s arguments: the `concurrency` fixture, the Redis of `redis` (a flag and its value)
/// over TLS with the CA of `tls`, and `extra`.
fn args(redis: [&str; 2], tls: &TlsFiles, extra: &[&str]) -> Vec<String> {
    let config = fixture("serve/concurrency.yaml");
    let ca = tls.ca.to_str().unwrap();
    let fixed = [
        "--config",
        config.to_str().unwrap(),
        redis[0],
        redis[1],
        "--threads",
        "2",
        "--redis-tls",
        "--redis-tls-ca",
        ca,
    ];
    fixed
        .iter()
        .chain(extra)
        .map(|arg| arg.to_string())
        .collect()
}

fn start(args: &[String]) -> Ratelimitd {
    Ratelimitd::start(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// Startup without a client certificate: exit 1, saying why.
fn refused_without_a_client_certificate(args: &[String]) {
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ])
    .args(args);
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(30));
    let text = format!("{stdout}{stderr}");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(text.contains("CertificateRequired"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_that_requires_client_certificates() {
    let tls = TlsFiles::generate();
    let cluster = RedisCluster::start_with(
        3,
        0,
        &ClusterOptions {
            tls: Some(tls.clone()),
            extra: require_client_certificates(),
            ..ClusterOptions::default()
        },
    );
    let (cert, key) = tls.client_certificate("ratelimitd");
    let seeds = cluster.seeds();
    let redis = ["--redis-cluster", seeds.as_str()];
    let identity = [
        "--redis-tls-client-cert",
        cert.to_str().unwrap(),
        "--redis-tls-client-key",
        key.to_str().unwrap(),
    ];
    let server = start(&args(redis, &tls, &identity));
    assert_window_exact(server.grpc_addr(), "cluster-mtls").await;
    drop(server);
    refused_without_a_client_certificate(&args(redis, &tls, &[]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_sentinel_setup_that_requires_client_certificates() {
    let tls = TlsFiles::generate();
    let setup = RedisSentinel::start_with(
        "mutual",
        &SentinelOptions {
            tls: Some(tls.clone()),
            extra: require_client_certificates(),
            ..SentinelOptions::default()
        },
    );
    let (cert, key) = tls.client_certificate("ratelimitd");
    let target = format!("{}@{}", setup.master_name(), setup.sentinel_addrs());
    let redis = ["--redis-sentinel", target.as_str()];
    let identity = [
        "--redis-tls-client-cert",
        cert.to_str().unwrap(),
        "--redis-tls-client-key",
        key.to_str().unwrap(),
    ];
    let server = start(&args(redis, &tls, &identity));
    assert_window_exact(server.grpc_addr(), "sentinel-mtls").await;
    drop(server);
    refused_without_a_client_certificate(&args(redis, &tls, &[]));
}
