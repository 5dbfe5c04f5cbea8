//! Request limits against the real binary: a request with more descriptors, more entries in a
//! descriptor, or a longer entry key or value than accepted is refused whole with
//! INVALID_ARGUMENT naming the numbers and the flag, over gRPC and `/json`; nothing of it is
//! counted, in memory or in Redis (DBSIZE stays 0); refusals are counted by limit; the flags and
//! their environment variables set the limits, and `--max-descriptors` cannot pass the checks of
//! one Redis call.

use std::time::{Duration, Instant};

use ratelimitd::proto::common::rate_limit_descriptor::Entry;
use ratelimitd::proto::common::RateLimitDescriptor;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use testkit::redis_server::RedisServer;

/// A server whose message cap (64 KiB by default, RESOURCE_EXHAUSTED above: see
/// tests/it/hardening_transport.rs) lets through the large requests these limits refuse.
fn serve(args: &[&str], envs: &[(&str, &str)]) -> Ratelimitd {
    let matching = fixture("serve/matching.yaml");
    let mut full = vec![
        "--config",
        matching.to_str().unwrap(),
        "--max-request-size",
        "16MiB",
    ];
    full.extend_from_slice(args);
    Ratelimitd::start_with_env(&full, envs)
}

/// `count` descriptors `hits=<prefix><i>` (a key-only limit of 10 per hour in matching.yaml).
fn descriptors(prefix: &str, count: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "matching".into(),
        descriptors: (0..count)
            .map(|i| descriptor(&[("hits", &format!("{prefix}{i}"))]))
            .collect(),
        hits_addend: 0,
    }
}

/// One descriptor of `count` entries `k<i>=v`.
fn entries(count: usize) -> RateLimitRequest {
    RateLimitRequest {
        domain: "matching".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: (0..count)
                .map(|i| Entry {
                    key: format!("k{i}"),
                    value: "v".into(),
                })
                .collect(),
            ..RateLimitDescriptor::default()
        }],
        hits_addend: 0,
    }
}

/// Expects INVALID_ARGUMENT with exactly `message`.
async fn expect_refused(c: &mut Client, req: RateLimitRequest, message: &str) {
    match c.should_rate_limit(req).await {
        Ok(resp) => panic!("expected INVALID_ARGUMENT, got {:?}", resp.into_inner()),
        Err(status) => {
            assert_eq!(status.code(), tonic::Code::InvalidArgument, "{status:?}");
            assert_eq!(status.message(), message);
        }
    }
}

/// `limit_remaining` of `hits=value` without consuming.
async fn remaining(c: &mut Client, value: &str) -> u32 {
    let mut d = descriptor(&[("hits", value)]);
    d.hits_addend = Some(0);
    let req = RateLimitRequest {
        domain: "matching".into(),
        descriptors: vec![d],
        hits_addend: 0,
    };
    should(c, req).await.statuses[0].limit_remaining
}

async fn rejections(server: &Ratelimitd, limit: &str) -> f64 {
    value(
        &metrics(server.http_addr()).await,
        "ratelimitd_request_limit_rejections_total",
        &format!("limit=\"{limit}\""),
    )
}

#[tokio::test]
async fn requests_beyond_the_default_limits_are_refused_whole_with_the_numbers() {
    let server = serve(&[], &[]);
    let mut c = server.client().await;

    expect_refused(
        &mut c,
        descriptors("many-", 100_000),
        "request has 100000 descriptors; at most 64 are accepted (--max-descriptors)",
    )
    .await;
    expect_refused(
        &mut c,
        descriptors("over-", 65),
        "request has 65 descriptors; at most 64 are accepted (--max-descriptors)",
    )
    .await;
    assert_eq!(remaining(&mut c, "over-0").await, 10, "nothing was counted");
    let resp = should(&mut c, descriptors("at-", 64)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert!(resp.statuses.iter().all(|s| s.limit_remaining == 9));

    expect_refused(
        &mut c,
        entries(33),
        "descriptor 0 has 33 entries; at most 32 are accepted (--max-descriptor-entries)",
    )
    .await;
    should(&mut c, entries(32)).await;

    let long = "v".repeat(8193);
    let mut req = descriptors("x", 2);
    req.descriptors[1].entries[0].value = long.clone();
    expect_refused(
        &mut c,
        req,
        "descriptor 1: entry 0 has a value of 8193 bytes; at most 8192 are accepted (--max-entry-bytes)",
    )
    .await;
    assert_eq!(remaining(&mut c, "x0").await, 10, "nothing was counted");
    let mut req = descriptors("x", 1);
    req.descriptors[0].entries[0].key = "k".repeat(8193);
    expect_refused(
        &mut c,
        req,
        "descriptor 0: entry 0 has a key of 8193 bytes; at most 8192 are accepted (--max-entry-bytes)",
    )
    .await;
    let at_limit = "v".repeat(8192);
    let resp = should(&mut c, request("matching", &[&[("hits", &at_limit)]], 0)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 9);

    // `/json` goes through the same edge: 400 with the message.
    let body = format!(
        r#"{{"domain":"matching","descriptors":[{}]}}"#,
        vec![r#"{"entries":[{"key":"hits","value":"j"}]}"#; 65].join(",")
    );
    let response = post_json(server.http_addr(), &body).await;
    assert_eq!(response.status, 400, "{response:?}");
    assert!(
        response
            .body
            .contains("request has 65 descriptors; at most 64 are accepted (--max-descriptors)"),
        "{response:?}"
    );

    assert_eq!(rejections(&server, "descriptors").await, 3.0);
    assert_eq!(rejections(&server, "entries").await, 1.0);
    assert_eq!(rejections(&server, "entry_bytes").await, 2.0);
    let text = metrics(server.http_addr()).await;
    assert_eq!(
        value(
            &text,
            "ratelimitd_requests_total",
            "result=\"invalid_argument\""
        ),
        6.0
    );
}

#[tokio::test]
async fn flags_and_variables_set_the_limits() {
    let server = serve(
        &[
            "--max-descriptors",
            "2",
            "--max-descriptor-entries",
            "1",
            "--max-entry-bytes",
            "4",
        ],
        &[],
    );
    let mut c = server.client().await;
    expect_refused(
        &mut c,
        descriptors("f", 3),
        "request has 3 descriptors; at most 2 are accepted (--max-descriptors)",
    )
    .await;
    expect_refused(
        &mut c,
        entries(2),
        "descriptor 0 has 2 entries; at most 1 are accepted (--max-descriptor-entries)",
    )
    .await;
    expect_refused(
        &mut c,
        descriptors("abcd", 1),
        "descriptor 0: entry 0 has a value of 5 bytes; at most 4 are accepted (--max-entry-bytes)",
    )
    .await;
    should(&mut c, descriptors("f", 2)).await;
    drop(server);

    let server = serve(
        &[],
        &[
            ("RATELIMITD_MAX_DESCRIPTORS", "3"),
            ("RATELIMITD_MAX_DESCRIPTOR_ENTRIES", "2"),
            ("RATELIMITD_MAX_ENTRY_BYTES", "5"),
        ],
    );
    let mut c = server.client().await;
    expect_refused(
        &mut c,
        descriptors("e", 4),
        "request has 4 descriptors; at most 3 are accepted (--max-descriptors)",
    )
    .await;
    expect_refused(
        &mut c,
        entries(3),
        "descriptor 0 has 3 entries; at most 2 are accepted (--max-descriptor-entries)",
    )
    .await;
    should(&mut c, descriptors("e", 3)).await;
    drop(server);

    // Past the checks of one Redis call: refused at startup.
    let matching = fixture("serve/matching.yaml");
    let mut cmd = command();
    cmd.args([
        "serve",
        "--config",
        matching.to_str().unwrap(),
        "--max-descriptors",
        "1025",
    ]);
    let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("--max-descriptors"), "{stderr}");
    assert!(stderr.contains("1..=1024"), "{stderr}");
}

#[tokio::test]
async fn a_refused_request_writes_nothing_to_redis() {
    let redis = RedisServer::start();
    let url = redis.url();
    let server = serve(&["--redis-url", &url], &[]);
    let mut c = server.client().await;
    let dbsize = || -> usize {
        redis::cmd("DBSIZE")
            .query(&mut redis.connection())
            .expect("DBSIZE")
    };

    let started = Instant::now();
    expect_refused(
        &mut c,
        descriptors("many-", 100_000),
        "request has 100000 descriptors; at most 64 are accepted (--max-descriptors)",
    )
    .await;
    eprintln!(
        "100 000 descriptors refused in {:?} (encoding, sending and decoding included)",
        started.elapsed()
    );
    assert_eq!(dbsize(), 0, "nothing written for 100 000 descriptors");
    expect_refused(
        &mut c,
        entries(33),
        "descriptor 0 has 33 entries; at most 32 are accepted (--max-descriptor-entries)",
    )
    .await;
    let mut req = descriptors("long-", 3);
    req.descriptors[2].entries[0].value = "v".repeat(9000);
    expect_refused(
        &mut c,
        req,
        "descriptor 2: entry 0 has a value of 9000 bytes; at most 8192 are accepted (--max-entry-bytes)",
    )
    .await;
    assert_eq!(dbsize(), 0, "nothing written for refused requests");

    // At the limit: one script call, one key per descriptor.
    let resp = should(&mut c, descriptors("at-", 64)).await;
    assert_eq!(overall(&resp), Code::Ok);
    assert_eq!(dbsize(), 64);
}
