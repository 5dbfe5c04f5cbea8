//! The gRPC clients people put in front of `--grpc-uds`, each as it names the socket in
//! `:authority`, through the real binary:
//! - gRPC core (Python grpcio 1.85, the library under the Python, C++, Ruby and PHP clients):
//!   the socket's path percent-encoded (`tmp%2Fx%2Fr.sock`) by default, or plain when the
//!   channel's authority is set to it;
//! - grpc-go's form: `localhost` (a raw HTTP/2 client, as grpc-go sends it);
//! - Envoy 1.40 with a `pipe` cluster address: whatever the cluster's `authority` says (here the
//!   socket's path).
//!
//! gRPC core comes from `scripts/ensure-grpcio.sh` (PyPI `grpcio`, in `target/grpcio-venv`) or
//! `GRPCIO_PYTHON`; Envoy from `scripts/ensure-envoy.sh` or `ENVOY_BIN`. Without them these tests
//! fail: they never skip.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use testkit::envoy::Envoy;
use testkit::ratelimitd::{self as rld, request, Ratelimitd};

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// Domain `uds`: every value of key `k` admits 2 per hour.
fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("uds.yaml");
    std::fs::write(
        &path,
        "domain: uds\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn serve_on_socket(dir: &tempfile::TempDir) -> (Ratelimitd, PathBuf) {
    let socket = dir.path().join("r.sock");
    let config = config(dir);
    let server = Ratelimitd::start(&["--config", &config, "--grpc-uds", socket.to_str().unwrap()]);
    (server, socket)
}

fn rls_request(value: &str) -> RateLimitRequest {
    request("uds", &[&[("k", value)]], 1)
}

// ---------------------------------------------------------------------------------------------
// gRPC core
// ---------------------------------------------------------------------------------------------

/// The venv's interpreter with grpcio: `GRPCIO_PYTHON`, else `target/grpcio-venv/bin/python`.
fn grpcio_python() -> PathBuf {
    let python = match std::env::var_os("GRPCIO_PYTHON") {
        Some(python) => PathBuf::from(python),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("target/grpcio-venv/bin/python"),
    };
    let found = Command::new(&python)
        .args(["-c", "import grpc, grpc_health.v1; print(grpc.__version__)"])
        .output();
    match found {
        Ok(output) if output.status.success() => python,
        other => panic!(
            "gRPC core (Python grpcio) is needed for tests/it/grpc_uds_clients.rs and was not found \
             at {} ({other:?}); run `bash scripts/ensure-grpcio.sh` (scripts/test.sh does) or set \
             GRPCIO_PYTHON",
            python.display()
        ),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// Health (service `""`) and one RLS call from gRPC core to `target`, with `authority` instead
/// of the one gRPC core derives from the target when given: the health status's name and the
/// RLS answer, or the failure as the client reported it.
fn grpc_core_call(
    target: &str,
    authority: Option<&str>,
    request: &RateLimitRequest,
) -> Result<(String, RateLimitResponse), String> {
    let script = testkit::grpc_core_client_script();
    let mut cmd = Command::new(grpcio_python());
    cmd.arg(script)
        .arg(target)
        .arg(hex(&prost::Message::encode_to_vec(request)));
    if let Some(authority) = authority {
        cmd.arg(authority);
    }
    let output = cmd.output().expect("run the gRPC core client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let answer: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|_| {
        panic!(
            "gRPC core client printed {stdout:?}; stderr: {}",
            String::from_utf8_lossy(&output.stderr)
        )
    });
    if let Some(error) = answer["error"].as_str() {
        return Err(format!("{error}: {}", answer["details"]));
    }
    let response = unhex(answer["response"].as_str().expect("a response"));
    Ok((
        answer["health"]
            .as_str()
            .expect("a health status")
            .to_owned(),
        prost::Message::decode(response.as_slice()).expect("a RateLimitResponse"),
    ))
}

#[test]
fn grpc_core_clients_call_the_socket_whatever_path_they_send_as_authority() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, socket) = serve_on_socket(&dir);
    let path = socket.to_str().unwrap();
    let calls = [
        // grpcio's own authority for a unix target: the path, percent-encoded.
        (format!("unix:{path}"), None),
        // The plain path, as older gRPC core releases and grpc-java send it.
        (format!("unix:{path}"), Some(path)),
        (format!("unix://{path}"), None),
    ];
    let mut codes = Vec::new();
    for (target, authority) in &calls {
        let (health, response) = grpc_core_call(target, *authority, &rls_request("core"))
            .unwrap_or_else(|error| panic!("{target} (authority {authority:?}): {error}"));
        assert_eq!(health, "SERVING", "{target}");
        codes.push(rld::overall(&response));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
}

// ---------------------------------------------------------------------------------------------
// grpc-go's form
// ---------------------------------------------------------------------------------------------

/// One RLS call over a new HTTP/2 connection to `socket` with `:authority: localhost`: the
/// grpc-status and the answer.
async fn localhost_call(socket: &Path, request: &RateLimitRequest) -> (String, RateLimitResponse) {
    let stream = tokio::net::UnixStream::connect(socket).await.unwrap();
    let (send, connection) = h2::client::handshake(stream)
        .await
        .expect("HTTP/2 handshake");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let head = tonic::codegen::http::Request::builder()
        .method(tonic::codegen::http::Method::POST)
        .uri(format!("http://localhost{RLS_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .unwrap();
    let mut send = send.ready().await.unwrap();
    let (response, mut body) = send.send_request(head, false).unwrap();
    let message = prost::Message::encode_to_vec(request);
    let mut framed = BytesMut::with_capacity(5 + message.len());
    framed.put_u8(0);
    framed.put_u32(message.len() as u32);
    framed.put_slice(&message);
    body.send_data(framed.freeze(), true).unwrap();
    let response = tokio::time::timeout(Duration::from_secs(10), response)
        .await
        .expect("an answer within 10 s")
        .expect("an answer, not a reset stream");
    assert_eq!(response.status(), 200);
    let mut body = response.into_body();
    let mut data = BytesMut::new();
    while let Some(chunk) = body.data().await {
        let chunk: Bytes = chunk.unwrap();
        let _ = body.flow_control().release_capacity(chunk.len());
        data.extend_from_slice(&chunk);
    }
    let trailers = body.trailers().await.unwrap().expect("trailers");
    let status = trailers["grpc-status"].to_str().unwrap().to_owned();
    assert!(data.len() >= 5, "a gRPC message: {data:?}");
    let answer = prost::Message::decode(&data[5..]).expect("a RateLimitResponse");
    (status, answer)
}

#[tokio::test]
async fn grpc_go_form_localhost_authority_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, socket) = serve_on_socket(&dir);
    let mut codes = Vec::new();
    for _ in 0..3 {
        let (status, answer) = localhost_call(&socket, &rls_request("go")).await;
        assert_eq!(status, "0");
        codes.push(rld::overall(&answer));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
}

// ---------------------------------------------------------------------------------------------
// Envoy with a pipe cluster
// ---------------------------------------------------------------------------------------------

/// Starts Envoy (tests/fixtures/envoy/envoy-uds.yaml) in front of `server`'s socket, with its
/// HTTP port as the upstream.
async fn start_envoy(server: &Ratelimitd, socket: &Path) -> Envoy {
    let config = std::fs::read_to_string(rld::fixture("envoy/envoy-uds.yaml"))
        .expect("read tests/fixtures/envoy/envoy-uds.yaml")
        .replace("{{SOCKET}}", socket.to_str().unwrap())
        .replace("{{HTTP_PORT}}", &server.http_addr().port().to_string());
    Envoy::start(&config).await
}

#[tokio::test]
async fn envoy_reaches_the_socket_through_a_pipe_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let (server, socket) = serve_on_socket(&dir);
    let envoy = start_envoy(&server, &socket).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(rld::http_get(envoy.addr(), "/").await.0);
    }
    // failure_mode_deny: a call that failed would be 500, never 200.
    assert_eq!(statuses, [200, 200, 429], "{}", envoy.log());
}
