//! The real binary configured the way envoyproxy/ratelimit is: by its environment variables
//! only (no flags, no `RATELIMITD_*`), its configuration in a `RUNTIME_ROOT` tree behind a
//! `current` symlink, and Redis named by `REDIS_SOCKET_TYPE` / `REDIS_URL`, as upstream
//! Deployments set them.

mod common;

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::grpc_transport::{health_status, rls, tls_channel, uds_channel};
use common::pki::Pki;
use common::ratelimitd::{
    client, command, http_get, log_field, overall, request, run_to_end, should, Ratelimitd,
};
use common::redis_server::RedisServer;
use ratelimitd::proto::rls::rate_limit_response::Code;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

const EDGE_V1: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
const EDGE_V2: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
const SHOP: &str = "domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";

/// `root/current -> v1`, with `v1/ratelimit/config/` holding the configuration files.
struct RuntimeTree {
    dir: tempfile::TempDir,
}

impl RuntimeTree {
    fn new(files: &[(&str, &str)]) -> RuntimeTree {
        let tree = RuntimeTree {
            dir: tempfile::tempdir().unwrap(),
        };
        tree.write_version("v1", files);
        symlink("v1", tree.current()).unwrap();
        tree
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn current(&self) -> PathBuf {
        self.root().join("current")
    }

    fn write_version(&self, version: &str, files: &[(&str, &str)]) {
        let config = self.root().join(version).join("ratelimit/config");
        for (name, text) in files {
            let path = config.join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
    }

    /// Points `current` at `version` in one rename, as a deploy tool swaps it.
    fn swap_to(&self, version: &str) {
        let next = self.root().join("current.next");
        symlink(version, &next).unwrap();
        fs::rename(&next, self.current()).unwrap();
    }

    /// The upstream variables that find this tree.
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("RUNTIME_ROOT".into(), self.current().display().to_string()),
            ("RUNTIME_SUBDIRECTORY".into(), "ratelimit".into()),
        ]
    }
}

/// Upstream variables for loopback ports the kernel picks, logged at `info` so the harness
/// reads the addresses, with statsd off (nothing listens on localhost:8125 here).
fn loopback_env() -> Vec<(String, String)> {
    [
        ("GRPC_HOST", "127.0.0.1"),
        ("GRPC_PORT", "0"),
        ("HOST", "127.0.0.1"),
        ("PORT", "0"),
        ("DEBUG_HOST", "127.0.0.1"),
        ("DEBUG_PORT", "0"),
        ("LOG_LEVEL", "info"),
        ("USE_STATSD", "false"),
    ]
    .iter()
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect()
}

fn redis_env(redis: &RedisServer) -> Vec<(String, String)> {
    vec![
        ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
        ("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port())),
    ]
}

/// Starts the binary with no arguments at all and exactly `env` (beside the harness's own
/// hygiene variables).
fn start_bare(env: &[(String, String)]) -> Ratelimitd {
    let mut cmd = command();
    for (name, value) in env {
        cmd.env(name, value);
    }
    Ratelimitd::spawn(cmd)
}

/// The address a `serving HTTP` line gives for `port` (`metrics` or `debug`).
fn extra_port(server: &Ratelimitd, port: &str) -> SocketAddr {
    let marker = format!("port=\"{port}\"");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let output = server.output();
        if let Some(addr) = output
            .lines()
            .filter(|line| line.contains(&marker))
            .find_map(|line| log_field(line, "addr"))
        {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no {port} port in the log:\n{output}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn codes(server: &Ratelimitd, domain: &str, key: &str, value: &str, n: usize) -> Vec<Code> {
    let mut client = client(server.grpc_addr()).await;
    let mut codes = Vec::new();
    for _ in 0..n {
        let response = should(&mut client, request(domain, &[&[(key, value)]], 1)).await;
        codes.push(overall(&response));
    }
    codes
}

async fn health(server: &Ratelimitd) -> ServingStatus {
    let mut health = HealthClient::new(common::ratelimitd::channel(server.grpc_addr()).await);
    let status = health
        .check(HealthCheckRequest {
            service: String::new(),
        })
        .await
        .expect("health check")
        .into_inner()
        .status;
    ServingStatus::try_from(status).expect("a serving status")
}

async fn wait_for(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_upstream_deployment_is_served_from_redis_and_reloads_on_a_symlink_swap() {
    let redis = RedisServer::start();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1), ("teams/shop.yaml", SHOP)]);
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    let server = start_bare(&env);

    assert_eq!(health(&server).await, ServingStatus::Serving);
    let ok_ok_ok_over = vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit];
    assert_eq!(
        codes(&server, "edge", "client", "a", 4).await,
        ok_ok_ok_over
    );
    // A file in a subdirectory of the runtime tree is configuration too, as upstream loads it.
    assert_eq!(
        codes(&server, "shop", "cart", "c1", 2).await,
        vec![Code::Ok, Code::OverLimit]
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        keys.len() >= 2,
        "the counters live in the Redis of REDIS_URL: {keys:?}"
    );

    // The debug port serves /rlconfig, as upstream's does.
    let debug = extra_port(&server, "debug");
    let (status, body) = http_get(debug, "/rlconfig").await;
    assert_eq!(status, 200);
    assert!(body.contains("edge.client"), "{body}");

    tree.write_version("v2", &[("edge.yaml", EDGE_V2), ("teams/shop.yaml", SHOP)]);
    tree.swap_to("v2");
    wait_for("the swapped tree's limit", async || {
        let (_, body) = http_get(server.http_addr(), "/rlconfig").await;
        body.contains("requests_per_unit=5")
    })
    .await;
    let codes = codes(&server, "edge", "client", "b", 6).await;
    assert_eq!(
        codes.iter().filter(|c| **c == Code::Ok).count(),
        5,
        "{codes:?}"
    );
    let log = server.output();
    assert!(
        log.contains("envoyproxy/ratelimit setting: RATELIMITD_REDIS_URL"),
        "{log}"
    );
}

#[test]
fn check_reads_the_runtime_tree_with_upstreams_dotfile_rule() {
    let tree = RuntimeTree::new(&[
        ("edge.yaml", EDGE_V1),
        // Upstream loads every file of the tree, whatever its name.
        ("teams/shop", SHOP),
        (".edge-copy.yaml", EDGE_V2),
    ]);
    let run = |ignore_dotfiles: &str| {
        let mut cmd = command();
        cmd.arg("check");
        for (name, value) in tree.env() {
            cmd.env(name, value);
        }
        cmd.env("RUNTIME_IGNOREDOTFILES", ignore_dotfiles);
        run_to_end(cmd, Duration::from_secs(20))
    };
    let (status, stdout, stderr) = run("true");
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("2 domain(s), 2 limit(s)"), "{stdout}");

    // Without RUNTIME_IGNOREDOTFILES (upstream's default: false), the dotfile is read too and
    // its domain is defined twice.
    let (status, _, stderr) = run("false");
    assert!(!status.success());
    assert!(
        stderr.contains(".edge-copy.yaml") && stderr.contains("domain `edge` is already defined"),
        "{stderr}"
    );
}

#[tokio::test]
async fn global_modes_headers_and_merging_follow_upstreams_variables() {
    let tree = RuntimeTree::new(&[
        ("edge.yaml", EDGE_V1),
        ("edge-more.yaml", SHOP.replace("shop", "edge").as_str()),
    ]);
    let mut env = loopback_env();
    env.extend(tree.env());
    // No REDIS_URL: drop-in mode would use upstream's nutcracker socket; a Redis is given.
    let redis = RedisServer::start();
    env.extend(redis_env(&redis));
    for (name, value) in [
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("SHADOW_MODE", "1"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "T"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ] {
        env.push((name.into(), value.into()));
    }
    let server = start_bare(&env);
    let mut client = client(server.grpc_addr()).await;
    let mut last = None;
    for _ in 0..4 {
        last = Some(should(&mut client, request("edge", &[&[("client", "z")]], 1)).await);
    }
    let response = last.unwrap();
    // SHADOW_MODE: over the limit, yet the answer is OK and the status keeps its code.
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(response.statuses[0].code, Code::OverLimit as i32);
    let headers: Vec<(String, String)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit".into(), "3".into()));
    assert_eq!(headers[1], ("X-Left".into(), "0".into()));
    assert_eq!(headers[2].0, "RateLimit-Reset");
    assert!(response.dynamic_metadata.is_some());
    // MERGE_DOMAIN_CONFIG: the second file's `cart` is part of domain `edge`.
    assert_eq!(
        codes(&server, "edge", "cart", "c", 2).await,
        vec![Code::Ok, Code::Ok],
        "shadow mode answers OK"
    );
    let (_, body) = http_get(server.http_addr(), "/rlconfig").await;
    assert!(body.contains("edge.cart"), "{body}");
}

#[tokio::test]
async fn use_prometheus_opens_its_own_port_and_path() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("USE_PROMETHEUS".into(), "true".into()));
    env.push(("PROMETHEUS_ADDR".into(), "127.0.0.1:0".into()));
    env.push(("PROMETHEUS_PATH".into(), "/stats/prometheus".into()));
    let server = start_bare(&env);
    codes(&server, "edge", "client", "p", 1).await;
    let metrics = extra_port(&server, "metrics");
    let (status, body) = http_get(metrics, "/stats/prometheus").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("ratelimitd_total_hits_total{domain=\"edge\",rule=\"edge.client\"} 1"),
        "{body}"
    );
    assert_eq!(http_get(metrics, "/metrics").await.0, 404);
    // The HTTP port keeps /metrics.
    assert_eq!(http_get(server.http_addr(), "/metrics").await.0, 200);
}

#[tokio::test]
async fn a_forced_start_is_unhealthy_until_a_configuration_loads() {
    let tree = RuntimeTree::new(&[("edge.yaml", "domain: edge\nbogus: 1\n")]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("FORCE_START_WITHOUT_INITIAL_CONFIG".into(), "true".into()));
    env.push((
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED".into(),
        "true".into(),
    ));
    let server = start_bare(&env);
    assert_eq!(health(&server).await, ServingStatus::NotServing);
    assert!(
        server.output().contains("edge.yaml:2:1"),
        "{}",
        server.output()
    );

    tree.write_version("v1", &[("edge.yaml", EDGE_V1)]);
    wait_for("health after a valid configuration", async || {
        health(&server).await == ServingStatus::Serving
    })
    .await;
    assert_eq!(
        codes(&server, "edge", "client", "f", 4).await,
        vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
}

#[tokio::test]
async fn redis_auth_and_a_unix_socket_as_upstream_names_them() {
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("redis.sock");
    let socket_text = socket.display().to_string();
    let redis = RedisServer::start_with(&[
        "--requirepass",
        "s3c@r/t",
        "--unixsocket",
        &socket_text,
        "--unixsocketperm",
        "700",
    ]);
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    for (socket_type, url) in [
        // REDIS_SOCKET_TYPE defaults to unix, as upstream's.
        (None, socket_text.clone()),
        (Some("tcp"), format!("127.0.0.1:{}", redis.port())),
    ] {
        let mut env = loopback_env();
        env.extend(tree.env());
        env.push(("REDIS_URL".into(), url));
        env.push(("REDIS_AUTH".into(), "s3c@r/t".into()));
        if let Some(socket_type) = socket_type {
            env.push(("REDIS_SOCKET_TYPE".into(), socket_type.into()));
        }
        let server = start_bare(&env);
        let value = format!("{socket_type:?}");
        assert_eq!(
            codes(&server, "edge", "client", &value, 4).await,
            vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
            "{socket_type:?}"
        );
        assert!(
            !server.output().contains("s3c@r"),
            "the password is never logged:\n{}",
            server.output()
        );
        let shown = match socket_type {
            None => format!("RATELIMITD_REDIS_URL=unix://{socket_text}?pass=***"),
            Some(_) => format!(
                "RATELIMITD_REDIS_URL=redis://:***@127.0.0.1:{}",
                redis.port()
            ),
        };
        assert!(
            server.output().contains(&shown),
            "the address is logged: {shown}\n{}",
            server.output()
        );
    }
}

/// Each refused value names what the user set (the upstream variable, or the `RATELIMITD_*` one,
/// never a flag they did not pass), the value and what is accepted; every one exits 1.
#[test]
fn refused_values_name_the_variable_the_user_set() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    for (env, expected) in [
        (
            vec![("REDIS_POOL_SIZE", "ten")],
            "REDIS_POOL_SIZE: `ten` is not a number of connections (a whole number from 1)",
        ),
        (
            vec![("NEAR_LIMIT_RATIO", "1.5")],
            "NEAR_LIMIT_RATIO=`1.5` is refused: `1.5` is not a ratio in (0, 1]",
        ),
        (
            vec![("RATELIMITD_REDIS_POOL_SIZE", "ten")],
            "RATELIMITD_REDIS_POOL_SIZE=`ten` is refused",
        ),
        (
            vec![("RATELIMITD_ON_STORE_ERROR", "maybe")],
            "RATELIMITD_ON_STORE_ERROR=`maybe` is refused: unknown store error policy `maybe` (expected unavailable, allow or deny)",
        ),
        (
            vec![("REDIS_URL", "127.0.0.1:6379")],
            "REDIS_URL: `127.0.0.1:6379` is read as the path of a unix socket because \
             REDIS_SOCKET_TYPE is unset, and upstream's default is unix; for a TCP address set \
             REDIS_SOCKET_TYPE=tcp",
        ),
    ] {
        let mut cmd = command();
        for (name, value) in tree.env() {
            cmd.env(name, value);
        }
        for (name, value) in &env {
            cmd.env(name, value);
        }
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{env:?}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{env:?}: {stderr}");
        assert!(!stderr.contains("'--"), "no flag the user did not pass: {stderr}");
    }
    // A flag that does not exist is a configuration error too: exit 1.
    let mut cmd = command();
    cmd.args(["serve", "--no-such-flag"]);
    let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stderr}");
}

#[test]
fn ratelimitd_flags_and_variables_win_over_upstreams() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let own = tempfile::tempdir().unwrap();
    fs::write(own.path().join("shop.yaml"), SHOP).unwrap();
    let mut cmd = command();
    cmd.arg("check");
    for (name, value) in tree.env() {
        cmd.env(name, value);
    }
    cmd.env("RATELIMITD_CONFIG", own.path());
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 domain(s), 1 limit(s)"), "{stdout}");

    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(redis_env(&redis));
    env.push(("GRPC_PORT".into(), "1".into()));
    let mut cmd = command();
    cmd.args(["serve", "--config"]).arg(own.path());
    cmd.args(["--grpc-addr", "127.0.0.1:0"]);
    for (name, value) in &env {
        cmd.env(name, value);
    }
    let server = Ratelimitd::spawn(cmd);
    assert_ne!(server.grpc_addr().port(), 1, "the flag wins over GRPC_PORT");
}

#[test]
fn variables_that_cannot_be_honoured_stop_startup_by_name() {
    for (name, value, expected) in [
        (
            "BACKEND_TYPE",
            "memcache",
            "BACKEND_TYPE=memcache: Memcached is not supported",
        ),
        (
            "USE_DOG_STATSD",
            "true",
            "USE_DOG_STATSD=true: DogStatsD is not supported",
        ),
        ("CONFIG_TYPE", "REST", "CONFIG_TYPE: `REST`"),
        (
            "SHADOW_MODE",
            "yes",
            "SHADOW_MODE: `yes` is not a Go boolean",
        ),
    ] {
        let mut cmd = command();
        cmd.env(name, value);
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{name}={value}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{name}={value}: {stderr}");
    }
}

#[tokio::test]
async fn statsd_is_on_by_default_as_upstreams_and_takes_its_host_port_tags_and_interval() {
    let statsd = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    statsd
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env: Vec<(String, String)> = loopback_env()
        .into_iter()
        .filter(|(name, _)| name != "USE_STATSD")
        .collect();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("STATSD_HOST".into(), "127.0.0.1".into()));
    let port = statsd.local_addr().unwrap().port().to_string();
    env.push(("STATSD_PORT".into(), port));
    env.push(("STATS_FLUSH_INTERVAL".into(), "100ms".into()));
    env.push(("EXTRA_TAGS".into(), "env:test".into()));
    let server = start_bare(&env);
    assert_eq!(
        codes(&server, "edge", "client", "s", 4).await,
        vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    let mut totals = std::collections::BTreeMap::<String, i64>::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let hits = "ratelimit.service.rate_limit.edge.client.total_hits.__env=test";
    let over = "ratelimit.service.rate_limit.edge.client.over_limit.__env=test";
    while totals.get(hits) != Some(&4) || totals.get(over) != Some(&1) {
        assert!(Instant::now() < deadline, "statsd received {totals:?}");
        let mut buffer = [0u8; 2048];
        let Ok(length) = statsd.recv(&mut buffer) else {
            continue;
        };
        for line in String::from_utf8_lossy(&buffer[..length]).lines() {
            if let Some((name, rest)) = line.split_once(':') {
                if let Some(count) = rest.strip_suffix("|c") {
                    *totals.entry(name.to_string()).or_default() += count.parse::<i64>().unwrap();
                }
            }
        }
    }
}

#[tokio::test]
async fn grpc_tls_and_mutual_tls_from_upstreams_variables() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd drop-in", 2);
    let client = ca.client("envoy", "DNS:envoy.client.test");
    let impostor = ca.client("impostor", "DNS:other.client.test");
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    for (name, path) in [
        ("GRPC_SERVER_TLS_CERT", &cert.cert),
        ("GRPC_SERVER_TLS_KEY", &cert.key),
        ("GRPC_CLIENT_TLS_CACERT", &ca.cert),
    ] {
        env.push((name.into(), path.display().to_string()));
    }
    env.push(("GRPC_SERVER_USE_TLS".into(), "true".into()));
    env.push(("GRPC_CLIENT_TLS_SAN".into(), "envoy.client.test".into()));
    let server = start_bare(&env);

    let anonymous = tls_channel(server.grpc_addr(), &ca.cert, None).await;
    let refused = match anonymous {
        Err(_) => true,
        Ok(channel) => health_status(channel).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused");
    let wrong_san = match tls_channel(server.grpc_addr(), &ca.cert, Some(&impostor)).await {
        Err(_) => true,
        Ok(channel) => health_status(channel).await.is_err(),
    };
    assert!(
        wrong_san,
        "a client certificate without GRPC_CLIENT_TLS_SAN is refused"
    );
    let channel = tls_channel(server.grpc_addr(), &ca.cert, Some(&client))
        .await
        .expect("the pinned client connects");
    let mut client = rls(channel);
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = should(&mut client, request("edge", &[&[("client", "tls")]], 1)).await;
        codes.push(overall(&response));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
}

#[tokio::test]
async fn grpc_uds_and_connection_age_from_upstreams_variables() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("ratelimit.sock");
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("GRPC_UDS".into(), socket.display().to_string()));
    env.push(("GRPC_MAX_CONNECTION_AGE".into(), "1s".into()));
    env.push(("GRPC_MAX_CONNECTION_AGE_GRACE".into(), "500ms".into()));
    let server = start_bare(&env);
    assert_eq!(
        server.grpc_uds(),
        socket,
        "GRPC_UDS replaces GRPC_HOST:GRPC_PORT"
    );

    let mut client = rls(uds_channel(&socket).await);
    let response = should(&mut client, request("edge", &[&[("client", "uds")]], 1)).await;
    assert_eq!(overall(&response), Code::Ok);
    wait_for(
        "a connection aged out by GRPC_MAX_CONNECTION_AGE",
        async || {
            let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
            metrics
                .lines()
                .find_map(|line| line.strip_prefix("ratelimitd_grpc_connections_aged_total "))
                .and_then(|count| count.parse::<u64>().ok())
                .is_some_and(|count| count >= 1)
        },
    )
    .await;
}

#[tokio::test]
async fn cache_key_prefix_and_upstreams_key_format_by_default() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("CACHE_KEY_PREFIX".into(), "shop_".into()));

    // Drop-in mode writes envoyproxy/ratelimit's keys, with its 300 s of expiration jitter.
    let server = start_bare(&env);
    let before = common::ratelimitd::unix_now() as u64 / 60 * 60;
    codes(&server, "edge", "client", "u", 1).await;
    let after = common::ratelimitd::unix_now() as u64 / 60 * 60;
    let mut found = None;
    for window_start in [before, after] {
        let key = format!("shop_edge_client_u_{window_start}");
        let count: Option<u64> = redis::cmd("GET")
            .arg(&key)
            .query(&mut redis.connection())
            .unwrap();
        if count == Some(1) {
            found = Some(key);
        }
    }
    let upstream_key = found.expect("envoyproxy/ratelimit's key holds the hit");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&upstream_key)
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        (55..=360).contains(&ttl),
        "TTL within a minute plus 300 s of jitter: {ttl}"
    );
    drop(server);
    redis::cmd("FLUSHALL")
        .query::<()>(&mut redis.connection())
        .unwrap();

    // RATELIMITD_KEY_FORMAT=ratelimitd: ratelimitd's own keys, behind CACHE_KEY_PREFIX.
    env.push(("RATELIMITD_KEY_FORMAT".into(), "ratelimitd".into()));
    let server = start_bare(&env);
    codes(&server, "edge", "client", "k", 1).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key.starts_with("shop_rl1:")),
        "ratelimitd's own keys, behind CACHE_KEY_PREFIX: {keys:?}"
    );
}
