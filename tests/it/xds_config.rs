//! Configuration over xDS, end to end: the real binary subscribed to a test control plane (a
//! tonic ADS server) that pushes versions, valid and not, goes away and comes back; over
//! plaintext and mutual TLS; with ratelimitd's flags and with envoyproxy/ratelimit's variables
//! alone.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls_config::RateLimitPolicy;
use testkit::control_plane::{domain_config, ControlPlane, ControlPlaneTls, Received};
use testkit::pki::Pki;
use testkit::ratelimitd::{http_get, limit, overall_health, request, should, Client, Ratelimitd};
use testkit::redis_server::RedisServer;

/// Generous: the machine is shared; nothing here measures speed.
const WAIT: Duration = Duration::from_secs(20);

const SERVING: i32 = 1;
const NOT_SERVING: i32 = 2;

/// Fast reconnects, so the outage part of the scenario stays short.
const QUICK_RECONNECT: [&str; 6] = [
    "--xds-backoff-initial",
    "200ms",
    "--xds-backoff-max",
    "1s",
    "--xds-connect-retry-interval",
    "200ms",
];

/// The limit `client` is told for `key` in `domain` (`None`: no limit applies).
async fn limit_of(client: &mut Client, domain: &str, key: &str) -> Option<(u32, Unit)> {
    let response = should(client, request(domain, &[&[(key, "x")]], 0)).await;
    limit(&response.statuses[0])
}

async fn wait_health(server: &Ratelimitd, wanted: i32) {
    let mut health = server.health_client().await;
    let deadline = Instant::now() + WAIT;
    while overall_health(&mut health).await != wanted {
        assert!(Instant::now() < deadline, "health never became {wanted}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn wait_log(server: &Ratelimitd, needle: &str) {
    let deadline = Instant::now() + WAIT;
    while !server.output().contains(needle) {
        assert!(
            Instant::now() < deadline,
            "no `{needle}` in:\n{}",
            server.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn ack_of(version: &'static str) -> impl Fn(&Received) -> bool {
    move |received| received.is_ack_of(version)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_apply_nacks_keep_the_running_config_and_reconnects_resubscribe() {
    let mut plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let mut args = vec![
        "--config-source",
        "xds",
        "--xds-server",
        &server_addr,
        "--xds-node-id",
        "ratelimit-test",
        "--xds-node-metadata",
        "zone=a,team=edge",
        "--xds-header",
        "x-token:t0ken",
    ];
    args.extend_from_slice(&QUICK_RECONNECT);
    let server = Ratelimitd::start(&args);
    let mut client = server.client().await;

    // Subscribed as envoyproxy/ratelimit subscribes, and NOT_SERVING until a configuration.
    let subscription = plane.wait_for("a subscription", WAIT, |_| true).await;
    let first = &subscription.request;
    assert_eq!(first.type_url, testkit::control_plane::TYPE_URL);
    assert!(first.resource_names.is_empty(), "a wildcard subscription");
    assert_eq!(first.version_info, "");
    let node = first.node.as_ref().expect("the node");
    assert_eq!(node.id, "ratelimit-test");
    let metadata = &node.metadata.as_ref().expect("node metadata").fields;
    assert!(
        format!("{:?}", metadata["zone"]).contains("\"a\""),
        "{metadata:?}"
    );
    assert!(
        format!("{:?}", metadata["team"]).contains("\"edge\""),
        "{metadata:?}"
    );
    assert_eq!(
        subscription.headers.get("x-token").map(String::as_str),
        Some("t0ken")
    );
    let mut health = server.health_client().await;
    assert_eq!(overall_health(&mut health).await, NOT_SERVING);
    // Without a configuration nothing is decided: UNAVAILABLE, which Envoy's failure_mode_deny
    // decides, as for a server it cannot reach.
    let refused = client
        .should_rate_limit(request("edge", &[&[("user", "x")]], 0))
        .await
        .expect_err("no answer before the first configuration");
    assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
    assert_eq!(
        refused.message(),
        "no configuration yet: waiting for the xDS server's first one"
    );

    // Version 1.
    plane.push(
        "1",
        vec![domain_config("edge-config", "edge", &[("user", 1)])],
    );
    plane.wait_for("the ACK of 1", WAIT, ack_of("1")).await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((1, Unit::Minute))
    );
    wait_health(&server, SERVING).await;

    // Version 2: a changed limit and a second domain in a second resource. Applied before it is
    // ACKed, so it answers as soon as the ACK is seen.
    plane.push(
        "2",
        vec![
            domain_config("edge-config", "edge", &[("user", 50)]),
            domain_config("api-config", "api", &[("key", 7)]),
        ],
    );
    let ack = plane.wait_for("the ACK of 2", WAIT, ack_of("2")).await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((50, Unit::Minute))
    );
    assert_eq!(
        limit_of(&mut client, "api", "key").await,
        Some((7, Unit::Minute))
    );
    assert!(ack.request.response_nonce.starts_with('n'), "{ack:?}");
    let (status, rlconfig) = http_get(server.http_addr(), "/rlconfig").await;
    assert_eq!(status, 200);
    assert!(rlconfig.starts_with("# xDS version: 2\n"), "{rlconfig}");
    assert!(
        rlconfig.contains("api.key: unit=MINUTE requests_per_unit=7"),
        "{rlconfig}"
    );
    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    assert!(
        metrics.contains("ratelimitd_config_xds_version_info{version=\"2\"} 1"),
        "{metrics}"
    );

    // Version 3 is invalid: NACKed with what and where, version 2 keeps answering.
    let mut broken = domain_config("edge-config", "edge", &[("user", 9)]);
    broken.descriptors[0].rate_limit = Some(RateLimitPolicy {
        requests_per_unit: 9,
        ..RateLimitPolicy::default()
    });
    plane.push(
        "3",
        vec![broken, domain_config("api-config", "api", &[("key", 7)])],
    );
    let nack = plane
        .wait_for("the NACK of 3", WAIT, |r| r.nack_message().is_some())
        .await;
    let message = nack.nack_message().unwrap_or_default();
    assert!(
        message.contains("resource edge-config: descriptors[0].rate_limit"),
        "{message}"
    );
    assert_eq!(
        nack.request.version_info, "2",
        "a NACK names the version in force"
    );
    assert!(!nack.request.response_nonce.is_empty());
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((50, Unit::Minute))
    );
    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    assert!(
        metrics.contains("ratelimitd_config_last_reload_successful 0"),
        "{metrics}"
    );
    assert!(
        metrics.contains("ratelimitd_config_xds_version_info{version=\"2\"} 1"),
        "{metrics}"
    );

    // Version 4 removes the api resource.
    plane.push(
        "4",
        vec![domain_config("edge-config", "edge", &[("user", 40)])],
    );
    plane.wait_for("the ACK of 4", WAIT, ack_of("4")).await;
    assert_eq!(
        limit_of(&mut client, "api", "key").await,
        None,
        "api is gone"
    );
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((40, Unit::Minute))
    );

    // The control plane goes away and comes back: answers never stop, the client reconnects
    // and re-subscribes by itself with the version in force.
    let answering = Arc::new(AtomicBool::new(true));
    let answers = Arc::new(AtomicU64::new(0));
    let prober = tokio::spawn({
        let (answering, answers) = (answering.clone(), answers.clone());
        let mut client = client.clone();
        async move {
            while answering.load(Ordering::Relaxed) {
                let response = should(&mut client, request("edge", &[&[("user", "x")]], 0)).await;
                assert_ne!(response.overall_code, Code::Unknown as i32);
                answers.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let streams_before = plane.received().iter().map(|r| r.stream).max().unwrap_or(0);
    plane.stop().await;
    wait_log(&server, "xDS stream ended").await;
    plane.push(
        "5",
        vec![domain_config("edge-config", "edge", &[("user", 30)])],
    );
    plane.restart().await;
    let resubscribed = plane
        .wait_for("a new subscription", WAIT, |r| {
            r.stream > streams_before && r.request.response_nonce.is_empty()
        })
        .await;
    assert_eq!(resubscribed.request.version_info, "4");
    plane.wait_for("the ACK of 5", WAIT, ack_of("5")).await;
    answering.store(false, Ordering::Relaxed);
    prober
        .await
        .expect("every answer during the outage was a decision");
    assert!(answers.load(Ordering::Relaxed) > 0);
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((30, Unit::Minute))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_tls_to_the_control_plane() {
    let pki = Pki::new();
    let ca = pki.ca("xds");
    let server_cert = ca.server("control-plane", "xds control plane", 2);
    let client_cert = ca.client("ratelimitd", "DNS:ratelimitd.test");
    let mut plane = ControlPlane::start(Some(ControlPlaneTls {
        cert: server_cert.cert.clone(),
        key: server_cert.key.clone(),
        client_ca: ca.cert.clone(),
    }))
    .await;
    plane.push(
        "1",
        vec![domain_config("edge-config", "edge", &[("user", 3)])],
    );
    let server_addr = format!("localhost:{}", plane.addr().port());
    let ca_path = ca.cert.display().to_string();
    let cert = client_cert.cert.display().to_string();
    let key = client_cert.key.display().to_string();
    let mut args = vec![
        "--config-source",
        "xds",
        "--xds-server",
        &server_addr,
        "--xds-tls",
        "--xds-tls-ca",
        &ca_path,
    ];
    args.extend_from_slice(&QUICK_RECONNECT);

    // Without a client certificate the control plane refuses the connection.
    let anonymous = Ratelimitd::start(&args);
    wait_log(&anonymous, "cannot open the xDS stream").await;
    assert!(plane.received().is_empty(), "{:?}", plane.received());

    args.extend_from_slice(&["--xds-tls-cert", &cert, "--xds-tls-key", &key]);
    let server = Ratelimitd::start(&args);
    plane
        .wait_for("the ACK of 1 over mTLS", WAIT, ack_of("1"))
        .await;
    let mut client = server.client().await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((3, Unit::Minute))
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_variables_alone_run_the_same_scenario() {
    let mut plane = ControlPlane::start(None).await;
    plane.push(
        "1",
        vec![domain_config("edge-config", "edge", &[("user", 2)])],
    );
    let redis = RedisServer::start();
    let env: Vec<(String, String)> = [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.addr().to_string()),
        ("CONFIG_GRPC_XDS_NODE_ID", "upstream-node".to_string()),
        ("CONFIG_GRPC_XDS_NODE_METADATA", "zone=b".to_string()),
        (
            "CONFIG_GRPC_XDS_CLIENT_ADDITIONAL_HEADERS",
            "x-token:upstream".to_string(),
        ),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "200ms".to_string(),
        ),
        ("XDS_CLIENT_BACKOFF_INITIAL_INTERVAL", "200ms".to_string()),
        ("XDS_CLIENT_BACKOFF_MAX_INTERVAL", "1s".to_string()),
        ("GRPC_HOST", "127.0.0.1".to_string()),
        ("GRPC_PORT", "0".to_string()),
        ("HOST", "127.0.0.1".to_string()),
        ("PORT", "0".to_string()),
        ("DEBUG_HOST", "127.0.0.1".to_string()),
        ("DEBUG_PORT", "0".to_string()),
        ("LOG_LEVEL", "info".to_string()),
        ("USE_STATSD", "false".to_string()),
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect();
    let mut cmd = testkit::ratelimitd::command();
    for (name, value) in &env {
        cmd.env(name, value);
    }
    let server = Ratelimitd::spawn(cmd);
    let ack = plane.wait_for("the ACK of 1", WAIT, ack_of("1")).await;
    let node = ack.request.node.as_ref().expect("the node");
    assert_eq!(node.id, "upstream-node");
    assert_eq!(
        ack.headers.get("x-token").map(String::as_str),
        Some("upstream")
    );
    let mut client = server.client().await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((2, Unit::Minute))
    );

    let mut broken = domain_config("edge-config", "edge", &[("user", 9)]);
    broken.descriptors[0].key = String::new();
    plane.push("2", vec![broken]);
    let nack = plane
        .wait_for("the NACK of 2", WAIT, |r| r.nack_message().is_some())
        .await;
    assert!(
        nack.nack_message()
            .is_some_and(|m| m.contains("resource edge-config: descriptors[0].key")),
        "{nack:?}"
    );
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((2, Unit::Minute))
    );

    let streams_before = plane.received().iter().map(|r| r.stream).max().unwrap_or(0);
    plane.push(
        "3",
        vec![domain_config("edge-config", "edge", &[("user", 6)])],
    );
    plane.restart().await;
    plane
        .wait_for("the ACK of 3 after the restart", WAIT, |r| {
            r.stream > streams_before && r.is_ack_of("3")
        })
        .await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((6, Unit::Minute))
    );
    assert!(
        server
            .output()
            .contains("envoyproxy/ratelimit setting: RATELIMITD_XDS_SERVER"),
        "{}",
        server.output()
    );
}

/// envoyproxy/ratelimit's environment for an xDS configuration from `plane`, Redis at `redis`,
/// and the ports given (`GRPC_PORT`, `PORT`, `DEBUG_PORT` on 127.0.0.1).
fn upstream_xds_env(
    plane: &ControlPlane,
    redis: &RedisServer,
    ports: [u16; 3],
) -> Vec<(String, String)> {
    [
        ("CONFIG_TYPE", "GRPC_XDS_SOTW".to_string()),
        ("CONFIG_GRPC_XDS_SERVER_URL", plane.addr().to_string()),
        (
            "CONFIG_GRPC_XDS_SERVER_CONNECT_RETRY_INTERVAL",
            "200ms".to_string(),
        ),
        ("GRPC_HOST", "127.0.0.1".to_string()),
        ("GRPC_PORT", ports[0].to_string()),
        ("HOST", "127.0.0.1".to_string()),
        ("PORT", ports[1].to_string()),
        ("DEBUG_HOST", "127.0.0.1".to_string()),
        ("DEBUG_PORT", ports[2].to_string()),
        ("LOG_LEVEL", "info".to_string()),
        ("USE_STATSD", "false".to_string()),
        ("REDIS_SOCKET_TYPE", "tcp".to_string()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
    ]
    .into_iter()
    .map(|(name, value)| (name.to_string(), value))
    .collect()
}

/// Whether a TCP connection to 127.0.0.1:`port` is refused.
async fn refused(port: u16) -> bool {
    matches!(
        tokio::net::TcpStream::connect(("127.0.0.1", port)).await,
        Err(error) if error.kind() == std::io::ErrorKind::ConnectionRefused
    )
}

/// envoyproxy/ratelimit opens no port before its first configuration: in drop-in mode neither
/// does ratelimitd, so a client (Envoy, a probe, upstream's own test harness waiting for the
/// port) never meets a server without limits. With FORCE_START_WITHOUT_INITIAL_CONFIG=true the
/// ports open at once and every domain is unknown until the configuration arrives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_mode_opens_no_port_before_the_first_configuration() {
    let plane = ControlPlane::start(None).await;
    let redis = RedisServer::start();
    let ports = [
        testkit::redis_server::free_port(),
        testkit::redis_server::free_port(),
        testkit::redis_server::free_port(),
    ];
    let mut cmd = testkit::ratelimitd::command();
    for (name, value) in upstream_xds_env(&plane, &redis, ports) {
        cmd.env(name, value);
    }
    let starting = tokio::task::spawn_blocking(move || Ratelimitd::spawn(cmd));

    // The process is up and subscribed, and waits: every port refuses connections.
    plane.wait_for("a subscription", WAIT, |_| true).await;
    for port in ports {
        assert!(
            refused(port).await,
            "port {port} open before the first configuration"
        );
    }
    plane.push(
        "1",
        vec![domain_config("edge-config", "edge", &[("user", 3)])],
    );
    let server = tokio::time::timeout(WAIT, starting)
        .await
        .expect("the ports open once the configuration arrived")
        .expect("the server starts");
    assert_eq!(server.grpc_addr().port(), ports[0]);
    let mut client = server.client().await;
    assert_eq!(
        limit_of(&mut client, "edge", "user").await,
        Some((3, Unit::Minute))
    );
    assert!(
        server
            .output()
            .contains("no port opens until the xDS server's first configuration arrives"),
        "{}",
        server.output()
    );

    let other = ControlPlane::start(None).await;
    let mut env = upstream_xds_env(&other, &redis, [0, 0, 0]);
    env.push(("FORCE_START_WITHOUT_INITIAL_CONFIG".into(), "true".into()));
    let mut cmd = testkit::ratelimitd::command();
    for (name, value) in env {
        cmd.env(name, value);
    }
    let forced = Ratelimitd::spawn(cmd);
    other.wait_for("a subscription", WAIT, |_| true).await;
    let mut client = forced.client().await;
    assert_eq!(limit_of(&mut client, "edge", "user").await, None);
}

/// A drop-in server still waiting for its first configuration stops on SIGTERM with exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drop_in_server_waiting_for_its_first_configuration_exits_on_sigterm() {
    let plane = ControlPlane::start(None).await;
    let redis = RedisServer::start();
    let mut cmd = testkit::ratelimitd::command();
    for (name, value) in upstream_xds_env(&plane, &redis, [0, 0, 0]) {
        cmd.env(name, value);
    }
    let mut child = cmd
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn ratelimitd");
    plane.wait_for("a subscription", WAIT, |_| true).await;
    let signalled = std::process::Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(signalled.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("no exit within 10 s of SIGTERM");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "exit status {status}");
}
