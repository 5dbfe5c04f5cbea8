//! The transport under attack, against the real binary: what one HTTP/2 connection, many idle
//! connections, slow HTTP clients and descriptor exhaustion can make the server hold. Each test
//! checks that memory (VmRSS) stays under a stated bound, that other clients keep being answered
//! (RLS, gRPC health, `/healthcheck`), that the limit shows in `/metrics`, and that the process
//! still exits 0 on SIGTERM. Plus the strict gRPC framing: content-type, one message per unary
//! call, oversized messages.

use std::future::poll_fn;
use std::net::SocketAddr;
use std::os::unix::process::CommandExt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::{ResponseFuture, SendRequest};
use h2::SendStream;
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ratelimitd::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tonic::codegen::http::{Method, Request};
use tonic_health::pb::health_check_response::ServingStatus;
use tonic_health::pb::HealthCheckRequest;

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
const CHECK_PATH: &str = "/grpc.health.v1.Health/Check";
const WATCH_PATH: &str = "/grpc.health.v1.Health/Watch";
/// gRPC status codes the tests expect.
const UNIMPLEMENTED: i32 = 12;
const RESOURCE_EXHAUSTED: i32 = 8;
const DEADLINE_EXCEEDED: i32 = 4;
/// How long any single answer may take before the test calls the server unresponsive.
const ANSWER: Duration = Duration::from_secs(10);

/// The port a test drives: the gRPC port (hyper's HTTP/2 and tonic) or the RLS port (ratelimitd's
/// own HTTP/2), whose bounds must hold the same.
#[derive(Debug, Clone, Copy)]
enum Port {
    Grpc,
    Rls,
}

impl Port {
    fn of(self, server: &Ratelimitd) -> SocketAddr {
        match self {
            Port::Grpc => server.grpc_addr(),
            Port::Rls => server.rls_addr(),
        }
    }
}

fn serve(args: &[&str], envs: &[(&str, &str)]) -> Ratelimitd {
    let matching = fixture("serve/matching.yaml");
    let mut full = vec![
        "--config",
        matching.to_str().unwrap(),
        "--rls-addr",
        "127.0.0.1:0",
    ];
    full.extend_from_slice(args);
    Ratelimitd::start_with_env(&full, envs)
}

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

/// Open descriptors of `pid`.
fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// CPU seconds (user + system) `pid` used so far.
fn cpu_seconds(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the parenthesised command name; utime and stime are the 14th and 15th.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = fields[11].parse::<f64>().unwrap() + fields[12].parse::<f64>().unwrap();
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    ticks / hz
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

async fn limited(server: &Ratelimitd, limit: &str) -> u64 {
    metric(
        server,
        &format!("ratelimitd_transport_limited_total{{limit=\"{limit}\"}}"),
    )
    .await
}

/// A bystander is served: a new connection's RLS call is decided, gRPC health and
/// `/healthcheck` say SERVING.
async fn assert_bystanders_served(server: &Ratelimitd, what: &str) {
    let served = async {
        let mut c = server.client().await;
        let resp = should(&mut c, request("matching", &[&[("hits", what)]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "{what}: bystander RLS call");
        let mut health = server.health_client().await;
        assert_eq!(
            overall_health(&mut health).await,
            ServingStatus::Serving as i32,
            "{what}: gRPC health"
        );
        let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
        assert_eq!((code, body.trim()), (200, "OK"), "{what}: /healthcheck");
    };
    tokio::time::timeout(ANSWER, served)
        .await
        .unwrap_or_else(|_| panic!("{what}: bystanders not served within {ANSWER:?}"));
}

/// SIGTERM, then exit 0.
async fn assert_exits_zero(mut server: Ratelimitd) {
    server.terminate();
    let status = server.exited(Duration::from_secs(15)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit after SIGTERM: {status:?}; output:\n{}",
        server.output()
    );
}

// ---------------------------------------------------------------------------------------------
// Raw HTTP/2
// ---------------------------------------------------------------------------------------------

/// An HTTP/2 connection (h2 directly, no gRPC library), driven by a task that ends with it.
async fn h2_connection(addr: SocketAddr) -> (SendRequest<Bytes>, JoinHandle<()>) {
    let tcp = TcpStream::connect(addr).await.expect("connect");
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(1 << 20)
        .max_concurrent_reset_streams(10_000)
        .handshake(tcp)
        .await
        .expect("HTTP/2 handshake");
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    // Let the server's SETTINGS (its stream limit) arrive before any stream is opened.
    let settled = Instant::now() + Duration::from_secs(1);
    while send.current_max_send_streams() == usize::MAX && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (send, driver)
}

fn head(addr: SocketAddr, path: &str, content_type: Option<&str>) -> Request<()> {
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}{path}"))
        .header("te", "trailers");
    if let Some(content_type) = content_type {
        builder = builder.header("content-type", content_type);
    }
    builder.body(()).unwrap()
}

/// A gRPC message: uncompressed flag, length, bytes.
fn framed(message: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(5 + message.len());
    out.put_u8(0);
    out.put_u32(message.len() as u32);
    out.put_slice(message);
    out.freeze()
}

/// The 5-byte header of a message of `length` bytes.
fn message_header(length: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    out.put_u8(0);
    out.put_u32(length);
    out.freeze()
}

fn rls_message(value: &str) -> Vec<u8> {
    prost::Message::encode_to_vec(&request("matching", &[&[("flat", value)]], 0))
}

fn check_message() -> Vec<u8> {
    prost::Message::encode_to_vec(&HealthCheckRequest {
        service: String::new(),
    })
}

/// Opens a stream once the connection allows one more (the server's stream limit), or `None`
/// when it does not within `wait`.
async fn open_stream(
    send: &SendRequest<Bytes>,
    head: Request<()>,
    end: bool,
    wait: Duration,
) -> Option<(ResponseFuture, SendStream<Bytes>)> {
    let ready = tokio::time::timeout(wait, send.clone().ready())
        .await
        .ok()?
        .ok()?;
    let mut ready = ready;
    ready.send_request(head, end).ok()
}

/// Sends up to `total` bytes (a message header first, then zeros) as flow control allows;
/// stops when the window stays shut for `stall` or the stream is reset. Returns bytes sent.
async fn send_partial(
    stream: &mut SendStream<Bytes>,
    header: Bytes,
    total: usize,
    stall: Duration,
) -> usize {
    let mut sent = 0;
    let mut first = Some(header);
    while sent < total {
        stream.reserve_capacity((total - sent).min(64 << 10));
        let granted = tokio::time::timeout(stall, poll_fn(|cx| stream.poll_capacity(cx))).await;
        let n = match granted {
            Ok(Some(Ok(n))) if n > 0 => n,
            _ => break,
        };
        let chunk = match first.take() {
            Some(header) if header.len() <= n => {
                let mut chunk = BytesMut::with_capacity(n);
                chunk.put_slice(&header);
                chunk.resize(n, 0);
                chunk.freeze()
            }
            Some(header) => {
                first = Some(header);
                continue;
            }
            None => Bytes::from(vec![0u8; n]),
        };
        if stream.send_data(chunk, false).is_err() {
            break;
        }
        sent += n;
    }
    sent
}

/// How a raw call ended: the HTTP status, and the gRPC status (from the headers of a
/// trailers-only answer, or from the trailers) when there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    http: u16,
    grpc: Option<i32>,
    message: String,
}

async fn outcome(response: ResponseFuture) -> Outcome {
    let response = tokio::time::timeout(ANSWER, response)
        .await
        .expect("an answer within 10 s")
        .expect("an answer, not a reset");
    let (head, mut body) = response.into_parts();
    let status_of = |headers: &tonic::codegen::http::HeaderMap| {
        let code = headers
            .get("grpc-status")
            .and_then(|v| v.to_str().ok()?.parse().ok());
        let message = headers
            .get("grpc-message")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        (code, message)
    };
    let (mut grpc, mut message) = status_of(&head.headers);
    if grpc.is_none() && head.status == 200 {
        while let Some(data) = body.data().await {
            if let Ok(data) = data {
                let _ = body.flow_control().release_capacity(data.len());
            }
        }
        if let Ok(Some(trailers)) = body.trailers().await {
            (grpc, message) = status_of(&trailers);
        }
    }
    Outcome {
        http: head.status.as_u16(),
        grpc,
        message,
    }
}

/// A health `Watch` taken (its answer streams: no status in its headers, kept open while held),
/// or the gRPC status it was refused with.
async fn watch_taken(
    response: ResponseFuture,
) -> Result<tonic::codegen::http::Response<h2::RecvStream>, i32> {
    let response = tokio::time::timeout(ANSWER, response)
        .await
        .expect("Watch answered within 10 s")
        .expect("Watch answered, not reset");
    match response
        .headers()
        .get("grpc-status")
        .and_then(|v| v.to_str().ok()?.parse().ok())
    {
        Some(code) => Err(code),
        None => Ok(response),
    }
}

// ---------------------------------------------------------------------------------------------
// 1. One connection, many streams, each holding part of a large message
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn partial_messages_on_one_connection_stay_bounded() {
    partial_messages_stay_bounded(Port::Grpc).await;
}

#[tokio::test]
async fn partial_messages_on_one_rls_port_connection_stay_bounded() {
    partial_messages_stay_bounded(Port::Rls).await;
}

async fn partial_messages_stay_bounded(port: Port) {
    let server = serve(
        &["--grpc-read-timeout", "3s"],
        &[("RATELIMITD_GRPC_MAX_BUFFERED_BYTES", "512KiB")],
    );
    let pid = server.pid();
    let before = rss_mib(pid);
    let addr = port.of(&server);

    // The stream limit is advertised.
    let (send, _driver) = h2_connection(addr).await;
    let send = tokio::time::timeout(ANSWER, send.ready())
        .await
        .expect("ready")
        .expect("connection");
    assert_eq!(
        send.current_max_send_streams(),
        100,
        "SETTINGS_MAX_CONCURRENT_STREAMS"
    );

    // 750 streams each announcing a 4,194,000-byte message and sending up to 1 MiB of it, as
    // many at once as the stream limit allows: each is refused at its header.
    let slots = Arc::new(tokio::sync::Semaphore::new(100));
    let mut tasks = Vec::new();
    for _ in 0..750 {
        let (send, slots) = (send.clone(), slots.clone());
        tasks.push(tokio::spawn(async move {
            let _slot = slots.acquire_owned().await.unwrap();
            let (response, mut stream) = open_stream(
                &send,
                head(addr, RLS_PATH, Some("application/grpc")),
                false,
                ANSWER,
            )
            .await
            .expect("a stream within 10 s");
            send_partial(
                &mut stream,
                message_header(4_194_000),
                1 << 20,
                Duration::from_secs(2),
            )
            .await;
            let ended = outcome(response).await;
            drop(stream);
            ended
        }));
    }
    let mut exhausted = 0;
    for task in tasks {
        let ended = task.await.unwrap();
        assert_eq!(ended.http, 200, "{ended:?}");
        if ended.grpc == Some(RESOURCE_EXHAUSTED) {
            exhausted += 1;
        }
    }
    let after_large = rss_mib(pid);
    eprintln!("VmRSS: {before:.1} MiB at start, {after_large:.1} MiB after 750 streams of 4,194,000-byte messages");
    assert_eq!(
        exhausted, 750,
        "every oversized message is RESOURCE_EXHAUSTED"
    );
    assert!(limited(&server, "request_size").await >= 750);

    // Four connections × 100 streams, each sending all but the last byte of a 60,000-byte
    // message (under the size limit): the per-connection budget (256 KiB) and the global one
    // (512 KiB) refuse what does not fit, and the read timeout ends the rest.
    let mut held = Vec::new();
    let mut refused = Vec::new();
    let mut drivers = Vec::new();
    for _ in 0..4 {
        let (send, driver) = h2_connection(addr).await;
        drivers.push(driver);
        for _ in 0..100 {
            let (response, mut stream) = open_stream(
                &send,
                head(addr, RLS_PATH, Some("application/grpc")),
                false,
                ANSWER,
            )
            .await
            .expect("a stream within the limit");
            let sent = send_partial(
                &mut stream,
                message_header(60_000),
                5 + 59_999,
                Duration::from_millis(300),
            )
            .await;
            held.push((response, stream, sent));
        }
    }
    let peak = rss_mib(pid);
    let buffered = metric(&server, "ratelimitd_grpc_buffered_request_bytes").await;
    eprintln!(
        "VmRSS: {peak:.1} MiB with 400 partial 60,000-byte messages on 4 connections ({buffered} bytes buffered)"
    );
    assert!(buffered <= 512 << 10, "buffered {buffered} B > 512 KiB");
    assert_bystanders_served(&server, "partial messages held").await;
    for (response, stream, _) in held {
        let ended = tokio::spawn(outcome(response));
        refused.push((ended, stream));
    }
    let mut codes = std::collections::BTreeMap::new();
    for (ended, _stream) in refused {
        let ended = ended.await.unwrap();
        *codes.entry(ended.grpc).or_insert(0) += 1;
        assert!(
            matches!(
                ended.grpc,
                Some(RESOURCE_EXHAUSTED) | Some(DEADLINE_EXCEEDED)
            ),
            "{ended:?}"
        );
    }
    eprintln!("partial messages ended with {codes:?}");
    assert!(limited(&server, "grpc_connection_buffer").await > 0);
    assert!(limited(&server, "grpc_buffered_bytes").await > 0);
    assert!(limited(&server, "grpc_read_timeout").await > 0);
    assert_eq!(
        metric(&server, "ratelimitd_grpc_buffered_request_bytes").await,
        0
    );
    assert!(
        peak - before < 64.0,
        "VmRSS grew {:.1} MiB (bound 64 MiB)",
        peak - before
    );
    assert_bystanders_served(&server, "after partial messages").await;
    assert_exits_zero(server).await;
}

// ---------------------------------------------------------------------------------------------
// 2. Idle health Watch streams
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn idle_watch_streams_are_capped() {
    let server = serve(&[], &[("RATELIMITD_GRPC_MAX_STREAMING_CALLS", "40")]);
    let pid = server.pid();
    let before = rss_mib(pid);
    let addr = server.grpc_addr();

    // Ten connections open 1000 Watch streams each and never read them.
    let mut connections = Vec::new();
    let mut watching = Vec::new();
    let mut taken = 0;
    let mut refused = 0;
    for _ in 0..10 {
        let (send, driver) = h2_connection(addr).await;
        let mut answers = Vec::new();
        for _ in 0..1000 {
            let (response, mut stream) = open_stream(
                &send,
                head(addr, WATCH_PATH, Some("application/grpc")),
                false,
                ANSWER,
            )
            .await
            .expect("a stream within 10 s");
            stream
                .send_data(framed(&check_message()), true)
                .expect("send Watch request");
            answers.push(tokio::spawn(watch_taken(response)));
        }
        let mut taken_here = 0;
        for answer in answers {
            match answer.await.unwrap() {
                Ok(watch) => {
                    taken_here += 1;
                    watching.push(watch);
                }
                Err(code) => {
                    assert_eq!(code, RESOURCE_EXHAUSTED);
                    refused += 1;
                }
            }
        }
        assert!(
            taken_here <= 8,
            "{taken_here} Watch streams on one connection (cap 8)"
        );
        taken += taken_here;
        connections.push((send, driver));
    }
    let peak = rss_mib(pid);
    eprintln!("VmRSS: {before:.1} MiB at start, {peak:.1} MiB with 10,000 Watch streams asked for ({taken} taken)");
    assert_eq!(taken, 40, "Watch streams taken (global cap 40)");
    assert_eq!(refused, 10_000 - 40);
    assert_eq!(metric(&server, "ratelimitd_grpc_streaming_calls").await, 40);
    assert!(limited(&server, "grpc_streaming_calls").await > 0);
    assert!(limited(&server, "grpc_streaming_calls_per_connection").await > 0);

    // Unary health checks still go through on a connection that holds its Watch streams.
    let (send, _) = &connections[0];
    let (response, mut stream) = open_stream(
        send,
        head(addr, CHECK_PATH, Some("application/grpc")),
        false,
        ANSWER,
    )
    .await
    .expect("a Check stream");
    stream.send_data(framed(&check_message()), true).unwrap();
    assert_eq!(
        outcome(response).await.grpc,
        Some(0),
        "Check beside Watch streams"
    );
    assert_bystanders_served(&server, "Watch streams held").await;
    assert!(
        peak - before < 16.0,
        "VmRSS grew {:.1} MiB (bound 16 MiB)",
        peak - before
    );
    assert_exits_zero(server).await;
}

// ---------------------------------------------------------------------------------------------
// 3. Many idle gRPC connections
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn idle_grpc_connections_are_shed_then_closed() {
    idle_connections_are_shed_then_closed(Port::Grpc).await;
}

#[tokio::test]
async fn idle_rls_port_connections_are_shed_then_closed() {
    idle_connections_are_shed_then_closed(Port::Rls).await;
}

async fn idle_connections_are_shed_then_closed(port: Port) {
    let server = serve(
        &["--grpc-max-connections", "100", "--grpc-idle-timeout", "3s"],
        &[],
    );
    let pid = server.pid();
    let addr = port.of(&server);

    // 300 connections that never send a byte, then 50 that complete the HTTP/2 handshake and
    // go quiet.
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(addr).await.expect("connect"));
    }
    let mut quiet = Vec::new();
    for _ in 0..50 {
        quiet.push(h2_connection(addr).await);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds = open_fds(pid);
    let open = metric(&server, "ratelimitd_grpc_connections").await;
    eprintln!(
        "{fds} descriptors open, {open} gRPC connections, after 350 idle connections (cap 100)"
    );
    assert!(
        open <= 100 + 16,
        "{open} gRPC connections open (cap 100 + 16 being shed)"
    );
    assert!(fds < 100 + 64 + 32, "{fds} descriptors open");
    // Five clients that made a call and went quiet: idle, they are closed with GOAWAY.
    let mut used = Vec::new();
    for _ in 0..5 {
        let (send, driver) = h2_connection(addr).await;
        let (response, mut stream) = open_stream(
            &send,
            head(addr, CHECK_PATH, Some("application/grpc")),
            false,
            ANSWER,
        )
        .await
        .expect("a Check stream");
        stream.send_data(framed(&check_message()), true).unwrap();
        assert_eq!(outcome(response).await.grpc, Some(0), "Check");
        used.push((send, driver));
    }
    let shed = limited(&server, "grpc_connection_shed").await;
    let refused = limited(&server, "grpc_connection_refused").await;
    eprintln!("{shed} connections shed, {refused} refused");
    assert!(
        shed > 0 && shed + refused >= 250,
        "{shed} shed, {refused} refused"
    );
    assert_bystanders_served(&server, "350 idle connections").await;

    // What was not shed is closed after 3 s without calls: the clients that made a call get
    // GOAWAY, the others (handshaken or silent) see their connection end.
    let deadline = Instant::now() + Duration::from_secs(15);
    for (send, driver) in used {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, driver)
            .await
            .expect("idle HTTP/2 connection closed by the server")
            .unwrap();
        let Err(refused) = send.ready().await else {
            panic!("a new stream after the connection was closed");
        };
        assert!(refused.is_go_away(), "closed with GOAWAY: {refused:?}");
    }
    for (_send, driver) in quiet {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, driver)
            .await
            .expect("idle HTTP/2 connection closed by the server")
            .unwrap();
    }
    for mut tcp in silent {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut buf = [0u8; 256];
        let closed = tokio::time::timeout(left, async {
            loop {
                match tcp.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "silent connection still open after 15 s");
    }
    assert!(limited(&server, "grpc_idle_timeout").await > 0);
    let fds_after = open_fds(pid);
    eprintln!("{fds_after} descriptors open once the idle connections are closed");
    assert!(fds_after < 64, "{fds_after} descriptors still open");
    assert_bystanders_served(&server, "after the idle timeout").await;
    assert_exits_zero(server).await;
}

// ---------------------------------------------------------------------------------------------
// 4. Slowloris on the HTTP port
// ---------------------------------------------------------------------------------------------

/// A connection that sends a request's headers a byte every 300 ms and never finishes.
async fn slowloris(addr: SocketAddr) -> JoinHandle<bool> {
    let mut tcp = TcpStream::connect(addr).await.expect("connect");
    tokio::spawn(async move {
        let _ = tcp
            .write_all(b"GET /healthcheck HTTP/1.1\r\nHost: x\r\n")
            .await;
        let started = Instant::now();
        while started.elapsed() < Duration::from_secs(30) {
            tokio::time::sleep(Duration::from_millis(300)).await;
            if tcp.write_all(b"X").await.is_err() {
                return true;
            }
            let mut buf = [0u8; 64];
            match tokio::time::timeout(Duration::from_millis(1), tcp.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return true,
                _ => {}
            }
        }
        false
    })
}

#[tokio::test]
async fn slowloris_http_connections_do_not_starve_healthcheck() {
    let server = serve(
        &[
            "--http-max-connections",
            "20",
            "--http-header-read-timeout",
            "1s",
        ],
        &[],
    );
    let pid = server.pid();
    let addr = server.http_addr();
    let mut lorises = Vec::new();
    for _ in 0..200 {
        lorises.push(slowloris(addr).await);
    }
    for i in 0..10 {
        let (code, body) = tokio::time::timeout(ANSWER, http_get(addr, "/healthcheck"))
            .await
            .expect("/healthcheck answered during the slowloris");
        assert_eq!((code, body.trim()), (200, "OK"), "probe {i}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let fds = open_fds(pid);
    eprintln!("{fds} descriptors open with 200 slowloris connections (cap 20)");
    assert!(fds < 20 + 64, "{fds} descriptors open");
    for loris in lorises {
        assert!(
            loris.await.unwrap(),
            "a slowloris connection stayed open for 30 s"
        );
    }
    assert!(limited(&server, "http_connection_shed").await > 0);
    assert!(limited(&server, "http_header_read_timeout").await > 0);
    assert!(metric(&server, "ratelimitd_http_connections").await <= 20);
    assert_bystanders_served(&server, "after the slowloris").await;
    assert_exits_zero(server).await;
}

// ---------------------------------------------------------------------------------------------
// 5. Out of descriptors
// ---------------------------------------------------------------------------------------------

/// `ratelimitd serve` with RLIMIT_NOFILE (soft and hard) set to `limit`.
fn serve_with_open_files(limit: u64, args: &[&str]) -> Ratelimitd {
    let matching = fixture("serve/matching.yaml");
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--threads",
        "2",
        "--config",
        matching.to_str().unwrap(),
    ])
    .args(args);
    let rlimit = libc::rlimit {
        rlim_cur: limit as libc::rlim_t,
        rlim_max: limit as libc::rlim_t,
    };
    // SAFETY: between fork and exec, setrlimit is async-signal-safe and touches no memory of
    // the parent.
    unsafe {
        cmd.pre_exec(move || {
            if libc::setrlimit(libc::RLIMIT_NOFILE, &rlimit) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    Ratelimitd::spawn(cmd)
}

async fn flood(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    let mut out = Vec::new();
    for _ in 0..count {
        match tokio::time::timeout(Duration::from_secs(1), TcpStream::connect(addr)).await {
            Ok(Ok(tcp)) => out.push(tcp),
            _ => break,
        }
    }
    out
}

#[tokio::test]
async fn with_few_descriptors_the_caps_keep_health_answering() {
    let server = serve_with_open_files(128, &[]);
    let pid = server.pid();
    assert!(
        server.output().contains("grpc_max_connections=32"),
        "caps fitted to 128 open files (64 reserved, 32 HTTP, 32 gRPC):\n{}",
        server.output()
    );
    let grpc = flood(server.grpc_addr(), 300).await;
    let http = flood(server.http_addr(), 300).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds = open_fds(pid);
    eprintln!(
        "{fds} of 128 descriptors open with {} gRPC and {} HTTP idle connections",
        grpc.len(),
        http.len()
    );
    assert!(fds < 128, "{fds} descriptors open");
    assert_bystanders_served(&server, "300 + 300 idle connections, 128 open files").await;
    assert_eq!(
        metric(&server, "ratelimitd_accept_errors_total{port=\"grpc\"}").await
            + metric(&server, "ratelimitd_accept_errors_total{port=\"http\"}").await,
        0,
        "the caps keep accept(2) from running out of descriptors"
    );
    drop((grpc, http));
    assert_exits_zero(server).await;
}

#[tokio::test]
async fn out_of_descriptors_accept_backs_off_and_recovers() {
    // No reserve: the caps (64 + 64) plus the process's own descriptors exceed the limit, so
    // accept(2) fails with EMFILE.
    let server = serve_with_open_files(128, &["--fd-reserve", "0"]);
    let pid = server.pid();
    let grpc = flood(server.grpc_addr(), 300).await;
    let http = flood(server.http_addr(), 300).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let log_before = server.output().matches("accept failed").count();
    let cpu_before = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let cpu = cpu_seconds(pid) - cpu_before;
    let logged = server.output().matches("accept failed").count() - log_before;
    eprintln!(
        "out of descriptors: {cpu:.2} CPU seconds in 3 s, {logged} `accept failed` lines ({} open)",
        open_fds(pid)
    );
    assert!(cpu < 1.5, "{cpu:.2} CPU seconds in 3 s: accept spins");
    assert!(logged <= 2 * 4, "{logged} accept warnings in 3 s");
    drop((grpc, http));
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_bystanders_served(&server, "descriptors back").await;
    let errors = metric(&server, "ratelimitd_accept_errors_total{port=\"grpc\"}").await
        + metric(&server, "ratelimitd_accept_errors_total{port=\"http\"}").await;
    eprintln!("{errors} failed accepts counted");
    assert!(errors > 0, "accept(2) ran out of descriptors");
    assert!(server.output().contains("suppressed="));
    assert_exits_zero(server).await;
}

// ---------------------------------------------------------------------------------------------
// 6. Strict gRPC framing
// ---------------------------------------------------------------------------------------------

/// One raw call: `content_type`, then `data` frames; the last one ends the stream.
async fn raw_call(
    addr: SocketAddr,
    path: &str,
    content_type: Option<&str>,
    data: Vec<Bytes>,
) -> Outcome {
    let (send, _driver) = h2_connection(addr).await;
    let (response, mut stream) = open_stream(
        &send,
        head(addr, path, content_type),
        data.is_empty(),
        ANSWER,
    )
    .await
    .expect("a stream");
    let frames = data.len();
    for (i, chunk) in data.into_iter().enumerate() {
        let _ = stream.send_data(chunk, i + 1 == frames);
    }
    outcome(response).await
}

#[tokio::test]
async fn grpc_framing_is_strict() {
    framing_is_strict(Port::Grpc).await;
}

#[tokio::test]
async fn rls_port_framing_is_strict() {
    framing_is_strict(Port::Rls).await;
}

async fn framing_is_strict(port: Port) {
    // Entries as long as a message may carry (the default entry cap, 8 KiB, would refuse the
    // 60,000-byte value below before the message cap is what decides).
    let server = serve(&["--max-entry-bytes", "65536"], &[]);
    let addr = port.of(&server);
    let one = || vec![framed(&rls_message("framing"))];

    for content_type in [
        None,
        Some("text/plain"),
        Some("application/json"),
        Some("application/grpc-web"),
        Some("application/grpc+json"),
    ] {
        let ended = raw_call(addr, RLS_PATH, content_type, one()).await;
        assert_eq!(ended.http, 415, "content-type {content_type:?}: {ended:?}");
        assert_eq!(ended.grpc, None, "{content_type:?}: not a gRPC answer");
    }
    for content_type in [
        "application/grpc",
        "application/grpc+proto",
        "application/grpc; charset=utf-8",
    ] {
        let ended = raw_call(addr, RLS_PATH, Some(content_type), one()).await;
        assert_eq!(
            (ended.http, ended.grpc),
            (200, Some(0)),
            "{content_type}: {ended:?}"
        );
    }

    // Two messages in one unary call, in one DATA frame or two, and none at all: UNIMPLEMENTED
    // (a cardinality violation), and nothing is charged.
    let mut both = BytesMut::new();
    both.put_slice(&framed(&rls_message("twice")));
    both.put_slice(&framed(&rls_message("twice")));
    let cases = [
        ("two messages in one frame", vec![both.freeze()]),
        (
            "two messages in two frames",
            vec![framed(&rls_message("twice")), framed(&rls_message("twice"))],
        ),
        ("no message", vec![]),
        ("no message, empty DATA", vec![Bytes::new()]),
    ];
    for (what, data) in cases {
        let ended = raw_call(addr, RLS_PATH, Some("application/grpc"), data).await;
        assert_eq!(ended.grpc, Some(UNIMPLEMENTED), "{what}: {ended:?}");
        assert!(!ended.message.is_empty(), "{what}: a message");
    }
    let ended = raw_call(
        addr,
        CHECK_PATH,
        Some("application/grpc"),
        vec![framed(&check_message()), framed(&check_message())],
    )
    .await;
    assert_eq!(
        ended.grpc,
        Some(UNIMPLEMENTED),
        "health Check, two messages: {ended:?}"
    );
    let mut c = testkit::ratelimitd::client(addr).await;
    let resp = should(&mut c, request("matching", &[&[("flat", "twice")]], 0)).await;
    assert_eq!(
        resp.statuses[0].limit_remaining, 5,
        "refused calls charged nothing: {resp:?}"
    );

    // Not a POST: 405.
    let (send, _driver) = h2_connection(addr).await;
    let mut get = head(addr, RLS_PATH, Some("application/grpc"));
    *get.method_mut() = Method::GET;
    let (response, _stream) = open_stream(&send, get, true, ANSWER).await.unwrap();
    assert_eq!(outcome(response).await.http, 405);

    // Messages above 64 KiB: RESOURCE_EXHAUSTED, through a real gRPC client too.
    let big = "x".repeat(70_000);
    let status = c
        .should_rate_limit(request("matching", &[&[("hits", &big)]], 0))
        .await
        .expect_err("a 70,000-byte request is refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
    let fits = "y".repeat(60_000);
    let resp = should(&mut c, request("matching", &[&[("hits", &fits)]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok, "a 60,000-byte value fits");
    let huge: RateLimitRequest = request("matching", &[&[("hits", &"z".repeat(5 << 20))]], 0);
    let status = c.should_rate_limit(huge).await.expect_err("5 MiB refused");
    assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");

    assert!(limited(&server, "grpc_content_type").await >= 6);
    assert!(limited(&server, "grpc_cardinality").await >= 5);
    assert!(limited(&server, "request_size").await >= 2);
    assert_bystanders_served(&server, "after framing errors").await;
    assert_exits_zero(server).await;
}
