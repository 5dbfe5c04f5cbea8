//! One ShouldRateLimit call over [`h2`] ([`exchange`]): the request head of a [`Target`], the
//! response's head, body and trailers, read down to a [`Failure`] or the [`Answer`] the counts
//! need; and the connections ([`Link`]) a worker's slots share, replaced when found gone.

use std::future::poll_fn;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use h2::client::SendRequest;
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::Semaphore;
use tonic::codegen::http::header::{CONTENT_TYPE, TE};
use tonic::codegen::http::{HeaderMap, HeaderValue, Method, Request, StatusCode, Uri};

use super::wire::{decode_response, unframe, Answer};

/// The full method name, `:path` of every request.
const METHOD_PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";
/// HTTP/2 flow-control windows, hyper's (thus tonic's) client defaults: responses never wait for
/// a WINDOW_UPDATE, and few are sent.
const STREAM_WINDOW: u32 = 2 * 1024 * 1024;
const CONNECTION_WINDOW: u32 = 5 * 1024 * 1024;
/// Cancelled streams (timeouts) h2 remembers, so that their late response frames are dropped
/// quietly; with h2's default (10) a burst of timeouts makes late frames protocol errors, and
/// after 1024 of those h2 closes the connection (`too_many_internal_resets`).
const RESET_STREAMS: usize = 4096;
/// After a failed reconnect, requests fail without trying again for this long, and a
/// closed-loop slot pauses as long (no busy loop against a server that is down).
pub(super) const RECONNECT_BACKOFF: Duration = Duration::from_millis(10);

/// Where to connect and what every request's head is.
#[derive(Debug)]
pub(super) struct Target {
    /// As given and reported: `http://HOST:PORT`.
    pub(super) url: String,
    /// `HOST:PORT` to connect to.
    socket: String,
    /// `:scheme`, `:authority` and `:path` of the requests.
    uri: Uri,
    /// `content-type: application/grpc`, `te: trailers`.
    headers: HeaderMap,
}

impl Target {
    pub(super) fn parse(addr: &str) -> Result<Target, String> {
        let url = if addr.contains("://") {
            addr.to_owned()
        } else {
            format!("http://{addr}")
        };
        let bad = |why: String| format!("bad address {url}: {why}");
        let parsed: Uri = url.parse().map_err(|e| bad(format!("{e}")))?;
        if parsed.scheme_str() != Some("http") {
            return Err(bad("only http:// (HTTP/2 without TLS) is supported".into()));
        }
        let authority = parsed.authority().ok_or_else(|| bad("no host".into()))?;
        let socket = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(80)
        );
        let uri = Uri::builder()
            .scheme("http")
            .authority(authority.clone())
            .path_and_query(METHOD_PATH)
            .build()
            .map_err(|e| bad(format!("{e}")))?;
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
        headers.insert(TE, HeaderValue::from_static("trailers"));
        Ok(Target {
            url,
            socket,
            uri,
            headers,
        })
    }

    /// The head of one ShouldRateLimit request (h2 takes one by value per stream).
    fn request(&self) -> Request<()> {
        let mut request = Request::new(());
        *request.method_mut() = Method::POST;
        *request.uri_mut() = self.uri.clone();
        *request.headers_mut() = self.headers.clone();
        request
    }
}

/// Opens an HTTP/2 connection (prior knowledge, TCP_NODELAY as tonic sets it) and spawns its
/// driver task on the current runtime.
pub(super) async fn connect(target: &Target) -> Result<SendRequest<Bytes>, String> {
    let cannot = |e: &dyn std::fmt::Display| format!("cannot connect to {}: {e}", target.url);
    let tcp = TcpStream::connect(&target.socket)
        .await
        .map_err(|e| cannot(&e))?;
    tcp.set_nodelay(true).map_err(|e| cannot(&e))?;
    let (send, connection) = h2::client::Builder::new()
        .initial_window_size(STREAM_WINDOW)
        .initial_connection_window_size(CONNECTION_WINDOW)
        .max_concurrent_reset_streams(RESET_STREAMS)
        .enable_push(false)
        .handshake::<_, Bytes>(tcp)
        .await
        .map_err(|e| cannot(&e))?;
    tokio::spawn(async move {
        // Runs until the connection closes or fails; its streams then fail, and the next
        // request finds it gone and reconnects ([`Link::ready`]).
        let _ = connection.await;
    });
    Ok(send)
}

/// One of the N connections, shared by its M slots. Its driver task and its slots run on one
/// worker thread: the locks are never contended, they only make it shareable between tasks.
pub(super) struct Link {
    target: Arc<Target>,
    current: Mutex<Current>,
    /// Held while reconnecting, so that the slots finding the connection gone open one, not M.
    reconnecting: tokio::sync::Mutex<()>,
    /// Open loop: the connection's M slots.
    pub(super) slots: Arc<Semaphore>,
}

/// A link's connection, replaced when found gone (as a tonic `Channel` reconnects).
struct Current {
    /// Bumped by each reconnect.
    generation: u64,
    send: SendRequest<Bytes>,
    /// The last failed reconnect, when and why: within [`RECONNECT_BACKOFF`] of it, requests
    /// fail with the same error instead of each trying again.
    failed: Option<(Instant, String)>,
}

/// The connection a slot uses: its generation and its handle.
pub(super) type Sender = (u64, SendRequest<Bytes>);

impl Link {
    pub(super) fn new(target: Arc<Target>, send: SendRequest<Bytes>, concurrency: usize) -> Link {
        Link {
            target,
            current: Mutex::new(Current {
                generation: 0,
                send,
                failed: None,
            }),
            reconnecting: tokio::sync::Mutex::new(()),
            slots: Arc::new(Semaphore::new(concurrency)),
        }
    }

    pub(super) fn sender(&self) -> Sender {
        let current = self.current.lock();
        (current.generation, current.send.clone())
    }

    /// Replaces the connection of `generation`, found gone, unless another slot already has
    /// (or failed to, moments ago); returns the connection to use from now on.
    async fn reconnect(&self, generation: u64) -> Result<Sender, String> {
        let _one_at_a_time = self.reconnecting.lock().await;
        {
            let current = self.current.lock();
            if current.generation != generation {
                return Ok((current.generation, current.send.clone()));
            }
            if let Some((at, why)) = &current.failed {
                if at.elapsed() < RECONNECT_BACKOFF {
                    return Err(why.clone());
                }
            }
        }
        let connected = connect(&self.target).await;
        let mut current = self.current.lock();
        match connected {
            Ok(send) => {
                current.generation += 1;
                current.send = send;
                current.failed = None;
                Ok((current.generation, current.send.clone()))
            }
            Err(why) => {
                current.failed = Some((Instant::now(), why.clone()));
                Err(why)
            }
        }
    }

    /// Waits until `sender` may open a stream; if its connection is gone (closed by the
    /// server, or broken), switches it to a new one first.
    async fn ready(&self, sender: &mut Sender) -> Result<(), Failure> {
        if poll_fn(|cx| sender.1.poll_ready(cx)).await.is_ok() {
            return Ok(());
        }
        *sender = self.reconnect(sender.0).await.map_err(Failure::Connect)?;
        poll_fn(|cx| sender.1.poll_ready(cx))
            .await
            .map_err(Failure::Transport)
    }
}

/// One ShouldRateLimit call on `link`, with `sender` (a slot's, reconnected if need be): the
/// request head, `body` (a framed request) and then the response's head, body and trailers.
pub(super) async fn exchange(
    link: &Link,
    sender: &mut Sender,
    body: Bytes,
) -> Result<Answer, Failure> {
    link.ready(sender).await?;
    let (response, mut stream) = sender
        .1
        .send_request(link.target.request(), false)
        .map_err(Failure::Transport)?;
    stream.send_data(body, true).map_err(Failure::Transport)?;
    let (head, mut recv) = response.await.map_err(Failure::Transport)?.into_parts();
    if head.status != StatusCode::OK {
        return Err(Failure::Http(head.status));
    }
    // A trailers-only response (errors) has its grpc-status in the head.
    if let Some(Err(failure)) = grpc_status(&head.headers) {
        return Err(failure);
    }
    let mut body = Body::default();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.map_err(Failure::Transport)?;
        // Give the window back, or the connection stalls once 5 MiB have been received.
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.push(chunk);
    }
    let trailers = recv.trailers().await.map_err(Failure::Transport)?;
    let status = trailers
        .as_ref()
        .and_then(grpc_status)
        .or_else(|| grpc_status(&head.headers));
    match status {
        Some(Ok(())) => decode_response(unframe(body.as_slice()).map_err(Failure::Malformed)?)
            .map_err(Failure::Malformed),
        Some(Err(failure)) => Err(failure),
        None => Err(Failure::Malformed("no grpc-status")),
    }
}

/// A timer deadline `timeout` after `start`; a huge `--timeout` (no deadline, in effect) is
/// capped at 30 years so that the addition cannot overflow.
pub(super) fn deadline(start: Instant, timeout: Duration) -> tokio::time::Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 86_400);
    tokio::time::Instant::from_std(start + timeout.min(FAR))
}

/// Why an RPC brought no answer.
#[derive(Debug)]
pub(super) enum Failure {
    /// No answer before the deadline (`--timeout`).
    Timeout,
    /// A non-OK `grpc-status`, with its `grpc-message`.
    Status(tonic::Code, String),
    /// The connection was gone and a new one could not be opened.
    Connect(String),
    /// HTTP/2 failed: the stream was reset, or the connection broke under it.
    Transport(h2::Error),
    /// An HTTP status other than 200.
    Http(StatusCode),
    /// A body or status gRPC or protobuf cannot read.
    Malformed(&'static str),
}

impl Failure {
    /// The error kind it is counted under (tonic's `Code: message` for statuses, as before).
    pub(super) fn kind(&self) -> String {
        match self {
            Failure::Timeout => "client timeout".into(),
            Failure::Status(code, message) => format!("{code:?}: {message}"),
            Failure::Connect(why) => why.clone(),
            Failure::Transport(error) => format!("transport: {error}"),
            Failure::Http(status) => format!("HTTP status {status}"),
            Failure::Malformed(why) => format!("malformed response: {why}"),
        }
    }
}

/// The `grpc-status` in `headers`: `None` without one, `Some(Ok)` for 0, else the failure.
fn grpc_status(headers: &HeaderMap) -> Option<Result<(), Failure>> {
    let status = headers.get("grpc-status")?;
    if status.as_bytes() == b"0" {
        return Some(Ok(()));
    }
    let message = headers
        .get("grpc-message")
        .map(|message| percent_decode(message.as_bytes()))
        .unwrap_or_default();
    Some(Err(Failure::Status(
        tonic::Code::from_bytes(status.as_bytes()),
        message,
    )))
}

/// `grpc-message` is percent-encoded (gRPC over HTTP/2 spec); errors only, not the hot path.
fn percent_decode(text: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(text.len());
    let mut at = 0;
    while at < text.len() {
        let hex = text
            .get(at + 1..at + 3)
            .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))
            .and_then(|hex| std::str::from_utf8(hex).ok())
            .and_then(|hex| u8::from_str_radix(hex, 16).ok());
        match (text[at], hex) {
            (b'%', Some(byte)) => {
                bytes.push(byte);
                at += 3;
            }
            (byte, _) => {
                bytes.push(byte);
                at += 1;
            }
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// A response body as it arrives: usually one DATA frame, kept as is; copied only when the
/// message is split over several.
#[derive(Default)]
struct Body {
    first: Option<Bytes>,
    joined: Vec<u8>,
}

impl Body {
    fn push(&mut self, chunk: Bytes) {
        if self.first.is_none() && self.joined.is_empty() {
            self.first = Some(chunk);
            return;
        }
        if let Some(first) = self.first.take() {
            self.joined.extend_from_slice(&first);
        }
        self.joined.extend_from_slice(&chunk);
    }

    fn as_slice(&self) -> &[u8] {
        match &self.first {
            Some(first) => first,
            None => &self.joined,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::rng::SplitMix;
    use crate::load::template::{Encoder, Template};
    use bytes::BytesMut;
    use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
    use ratelimitd::proto::rls::{RateLimitRequest, RateLimitResponse};
    use tokio::sync::oneshot;

    #[test]
    fn grpc_messages_are_percent_decoded() {
        assert_eq!(
            percent_decode(b"a%20b%ZZ%+1%e2%82%ac%"),
            "a b%ZZ%+1\u{20ac}%"
        );
    }

    #[test]
    fn targets() {
        let target = Target::parse("127.0.0.1:8081").unwrap();
        assert_eq!(target.url, "http://127.0.0.1:8081");
        assert_eq!(target.socket, "127.0.0.1:8081");
        assert_eq!(
            target.request().uri().to_string(),
            format!("http://127.0.0.1:8081{METHOD_PATH}")
        );
        assert_eq!(Target::parse("http://[::1]").unwrap().socket, "[::1]:80");
        assert!(Target::parse("https://localhost:443").is_err());
    }

    /// A server answering OK, OVER_LIMIT, a gRPC error status, or nothing (a hang), by the
    /// request's first descriptor value.
    struct Scripted;

    #[tonic::async_trait]
    impl ratelimitd::proto::rls::rate_limit_service_server::RateLimitService for Scripted {
        async fn should_rate_limit(
            &self,
            request: tonic::Request<RateLimitRequest>,
        ) -> Result<tonic::Response<RateLimitResponse>, tonic::Status> {
            let request = request.into_inner();
            let value = request.descriptors[0].entries[0].value.clone();
            let code = match value.as_str() {
                "ok" => Code::Ok,
                "over" => Code::OverLimit,
                "hang" => std::future::pending().await,
                _ => return Err(tonic::Status::invalid_argument("bad value: é")),
            };
            Ok(tonic::Response::new(RateLimitResponse {
                overall_code: code as i32,
                statuses: vec![DescriptorStatus::default(); request.descriptors.len()],
                ..RateLimitResponse::default()
            }))
        }
    }

    /// Serves [`Scripted`] on `listener` until `stop` fires.
    fn serve(listener: tokio::net::TcpListener, stop: oneshot::Receiver<()>) {
        use ratelimitd::proto::rls::rate_limit_service_server::RateLimitServiceServer;
        tokio::spawn(
            tonic::transport::Server::builder()
                .add_service(RateLimitServiceServer::new(Scripted))
                .serve_with_incoming_shutdown(
                    tonic::transport::server::TcpIncoming::from(listener),
                    async {
                        let _ = stop.await;
                    },
                ),
        );
    }

    /// One call of `value` (see [`Scripted`]) with a second, constant descriptor.
    async fn call(link: &Link, value: &str) -> Result<Answer, Failure> {
        let template = Template::parse([format!("k={value}").as_str(), "k2=x"]).unwrap();
        let encoder = Encoder::new(&template, "d", 0, 1);
        let body = encoder.encode(&mut SplitMix(0), &mut BytesMut::new());
        let mut sender = link.sender();
        let exchange = exchange(link, &mut sender, body);
        tokio::time::timeout(Duration::from_millis(300), exchange)
            .await
            .unwrap_or(Err(Failure::Timeout))
    }

    #[tokio::test]
    async fn exchanges_with_a_tonic_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel();
        serve(listener, stopped);
        let target = Arc::new(Target::parse(&addr.to_string()).unwrap());
        let link = Link::new(target.clone(), connect(&target).await.unwrap(), 1);
        let ok = Answer {
            overall_code: Code::Ok as i32,
            statuses: 2,
        };
        assert_eq!(call(&link, "ok").await.unwrap(), ok);
        let over = call(&link, "over").await.unwrap();
        assert_eq!(over.overall_code, Code::OverLimit as i32);
        let failure = call(&link, "bad").await.unwrap_err();
        assert_eq!(failure.kind(), "InvalidArgument: bad value: é");
        assert_eq!(
            call(&link, "hang").await.unwrap_err().kind(),
            "client timeout"
        );
        // The connection still works after a cancelled stream.
        assert_eq!(call(&link, "ok").await.unwrap(), ok);

        // The server goes away: requests fail to reconnect, then reconnect once it is back.
        let _ = stop.send(());
        let mut refused = None;
        for _ in 0..100 {
            match call(&link, "ok").await {
                Err(Failure::Connect(why)) => {
                    refused = Some(why);
                    break;
                }
                _ => tokio::time::sleep(Duration::from_millis(10)).await,
            }
        }
        let refused = refused.expect("a failed reconnect");
        assert!(
            refused.starts_with("cannot connect to http://127.0.0.1:"),
            "{refused}"
        );
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let (_stop, stopped) = oneshot::channel();
        serve(listener, stopped);
        tokio::time::sleep(RECONNECT_BACKOFF).await;
        assert_eq!(call(&link, "ok").await.unwrap(), ok);
        assert_eq!(link.sender().0, 1, "one new connection");
    }
}
