//! Many connections holding half-sent calls, against the real binary: 200 connections, each
//! opening 100 calls that send their HEADERS and the 5-byte prefix of a 65,000-byte message and
//! nothing more, held, closed, round after round. The memory budget of all calls together
//! refuses what does not fit (RESOURCE_EXHAUSTED naming the budget, counted in `/metrics`), the
//! bytes held against it never pass it, and once the connections close the memory goes back:
//! VmRSS returns to within a bound of where it started.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::*;
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tonic::codegen::http::{Method, Request};

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const RESOURCE_EXHAUSTED: i32 = 8;
const CONNECTIONS: usize = 200;
const STREAMS: usize = 100;
const DECLARED: u32 = 65_000;
const ROUNDS: usize = 3;
const BUDGET_MIB: u64 = 32;
/// How far above its idle VmRSS the server may stay once every connection has closed.
const RSS_BACK_WITHIN_MIB: f64 = 32.0;
/// How long the memory may take to go back.
const GIVE_BACK: Duration = Duration::from_secs(20);

/// Resident memory of `pid`, in MiB (VmRSS of /proc/PID/status).
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS");
    kib / 1024.0
}

/// The value of one series of `/metrics` (`name{labels}` exactly as rendered); 0 when absent.
async fn metric(server: &Ratelimitd, series: &str) -> u64 {
    let (code, body) = http_get(server.http_addr(), "/metrics").await;
    assert_eq!(code, 200, "/metrics");
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// How the calls of one round ended while they were held.
#[derive(Debug, Default)]
struct Round {
    opened: usize,
    /// Answered RESOURCE_EXHAUSTED with a message naming the memory budget.
    over_budget: usize,
    /// Answered RESOURCE_EXHAUSTED by another limit (the global message-bytes cap).
    other_exhausted: usize,
    /// Any other answer, or a reset, while held.
    other: Vec<String>,
}

/// The 5-byte prefix of a message of `length` bytes.
fn prefix(length: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    out.put_u8(0);
    out.put_u32(length);
    out.freeze()
}

/// How a call ended while held: `None` still open, else its gRPC status and message, or the
/// reset that ended it.
type Ended = Option<Result<(i32, String), String>>;

/// One connection's calls, each held until `release` turns true; returns how each ended while
/// held (`None`: still open).
async fn hold_connection(
    addr: SocketAddr,
    release: watch::Receiver<bool>,
    opened: tokio::sync::mpsc::UnboundedSender<()>,
) -> Vec<Ended> {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::Builder::new()
        .max_concurrent_reset_streams(STREAMS)
        .handshake::<_, Bytes>(tcp)
        .await
        .expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut calls = JoinSet::new();
    for _ in 0..STREAMS {
        let mut ready = tokio::time::timeout(Duration::from_secs(10), send.clone().ready())
            .await
            .expect("a stream within the server's limit")
            .expect("connection open");
        let head = Request::builder()
            .method(Method::POST)
            .uri(format!("http://{addr}{RLS_PATH}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (response, mut stream) = ready.send_request(head, false).expect("send HEADERS");
        stream
            .send_data(prefix(DECLARED), false)
            .expect("send prefix");
        let _ = opened.send(());
        let mut release = release.clone();
        calls.spawn(async move {
            let _stream = stream;
            tokio::select! {
                answered = response => Some(match answered {
                    Ok(response) => {
                        let headers = response.headers();
                        let code = headers
                            .get("grpc-status")
                            .and_then(|v| v.to_str().ok()?.parse().ok())
                            .unwrap_or(-1);
                        let message = headers
                            .get("grpc-message")
                            .and_then(|v| v.to_str().ok())
                            .unwrap_or("")
                            .to_owned();
                        Ok((code, message))
                    }
                    Err(error) => Err(error.to_string()),
                }),
                _ = release.wait_for(|released| *released) => None,
            }
        });
    }
    let mut ended = Vec::new();
    while let Some(call) = calls.join_next().await {
        ended.push(call.expect("call task"));
    }
    drop(send);
    driver.abort();
    ended
}

/// A round's connections, their calls open.
struct Holding {
    release: watch::Sender<bool>,
    connections: JoinSet<Vec<Ended>>,
    opened: usize,
}

/// Opens every connection's calls and waits until they have all been sent.
async fn open_round(server: &Ratelimitd) -> Holding {
    let (release, released) = watch::channel(false);
    let (opened_tx, mut opened_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut connections = JoinSet::new();
    for _ in 0..CONNECTIONS {
        connections.spawn(hold_connection(
            server.grpc_addr(),
            released.clone(),
            opened_tx.clone(),
        ));
    }
    drop(opened_tx);
    let mut opened = 0;
    let all_open = async {
        while opened_rx.recv().await.is_some() {
            opened += 1;
            if opened == CONNECTIONS * STREAMS {
                break;
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(60), all_open)
        .await
        .expect("every call opened within 60 s");
    // Let the server read what was sent.
    tokio::time::sleep(Duration::from_millis(500)).await;
    Holding {
        release,
        connections,
        opened,
    }
}

impl Holding {
    /// Closes every connection; how their calls ended while held.
    async fn close(mut self) -> Round {
        self.release.send_replace(true);
        let mut outcome = Round {
            opened: self.opened,
            ..Round::default()
        };
        while let Some(connection) = self.connections.join_next().await {
            for ended in connection.expect("connection task") {
                match ended {
                    None => {}
                    Some(Ok((RESOURCE_EXHAUSTED, message)))
                        if message.contains("--grpc-memory-budget") =>
                    {
                        outcome.over_budget += 1
                    }
                    Some(Ok((RESOURCE_EXHAUSTED, _))) => outcome.other_exhausted += 1,
                    Some(other) => outcome.other.push(format!("{other:?}")),
                }
            }
        }
        outcome
    }
}

#[tokio::test]
async fn many_connections_of_half_sent_calls_stay_in_the_budget_and_give_memory_back() {
    let matching = fixture("serve/matching.yaml");
    let budget = format!("{BUDGET_MIB}MiB");
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            matching.to_str().unwrap(),
            "--grpc-read-timeout",
            "60s",
        ],
        &[("RATELIMITD_GRPC_MEMORY_BUDGET", &budget)],
    );
    let pid = server.pid();
    assert!(
        server
            .output()
            .contains(&format!("grpc_memory_budget={}", BUDGET_MIB << 20)),
        "the serving line names the budget:\n{}",
        server.output()
    );
    assert_eq!(
        metric(&server, "ratelimitd_grpc_memory_budget_bytes").await,
        BUDGET_MIB << 20
    );
    let idle = rss_mib(pid);
    let mut peak = idle;
    for number in 1..=ROUNDS {
        let holding = open_round(&server).await;
        // The server reads what was sent at its own pace: let it fill the budget.
        let mut held = 0;
        for _ in 0..40 {
            held = metric(&server, "ratelimitd_grpc_memory_held_bytes").await;
            if held > (BUDGET_MIB << 20) / 2 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        let calls = metric(&server, "ratelimitd_grpc_open_calls").await;
        let rss = rss_mib(pid);
        let outcome = holding.close().await;
        peak = peak.max(rss);
        eprintln!(
            "round {number}: {outcome:?}; while held: {held} bytes and {calls} calls against the budget, VmRSS {rss:.1} MiB; after: VmRSS {:.1} MiB",
            rss_mib(pid)
        );
        assert_eq!(outcome.opened, CONNECTIONS * STREAMS);
        assert!(outcome.other.is_empty(), "{:?}", outcome.other);
        assert!(
            outcome.over_budget > 0,
            "calls past the budget are refused: {outcome:?}"
        );
        assert!(
            held <= BUDGET_MIB << 20 && held > (BUDGET_MIB << 20) / 2,
            "held {held} bytes against a budget of {BUDGET_MIB} MiB"
        );
        assert!(calls > 0 && calls < (CONNECTIONS * STREAMS) as u64);
        assert!(
            rss - idle < 3.0 * BUDGET_MIB as f64,
            "VmRSS grew {:.1} MiB while held (budget {BUDGET_MIB} MiB)",
            rss - idle
        );
        // Closed connections give their calls' charges back.
        let mut left = (u64::MAX, u64::MAX);
        for _ in 0..40 {
            left = (
                metric(&server, "ratelimitd_grpc_open_calls").await,
                metric(&server, "ratelimitd_grpc_memory_held_bytes").await,
            );
            if left == (0, 0) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        assert_eq!(left, (0, 0), "open calls and held bytes after the round");
    }
    assert!(
        metric(
            &server,
            "ratelimitd_transport_limited_total{limit=\"grpc_memory_budget\"}"
        )
        .await
            > 0
    );

    // Served as before, and the memory goes back.
    let mut client = server.client().await;
    let resp = should(&mut client, request("matching", &[&[("hits", "after")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    drop(client);
    let deadline = tokio::time::Instant::now() + GIVE_BACK;
    let mut after = rss_mib(pid);
    while after - idle > RSS_BACK_WITHIN_MIB && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        after = rss_mib(pid);
    }
    eprintln!("VmRSS: idle {idle:.1} MiB, peak while held {peak:.1} MiB, after {after:.1} MiB");
    assert!(
        peak - idle > RSS_BACK_WITHIN_MIB,
        "the load made the server hold memory (peak {peak:.1} MiB, idle {idle:.1} MiB)"
    );
    assert!(
        after - idle <= RSS_BACK_WITHIN_MIB,
        "VmRSS stayed {:.1} MiB above idle ({after:.1} against {idle:.1} MiB) {GIVE_BACK:?} after the load",
        after - idle
    );
}
