//! Helpers shared by the `ops_*` tests: HTTP with a body, Prometheus text parsing, polling.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::ratelimitd::dechunk;

/// A file of `tests/fixtures/ops/`.
pub fn ops_fixture(name: &str) -> PathBuf {
    crate::repo_root().join("tests/fixtures/ops").join(name)
}

/// An HTTP response: status code, headers (lowercase names), body.
#[derive(Debug)]
pub struct HttpResponse {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl HttpResponse {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a fresh connection (`Connection: close`).
pub async fn http(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> HttpResponse {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect to {addr}: {e}"));
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut raw))
        .await
        .expect("HTTP response within 10 s")
        .expect("read HTTP response");
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("malformed HTTP response: {text:?}"));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("no status in {head:?}"));
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(n, v)| n == "transfer-encoding" && v.contains("chunked"));
    let body = if chunked {
        dechunk(body)
    } else {
        body.to_string()
    };
    HttpResponse {
        status,
        headers,
        body,
    }
}

pub async fn post_json(addr: SocketAddr, body: &str) -> HttpResponse {
    http(addr, "POST", "/json", body.as_bytes()).await
}

pub async fn get(addr: SocketAddr, path: &str) -> HttpResponse {
    http(addr, "GET", path, b"").await
}

/// The `/metrics` text.
pub async fn metrics(addr: SocketAddr) -> String {
    let response = get(addr, "/metrics").await;
    assert_eq!(response.status, 200, "{response:?}");
    response.body
}

/// The value of the sample `name{labels}` (labels in the order written, e.g.
/// `domain="ops",rule="ops.plain"`; empty for none), if present.
pub fn sample(text: &str, name: &str, labels: &str) -> Option<f64> {
    let series = if labels.is_empty() {
        name.to_string()
    } else {
        format!("{name}{{{labels}}}")
    };
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|line| {
            let (key, value) = line.rsplit_once(' ')?;
            (key == series).then(|| value.parse().ok()).flatten()
        })
}

/// Like [`sample`], but panics with the whole text when the series is missing.
#[track_caller]
pub fn value(text: &str, name: &str, labels: &str) -> f64 {
    sample(text, name, labels).unwrap_or_else(|| panic!("no sample {name}{{{labels}}} in:\n{text}"))
}

/// Every sample line of family `name` (exactly: `name{` or `name `).
pub fn samples<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    text.lines()
        .filter(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
        })
        .collect()
}

/// Polls `probe` every 50 ms until it returns `Some`, for at most `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(Instant::now() < deadline, "{what}: not within {timeout:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Script calls (`EVALSHA` and `FCALL` together: the store calls by `FCALL` where the server has
/// Functions) on a Redis server (0 before the first).
pub fn script_calls(connection: &mut redis::Connection) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(connection)
        .expect("INFO commandstats");
    ["evalsha", "fcall"]
        .iter()
        .map(|name| crate::redis_server::commandstats_calls(&info, name))
        .sum()
}
