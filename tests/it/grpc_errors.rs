//! Bad input over gRPC: INVALID_ARGUMENT with a message for the requests DESIGN names, and no
//! input at all (huge values, huge requests, odd overrides, undecodable bytes, garbage on the
//! ports) may take the process down. After each test the process is still healthy and answers.

use std::time::Duration;

use bytes::{Buf, BufMut};
use rand::{Rng, SeedableRng};
use ratelimitd::proto::common::rate_limit_descriptor::{Entry, RateLimitOverride};
use ratelimitd::proto::common::RateLimitDescriptor;
use ratelimitd::proto::envoy::r#type::v3::RateLimitUnit;
use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ratelimitd::*;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::Status;
use tonic_health::pb::health_check_response::ServingStatus;

fn serve() -> Ratelimitd {
    serve_with(&[])
}

fn serve_with(args: &[&str]) -> Ratelimitd {
    let matching = fixture("serve/matching.yaml");
    let mut full = vec!["--config", matching.to_str().unwrap()];
    full.extend_from_slice(args);
    Ratelimitd::start(&full)
}

/// The process is running, reports SERVING, and decides a normal request correctly.
async fn assert_still_healthy(server: &mut Ratelimitd) {
    assert!(
        server.is_running(),
        "ratelimitd died; output:\n{}",
        server.output()
    );
    let mut health = server.health_client().await;
    assert_eq!(
        overall_health(&mut health).await,
        ServingStatus::Serving as i32
    );
    let mut c = server.client().await;
    let resp = should(&mut c, request("matching", &[&[("flat", "health")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(limit(&resp.statuses[0]), Some((6, Unit::Hour)));
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!((code, body.trim()), (200, "OK"));
}

/// Expects INVALID_ARGUMENT whose message mentions `word`.
async fn expect_invalid(c: &mut Client, req: RateLimitRequest, word: &str) {
    let what = format!("{req:?}");
    let what = &what[..what.len().min(300)];
    match c.should_rate_limit(req).await {
        Ok(resp) => panic!(
            "expected INVALID_ARGUMENT for {what}, got {:?}",
            resp.into_inner()
        ),
        Err(status) => {
            assert_eq!(
                status.code(),
                tonic::Code::InvalidArgument,
                "{what}: {status:?}"
            );
            assert!(
                status.message().to_lowercase().contains(word),
                "{what}: the message should mention {word:?}: {:?}",
                status.message()
            );
        }
    }
}

fn override_with(unit: i32, rpu: u32, multiplier: Option<u32>) -> RateLimitDescriptor {
    let mut d = descriptor(&[("flat", "override")]);
    d.limit = Some(RateLimitOverride {
        requests_per_unit: rpu,
        unit,
        unit_multiplier: multiplier,
    });
    d
}

fn single(d: RateLimitDescriptor) -> RateLimitRequest {
    RateLimitRequest {
        domain: "matching".into(),
        descriptors: vec![d],
        hits_addend: 0,
    }
}

#[tokio::test]
async fn invalid_argument_with_a_message() {
    let mut server = serve();
    let mut c = server.client().await;

    expect_invalid(&mut c, request("", &[&[("flat", "v")]], 0), "domain").await;
    expect_invalid(&mut c, request("matching", &[], 0), "descriptor").await;
    expect_invalid(&mut c, request("", &[], 0), "").await;
    expect_invalid(&mut c, request("matching", &[&[("", "v")]], 0), "key").await;
    // The empty key deep inside a later descriptor.
    expect_invalid(
        &mut c,
        request(
            "matching",
            &[&[("flat", "v")], &[("tier", "gold"), ("", "x")]],
            0,
        ),
        "key",
    )
    .await;
    // Also for an unknown domain: the request itself is malformed.
    expect_invalid(&mut c, request("no-such-domain", &[&[("", "v")]], 0), "key").await;
    expect_invalid(
        &mut c,
        single(override_with(RateLimitUnit::Unknown as i32, 5, None)),
        "unit",
    )
    .await;
    // Invalid requests charge nothing, even at their valid descriptors.
    let s = should(&mut c, request("matching", &[&[("flat", "v")]], 0)).await;
    assert_eq!(s.statuses[0].limit_remaining, 5, "{s:?}");

    assert_still_healthy(&mut server).await;
}

/// An answer or a clear error status; never a dropped connection or a crash.
async fn answered_or_error(c: &mut Client, req: RateLimitRequest, what: &str) {
    let descriptors = req.descriptors.len();
    match c.should_rate_limit(req).await {
        Ok(resp) => check_invariants(&resp.into_inner(), descriptors),
        Err(status) => {
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::InvalidArgument
                        | tonic::Code::ResourceExhausted
                        | tonic::Code::OutOfRange
                        | tonic::Code::FailedPrecondition
                ),
                "{what}: unexpected status {status:?}"
            );
            assert!(!status.message().is_empty(), "{what}: empty message");
        }
    }
}

#[tokio::test]
async fn odd_overrides_and_flags_never_crash() {
    let mut server = serve();
    let mut c = server.client().await;
    let cases = [
        (
            "requests_per_unit 0",
            override_with(RateLimitUnit::Hour as i32, 0, None),
        ),
        ("unit 99", override_with(99, 5, None)),
        ("unit -1", override_with(-1, 5, None)),
        (
            "unit 7 (WEEK in the response enum only)",
            override_with(7, 5, None),
        ),
        (
            "multiplier 0",
            override_with(RateLimitUnit::Hour as i32, 5, Some(0)),
        ),
        (
            "multiplier max with year",
            override_with(RateLimitUnit::Year as i32, 5, Some(u32::MAX)),
        ),
        (
            "requests_per_unit max",
            override_with(RateLimitUnit::Second as i32, u32::MAX, Some(u32::MAX)),
        ),
    ];
    for (what, d) in cases {
        answered_or_error(&mut c, single(d), what).await;
    }
    let mut negative = descriptor(&[("flat", "negative")]);
    negative.is_negative_hits = true;
    negative.hits_addend = Some(3);
    answered_or_error(&mut c, single(negative), "is_negative_hits").await;

    // A descriptor without entries.
    let empty = RateLimitDescriptor {
        entries: vec![],
        limit: None,
        hits_addend: None,
        is_negative_hits: false,
    };
    answered_or_error(&mut c, single(empty), "descriptor without entries").await;

    // Odd but valid strings.
    for value in [
        "",
        " ",
        "\0",
        "a\0b",
        "ünïcødé ✓",
        "*",
        "a*",
        "\u{10ffff}",
        "_:{}",
    ] {
        let resp = should(&mut c, request("matching", &[&[("user", value)]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "value {value:?}");
    }
    assert_still_healthy(&mut server).await;
}

#[tokio::test]
async fn one_mebibyte_value_is_answered() {
    // Real requests are a few KiB (the default caps are 64 KiB per message and 8 KiB per
    // entry); here the caps let them be large.
    let mut server = serve_with(&["--max-entry-bytes", "2097152", "--max-request-size", "4MiB"]);
    let mut c = server.client().await;
    let big = "v".repeat(1 << 20);

    // Counted under a key-only limit.
    let resp = should(&mut c, request("matching", &[&[("hits", &big)]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(resp.statuses[0].limit_remaining, 9);
    let resp = should(&mut c, request("matching", &[&[("hits", &big)]], 0)).await;
    assert_eq!(
        resp.statuses[0].limit_remaining, 8,
        "the same 1 MiB value is the same counter"
    );
    // Two 1 MiB values differing in the last byte are different counters.
    let mut other = big.clone();
    other.pop();
    other.push('w');
    let resp = should(&mut c, request("matching", &[&[("hits", &other)]], 0)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 9);

    // As a key, as a domain, and through a wildcard.
    let resp = should(&mut c, request("matching", &[&[(&big, "v")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let resp = should(&mut c, request(&big, &[&[("k", "v")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let alpha = format!("a{big}");
    let resp = should(&mut c, request("matching", &[&[("user", &alpha)]], 0)).await;
    assert_eq!(
        resp.statuses[0]
            .current_limit
            .as_ref()
            .map(|l| l.name.as_str()),
        Some("wildcard_a")
    );

    // A message above the 4 MiB cap: an error status, not a crash.
    let huge = "x".repeat(5 << 20);
    answered_or_error(
        &mut c,
        request("matching", &[&[("hits", &huge)]], 0),
        "5 MiB value",
    )
    .await;

    assert_still_healthy(&mut server).await;
}

#[tokio::test]
async fn ten_thousand_descriptors_in_one_request() {
    let mut server = serve();
    let mut c = server.client().await;

    // Distinct counters.
    let values: Vec<String> = (0..10_000).map(|i| format!("v{i}")).collect();
    let descriptors: Vec<RateLimitDescriptor> =
        values.iter().map(|v| descriptor(&[("hits", v)])).collect();
    let req = RateLimitRequest {
        domain: "matching".into(),
        descriptors,
        hits_addend: 0,
    };
    let started = std::time::Instant::now();
    match c.should_rate_limit(req.clone()).await {
        Ok(resp) => {
            let resp = resp.into_inner();
            check_invariants(&resp, 10_000);
            assert_eq!(overall(&resp), Code::Ok);
            assert!(resp.statuses.iter().all(|s| s.limit_remaining == 9));
        }
        Err(status) => {
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted
                ),
                "10 000 descriptors: {status:?}"
            );
            assert!(!status.message().is_empty());
        }
    }
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "10 000 descriptors took {:?}",
        started.elapsed()
    );

    // One counter, 10 000 times: denied as a whole, charges nothing.
    let same: Vec<RateLimitDescriptor> = (0..10_000)
        .map(|_| descriptor(&[("small", "same")]))
        .collect();
    let req = RateLimitRequest {
        domain: "matching".into(),
        descriptors: same,
        hits_addend: 0,
    };
    let denied = match c.should_rate_limit(req).await {
        Ok(resp) => {
            let resp = resp.into_inner();
            check_invariants(&resp, 10_000);
            assert_eq!(overall(&resp), Code::OverLimit);
            true
        }
        Err(status) => {
            assert!(
                matches!(
                    status.code(),
                    tonic::Code::InvalidArgument | tonic::Code::ResourceExhausted
                ),
                "{status:?}"
            );
            false
        }
    };
    let resp = should(&mut c, request("matching", &[&[("small", "same")]], 0)).await;
    assert_eq!(
        resp.statuses[0].limit_remaining, 1,
        "a request of 10 000 descriptors (denied: {denied}) charged nothing"
    );

    // One descriptor with 10 000 entries.
    let entries: Vec<Entry> = (0..10_000)
        .map(|i| Entry {
            key: format!("k{i}"),
            value: "v".into(),
        })
        .collect();
    let deep = RateLimitDescriptor {
        entries,
        limit: None,
        hits_addend: None,
        is_negative_hits: false,
    };
    answered_or_error(&mut c, single(deep), "10 000 entries").await;

    assert_still_healthy(&mut server).await;
}

// ---------------------------------------------------------------------------------------------
// Raw bytes: what a buggy or hostile client could send
// ---------------------------------------------------------------------------------------------

/// A codec that sends and receives message bodies as raw bytes.
#[derive(Clone, Copy, Default)]
struct Raw;

impl Codec for Raw {
    type Encode = Vec<u8>;
    type Decode = Vec<u8>;
    type Encoder = Raw;
    type Decoder = Raw;
    fn encoder(&mut self) -> Raw {
        Raw
    }
    fn decoder(&mut self) -> Raw {
        Raw
    }
}

impl Encoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn encode(&mut self, item: Vec<u8>, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(&item);
        Ok(())
    }
}

impl Decoder for Raw {
    type Item = Vec<u8>;
    type Error = Status;
    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Vec<u8>>, Status> {
        let mut out = Vec::with_capacity(src.remaining());
        while src.has_remaining() {
            let chunk = src.chunk();
            out.extend_from_slice(chunk);
            let n = chunk.len();
            src.advance(n);
        }
        Ok(Some(out))
    }
}

async fn raw_call(server: &Ratelimitd, body: Vec<u8>) -> Result<Vec<u8>, Status> {
    let mut grpc = tonic::client::Grpc::new(server.channel().await);
    grpc.ready().await.expect("channel ready");
    let path =
        PathAndQuery::from_static("/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit");
    grpc.unary(tonic::Request::new(body), path, Raw)
        .await
        .map(|r| r.into_inner())
}

fn encode(req: &RateLimitRequest) -> Vec<u8> {
    prost::Message::encode_to_vec(req)
}

#[tokio::test]
async fn undecodable_messages_are_rejected_without_harm() {
    let mut server = serve();

    // A valid request plus an unknown field (number 99, varint): answered normally.
    let mut body = encode(&request("matching", &[&[("flat", "raw")]], 0));
    body.extend_from_slice(&[0xf8, 0x06, 0x01]);
    let resp = raw_call(&server, body)
        .await
        .expect("unknown fields are ignored");
    let resp: ratelimitd::proto::rls::RateLimitResponse =
        prost::Message::decode(resp.as_slice()).unwrap();
    assert_eq!(overall(&resp), Code::Ok);

    // Invalid UTF-8 in the domain, a truncated message, a wrong wire type.
    let bad: Vec<Vec<u8>> = vec![
        vec![0x0a, 0x02, 0xff, 0xfe],
        {
            let mut b = encode(&request("matching", &[&[("flat", "raw")]], 0));
            b.truncate(b.len() - 3);
            b
        },
        vec![0x0d, 0x01, 0x02, 0x03, 0x04],
        vec![0x12, 0xff, 0xff, 0xff, 0xff, 0x0f],
    ];
    for body in bad {
        let result = raw_call(&server, body.clone()).await;
        assert!(result.is_err(), "{body:?} decoded: {result:?}");
    }

    // Random bytes.
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for _ in 0..300 {
        let len = rng.random_range(0..200);
        let body: Vec<u8> = (0..len).map(|_| rng.random()).collect();
        let _ = raw_call(&server, body).await;
    }
    assert_still_healthy(&mut server).await;
}

#[tokio::test]
async fn garbage_on_the_ports_does_not_hurt() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut server = serve();
    for addr in [server.grpc_addr(), server.http_addr()] {
        for payload in [
            &b"\x00\x01\x02garbage\r\n\r\n"[..],
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\xff\xff\xff\xff\xff\xff\xff\xff\xff",
            b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n",
        ] {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            let _ = s.write_all(payload).await;
            let mut buf = [0u8; 1024];
            let _ = tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await;
        }
    }
    // Unknown HTTP paths: an answer, not a crash.
    let (code, _) = http_get(server.http_addr(), "/no-such-path").await;
    assert!((400..500).contains(&code), "unknown path: {code}");
    assert_still_healthy(&mut server).await;
}
