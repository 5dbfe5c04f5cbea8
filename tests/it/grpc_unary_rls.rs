//! `ShouldRateLimit` is answered by the server's own unary path unless the call names a
//! `grpc-encoding`; with `grpc-encoding: identity` (no compression) tonic answers it. Every
//! request below is sent both ways over raw HTTP/2 and the two answers must be the same, byte for
//! byte: HTTP status, every response header but `date`, grpc-status and grpc-message (in the
//! headers of a trailers-only answer or in the trailers), and the response message.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use prost::Message as _;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
use testkit::ratelimitd::*;
use tokio::net::TcpStream;
use tonic::codegen::http::{HeaderMap, Method, Request};

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const ANSWER: Duration = Duration::from_secs(10);

/// What a client sees of one answer.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Answer {
    pub(crate) http: u16,
    /// Every header of the response head but `date`, sorted.
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) content_type: Option<String>,
    pub(crate) grpc_status: Option<String>,
    pub(crate) grpc_message: Option<String>,
    pub(crate) data: Vec<u8>,
}

/// One call on a connection of its own: `data` as DATA frames, the last ending the stream, and
/// `grpc-encoding: identity` when `through_tonic`.
pub(crate) async fn call(addr: SocketAddr, data: &[Bytes], through_tonic: bool) -> Answer {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::handshake(tcp).await.expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut head = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}{RLS_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers");
    if through_tonic {
        head = head.header("grpc-encoding", "identity");
    }
    let mut send = send.ready().await.expect("a stream");
    let (response, mut stream) = send
        .send_request(head.body(()).unwrap(), data.is_empty())
        .expect("send the head");
    for (i, chunk) in data.iter().enumerate() {
        stream
            .send_data(chunk.clone(), i + 1 == data.len())
            .expect("send a DATA frame");
    }
    let response = tokio::time::timeout(ANSWER, response)
        .await
        .expect("an answer within 10 s")
        .expect("an answer, not a reset");
    let (head, mut body) = response.into_parts();
    let text = |headers: &HeaderMap, name: &str| {
        headers
            .get(name)
            .map(|v| v.to_str().expect("a text header").to_string())
    };
    let mut headers: Vec<(String, String)> = head
        .headers
        .iter()
        .filter(|(name, _)| name.as_str() != "date")
        .map(|(name, value)| {
            let value = value.to_str().expect("a text header");
            (name.to_string(), value.to_string())
        })
        .collect();
    headers.sort();
    let mut answer = Answer {
        http: head.status.as_u16(),
        headers,
        content_type: text(&head.headers, "content-type"),
        grpc_status: text(&head.headers, "grpc-status"),
        grpc_message: text(&head.headers, "grpc-message"),
        data: Vec::new(),
    };
    while let Some(chunk) = body.data().await {
        let chunk = chunk.expect("DATA");
        let _ = body.flow_control().release_capacity(chunk.len());
        answer.data.extend_from_slice(&chunk);
    }
    if let Some(trailers) = body.trailers().await.expect("trailers") {
        answer.grpc_status = text(&trailers, "grpc-status");
        answer.grpc_message = text(&trailers, "grpc-message");
    }
    driver.abort();
    answer
}

/// `message` behind a gRPC prefix with `flag`.
pub(crate) fn framed(flag: u8, message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(flag);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// A request of domain `domain` whose one descriptor matches no rule: its answer does not
/// depend on what was counted before.
pub(crate) fn unmatched(domain: &str) -> Vec<u8> {
    request(domain, &[&[("nothing", "matches")]], 0).encode_to_vec()
}

#[tokio::test]
async fn should_rate_limit_is_answered_as_tonic_answers_it() {
    let config = fixture("serve/matching.yaml");
    let server = Ratelimitd::start(&["--config", config.to_str().unwrap()]);
    let addr = server.grpc_addr();

    for (what, data, expected_status) in framings() {
        let ours = call(addr, &data, false).await;
        let tonics = call(addr, &data, true).await;
        assert_eq!(ours, tonics, "{what}: answered otherwise than tonic");
        check_answer(what, &ours, expected_status);
    }

    // A real gRPC client, and the counts: the unary path decides as tonic's did.
    let mut client = server.client().await;
    let first = should(&mut client, request("matching", &[&[("flat", "same")]], 0)).await;
    let again = should(&mut client, request("matching", &[&[("flat", "same")]], 0)).await;
    assert_eq!(
        again.statuses[0].limit_remaining + 1,
        first.statuses[0].limit_remaining,
        "each call counted once: {first:?} then {again:?}"
    );
    let unused: RateLimitRequest = request("matching", &[&[("flat", "other")]], 0);
    assert_eq!(overall(&should(&mut client, unused).await), Code::Ok);
}

/// Requests of domain `matching` framed every way a client may frame them, right or wrong, with
/// the grpc-status each must get.
pub(crate) fn framings() -> Vec<(&'static str, Vec<Bytes>, Option<&'static str>)> {
    let whole = framed(0, &unmatched("matching"));
    let in_pieces: Vec<Bytes> = whole.chunks(3).map(Bytes::copy_from_slice).collect();
    let mut two = BytesMut::new();
    two.put_slice(&whole);
    two.put_slice(&whole);
    vec![
        ("one message", vec![whole.clone()], Some("0")),
        ("one message in 3-byte DATA frames", in_pieces, Some("0")),
        (
            "compressed flag without grpc-encoding",
            vec![framed(1, &unmatched("matching"))],
            Some("13"),
        ),
        (
            "unknown flag",
            vec![framed(7, &unmatched("matching"))],
            Some("13"),
        ),
        (
            "not protobuf",
            vec![framed(0, &[0xff, 0xff, 0xff, 0xff])],
            Some("13"),
        ),
        ("empty domain", vec![framed(0, &unmatched(""))], Some("3")),
        ("two messages", vec![two.freeze()], Some("12")),
        ("no message", vec![], Some("12")),
    ]
}

/// What every answer of [`framings`] must be: gRPC, with `expected_status`, one response message
/// when that is OK and a message saying why otherwise.
pub(crate) fn check_answer(what: &str, ours: &Answer, expected_status: Option<&str>) {
    assert_eq!(ours.http, 200, "{what}: {ours:?}");
    assert_eq!(
        ours.content_type.as_deref(),
        Some("application/grpc"),
        "{what}"
    );
    assert_eq!(
        ours.grpc_status.as_deref(),
        expected_status,
        "{what}: {ours:?}"
    );
    if expected_status == Some("0") {
        let response = RateLimitResponse::decode(&ours.data[5..]).expect("a response");
        assert_eq!(response.overall_code, Code::Ok as i32, "{what}");
        assert_eq!(
            ours.data.len(),
            5 + response.encoded_len(),
            "{what}: one message"
        );
    } else {
        assert!(ours.data.is_empty(), "{what}: no message with an error");
        assert!(ours.grpc_message.is_some(), "{what}: the error says why");
    }
}
