//! xDS control planes that stall, against the real binary: one that sends part of a response and
//! then nothing while its connection stays alive, and one that never answers the subscription of
//! a server without configuration. The stream is dropped after `--xds-response-timeout` and
//! opened again; `/metrics`, `/healthcheck` and the log say so; the configuration in force keeps
//! serving; an idle stream is left alone.
//!
//! The control plane here speaks HTTP/2 itself (the `h2` crate), as tonic cannot send half a
//! message: it answers each stream's headers at once and then sends what the test tells it to.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use prost::Message;
use ratelimitd::proto::discovery::{DiscoveryRequest, DiscoveryResponse};
use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::control_plane::{domain_config, TYPE_URL};
use testkit::ratelimitd::{http_get, request, should, Ratelimitd};
use tokio::sync::{mpsc, Notify};

/// The response deadline the servers run with.
const DEADLINE: Duration = Duration::from_secs(1);

/// Room for a shared, busy machine on top of the deadline and the backoff.
const SLACK: Duration = Duration::from_secs(10);

/// A stream the control plane accepted: what it received, and where to send raw bytes.
struct Stream {
    requests: Vec<DiscoveryRequest>,
    send: mpsc::UnboundedSender<Bytes>,
    /// Pongs to the control plane's pings on the stream's connection.
    pongs: Arc<Mutex<u64>>,
    opened: Instant,
}

/// An ADS server on raw HTTP/2 that records every stream and request and sends only what it is
/// told to.
#[derive(Clone)]
struct RawPlane {
    addr: SocketAddr,
    streams: Arc<Mutex<Vec<Stream>>>,
    changed: Arc<Notify>,
}

impl RawPlane {
    async fn start() -> RawPlane {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the control plane");
        let plane = RawPlane {
            addr: listener.local_addr().expect("its address"),
            streams: Arc::default(),
            changed: Arc::default(),
        };
        let accepting = plane.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                tokio::spawn(accepting.clone().serve(socket));
            }
        });
        plane
    }

    /// One connection: each stream answered with gRPC headers, its requests recorded, what the
    /// test sends written as DATA; the connection pinged every 100 ms (its pongs counted), and
    /// polled throughout, so that it answers the client's pings too.
    async fn serve(self, socket: tokio::net::TcpStream) {
        let Ok(mut connection) = h2::server::handshake(socket).await else {
            return;
        };
        let pongs = Arc::new(Mutex::new(0));
        if let Some(mut ping_pong) = connection.ping_pong() {
            let pongs = pongs.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if ping_pong.ping(h2::Ping::opaque()).await.is_err() {
                        return;
                    }
                    *pongs.lock().unwrap() += 1;
                }
            });
        }
        while let Some(Ok((request, mut respond))) = connection.accept().await {
            let head = tonic::codegen::http::Response::builder()
                .status(200)
                .header("content-type", "application/grpc")
                .body(())
                .expect("a response head");
            let Ok(mut sending) = respond.send_response(head, false) else {
                continue;
            };
            let (send, mut to_send) = mpsc::unbounded_channel::<Bytes>();
            let index = {
                let mut streams = self.streams.lock().unwrap();
                streams.push(Stream {
                    requests: Vec::new(),
                    send,
                    pongs: pongs.clone(),
                    opened: Instant::now(),
                });
                streams.len() - 1
            };
            self.changed.notify_waiters();
            tokio::spawn(async move {
                while let Some(bytes) = to_send.recv().await {
                    if sending.send_data(bytes, false).is_err() {
                        return;
                    }
                }
            });
            let plane = self.clone();
            tokio::spawn(async move {
                let mut body = request.into_body();
                let mut buffer = Vec::new();
                while let Some(Ok(data)) = body.data().await {
                    let _ = body.flow_control().release_capacity(data.len());
                    buffer.extend_from_slice(&data);
                    while buffer.len() >= 5 {
                        let length =
                            u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]])
                                as usize;
                        if buffer.len() < 5 + length {
                            break;
                        }
                        let message: Vec<u8> = buffer.drain(..5 + length).skip(5).collect();
                        let decoded = DiscoveryRequest::decode(message.as_slice())
                            .expect("a DiscoveryRequest");
                        plane.streams.lock().unwrap()[index].requests.push(decoded);
                        plane.changed.notify_waiters();
                    }
                }
            });
        }
    }

    fn stream_count(&self) -> usize {
        self.streams.lock().unwrap().len()
    }

    /// Waits (at most `timeout`) until `condition` holds over the streams.
    async fn wait_until(
        &self,
        what: &str,
        timeout: Duration,
        condition: impl Fn(&[Stream]) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let changed = self.changed.notified();
            if condition(&self.streams.lock().unwrap()) {
                return;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || tokio::time::timeout(left, changed).await.is_err() {
                panic!("no {what} within {timeout:?}");
            }
        }
    }

    /// Writes `bytes` on stream `index` (counted from 0).
    fn send(&self, index: usize, bytes: Vec<u8>) {
        self.streams.lock().unwrap()[index]
            .send
            .send(Bytes::from(bytes))
            .expect("the stream is open");
    }

    fn pongs(&self, index: usize) -> u64 {
        *self.streams.lock().unwrap()[index].pongs.lock().unwrap()
    }

    fn opened(&self, index: usize) -> Instant {
        self.streams.lock().unwrap()[index].opened
    }
}

/// A whole gRPC message: its 5-byte prefix, then `message`.
fn framed(message: &[u8]) -> Vec<u8> {
    let mut bytes = vec![0];
    bytes.extend((message.len() as u32).to_be_bytes());
    bytes.extend_from_slice(message);
    bytes
}

/// The response of `version`: domain `edge`, a limit of 2 per minute on `client`.
fn response(version: &str) -> Vec<u8> {
    DiscoveryResponse {
        version_info: version.to_owned(),
        resources: vec![prost_types::Any {
            type_url: TYPE_URL.to_owned(),
            value: domain_config("edge", "edge", &[("client", 2)]).encode_to_vec(),
        }],
        canary: false,
        type_url: TYPE_URL.to_owned(),
        nonce: format!("n{version}"),
    }
    .encode_to_vec()
}

fn start_server(plane: &RawPlane, backoff: &str) -> Ratelimitd {
    let deadline = format!("{}ms", DEADLINE.as_millis());
    Ratelimitd::start(&[
        "--config-source",
        "xds",
        "--xds-server",
        &plane.addr.to_string(),
        "--xds-response-timeout",
        &deadline,
        "--xds-backoff-initial",
        backoff,
        "--xds-backoff-max",
        backoff,
        "--xds-backoff-jitter=false",
    ])
}

/// The value of the sample `name` (a family without labels) on `/metrics`.
async fn sample(server: &Ratelimitd, name: &str) -> Option<u64> {
    let (_, text) = http_get(server.http_addr(), "/metrics").await;
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
}

async fn wait_for_sample(server: &Ratelimitd, name: &str, value: u64) {
    let deadline = Instant::now() + SLACK;
    while sample(server, name).await != Some(value) {
        assert!(
            Instant::now() < deadline,
            "{name} is not {value}: {:?}\n{}",
            sample(server, name).await,
            server.output()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A control plane that sends half a response and then nothing, its connection alive: the
/// stream is dropped once the deadline has passed since the response's first byte, health says
/// the stream is down while the configuration in force keeps deciding, and the reopened stream,
/// idle with a configuration in force, is kept.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_stalled_mid_message_drops_the_stream() {
    let plane = RawPlane::start().await;
    // A backoff of 3 s leaves a window in which the stream is down.
    let server = start_server(&plane, "3s");
    plane
        .wait_until("subscription", SLACK, |streams| {
            streams.first().is_some_and(|s| !s.requests.is_empty())
        })
        .await;
    plane.send(0, framed(&response("1")));
    plane
        .wait_until("ACK of 1", SLACK, |streams| {
            streams[0]
                .requests
                .iter()
                .any(|r| r.version_info == "1" && r.response_nonce == "n1")
        })
        .await;
    wait_for_sample(&server, "ratelimitd_xds_stream_up", 1).await;

    // Idle with a configuration in force: no deadline runs.
    tokio::time::sleep(DEADLINE * 5 / 2).await;
    assert_eq!(plane.stream_count(), 1, "{}", server.output());

    let partial = framed(&response("2"));
    let stalled_at = Instant::now();
    plane.send(0, partial[..partial.len() / 2].to_vec());
    let pongs_before = plane.pongs(0);
    wait_for_sample(&server, "ratelimitd_xds_stream_stalls_total", 1).await;
    let dropped_after = stalled_at.elapsed();
    assert!(
        dropped_after >= DEADLINE,
        "dropped {dropped_after:?} after the first byte, before the deadline"
    );
    assert!(
        plane.pongs(0) > pongs_before,
        "the connection answered pings during the stall"
    );
    assert_eq!(sample(&server, "ratelimitd_xds_stream_up").await, Some(0));
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!(
        code, 200,
        "the configuration in force keeps serving: {body}"
    );
    assert!(
        body.starts_with("OK\nxDS stream: down for ")
            && body.contains(&format!(
                "a response was still incomplete 1s after its first byte: {} of {} bytes received",
                partial.len() / 2,
                partial.len()
            )),
        "{body}"
    );
    let log = server.output();
    assert!(
        log.contains("xDS stream stalled; dropped, reconnecting"),
        "{log}"
    );
    let mut client = server.client().await;
    let response = should(&mut client, request("edge", &[&[("client", "a")]], 1)).await;
    assert_eq!(Code::try_from(response.overall_code), Ok(Code::Ok));

    plane
        .wait_until(
            "a new stream",
            DEADLINE + Duration::from_secs(3) + SLACK,
            |streams| streams.len() == 2 && !streams[1].requests.is_empty(),
        )
        .await;
    let reopened_after = plane.opened(1) - stalled_at;
    assert!(reopened_after >= DEADLINE, "{reopened_after:?}");
    eprintln!("stream dropped {dropped_after:?} and reopened {reopened_after:?} after the stalled response's first byte");
    let resubscribe = plane.streams.lock().unwrap()[1].requests[0].clone();
    assert_eq!(resubscribe.version_info, "1", "the version in force");
    wait_for_sample(&server, "ratelimitd_xds_stream_up", 1).await;

    // Reopened with the version in force, the server may have nothing newer: no deadline runs.
    tokio::time::sleep(DEADLINE * 5 / 2).await;
    assert_eq!(plane.stream_count(), 2, "{}", server.output());
    assert_eq!(
        sample(&server, "ratelimitd_xds_stream_stalls_total").await,
        Some(1)
    );
    let (_, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!(body, "OK\nxDS stream: up\n");
}

/// A control plane that never answers the subscription of a server without configuration: the
/// stream is dropped at the deadline and opened again, and again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_first_subscription_drops_the_stream() {
    let plane = RawPlane::start().await;
    let server = start_server(&plane, "100ms");
    plane
        .wait_until("subscription", SLACK, |streams| {
            streams.first().is_some_and(|s| !s.requests.is_empty())
        })
        .await;
    plane
        .wait_until("a new stream", DEADLINE + SLACK, |streams| {
            streams.len() >= 2 && !streams[1].requests.is_empty()
        })
        .await;
    let reopened_after = plane.opened(1) - plane.opened(0);
    assert!(reopened_after >= DEADLINE, "{reopened_after:?}");
    assert_eq!(
        plane.streams.lock().unwrap()[1].requests[0].version_info,
        "",
        "no version in force"
    );
    let stalls = sample(&server, "ratelimitd_xds_stream_stalls_total")
        .await
        .expect("the stall counter");
    assert!(stalls >= 1, "{stalls}");
    let log = server.output();
    assert!(
        log.contains("no response 1s after subscribing, with no configuration in force"),
        "{log}"
    );
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!(code, 503, "no configuration yet: {body}");
    assert!(body.starts_with("NOT SERVING\nxDS stream: "), "{body}");
}
