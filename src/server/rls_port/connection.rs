//! The driver of one RLS-port connection: it reads the socket into the HTTP/2 state machine
//! ([`super::h2::Connection`]), admits each request it completes as the gRPC port's call gate
//! would (POST, gRPC content type, the memory budget, the connection's call count), runs the calls
//! on the connection's own task, and writes every answer ready after a read in one write.

use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt as _;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tonic::metadata::{MetadataKey, MetadataValue};
use tonic::Status;
use tonic_health::pb::health_server::Health as _;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::server::HealthService;

use super::frame::ErrorCode;
use super::h2::{Connection, Event, Limits, Reply};
use super::head::{CallHead, Route};
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::proto::rls::RateLimitRequest;
use crate::server::call_gate::{NOT_GRPC_CONTENT, NOT_POST};
use crate::server::connections::{BufferPool, Buffered, CallGuard, CallKind, ConnectionHandle};
use crate::server::memory_budget::CallCharge;
use crate::server::request_body::{
    buffer_refusal, read_timeout, BodyBounds, HEADER, NO_MESSAGE, SECOND_MESSAGE,
};
use crate::server::unary_rls;
use crate::service::transport_refusal::TransportRefusal;

/// PINGs to a client silent this long, and the time it has to answer.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);

/// Bytes read from the socket at a time, at least.
const READ_CHUNK: usize = 16 * 1024;

/// What every connection of the RLS port is served with.
pub struct RlsService {
    pub rls: Arc<dyn RateLimitService>,
    pub health: Arc<HealthService>,
    pub limits: Limits,
    pub body: BodyBounds,
}

/// What an admitted call holds until its answer is written.
struct Admitted {
    _call: CallGuard,
    _charge: CallCharge,
}

/// A call's answer, with what it held.
struct Answered {
    stream: u32,
    reply: Reply,
    _admitted: Admitted,
}

type Call = std::pin::Pin<Box<dyn std::future::Future<Output = Answered> + Send>>;

impl RlsService {
    /// Serves one connection until the client closes it, it fails, or — once `go_away` is
    /// cancelled — its GOAWAY is sent and its open calls are answered.
    pub async fn serve<I>(
        self: Arc<Self>,
        mut io: I,
        handle: ConnectionHandle,
        go_away: CancellationToken,
    ) where
        I: AsyncRead + AsyncWrite + Unpin,
    {
        let mut h2 = Connection::new(self.limits);
        let mut input = BytesMut::with_capacity(READ_CHUNK);
        let mut events = Vec::new();
        let mut calls: FuturesUnordered<Call> = FuturesUnordered::new();
        let mut buffered = Buffered::new(&handle, BufferPool::Requests);
        let mut going_away = false;
        let mut last_read = Instant::now();
        let mut ping_sent = false;
        let keepalive = tokio::time::sleep(KEEPALIVE_INTERVAL);
        let expiry = tokio::time::sleep(Duration::ZERO);
        let mut expiry_armed = false;
        tokio::pin!(keepalive, expiry);
        loop {
            while let Some(Some(done)) = calls.next().now_or_never() {
                h2.respond(done.stream, done.reply);
            }
            if !h2.output().is_empty() {
                let written = io.write_all(h2.output()).await;
                if written.is_err() || io.flush().await.is_err() {
                    return;
                }
                h2.output().clear();
            }
            if h2.finished() {
                if let Some(failure) = h2.failed() {
                    tracing::debug!(code = ?failure.code, reason = failure.reason, "RLS port connection failed");
                }
                let _ = io.shutdown().await;
                return;
            }
            if input.capacity() - input.len() < READ_CHUNK / 4 {
                input.reserve(READ_CHUNK);
            }
            tokio::select! {
                biased;
                Some(done) = calls.next(), if !calls.is_empty() => {
                    h2.respond(done.stream, done.reply);
                }
                read = io.read_buf(&mut input) => {
                    let Ok(1..) = read else { return };
                    last_read = Instant::now();
                    ping_sent = false;
                    h2.receive(&mut input, last_read.into_std(), &mut events);
                    let grown = h2.take_grown();
                    self.hold_buffered(&mut h2, &mut buffered, grown, &handle);
                    for event in events.drain(..) {
                        self.dispatch(event, &handle, &mut h2, &calls);
                    }
                    if !expiry_armed {
                        if let Some(at) = h2.next_expiry(self.body.read_timeout) {
                            expiry.as_mut().reset(at.into());
                            expiry_armed = true;
                        }
                    }
                }
                () = go_away.cancelled(), if !going_away => {
                    going_away = true;
                    h2.go_away(ErrorCode::NoError, "");
                }
                () = &mut expiry, if expiry_armed => {
                    let timeout = self.body.read_timeout;
                    let now = std::time::Instant::now();
                    for stream in h2.expire(now.checked_sub(timeout).unwrap_or(now)) {
                        handle.metrics().record_transport_refusal(TransportRefusal::ReadTimeout);
                        h2.respond(stream, Reply::Status(read_timeout(timeout)));
                    }
                    self.hold_buffered(&mut h2, &mut buffered, Vec::new(), &handle);
                    expiry_armed = false;
                    if let Some(at) = h2.next_expiry(timeout) {
                        expiry.as_mut().reset(at.into());
                        expiry_armed = true;
                    }
                }
                () = &mut keepalive => {
                    if ping_sent {
                        tracing::debug!("RLS port client did not answer a PING; closing");
                        return;
                    }
                    let silent = last_read.elapsed();
                    if silent >= KEEPALIVE_INTERVAL {
                        h2.ping(*b"rlskeep!");
                        ping_sent = true;
                        keepalive.as_mut().reset(Instant::now() + KEEPALIVE_TIMEOUT);
                    } else {
                        keepalive.as_mut().reset(last_read + KEEPALIVE_INTERVAL);
                    }
                }
            }
        }
    }

    /// Admits a request as the gRPC port's call gate does and starts its call, or answers it.
    fn dispatch(
        &self,
        event: Event,
        handle: &ConnectionHandle,
        h2: &mut Connection,
        calls: &FuturesUnordered<Call>,
    ) {
        let metrics = handle.metrics();
        let (stream, head, body) = match event {
            Event::Call { stream, head, body } => (stream, head, body),
            Event::BodyTooLarge { stream } => {
                metrics.record_transport_refusal(TransportRefusal::RequestSize);
                let status = Status::resource_exhausted(format!(
                    "grpc: received message larger than max (over {} bytes; {})",
                    self.body.max_message, self.body.max_message_flags
                ));
                return h2.respond(stream, Reply::Status(status));
            }
            Event::HeadTooLarge { stream, size } => {
                metrics.record_transport_refusal(TransportRefusal::RequestSize);
                let status = Status::resource_exhausted(format!(
                    "request headers of {size} bytes, over the {} the port takes",
                    self.limits.max_header_list
                ));
                return h2.respond(stream, Reply::Status(status));
            }
        };
        if let Some(answer) = not_grpc(&head) {
            metrics.record_transport_refusal(TransportRefusal::ContentType);
            return h2.respond(stream, answer);
        }
        let budget = handle.budget();
        let Ok(charge) = budget.open_call(head.list_size) else {
            metrics.record_transport_refusal(TransportRefusal::MemoryBudget);
            return h2.respond(
                stream,
                Reply::Status(Status::resource_exhausted(budget.refusal())),
            );
        };
        let max_streams = self.limits.max_concurrent_streams;
        let Ok(call) = CallGuard::open(handle, CallKind::Call, max_streams, 0, 0) else {
            return h2.respond(
                stream,
                Reply::Status(Status::resource_exhausted("no room for the call")),
            );
        };
        let admitted = Admitted {
            _call: call,
            _charge: charge,
        };
        if let Some(refused) = refusal(&head) {
            return h2.respond(stream, Reply::Status(refused));
        }
        let CallHead {
            route,
            timeout,
            trace,
            ..
        } = head;
        let body = match single_message(body, &self.body) {
            Ok(message) => message,
            Err((refusal, status)) => {
                metrics.record_transport_refusal(refusal);
                return h2.respond(stream, Reply::Status(status));
            }
        };
        let answer: std::pin::Pin<Box<dyn std::future::Future<Output = Reply> + Send>> = match route
        {
            Route::ShouldRateLimit => Box::pin(decide(self.rls.clone(), trace, body)),
            _ => Box::pin(check_health(self.health.clone(), body)),
        };
        calls.push(Box::pin(async move {
            let reply = match timeout {
                None => answer.await,
                Some(deadline) => {
                    tokio::time::timeout(deadline, answer)
                        .await
                        .unwrap_or_else(|_| {
                            Reply::Status(Status::deadline_exceeded(format!(
                                "no answer within the call's grpc-timeout of {deadline:?}"
                            )))
                        })
                }
            };
            Answered {
                stream,
                reply,
                _admitted: admitted,
            }
        }));
    }

    /// Charges the bytes of requests being received to the connection's, the global and the
    /// memory budgets; when they do not fit, refuses the requests whose bytes arrived last
    /// (`grown`, most recent last) until they do, as the gRPC port refuses a message whose next
    /// bytes do not fit.
    fn hold_buffered(
        &self,
        h2: &mut Connection,
        buffered: &mut Buffered,
        mut grown: Vec<u32>,
        handle: &ConnectionHandle,
    ) {
        let (per_connection, global) = (self.body.per_connection, self.body.global);
        while let Err(full) = buffered.hold(h2.buffered(), per_connection, global) {
            let (refusal, status) = buffer_refusal(full, &self.body, buffered);
            let refused = match grown.pop() {
                Some(stream) => h2.abandon(stream).then_some(stream).into_iter().collect(),
                None => h2.abandon_all_receiving(),
            };
            for stream in refused {
                handle.metrics().record_transport_refusal(refusal);
                h2.respond(stream, Reply::Status(status.clone()));
            }
        }
    }
}

/// The plain HTTP answer to a request that is not a gRPC call (as the gRPC port's call gate gives
/// it): 405 to a method other than POST, 415 to another content type.
fn not_grpc(head: &CallHead) -> Option<Reply> {
    if !head.post {
        return Some(Reply::Http {
            status: 405,
            text: NOT_POST,
            allow_post: true,
        });
    }
    (!head.grpc_content_type).then_some(Reply::Http {
        status: 415,
        text: NOT_GRPC_CONTENT,
        allow_post: false,
    })
}

/// The one message of a unary call's `body`, refused as the gRPC port's request bodies refuse it
/// (no message, a second one, one over the size bound); the gRPC prefix is left on it.
fn single_message(body: Bytes, bounds: &BodyBounds) -> Result<Bytes, (TransportRefusal, Status)> {
    if body.is_empty() {
        return Err((
            TransportRefusal::Cardinality,
            Status::unimplemented(NO_MESSAGE),
        ));
    }
    if let Some(prefix) = body.get(1..HEADER) {
        let length = u32::from_be_bytes([prefix[0], prefix[1], prefix[2], prefix[3]]) as usize;
        let max = bounds.max_message;
        if length > max {
            return Err((
                TransportRefusal::RequestSize,
                Status::resource_exhausted(format!(
                    "grpc: received message larger than max ({length} vs. {max}; {})",
                    bounds.max_message_flags
                )),
            ));
        }
        if body.len() > HEADER + length {
            return Err((
                TransportRefusal::Cardinality,
                Status::unimplemented(SECOND_MESSAGE),
            ));
        }
    }
    Ok(body)
}

/// The answer for a call the port does not make: another method, or a compressed request.
fn refusal(head: &CallHead) -> Option<Status> {
    if let Route::Other(path) = &head.route {
        return Some(Status::unimplemented(format!(
            "{path} is not served on the RLS port (--rls-addr), which serves ShouldRateLimit and \
             health Check: call it on the gRPC port (--grpc-addr)"
        )));
    }
    head.encoding.as_ref().map(|encoding| {
        Status::unimplemented(format!(
            "a request compressed with {encoding}: the RLS port (--rls-addr) takes uncompressed \
             requests"
        ))
    })
}

/// `ShouldRateLimit`: the request decoded, decided by the RLS handler (with the caller's trace
/// context), the response framed.
async fn decide(
    rls: Arc<dyn RateLimitService>,
    trace: Vec<(String, String)>,
    body: Bytes,
) -> Reply {
    let message: RateLimitRequest = match unary_rls::decode(body) {
        Ok(message) => message,
        Err(status) => return Reply::Status(status),
    };
    let mut request = tonic::Request::new(message);
    for (name, value) in trace {
        if let (Ok(name), Ok(value)) = (
            MetadataKey::from_bytes(name.as_bytes()),
            MetadataValue::try_from(value.as_str()),
        ) {
            request.metadata_mut().insert(name, value);
        }
    }
    reply(rls.should_rate_limit(request).await)
}

/// Health `Check`, answered by the same health service as the gRPC port's.
async fn check_health(health: Arc<HealthService>, body: Bytes) -> Reply {
    match unary_rls::decode::<HealthCheckRequest>(body) {
        Ok(message) => reply(health.check(tonic::Request::new(message)).await),
        Err(status) => Reply::Status(status),
    }
}

/// A handler's answer: its message framed, or its status as a trailers-only answer.
fn reply<M: prost::Message>(answered: Result<tonic::Response<M>, Status>) -> Reply {
    match answered.and_then(|response| unary_rls::frame(response.get_ref())) {
        Ok(framed) => Reply::Message(framed),
        Err(status) => Reply::Status(status),
    }
}
