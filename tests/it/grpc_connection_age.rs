//! `--grpc-max-connection-age` / `--grpc-max-connection-age-grace` through the real binary: a
//! connection is sent GOAWAY at its age (±10 %), a long-running client's calls go on over new
//! connections, a call in flight at the GOAWAY completes, and the connection is closed once the
//! grace has passed too. The in-flight calls are driven with a bare HTTP/2 client (h2), which
//! shows exactly when the GOAWAY arrives.
//!
//! tonic's channel (hyper) fails a call it had queued for a connection at the moment that
//! connection's GOAWAY arrives, without sending it (hyper's `Canceled`, or h2 refusing a new
//! stream after a GOAWAY); grpc-go and Envoy retry such calls themselves. The long-running
//! client here retries exactly those, and no more than one per aged connection may happen.

use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use prost::Message;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitResponse;
use testkit::ratelimitd::{self as rld, request, Ratelimitd};

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("age.yaml");
    std::fs::write(
        &path,
        "domain: age\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 100000}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

async fn metric(server: &Ratelimitd, name: &str) -> u64 {
    let (_, body) = rld::http_get(server.http_addr(), "/metrics").await;
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .map_or(0, |value| value.trim().parse().unwrap())
}

#[tokio::test]
async fn a_long_running_client_moves_to_new_connections_without_failing_calls() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--grpc-max-connection-age",
        "1s",
        "--grpc-max-connection-age-grace",
        "5s",
    ]);
    let mut client = server.client().await;
    let started = Instant::now();
    let (mut calls, mut unsent) = (0, 0);
    while started.elapsed() < Duration::from_millis(4_500) {
        let mut attempts = 0;
        loop {
            attempts += 1;
            match client
                .should_rate_limit(request("age", &[&[("k", "v")]], 1))
                .await
            {
                Ok(resp) => {
                    assert_eq!(resp.into_inner().overall_code, Code::Ok as i32);
                    break;
                }
                Err(status) if attempts < 3 && never_sent(&status) => unsent += 1,
                Err(status) => panic!("call {calls} failed: {status:?}"),
            }
        }
        calls += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let accepted = metric(&server, "ratelimitd_grpc_connections_accepted_total").await;
    let aged = metric(&server, "ratelimitd_grpc_connections_aged_total").await;
    println!(
        "{calls} calls over {accepted} connections, {aged} sent GOAWAY for their age, \
         {unsent} attempts failed unsent by the client"
    );
    // Ages of 0.9 to 1.1 s: at least four connections in 4.5 s, each but the last one aged.
    assert!(accepted >= 4, "accepted {accepted}");
    assert!(aged >= 3 && aged < accepted, "aged {aged} of {accepted}");
    assert!(
        unsent <= aged,
        "{unsent} unsent attempts for {aged} GOAWAYs"
    );
}

/// Whether the call failed in the client before its request left: hyper cancelled it (its
/// connection shut down while it was queued) or h2 refused to open a stream after a GOAWAY.
fn never_sent(status: &tonic::Status) -> bool {
    let mut source = std::error::Error::source(status);
    while let Some(error) = source {
        if error
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
            || error
                .downcast_ref::<h2::Error>()
                .is_some_and(h2::Error::is_go_away)
        {
            return true;
        }
        source = error.source();
    }
    false
}

/// A RateLimitService request as a gRPC message (5-byte prefix, then the protobuf).
fn grpc_message() -> Bytes {
    let body = request("age", &[&[("k", "in-flight")]], 1).encode_to_vec();
    let mut framed = BytesMut::with_capacity(body.len() + 5);
    framed.extend_from_slice(&[0]);
    framed.extend_from_slice(&(body.len() as u32).to_be_bytes());
    framed.extend_from_slice(&body);
    framed.freeze()
}

fn call_head(path: &str) -> hyper::Request<()> {
    hyper::Request::builder()
        .method("POST")
        .uri(format!("http://localhost{path}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap()
}

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

#[tokio::test]
async fn a_call_in_flight_at_the_goaway_completes_and_the_grace_ends_the_connection() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--grpc-max-connection-age",
        "1s",
        "--grpc-max-connection-age-grace",
        "3s",
    ]);
    let tcp = tokio::net::TcpStream::connect(server.grpc_addr())
        .await
        .unwrap();
    let opened = Instant::now();
    let (sender, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let ended = connection.await;
        (Instant::now(), ended)
    });
    let mut sender = sender.ready().await.unwrap();
    // Two calls whose requests are still being sent: one finishes after the GOAWAY, one never.
    let (answer, mut request_body) = sender.send_request(call_head(RLS_PATH), false).unwrap();
    let (never_answered, _never_sent) = sender.send_request(call_head(RLS_PATH), false).unwrap();

    // Once the GOAWAY has arrived, h2 refuses to open more streams on the connection.
    let goaway_at = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let probe = sender.clone().ready().await.and_then(|mut ready| {
            ready.send_request(call_head("/grpc.health.v1.Health/Check"), true)
        });
        match probe {
            Ok(_) => assert!(opened.elapsed() < Duration::from_secs(3), "no GOAWAY"),
            Err(error) if error.is_go_away() => break Instant::now(),
            Err(error) => panic!("unexpected HTTP/2 error before the GOAWAY: {error}"),
        }
    };
    let age = goaway_at - opened;
    assert!(
        age >= Duration::from_millis(850) && age <= Duration::from_millis(1_600),
        "GOAWAY after {age:?}, expected 1 s ± 10 %"
    );

    // The call in flight completes on the old connection.
    request_body.send_data(grpc_message(), true).unwrap();
    let response = answer.await.expect("the in-flight call is answered");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut message = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        message.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().expect("gRPC trailers");
    assert_eq!(trailers.get("grpc-status").unwrap(), "0", "{trailers:?}");
    let decoded = RateLimitResponse::decode(&message[5..]).unwrap();
    assert_eq!(decoded.overall_code, Code::Ok as i32, "{decoded:?}");

    // The call that never sent its request holds the connection until the grace has passed.
    let (closed_at, _) = tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the connection is closed after the grace")
        .unwrap();
    let held = closed_at - goaway_at;
    assert!(
        held >= Duration::from_millis(2_700) && held <= Duration::from_millis(4_500),
        "closed {held:?} after the GOAWAY, expected the 3 s grace"
    );
    assert!(never_answered.await.is_err(), "the unfinished call is cut");
    assert_eq!(
        metric(&server, "ratelimitd_grpc_connections_aged_total").await,
        1
    );
}
