//! Startup waiting for a Redis that is not up yet, with the real binary and a real redis-server
//! started later on the port it was pointed at: in drop-in mode (envoyproxy/ratelimit's
//! environment, which waits for ever) and natively with `--redis-startup-wait`. While it waits,
//! every port answers at once: liveness SERVING, readiness NOT_SERVING, `ShouldRateLimit`
//! UNAVAILABLE naming the address (never the password), `/healthcheck` 503. Once Redis answers,
//! requests are decided and readiness is SERVING, without a restart.

use std::time::{Duration, Instant};

use testkit::ratelimitd::{
    assert_two_then_over, channel, command, http_get, request, run_to_end, Ratelimitd,
    UPSTREAM_LOOPBACK,
};
use testkit::redis_server::{free_port, RedisServer, ServerOptions};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;

/// Each call made while startup waits must be answered within this.
const PROMPT: Duration = Duration::from_secs(2);

/// How long Redis may take to be noticed once up (attempts every 250-500 ms here), generously.
const NOTICED: Duration = Duration::from_secs(30);

const PASSWORD: &str = "s3cr3t-pw";

const EDGE: &str =
    "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

/// The status of health service `service`, asked on a connection of its own within [`PROMPT`].
async fn status(server: &Ratelimitd, service: &str) -> ServingStatus {
    let asked = async {
        let mut health = HealthClient::new(channel(server.grpc_addr()).await);
        let status = health
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .unwrap_or_else(|status| panic!("health of {service:?}: {status:?}"))
            .into_inner()
            .status;
        ServingStatus::try_from(status).expect("a serving status")
    };
    tokio::time::timeout(PROMPT, asked)
        .await
        .unwrap_or_else(|_| panic!("health of {service:?} not answered within {PROMPT:?}"))
}

/// What every port answers while startup waits for the Redis on `port`.
async fn assert_waiting(server: &Ratelimitd, port: u16) {
    assert_eq!(
        status(server, "ratelimitd.liveness").await,
        ServingStatus::Serving
    );
    for readiness in [
        "",
        "envoy.service.ratelimit.v3.RateLimitService",
        "ratelimit",
    ] {
        assert_eq!(
            status(server, readiness).await,
            ServingStatus::NotServing,
            "{readiness:?}"
        );
    }
    let call = async {
        let mut client = server.client().await;
        client
            .should_rate_limit(request("edge", &[&[("client", "a")]], 1))
            .await
    };
    let answer = tokio::time::timeout(PROMPT, call)
        .await
        .expect("ShouldRateLimit answered while startup waits");
    let status = answer.expect_err("no decision without Redis");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
    let message = status.message();
    assert!(
        message.contains(&format!("127.0.0.1:{port} is not reachable yet")),
        "{message}"
    );
    assert!(!message.contains(PASSWORD), "{message}");
    let (code, body) = tokio::time::timeout(PROMPT, http_get(server.http_addr(), "/healthcheck"))
        .await
        .expect("/healthcheck answered while startup waits");
    assert_eq!(code, 503, "{body}");
    assert!(
        !server.output().contains(PASSWORD),
        "the password is never logged:\n{}",
        server.output()
    );
}

/// Starts Redis on `port` and waits until the server is ready; then requests are decided.
async fn assert_connects_once_redis_is_up(server: &Ratelimitd, port: u16) -> RedisServer {
    let redis = RedisServer::start_options(ServerOptions {
        port: Some(port),
        extra: vec!["--requirepass".into(), PASSWORD.into()],
        ..ServerOptions::default()
    });
    let deadline = Instant::now() + NOTICED;
    while status(server, "").await != ServingStatus::Serving {
        assert!(
            Instant::now() < deadline,
            "not ready {NOTICED:?} after Redis came up:\n{}",
            server.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_two_then_over(server, "edge", "client", "b").await;
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!((code, body.trim()), (200, "OK"));
    assert_eq!(
        status(server, "ratelimitd.liveness").await,
        ServingStatus::Serving
    );
    redis
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_in_startup_answers_at_once_while_it_waits_for_redis() {
    let port = free_port();
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("ratelimit/config");
    std::fs::create_dir_all(&config).unwrap();
    std::fs::write(config.join("edge.yaml"), EDGE).unwrap();
    let mut cmd = command();
    for (name, value) in UPSTREAM_LOOPBACK {
        cmd.env(name, value);
    }
    cmd.env("LOG_LEVEL", "info")
        .env("RUNTIME_ROOT", root.path())
        .env("RUNTIME_SUBDIRECTORY", "ratelimit")
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", format!("127.0.0.1:{port}"))
        .env("REDIS_AUTH", PASSWORD)
        .env("REDIS_STARTUP_INITIAL_INTERVAL", "250ms")
        .env("REDIS_STARTUP_MAX_INTERVAL", "500ms");
    let server = Ratelimitd::spawn(cmd);

    assert_waiting(&server, port).await;
    let log = server.output();
    assert!(
        log.contains("serving while startup waits for redis"),
        "{log}"
    );
    let _redis = assert_connects_once_redis_is_up(&server, port).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_startup_wait_answers_at_once_while_it_waits_for_redis() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, EDGE).unwrap();
    let url = format!("redis://:{PASSWORD}@127.0.0.1:{port}");
    let server = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &url,
        "--redis-startup-wait",
        "10m",
        "--redis-startup-initial-interval",
        "250ms",
        "--redis-startup-max-interval",
        "500ms",
    ]);

    assert_waiting(&server, port).await;
    let _redis = assert_connects_once_redis_is_up(&server, port).await;
}

/// A wait that runs out ends the start as one that could not connect: exit 1 with the reason,
/// after having answered meanwhile.
#[test]
fn a_startup_wait_that_runs_out_exits_1() {
    let port = free_port();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("edge.yaml");
    std::fs::write(&config, EDGE).unwrap();
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &format!("redis://127.0.0.1:{port}"),
        "--redis-startup-wait",
        "2s",
        "--redis-startup-initial-interval",
        "250ms",
        "--redis-startup-max-interval",
        "500ms",
    ]);
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(30));
    let said = format!("{stdout}{stderr}");
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains("serving while startup waits for redis"),
        "{said}"
    );
    assert!(
        said.contains(&format!("127.0.0.1:{port}")) && said.contains("gave up after"),
        "{said}"
    );
}
