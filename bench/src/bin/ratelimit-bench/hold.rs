//! `ratelimit-bench hold`: what many connections holding half-sent calls make a server keep, and
//! whether it gives the memory back.
//!
//! Each round opens `--connections` HTTP/2 connections; on each it opens `--streams` calls, each
//! sending its HEADERS and the 5-byte gRPC prefix of a message of `--declared` bytes and nothing
//! more. Once every call is open it holds them `--hold`, then closes every connection. Printed per round: the calls
//! opened, those the server answered while held (by gRPC status: a server that refuses what it
//! cannot hold answers them at once), and the server's VmRSS (`--server-pid`) before the round,
//! while held and after it; then VmRSS every `--sample` for `--after` once every round is over.
//! With `--metrics-addr`, the server's `ratelimitd_grpc_*` gauges are printed while held.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, Semaphore};
use tokio::task::JoinSet;
use tonic::codegen::http::{Method, Request};

const RLS_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// Handshakes under way at once: a burst of a thousand connects overflows a listen backlog.
const CONNECTING: usize = 128;
/// Time a round has to open its connections and calls before the hold starts.
const SET_UP: Duration = Duration::from_secs(60);

#[derive(clap::Args)]
pub struct HoldArgs {
    /// Server address: `IP:PORT` of the gRPC port (plaintext HTTP/2).
    #[arg(long, default_value = "127.0.0.1:8081")]
    pub addr: SocketAddr,
    /// Connections per round.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub connections: u32,
    /// Calls opened on each connection (at most what the server's SETTINGS allow at once).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..))]
    pub streams: u32,
    /// Message length each call's 5-byte prefix declares (none of the message follows).
    #[arg(long, default_value_t = 65_000)]
    pub declared: u32,
    /// Send only each call's HEADERS, no message prefix.
    #[arg(long)]
    pub headers_only: bool,
    /// How long each round holds its calls open.
    #[arg(long, default_value = "2s", value_parser = humantime::parse_duration)]
    pub hold: Duration,
    /// Rounds.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Pause between rounds (connections closed).
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub pause: Duration,
    /// After the last round, how long to keep reading the server's VmRSS.
    #[arg(long, default_value = "40s", value_parser = humantime::parse_duration)]
    pub after: Duration,
    /// Interval of those readings.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub sample: Duration,
    /// The server's process id, for its VmRSS.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's HTTP port (`IP:PORT`), for its `ratelimitd_grpc_*` gauges while held.
    #[arg(long)]
    pub metrics_addr: Option<SocketAddr>,
}

/// What one round's calls saw.
#[derive(Default)]
struct Tally {
    connected: u64,
    connect_failed: u64,
    opened: u64,
    not_opened: u64,
    /// Calls answered while held, by `grpc-status` (`None`: an answer without one).
    answered: BTreeMap<Option<i32>, u64>,
    /// Calls reset by the server while held.
    reset: u64,
}

pub fn run(args: &HoldArgs) -> Result<(), String> {
    raise_open_files();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(rounds(args))
}

async fn rounds(args: &HoldArgs) -> Result<(), String> {
    let rss = || args.server_pid.and_then(crate::procstat::vm_rss_kib);
    let mib = |kib: Option<u64>| {
        kib.map_or_else(|| "-".to_owned(), |k| format!("{:.0}", k as f64 / 1024.0))
    };
    let sent = if args.headers_only {
        "HEADERS only".to_owned()
    } else {
        format!("HEADERS + a prefix declaring {} bytes", args.declared)
    };
    println!(
        "hold: {} connections x {} calls, each {sent}, held {:?}, {} rounds",
        args.connections, args.streams, args.hold, args.rounds
    );
    println!("VmRSS before: {} MiB", mib(rss()));
    for round in 1..=args.rounds {
        let before = rss();
        let tally = Arc::new(Mutex::new(Tally::default()));
        let mut connections = JoinSet::new();
        let connecting = Arc::new(Semaphore::new(CONNECTING));
        let (release, released) = watch::channel(false);
        let (set_up, mut ready) = mpsc::unbounded_channel();
        let setup_deadline = Instant::now() + SET_UP;
        for _ in 0..args.connections {
            connections.spawn(hold_connection(
                args.addr,
                args.streams,
                (!args.headers_only).then_some(args.declared),
                setup_deadline,
                connecting.clone(),
                tally.clone(),
                set_up.clone(),
                released.clone(),
            ));
        }
        drop(set_up);
        // The hold starts once every connection has opened its calls (or given up).
        while ready.recv().await.is_some() {}
        tokio::time::sleep(args.hold).await;
        let during = rss();
        let gauges = match args.metrics_addr {
            Some(addr) => grpc_gauges(addr).await,
            None => String::new(),
        };
        release.send_replace(true);
        while connections.join_next().await.is_some() {}
        tokio::time::sleep(args.pause).await;
        let after = rss();
        let tally = tally.lock();
        let answered: Vec<String> = tally
            .answered
            .iter()
            .map(|(code, n)| match code {
                Some(code) => format!("{n} grpc-status {code}"),
                None => format!("{n} without status"),
            })
            .collect();
        println!(
            "round {round}: connected {} (failed {}), calls opened {} (not opened {}), answered while held: [{}], reset {}; VmRSS MiB: before {}, held {}, after {}{}",
            tally.connected,
            tally.connect_failed,
            tally.opened,
            tally.not_opened,
            answered.join(", "),
            tally.reset,
            mib(before),
            mib(during),
            mib(after),
            if gauges.is_empty() { String::new() } else { format!("; {gauges}") },
        );
    }
    let end = Instant::now() + args.after;
    let started = Instant::now();
    loop {
        let now = Instant::now();
        if now >= end {
            break;
        }
        tokio::time::sleep(args.sample.min(end - now)).await;
        println!(
            "after +{:.0}s: VmRSS {} MiB",
            started.elapsed().as_secs_f64(),
            mib(rss())
        );
    }
    Ok(())
}

/// One connection: `streams` half-sent calls (opened by `deadline`, or given up), reported on
/// `set_up` once opened, held until `release`, then closed.
#[allow(clippy::too_many_arguments)]
async fn hold_connection(
    addr: SocketAddr,
    streams: u32,
    declared: Option<u32>,
    deadline: Instant,
    connecting: Arc<Semaphore>,
    tally: Arc<Mutex<Tally>>,
    set_up: mpsc::UnboundedSender<()>,
    mut release: watch::Receiver<bool>,
) {
    let slot = connecting.acquire_owned().await;
    let handshake = async {
        let tcp = TcpStream::connect(addr).await.ok()?;
        h2::client::Builder::new()
            .max_concurrent_reset_streams(streams as usize)
            .handshake::<_, Bytes>(tcp)
            .await
            .ok()
    };
    let Ok(Some((send, connection))) = tokio::time::timeout_at(deadline.into(), handshake).await
    else {
        tally.lock().connect_failed += 1;
        return;
    };
    drop(slot);
    tally.lock().connected += 1;
    let driver = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut calls = JoinSet::new();
    let prefix = declared.map(message_prefix);
    for _ in 0..streams {
        let ready = tokio::time::timeout_at(deadline.into(), send.clone().ready()).await;
        let Ok(Ok(mut ready)) = ready else {
            tally.lock().not_opened += (streams as u64).saturating_sub(calls.len() as u64);
            break;
        };
        match open_call(&mut ready, addr, prefix.clone()) {
            Some((response, stream)) => {
                tally.lock().opened += 1;
                let tally = tally.clone();
                let mut release = release.clone();
                calls.spawn(async move {
                    let _stream = stream;
                    tokio::select! {
                        answered = response => match answered {
                            Ok(response) => {
                                let code = response
                                    .headers()
                                    .get("grpc-status")
                                    .and_then(|v| v.to_str().ok()?.parse().ok());
                                *tally.lock().answered.entry(code).or_default() += 1;
                            }
                            Err(_) => tally.lock().reset += 1,
                        },
                        _ = release.wait_for(|released| *released) => return,
                    }
                    // Held until the release like every other call.
                    let _ = release.wait_for(|released| *released).await;
                });
            }
            None => tally.lock().not_opened += 1,
        }
    }
    drop(set_up);
    let _ = release.wait_for(|released| *released).await;
    calls.abort_all();
    while calls.join_next().await.is_some() {}
    drop(send);
    driver.abort();
    let _ = driver.await;
}

/// Sends a call's HEADERS and its message prefix (if any), leaving the stream open.
fn open_call(
    send: &mut SendRequest<Bytes>,
    addr: SocketAddr,
    prefix: Option<Bytes>,
) -> Option<(h2::client::ResponseFuture, h2::SendStream<Bytes>)> {
    let head = Request::builder()
        .method(Method::POST)
        .uri(format!("http://{addr}{RLS_PATH}"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .body(())
        .ok()?;
    let (response, mut stream) = send.send_request(head, false).ok()?;
    if let Some(prefix) = prefix {
        stream.send_data(prefix, false).ok()?;
    }
    Some((response, stream))
}

/// The 5-byte header of an uncompressed message of `length` bytes.
fn message_prefix(length: u32) -> Bytes {
    let mut out = BytesMut::with_capacity(5);
    out.put_u8(0);
    out.put_u32(length);
    out.freeze()
}

/// The `ratelimitd_grpc_*` gauges and the transport-limit counters of `/metrics`, on one line.
async fn grpc_gauges(addr: SocketAddr) -> String {
    let fetched = async {
        let mut tcp = TcpStream::connect(addr).await.ok()?;
        tcp.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .ok()?;
        let mut body = String::new();
        tcp.read_to_string(&mut body).await.ok()?;
        Some(body)
    };
    let Ok(Some(body)) = tokio::time::timeout(Duration::from_secs(5), fetched).await else {
        return "metrics: no answer".to_owned();
    };
    body.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| {
            l.starts_with("ratelimitd_grpc_")
                || (l.starts_with("ratelimitd_transport_limited_total") && !l.ends_with(" 0"))
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// Raises this process's soft open-files limit to the hard limit: a round holds a descriptor
/// per connection.
fn raise_open_files() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write the struct, which outlives the calls.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}
