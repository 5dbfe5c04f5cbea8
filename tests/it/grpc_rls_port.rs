//! The RLS port (`--rls-addr`) through the real binary: every framing of a `ShouldRateLimit`
//! request answered byte for byte as tonic answers it on the gRPC port; decisions counted in the
//! same counters as the gRPC port's; health `Check` from the same health service; other
//! methods and compressed requests refused naming the gRPC port; the size bound; a client that
//! does not speak HTTP/2; TLS with the gRPC port's certificate.

use std::time::Duration;

use bytes::Bytes;
use prost::Message as _;
use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::grpc_transport::{health_status, rls, tls_channel};
use testkit::pki::Pki;
use testkit::ratelimitd::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tonic::transport::Endpoint;
use tonic_health::pb::health_client::HealthClient;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::ServingStatus;

use crate::grpc_unary_rls::{call, check_answer, framed, framings};

/// A configuration of domain `port`: key `k` admits 3 per hour.
fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("port.yaml");
    std::fs::write(
        &path,
        "domain: port\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 3}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

async fn channel(addr: std::net::SocketAddr) -> tonic::transport::Channel {
    Endpoint::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .expect("connect to the RLS port")
}

#[tokio::test]
async fn every_framing_is_answered_as_tonic_answers_it_on_the_grpc_port() {
    let config = fixture("serve/matching.yaml");
    let server = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--rls-addr",
        "127.0.0.1:0",
    ]);
    for (what, data, expected_status) in framings() {
        let port = call(server.rls_addr(), &data, false).await;
        let tonics = call(server.grpc_addr(), &data, true).await;
        assert_eq!(port, tonics, "{what}: answered otherwise than tonic");
        check_answer(what, &port, expected_status);
    }
}

#[tokio::test]
async fn decisions_share_the_counters_health_is_checked_and_other_calls_are_sent_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&["--config", &config, "--rls-addr", "127.0.0.1:0"]);
    let port = channel(server.rls_addr()).await;
    let mut on_port = rls(port.clone());
    let mut on_grpc = server.client().await;
    let one = || request("port", &[&[("k", "shared")]], 1);
    let mut seen = Vec::new();
    for through_port in [false, true, true, false] {
        let client = if through_port {
            &mut on_port
        } else {
            &mut on_grpc
        };
        let response = should(client, one()).await;
        seen.push((overall(&response), response.statuses[0].limit_remaining));
    }
    assert_eq!(
        seen,
        [
            (Code::Ok, 2),
            (Code::Ok, 1),
            (Code::Ok, 0),
            (Code::OverLimit, 0)
        ],
        "one counter for both ports"
    );

    assert_eq!(
        health_status(port.clone()).await.unwrap(),
        ServingStatus::Serving as i32
    );
    let unknown = HealthClient::new(port.clone())
        .check(HealthCheckRequest {
            service: "no.such.Service".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound, "{unknown:?}");

    let watch = HealthClient::new(port.clone())
        .watch(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert_eq!(watch.code(), tonic::Code::Unimplemented, "{watch:?}");
    assert!(watch.message().contains("--grpc-addr"), "{watch:?}");

    let compressed = gzip_call(server.rls_addr()).await;
    assert_eq!(compressed.0.as_deref(), Some("12"), "{compressed:?}");
    assert!(
        compressed.1.as_deref().is_some_and(|m| m.contains("gzip")),
        "{compressed:?}"
    );
    let metrics = metrics_text(&server).await;
    assert!(
        metrics.contains("ratelimitd_grpc_connections_accepted_total 3")
            || metrics.contains("ratelimitd_grpc_connections_accepted_total 2"),
        "the RLS port's connections are the gRPC port's: {metrics}"
    );
}

/// grpc-status and grpc-message of a call that says its message is gzip-compressed.
async fn gzip_call(addr: std::net::SocketAddr) -> (Option<String>, Option<String>) {
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let head = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!(
            "http://{addr}/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ))
        .header("content-type", "application/grpc")
        .header("grpc-encoding", "gzip")
        .body(())
        .unwrap();
    let mut send = send.ready().await.unwrap();
    let (response, mut stream) = send.send_request(head, false).unwrap();
    stream
        .send_data(framed(1, b"not really gzip"), true)
        .unwrap();
    let response = response.await.unwrap();
    let text = |name: &str| {
        response
            .headers()
            .get(name)
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let answer = (text("grpc-status"), text("grpc-message"));
    driver.abort();
    answer
}

async fn metrics_text(server: &Ratelimitd) -> String {
    let addr = server.http_addr();
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut text = String::new();
    tcp.read_to_string(&mut text).await.unwrap();
    text
}

#[tokio::test]
async fn a_message_over_the_size_bound_and_a_client_without_http2_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--rls-addr",
        "127.0.0.1:0",
        "--max-request-size",
        "256",
    ]);
    let large = request("port", &[&[("k", &"x".repeat(1000))]], 1).encode_to_vec();
    let refused = call(server.rls_addr(), &[framed(0, &large)], false).await;
    assert_eq!(refused.grpc_status.as_deref(), Some("8"), "{refused:?}");
    let in_pieces: Vec<Bytes> = framed(0, &large)
        .chunks(100)
        .map(Bytes::copy_from_slice)
        .collect();
    let refused = call(server.rls_addr(), &in_pieces, false).await;
    assert_eq!(refused.grpc_status.as_deref(), Some("8"), "{refused:?}");

    let mut http1 = TcpStream::connect(server.rls_addr()).await.unwrap();
    http1
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), http1.read_to_end(&mut answer))
        .await
        .expect("closed within 10 s")
        .expect("read");
    // The server's SETTINGS, then GOAWAY(PROTOCOL_ERROR), then the connection closes.
    assert_eq!(answer.get(3), Some(&0x4), "{answer:?}");
    assert!(
        answer.windows(2).any(|w| w == [0x7, 0x0]),
        "a GOAWAY: {answer:?}"
    );

    let mut client = rls(channel(server.rls_addr()).await);
    let response = should(&mut client, request("port", &[&[("k", "after")]], 1)).await;
    assert_eq!(overall(&response), Code::Ok);
}

#[tokio::test]
async fn the_rls_port_speaks_tls_with_the_grpc_ports_certificate() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd tls", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--rls-addr",
        "127.0.0.1:0",
        "--grpc-tls-cert",
        cert.cert.to_str().unwrap(),
        "--grpc-tls-key",
        cert.key.to_str().unwrap(),
    ]);
    let port = tls_channel(server.rls_addr(), &ca.cert, None)
        .await
        .expect("TLS connect to the RLS port");
    assert_eq!(
        health_status(port.clone()).await.unwrap(),
        ServingStatus::Serving as i32
    );
    let mut client = rls(port);
    let mut codes = Vec::new();
    for _ in 0..4 {
        codes.push(overall(
            &should(&mut client, request("port", &[&[("k", "tls")]], 1)).await,
        ));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    let plaintext = Endpoint::from_shared(format!("http://{}", server.rls_addr()))
        .unwrap()
        .connect_timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(plaintext) = plaintext {
        assert!(
            health_status(plaintext).await.is_err(),
            "no plaintext on a TLS port"
        );
    }
}

#[tokio::test]
async fn at_sigterm_rls_port_connections_get_goaway_and_the_process_exits_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let mut server = Ratelimitd::start(&["--config", &config, "--rls-addr", "127.0.0.1:0"]);
    let addr = server.rls_addr();
    let tcp = TcpStream::connect(addr).await.unwrap();
    let (send, connection) = h2::client::handshake(tcp).await.unwrap();
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let send = send.ready().await.expect("a stream");
    let head = tonic::codegen::http::Request::builder()
        .method("POST")
        .uri(format!("http://{addr}{}", "/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let mut sender = send.clone();
    let (response, mut stream) = sender.send_request(head, false).unwrap();
    stream
        .send_data(
            framed(0, &HealthCheckRequest::default().encode_to_vec()),
            true,
        )
        .unwrap();
    let response = response.await.expect("an answer");
    assert_eq!(response.status(), 200);

    server.terminate();
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the connection closed by the server within 10 s")
        .unwrap();
    let Err(refused) = send.ready().await else {
        panic!("a new stream after shutdown began");
    };
    assert!(refused.is_go_away(), "closed with GOAWAY: {refused:?}");
    let status = server
        .exited(Duration::from_secs(15))
        .await
        .expect("exited within 15 s");
    assert!(status.success(), "exit status {status:?}");
}
