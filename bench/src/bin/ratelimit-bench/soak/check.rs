//! The soak's over-admission check: one sequential client per (server, rule) on the HTTP `/json`
//! endpoint, paced at a fixed rate, counting the OK answers per window against the limit.
//!
//! Each request is decided by the server at some instant in [sent, received] (the client waits for
//! each answer before the next request, and server, Redis and client share the host's clock). For
//! a fixed window of W starting on the Unix epoch, an OK answer whose [sent, received] lies in one
//! window is certainly counted in it; one that straddles a boundary is ambiguous. A window whose
//! certain OKs exceed the limit is a certain over-admission; counting the ambiguous ones in both
//! neighbours gives the possible ones. For a sliding-window log, L + 1 OK answers whose decisions
//! all lie within less than W of each other, i.e. received(last) - sent(first) < W, are a certain
//! over-admission; sent(last) - received(first) < W, a possible one.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{header, Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::{timeout, MissedTickBehavior};

/// How long the client waits to connect, and for each answer.
const IO_TIMEOUT: Duration = Duration::from_secs(5);

/// A checked rule of domain `soak`: its key (value `checked`), algorithm, limit and window.
#[derive(Clone, Copy, Debug)]
pub struct Rule {
    pub key: &'static str,
    pub kind: Kind,
    pub limit: u64,
    pub window_s: u64,
}

impl Rule {
    /// The rate in the configuration's words: `unit: second, requests_per_unit: 20,
    /// unit_multiplier: 2`.
    pub fn rate_yaml(&self) -> String {
        match self.window_s {
            60 => format!("unit: minute, requests_per_unit: {}", self.limit),
            1 => format!("unit: second, requests_per_unit: {}", self.limit),
            n => format!(
                "unit: second, requests_per_unit: {}, unit_multiplier: {n}",
                self.limit
            ),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    FixedWindow,
    SlidingWindowLog,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::FixedWindow => "fixed_window",
            Kind::SlidingWindowLog => "sliding_window_log",
        }
    }
}

/// What one client saw on one server and rule.
#[derive(Debug)]
pub struct CheckResult {
    pub server: String,
    pub rule: Rule,
    /// Answered requests.
    pub requests: u64,
    pub ok: u64,
    pub over_limit: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    /// Connections the server closed (it closes each one after `--http-connection-timeout`),
    /// opened again; a request it closed one on without answering is sent again, not counted.
    pub reconnects: u64,
    pub verdict: Verdict,
}

impl CheckResult {
    /// Certain over-admissions: windows over the limit, or runs of L + 1 OKs within W.
    pub fn certain(&self) -> u64 {
        match self.verdict {
            Verdict::FixedWindow(v) => v.over_certain,
            Verdict::SlidingWindowLog(v) => v.runs_certain,
        }
    }

    /// Over-admissions that only the client's timing uncertainty allows.
    pub fn possible_only(&self) -> u64 {
        match self.verdict {
            Verdict::FixedWindow(v) => v.over_possible - v.over_certain,
            Verdict::SlidingWindowLog(v) => v.runs_possible - v.runs_certain,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Verdict {
    FixedWindow(FixedWindowVerdict),
    SlidingWindowLog(SlidingLogVerdict),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FixedWindowVerdict {
    /// Windows with at least one OK answer.
    pub windows: u64,
    /// Windows whose certain and ambiguous OKs reach the limit.
    pub at_limit: u64,
    pub max_ok_per_window: u64,
    /// OK answers that straddle a window boundary.
    pub ambiguous_ok: u64,
    pub over_certain: u64,
    pub over_possible: u64,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SlidingLogVerdict {
    pub runs_certain: u64,
    pub runs_possible: u64,
}

/// Starts the client of `rule` on the server `server` (its HTTP port `http`), sending `rate`
/// requests per second; it runs until `deadline` or until `stop` is set.
pub fn spawn(
    server: &str,
    http: SocketAddr,
    rule: Rule,
    rate: u32,
    deadline: Instant,
    stop: Arc<AtomicBool>,
) -> thread::JoinHandle<CheckResult> {
    let server = server.to_string();
    thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for the checker");
        runtime.block_on(run(server, http, rule, rate, deadline, &stop))
    })
}

/// Request k is sent at start + k / `rate`; one that comes due while an earlier one is still
/// unanswered waits for it, and the slots missed meanwhile are skipped rather than sent in a
/// burst.
async fn run(
    server: String,
    http: SocketAddr,
    rule: Rule,
    rate: u32,
    deadline: Instant,
    stop: &AtomicBool,
) -> CheckResult {
    let body = Bytes::from(
        serde_json::json!({
            "domain": "soak",
            "descriptors": [{"entries": [{"key": rule.key, "value": "checked"}]}],
        })
        .to_string(),
    );
    let mut result = CheckResult {
        server,
        rule,
        requests: 0,
        ok: 0,
        over_limit: 0,
        errors: 0,
        error_kinds: BTreeMap::new(),
        reconnects: 0,
        verdict: Verdict::SlidingWindowLog(SlidingLogVerdict::default()),
    };
    // (sent, received) of every OK answer, µs since the epoch.
    let mut answers = Vec::new();
    let mut connection: Option<HttpConnection> = None;
    let mut slots = tokio::time::interval(Duration::from_secs(1) / rate);
    slots.set_missed_tick_behavior(MissedTickBehavior::Skip);
    loop {
        slots.tick().await;
        if stop.load(Ordering::Relaxed) || Instant::now() >= deadline {
            break;
        }
        // A request the server closed the connection on is sent again on a new one, once.
        for _attempt in 0..2 {
            let link = match connection.as_mut() {
                Some(link) => link,
                None => match HttpConnection::open(http).await {
                    Ok(link) => connection.insert(link),
                    Err(kind) => {
                        error(&mut result, kind);
                        break;
                    }
                },
            };
            let sent = now_us();
            match link.request(Method::POST, "/json", body.clone()).await {
                Ok((status, payload)) => {
                    let received = now_us();
                    result.requests += 1;
                    // /json answers OVER_LIMIT with 429 and the same body.
                    if status != 200 && status != 429 {
                        error(&mut result, format!("http {status}"));
                        break;
                    }
                    match overall_code(&payload).as_deref() {
                        Some("OK") => {
                            result.ok += 1;
                            answers.push((sent, received));
                        }
                        Some("OVER_LIMIT") => result.over_limit += 1,
                        Some(code) => error(&mut result, format!("code {code}")),
                        None => error(&mut result, "unreadable body".into()),
                    }
                }
                Err(HttpError::Closed) => {
                    result.reconnects += 1;
                    connection = None;
                    continue;
                }
                Err(HttpError::Failed(kind)) => {
                    error(&mut result, kind);
                    connection = None;
                }
            }
            break;
        }
    }
    let window_us = rule.window_s * 1_000_000;
    result.verdict = match rule.kind {
        Kind::FixedWindow => Verdict::FixedWindow(fixed_window(&answers, rule.limit, window_us)),
        Kind::SlidingWindowLog => {
            Verdict::SlidingWindowLog(sliding_log(&answers, rule.limit, window_us))
        }
    };
    result
}

fn error(result: &mut CheckResult, kind: String) {
    result.errors += 1;
    *result.error_kinds.entry(kind).or_default() += 1;
}

fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// `overallCode` of a `/json` answer.
fn overall_code(payload: &[u8]) -> Option<String> {
    let json: serde_json::Value = serde_json::from_slice(payload).ok()?;
    Some(json.get("overallCode")?.as_str()?.to_string())
}

/// Fixed windows of `window_us` from the epoch, over the (sent, received) of the OK answers.
pub fn fixed_window(answers: &[(u64, u64)], limit: u64, window_us: u64) -> FixedWindowVerdict {
    let mut certain: BTreeMap<u64, u64> = BTreeMap::new();
    let mut ambiguous: BTreeMap<u64, u64> = BTreeMap::new();
    for &(sent, received) in answers {
        let (first, last) = (sent / window_us, received / window_us);
        if first == last {
            *certain.entry(first).or_default() += 1;
        } else {
            *ambiguous.entry(first).or_default() += 1;
            *ambiguous.entry(last).or_default() += 1;
        }
    }
    let windows: BTreeSet<u64> = certain.keys().chain(ambiguous.keys()).copied().collect();
    let certain_in = |w: &u64| certain.get(w).copied().unwrap_or(0);
    let all_in = |w: &u64| certain_in(w) + ambiguous.get(w).copied().unwrap_or(0);
    let count = |pass: &dyn Fn(&u64) -> bool| windows.iter().filter(|w| pass(w)).count() as u64;
    FixedWindowVerdict {
        windows: windows.len() as u64,
        at_limit: count(&|w| all_in(w) >= limit),
        max_ok_per_window: windows.iter().map(certain_in).max().unwrap_or(0),
        ambiguous_ok: ambiguous.values().sum::<u64>() / 2,
        over_certain: count(&|w| certain_in(w) > limit),
        over_possible: count(&|w| all_in(w) > limit),
    }
}

/// Runs of `limit + 1` OK answers (in the order sent) within less than `window_us`.
pub fn sliding_log(answers: &[(u64, u64)], limit: u64, window_us: u64) -> SlidingLogVerdict {
    let mut verdict = SlidingLogVerdict::default();
    let span = limit as usize;
    for (i, first) in answers.iter().enumerate() {
        let Some(last) = answers.get(i + span) else {
            break;
        };
        if last.1.saturating_sub(first.0) < window_us {
            verdict.runs_certain += 1;
        }
        if last.0.saturating_sub(first.1) < window_us {
            verdict.runs_possible += 1;
        }
    }
    verdict
}

/// An HTTP/1.1 keep-alive connection (hyper's client), one request at a time.
pub struct HttpConnection {
    sender: SendRequest<Full<Bytes>>,
    host: String,
}

pub enum HttpError {
    /// The server closed the connection before answering.
    Closed,
    /// Anything else, named for the error counts.
    Failed(String),
}

impl HttpConnection {
    /// Connects and starts the connection's task on the current runtime; it ends when either
    /// side closes.
    pub async fn open(addr: SocketAddr) -> Result<HttpConnection, String> {
        let stream = timeout(IO_TIMEOUT, TcpStream::connect(addr))
            .await
            .map_err(|_| "timeout".to_string())?
            .map_err(|e| io_kind(&e))?;
        stream.set_nodelay(true).map_err(|e| io_kind(&e))?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| hyper_kind(&e))?;
        tokio::spawn(connection);
        Ok(HttpConnection {
            sender,
            host: addr.to_string(),
        })
    }

    /// Sends a request (a body, when not empty, as JSON) and reads the answer: its status and
    /// body, within [`IO_TIMEOUT`].
    pub async fn request(
        &mut self,
        method: Method,
        path: &str,
        body: Bytes,
    ) -> Result<(u16, Bytes), HttpError> {
        self.sender.ready().await.map_err(|_| HttpError::Closed)?;
        let mut request = Request::builder()
            .method(method)
            .uri(path)
            .header(header::HOST, &self.host);
        if !body.is_empty() {
            request = request.header(header::CONTENT_TYPE, "application/json");
        }
        let request = request
            .body(Full::new(body))
            .map_err(|e| HttpError::Failed(e.to_string()))?;
        let exchange = async {
            let response = self.sender.send_request(request).await?;
            let status = response.status().as_u16();
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, body))
        };
        match timeout(IO_TIMEOUT, exchange).await {
            Ok(Ok(answer)) => Ok(answer),
            Ok(Err(e)) if closed(&e) => Err(HttpError::Closed),
            Ok(Err(e)) => Err(HttpError::Failed(hyper_kind(&e))),
            Err(_) => Err(HttpError::Failed("timeout".into())),
        }
    }
}

/// Whether the connection was closed under the request: before it was written (canceled), while
/// it was written (reset, broken pipe) or before its answer came.
fn closed(e: &hyper::Error) -> bool {
    e.is_canceled()
        || e.is_incomplete_message()
        || io_source(e).is_some_and(|io| {
            matches!(
                io.kind(),
                io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
            )
        })
}

fn io_source(e: &hyper::Error) -> Option<&io::Error> {
    std::error::Error::source(e)?.downcast_ref::<io::Error>()
}

/// hyper's description of the error, with the kind of the I/O error under it.
fn hyper_kind(e: &hyper::Error) -> String {
    match io_source(e) {
        Some(io) => format!("{e}: {}", io_kind(io)),
        None => e.to_string(),
    }
}

/// The name of an I/O error's kind.
fn io_kind(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => "timeout".into(),
        kind => format!("{kind:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000;

    #[test]
    fn a_fixed_window_over_its_limit_is_certain_only_with_answers_inside_it() {
        // Windows of 1 s: 3 OKs inside [10 s, 11 s), one straddling into [11 s, 12 s), one in it.
        let answers = [
            (10 * S + 1, 10 * S + 2),
            (10 * S + 3, 10 * S + 4),
            (10 * S + 5, 10 * S + 6),
            (11 * S - 1, 11 * S + 1),
            (11 * S + 10, 11 * S + 20),
        ];
        let verdict = fixed_window(&answers, 3, S);
        assert_eq!(
            verdict,
            FixedWindowVerdict {
                windows: 2,
                at_limit: 1,
                max_ok_per_window: 3,
                ambiguous_ok: 1,
                over_certain: 0,
                over_possible: 1,
            }
        );
        let verdict = fixed_window(&answers, 2, S);
        assert_eq!((verdict.over_certain, verdict.over_possible), (1, 1));
    }

    #[test]
    fn a_sliding_log_run_of_limit_plus_one_within_the_window_is_an_over_admission() {
        // Limit 2 per 1 s: three OKs spanning 0.9 s (certain), then three spanning about 1 s.
        let answers = [
            (0, 10),
            (400_000, 400_010),
            (900_000, 900_010),
            (5 * S, 5 * S + 10),
            (5 * S + 500_000, 5 * S + 500_010),
            (6 * S - 5, 6 * S + 5),
        ];
        let verdict = sliding_log(&answers, 2, S);
        // Runs (0..2) certain; (3..5): received(last) - sent(first) = 1 s + 5 µs, not certain,
        // but sent(last) - received(first) = 1 s - 15 µs, possible.
        assert_eq!(
            verdict,
            SlidingLogVerdict {
                runs_certain: 1,
                runs_possible: 2,
            }
        );
        assert_eq!(
            sliding_log(&answers[..2], 2, S),
            SlidingLogVerdict::default()
        );
    }
}
