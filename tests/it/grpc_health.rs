//! Health and lifecycle: grpc.health.v1 under every service name, server reflection, HTTP
//! `/healthcheck`, and graceful shutdown on SIGTERM / SIGINT (NOT_SERVING first, in-flight calls
//! finish, exit 0).

use std::time::Duration;

use prost::Message;
use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::*;
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;
use tonic_reflection::pb::v1::server_reflection_client::ServerReflectionClient;
use tonic_reflection::pb::v1::server_reflection_request::MessageRequest;
use tonic_reflection::pb::v1::server_reflection_response::MessageResponse;
use tonic_reflection::pb::v1::ServerReflectionRequest;

const RLS: &str = "envoy.service.ratelimit.v3.RateLimitService";
const NAMES: [&str; 3] = ["", RLS, "ratelimit"];

fn serve() -> Ratelimitd {
    let matching = fixture("serve/matching.yaml");
    Ratelimitd::start(&["--config", matching.to_str().unwrap()])
}

fn check_req(service: &str) -> HealthCheckRequest {
    HealthCheckRequest {
        service: service.to_string(),
    }
}

#[tokio::test]
async fn health_is_serving_under_every_name() {
    let server = serve();
    let mut health = server.health_client().await;
    for name in NAMES {
        let resp = health
            .check(check_req(name))
            .await
            .unwrap_or_else(|s| panic!("health check {name:?}: {s:?}"))
            .into_inner();
        assert_eq!(
            resp.status,
            ServingStatus::Serving as i32,
            "service name {name:?}"
        );
    }
    let liveness = health
        .check(check_req("ratelimitd.liveness"))
        .await
        .expect("liveness answers")
        .into_inner();
    assert_eq!(liveness.status, ServingStatus::Serving as i32);
    let err = health
        .check(check_req("no.such.Service"))
        .await
        .expect_err("unknown service name");
    assert_eq!(err.code(), tonic::Code::NotFound, "{err:?}");
}

#[tokio::test]
async fn reflection_lists_and_describes_the_service() {
    let server = serve();
    let mut reflection = ServerReflectionClient::new(server.channel().await);
    let requests = vec![
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::ListServices(String::new())),
        },
        ServerReflectionRequest {
            host: String::new(),
            message_request: Some(MessageRequest::FileContainingSymbol(RLS.to_string())),
        },
    ];
    let mut stream = reflection
        .server_reflection_info(tokio_stream::iter(requests))
        .await
        .expect("reflection stream")
        .into_inner();

    let first = stream.message().await.unwrap().expect("list response");
    match first.message_response {
        Some(MessageResponse::ListServicesResponse(list)) => {
            let names: Vec<_> = list.service.iter().map(|s| s.name.as_str()).collect();
            assert!(names.contains(&RLS), "services listed: {names:?}");
            assert!(
                names.contains(&"envoy.service.rate_limit_quota.v3.RateLimitQuotaService"),
                "services listed: {names:?}"
            );
        }
        other => panic!("expected a service list, got {other:?}"),
    }

    let second = stream.message().await.unwrap().expect("file response");
    match second.message_response {
        Some(MessageResponse::FileDescriptorResponse(files)) => {
            let found = files.file_descriptor_proto.iter().any(|bytes| {
                let file = prost_types::FileDescriptorProto::decode(bytes.as_slice()).unwrap();
                file.package() == "envoy.service.ratelimit.v3"
                    && file.service.iter().any(|s| {
                        s.name() == "RateLimitService"
                            && s.method.iter().any(|m| m.name() == "ShouldRateLimit")
                    })
            });
            assert!(found, "no descriptor of {RLS} with ShouldRateLimit");
        }
        other => panic!("expected file descriptors, got {other:?}"),
    }
}

#[tokio::test]
async fn http_healthcheck_says_ok() {
    let server = serve();
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!(code, 200);
    assert_eq!(body.trim(), "OK");
}

#[tokio::test]
async fn sigterm_turns_health_not_serving_then_exits_zero() {
    let mut server = serve();
    let mut health = server.health_client().await;
    let mut watch = health
        .watch(check_req(""))
        .await
        .expect("watch")
        .into_inner();
    let first = watch.message().await.unwrap().expect("first watch message");
    assert_eq!(first.status, ServingStatus::Serving as i32);

    server.terminate();

    let mut seen = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match tokio::time::timeout_at(deadline, watch.message()).await {
            Ok(Ok(Some(msg))) => {
                seen.push(msg.status);
                if msg.status == ServingStatus::NotServing as i32 {
                    break;
                }
            }
            Ok(Ok(None)) | Ok(Err(_)) => break,
            Err(_) => panic!("no NOT_SERVING within 10 s of SIGTERM; seen {seen:?}"),
        }
    }
    assert!(
        seen.contains(&(ServingStatus::NotServing as i32)),
        "health went to NOT_SERVING before the process exited; watch saw {seen:?}"
    );
    drop(watch);
    drop(health);

    let status = server
        .exited(Duration::from_secs(15))
        .await
        .unwrap_or_else(|| {
            panic!(
                "no exit within 15 s of SIGTERM; output:\n{}",
                server.output()
            )
        });
    assert!(
        status.success(),
        "exit status {status}; output:\n{}",
        server.output()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_exits_even_with_an_open_watch_stream() {
    let mut server = serve();
    let mut health = server.health_client().await;
    let mut watch = health
        .watch(check_req(RLS))
        .await
        .expect("watch")
        .into_inner();
    assert_eq!(
        watch.message().await.unwrap().unwrap().status,
        ServingStatus::Serving as i32
    );
    // Keep reading in the background, as a watching load balancer would, without ever closing.
    let reader = tokio::spawn(async move { while let Ok(Some(_)) = watch.message().await {} });

    server.terminate();
    let status = server.exited(Duration::from_secs(20)).await;
    reader.abort();
    let status = status.unwrap_or_else(|| {
        panic!(
            "ratelimitd did not exit within 20 s of SIGTERM while a health Watch stream was open; output:\n{}",
            server.output()
        )
    });
    assert!(status.success(), "exit status {status}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigterm_lets_in_flight_calls_finish() {
    let mut server = serve();
    let mut tasks = Vec::new();
    for t in 0..8 {
        let mut c = server.client().await;
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut refused) = (0u32, 0u32);
            for i in 0..400 {
                let value = format!("{t}-{i}");
                let req = request("matching", &[&[("flat", &value)]], 0);
                match c.should_rate_limit(req).await {
                    Ok(resp) => {
                        let resp = resp.into_inner();
                        check_invariants(&resp, 1);
                        assert_eq!(overall(&resp), Code::Ok);
                        ok += 1;
                    }
                    // Calls started after the server stopped accepting streams (a stream
                    // opened after the server's GOAWAY surfaces as Internal "GoAway").
                    Err(status)
                        if matches!(
                            status.code(),
                            tonic::Code::Unavailable
                                | tonic::Code::Cancelled
                                | tonic::Code::Unknown
                        ) || (status.code() == tonic::Code::Internal
                            && format!("{status:?}").contains("GoAway")) =>
                    {
                        refused += 1;
                        break;
                    }
                    Err(status) => panic!("call failed during shutdown: {status:?}"),
                }
            }
            (ok, refused)
        }));
    }
    tokio::time::sleep(Duration::from_millis(30)).await;
    server.terminate();
    let mut ok = 0;
    for task in tasks {
        ok += task.await.expect("client task").0;
    }
    assert!(ok > 0, "no call completed");
    let status = server
        .exited(Duration::from_secs(15))
        .await
        .unwrap_or_else(|| panic!("no exit within 15 s; output:\n{}", server.output()));
    assert!(status.success(), "exit status {status}");
}

#[tokio::test]
async fn sigint_exits_zero() {
    let mut server = serve();
    // Make sure it is fully up and has answered once.
    let mut c = server.client().await;
    should(&mut c, request("matching", &[&[("flat", "x")]], 0)).await;
    drop(c);
    server.signal("INT");
    let status = server
        .exited(Duration::from_secs(15))
        .await
        .unwrap_or_else(|| {
            panic!(
                "no exit within 15 s of SIGINT; output:\n{}",
                server.output()
            )
        });
    assert!(status.success(), "exit status {status}");
}

/// `ratelimitd health`, the probe the container image uses: exit 0 and `SERVING` against a
/// serving server, exit 1 when nothing listens.
#[test]
fn health_subcommand_probes_the_grpc_health_service() {
    let server = serve();
    let addr = server.grpc_addr().to_string();
    for name in NAMES {
        let mut cmd = command();
        cmd.args(["health", "--grpc-addr", &addr, "--service", name]);
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(10));
        assert!(status.success(), "{name:?}: {stdout} {stderr}");
        assert_eq!(stdout.trim(), "SERVING");
    }
    drop(server);
    let mut cmd = command();
    cmd.args(["health", "--grpc-addr", &addr, "--timeout", "1s"]);
    let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(!stderr.is_empty());
}
