//! `/json` (envoyproxy/ratelimit's HTTP endpoint: proto3 JSON in and out, 200 / 429 / 400) and
//! `/rlconfig` against the real binary.

use ratelimitd::proto::rls::rate_limit_response::Code;
use serde_json::{json, Value};
use testkit::ops_support::*;
use testkit::ratelimitd::*;

fn serve(extra: &[&str]) -> Ratelimitd {
    let config = ops_fixture("json.yaml");
    let mut args = vec!["--config", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

fn parse(response: &HttpResponse) -> Value {
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "{response:?}"
    );
    serde_json::from_str(&response.body).unwrap_or_else(|e| panic!("{e}: {response:?}"))
}

/// `durationUntilReset` is a whole number of seconds, as a proto3-JSON duration string.
fn seconds(status: &Value) -> u64 {
    let text = status["durationUntilReset"]
        .as_str()
        .unwrap_or_else(|| panic!("no durationUntilReset in {status}"));
    text.strip_suffix('s')
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("bad duration {text:?}"))
}

fn user(value: &str) -> String {
    json!({"domain": "web", "descriptors": [{"entries": [{"key": "user", "value": value}]}]})
        .to_string()
}

#[tokio::test]
async fn ok_then_over_limit_with_proto3_json_bodies() {
    wait_for_window_room(3600, 30);
    let server = serve(&[]);
    let addr = server.http_addr();

    let first = post_json(addr, &user("alice")).await;
    assert_eq!(first.status, 200, "{first:?}");
    let body = parse(&first);
    let status = &body["statuses"][0];
    let reset = seconds(status);
    assert!((1..=3600).contains(&reset), "{body}");
    assert_eq!(
        body,
        json!({
            "overallCode": "OK",
            "statuses": [{
                "code": "OK",
                "currentLimit": {"name": "per_user", "requestsPerUnit": 2, "unit": "HOUR"},
                "limitRemaining": 1,
                "durationUntilReset": format!("{reset}s"),
            }],
        })
    );

    // Remaining 0 is proto3's default: omitted.
    let second = post_json(addr, &user("alice")).await;
    assert_eq!(second.status, 200);
    let body = parse(&second);
    assert!(
        body["statuses"][0].get("limitRemaining").is_none(),
        "{body}"
    );

    let third = post_json(addr, &user("alice")).await;
    assert_eq!(third.status, 429, "{third:?}");
    let body = parse(&third);
    assert_eq!(body["overallCode"], "OVER_LIMIT");
    assert_eq!(body["statuses"][0]["code"], "OVER_LIMIT");
    assert!(seconds(&body["statuses"][0]) >= 1);

    // gRPC and /json share the counters.
    let mut c = server.client().await;
    let resp = should(&mut c, request("web", &[&[("user", "alice")]], 0)).await;
    assert_eq!(overall(&resp), Code::OverLimit);
    let resp = should(&mut c, request("web", &[&[("user", "bob")]], 0)).await;
    assert_eq!(resp.statuses[0].limit_remaining, 1);
    let body = parse(&post_json(addr, &user("bob")).await);
    assert!(
        body["statuses"][0].get("limitRemaining").is_none(),
        "{body}"
    );
}

#[tokio::test]
async fn every_kind_of_status_and_the_accepted_spellings() {
    let server = serve(&[]);
    let addr = server.http_addr();

    // No limit, unlimited, shadow-mode ban, a nested limit with gcra and a multiplier: one
    // status each, in request order.
    let body = r#"{
        "domain": "web",
        "descriptors": [
            {"entries": [{"key": "nothing", "value": "x"}]},
            {"entries": [{"key": "internal", "value": "svc"}]},
            {"entries": [{"key": "banned", "value": "b"}]},
            {"entries": [{"key": "plan", "value": "free"}, {"key": "path", "value": "/a"}]}
        ]
    }"#;
    let response = post_json(addr, body).await;
    assert_eq!(response.status, 200, "{response:?}");
    let body = parse(&response);
    let statuses = body["statuses"].as_array().unwrap();
    assert_eq!(statuses.len(), 4);
    assert_eq!(statuses[0], json!({"code": "OK"}));
    assert_eq!(
        statuses[1],
        json!({"code": "OK", "limitRemaining": 4294967295u32})
    );
    assert_eq!(statuses[2]["code"], "OK", "shadow mode never denies");
    // requests_per_unit 0 is proto3's default: omitted.
    assert_eq!(statuses[2]["currentLimit"], json!({"unit": "DAY"}));
    assert_eq!(
        statuses[3]["currentLimit"],
        json!({"requestsPerUnit": 10, "unit": "MINUTE", "unitMultiplier": 5})
    );
    assert_eq!(statuses[3]["limitRemaining"], 19, "gcra burst 20");

    // Proto field names, integers as strings, enums by name, a per-descriptor override.
    let body = r#"{"domain":"web","hits_addend":"2","descriptors":[
        {"entries":[{"key":"user","value":"carol"}]},
        {"entries":[{"key":"other","value":"y"}],
         "limit":{"requests_per_unit":7,"unit":"MINUTE"},"hitsAddend":"3"}]}"#;
    let response = post_json(addr, body).await;
    assert_eq!(response.status, 200, "{response:?}");
    let body = parse(&response);
    assert!(
        body["statuses"][0].get("limitRemaining").is_none(),
        "2 of 2 taken: {body}"
    );
    assert_eq!(
        body["statuses"][1]["currentLimit"],
        json!({"requestsPerUnit": 7, "unit": "MINUTE"})
    );
    assert_eq!(body["statuses"][1]["limitRemaining"], 4);

    // Rate-limit headers (--response-headers) travel in responseHeadersToAdd.
    let server = serve(&["--response-headers", "draft03"]);
    let body = parse(&post_json(server.http_addr(), &user("dave")).await);
    let headers = body["responseHeadersToAdd"].as_array().expect("headers");
    assert!(
        headers
            .iter()
            .any(|h| h["key"] == "X-RateLimit-Remaining" && h["value"] == "1"),
        "{body}"
    );
}

#[tokio::test]
async fn bad_bodies_are_400_with_a_message() {
    let server = serve(&[]);
    let addr = server.http_addr();
    for (body, message) in [
        ("", "invalid JSON"),
        ("{", "invalid JSON"),
        ("[1]", "expected an object"),
        (r#"{"domain":"web","bogus":1}"#, "bogus: unknown field"),
        (
            r#"{"domain":"web","descriptors":[{"entries":[{"key":1}]}]}"#,
            "descriptors[0].entries[0].key: expected a string",
        ),
        (r#"{"domain":"web","hitsAddend":-1}"#, "hits_addend"),
        // Valid JSON, invalid requests: what gRPC answers with INVALID_ARGUMENT.
        (
            r#"{"descriptors":[{"entries":[{"key":"user","value":"x"}]}]}"#,
            "domain must not be empty",
        ),
        (r#"{"domain":"web"}"#, "descriptor list must not be empty"),
        (
            r#"{"domain":"web","descriptors":[{"entries":[{"key":"","value":"x"}]}]}"#,
            "empty key",
        ),
        (
            r#"{"domain":"web","descriptors":[{"entries":[{"key":"k"}],"limit":{"requestsPerUnit":1}}]}"#,
            "unit",
        ),
    ] {
        let response = post_json(addr, body).await;
        assert_eq!(response.status, 400, "{body:?}: {response:?}");
        assert!(
            response.body.contains(message),
            "{body:?}: {:?} should mention {message:?}",
            response.body
        );
        assert_eq!(
            response.header("content-type"),
            Some("text/plain; charset=utf-8")
        );
    }

    let huge = format!(
        r#"{{"domain":"web","descriptors":[{{"entries":[{{"key":"user","value":"{}"}}]}}]}}"#,
        "x".repeat(200 << 10)
    );
    let response = post_json(addr, &huge).await;
    assert_eq!(
        response.status, 413,
        "above --max-request-size (64 KiB): {:?}",
        response.body
    );

    // Still serving.
    assert_eq!(post_json(addr, &user("erin")).await.status, 200);
    let text = metrics(addr).await;
    assert_eq!(
        value(
            &text,
            "ratelimitd_requests_total",
            "result=\"invalid_argument\""
        ),
        4.0,
        "the JSON errors never reach the service; the four invalid requests do"
    );
}

#[tokio::test]
async fn rlconfig_lists_the_loaded_limits() {
    let server = serve(&[]);
    let response = get(server.http_addr(), "/rlconfig").await;
    assert_eq!(response.status, 200);
    assert_eq!(
        response.body,
        "web.banned: unit=DAY requests_per_unit=0, shadow_mode: true\n\
         web.internal: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true\n\
         web.plan_free.path: unit=MINUTE requests_per_unit=10, shadow_mode: false, unit_multiplier: 5, algorithm: gcra, burst: 20\n\
         web.user: unit=HOUR requests_per_unit=2, shadow_mode: false\n"
    );
    let post = http(server.http_addr(), "POST", "/rlconfig", b"").await;
    assert_eq!(post.status, 405);
    assert_eq!(get(server.http_addr(), "/nope").await.status, 404);
}

/// Sends `head` on a new connection to the HTTP port, then `trickle` one byte a second from
/// another task, and returns what the server answered within `bound` (the connection left open
/// by the client, so only the server can end the wait early).
async fn answer_while_trickling(
    addr: std::net::SocketAddr,
    head: &[u8],
    trickle: &'static [u8],
    bound: std::time::Duration,
) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    write.write_all(head).await.unwrap();
    let writer = tokio::spawn(async move {
        for byte in trickle {
            if write.write_all(&[*byte]).await.is_err() {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        }
    });
    let mut answer = Vec::new();
    let mut buffer = [0u8; 4096];
    let _ = tokio::time::timeout(bound, async {
        while !answer.windows(4).any(|w| w == b"\r\n\r\n") {
            match read.read(&mut buffer).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buffer[..n]),
            }
        }
    })
    .await;
    writer.abort();
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test]
async fn a_body_declared_or_sent_over_the_cap_is_refused_at_once_with_413() {
    let server = serve(&["--max-request-size", "1KiB"]);
    let addr = server.http_addr();
    let bound = std::time::Duration::from_secs(5);
    // 60 bytes sent at 1 byte/s would take a minute; a 2 KiB declared length is over the cap.
    let trickle: &'static [u8] = &[b' '; 60];

    let declared = answer_while_trickling(
        addr,
        b"POST /json HTTP/1.1\r\nhost: test\r\ncontent-type: application/json\r\n\
          content-length: 2048\r\n\r\n",
        trickle,
        bound,
    )
    .await;
    assert!(
        declared.starts_with("HTTP/1.1 413"),
        "a declared length over the cap, answered within {bound:?}: {declared:?}"
    );
    assert!(
        declared.to_ascii_lowercase().contains("connection: close"),
        "{declared:?}"
    );

    // Chunked: the cap's worth and one byte more arrive at once, then the body trickles on.
    let mut head =
        b"POST /json HTTP/1.1\r\nhost: test\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
    head.extend_from_slice(format!("{:x}\r\n", 1025).as_bytes());
    head.extend_from_slice(&[b' '; 1025]);
    head.extend_from_slice(b"\r\n");
    let chunked = answer_while_trickling(addr, &head, trickle, bound).await;
    assert!(
        chunked.starts_with("HTTP/1.1 413"),
        "a chunked body past the cap, answered within {bound:?}: {chunked:?}"
    );

    // A declared length within the cap is still read and answered.
    let body = user("frank");
    assert!(body.len() < 1024);
    assert_eq!(post_json(addr, &body).await.status, 200);
    let text = metrics(addr).await;
    assert_eq!(
        value(
            &text,
            "ratelimitd_transport_limited_total",
            "limit=\"request_size\""
        ),
        2.0,
        "{text}"
    );
}
