//! What every gRPC call passes before tonic sees it, per connection: strict framing of the
//! request head, the cap on long-lived calls, the call's accounting on its connection, the
//! request body's checks ([`RequestBody`]) and the client's `grpc-timeout`.
//!
//! - Not a POST: HTTP 405. A content-type other than `application/grpc` or
//!   `application/grpc+proto` (parameters after `;` allowed): HTTP 415, as gRPC's HTTP/2
//!   protocol says servers should, so that no other HTTP client takes the error for a success.
//!   There is no JSON codec: `application/grpc+json` is refused rather than misread as protobuf.
//! - Health `Watch` and reflection streams beyond the caps: RESOURCE_EXHAUSTED at once.
//! - A call that does not fit the memory budget of all calls
//!   ([`super::memory_budget::MemoryBudget`]):
//!   RESOURCE_EXHAUSTED at once, before tonic sees it.
//! - An uncompressed `ShouldRateLimit` is answered here ([`super::unary_rls`]), every other call
//!   by tonic's routes.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use tonic::service::Routes;
use tonic::Status;
use tower_service::Service as _;

use super::connections::{CallGuard, CallKind, ConnectionHandle, StreamingRefused};
use super::grpc_timeout;
use super::memory_budget::{self, CallCharge};
use super::request_body::{BodyBounds, RequestBody};
use super::unary_rls::{self, UnaryBody};
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::service::transport_refusal::TransportRefusal;

/// `:path` of health `Watch`.
pub const WATCH_PATH: &str = "/grpc.health.v1.Health/Watch";
/// `:path` prefixes of the reflection services, whose one method streams both ways.
const REFLECTION_PREFIXES: [&str; 2] = [
    "/grpc.reflection.v1.ServerReflection/",
    "/grpc.reflection.v1alpha.ServerReflection/",
];

/// The text of the 405 answer to a call that is not a POST.
pub const NOT_POST: &str = "gRPC calls are POSTs\n";
/// The text of the 415 answer to a call of another content type.
pub const NOT_GRPC_CONTENT: &str = "gRPC calls have content-type application/grpc\n";

/// What the gate enforces, the same for every connection.
#[derive(Debug, Clone, Copy)]
pub struct GateBounds {
    pub body: BodyBounds,
    /// RLQS calls' bodies: their usage reports have a cap of their own.
    pub report_body: BodyBounds,
    pub max_concurrent_streams: u32,
    pub max_streaming_calls: usize,
    pub max_streaming_calls_per_connection: u32,
}

/// The hyper service of one gRPC connection, in front of tonic's routes.
#[derive(Clone)]
pub struct CallGate {
    routes: Routes,
    /// The RLS handler, which [`unary_rls`] calls without the routes.
    rls: Arc<dyn RateLimitService>,
    connection: ConnectionHandle,
    bounds: Arc<GateBounds>,
}

/// What an admitted call holds until its response ends: its count on the connection and its
/// charge on the memory budget.
pub struct Admitted {
    _call: CallGuard,
    _charge: CallCharge,
}

/// A response body that keeps its call counted on the connection until it is dropped.
pub struct ResponseBody {
    inner: Inner,
    _call: Option<Admitted>,
}

/// Who wrote the response.
enum Inner {
    Tonic(tonic::body::Body),
    Unary(UnaryBody),
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match &mut self.get_mut().inner {
            Inner::Tonic(body) => Pin::new(body).poll_frame(cx),
            Inner::Unary(body) => Pin::new(body)
                .poll_frame(cx)
                .map_err(|never| match never {}),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.inner {
            Inner::Tonic(body) => body.is_end_stream(),
            Inner::Unary(body) => body.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.inner {
            Inner::Tonic(body) => body.size_hint(),
            Inner::Unary(body) => body.size_hint(),
        }
    }
}

type Answer = Response<ResponseBody>;

impl CallGate {
    pub fn new(
        routes: Routes,
        rls: Arc<dyn RateLimitService>,
        connection: ConnectionHandle,
        bounds: Arc<GateBounds>,
    ) -> CallGate {
        CallGate {
            routes,
            rls,
            connection,
            bounds,
        }
    }

    /// The call counted on its connection and charged to the memory budget, or the answer that
    /// refuses it.
    fn admit(&self, request: &Request<Incoming>) -> Result<Admitted, Box<Answer>> {
        let metrics = self.connection.metrics();
        if request.method() != Method::POST {
            metrics.record_transport_refusal(TransportRefusal::ContentType);
            let mut answer = plain(StatusCode::METHOD_NOT_ALLOWED, NOT_POST);
            answer
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return Err(Box::new(answer));
        }
        if !is_grpc_content_type(request.headers().get(CONTENT_TYPE)) {
            metrics.record_transport_refusal(TransportRefusal::ContentType);
            return Err(Box::new(plain(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                NOT_GRPC_CONTENT,
            )));
        }
        let budget = self.connection.budget();
        let Ok(charge) = budget.open_call(memory_budget::head_bytes(request)) else {
            metrics.record_transport_refusal(TransportRefusal::MemoryBudget);
            return Err(Box::new(status(Status::resource_exhausted(
                budget.refusal(),
            ))));
        };
        let kind = if streams(request.uri().path()) {
            CallKind::Streaming
        } else {
            CallKind::Call
        };
        let bounds = &self.bounds;
        CallGuard::open(
            &self.connection,
            kind,
            bounds.max_concurrent_streams,
            bounds.max_streaming_calls,
            bounds.max_streaming_calls_per_connection,
        )
        .map_err(|refused| {
            let (refusal, message) = match refused {
                StreamingRefused::Global => (
                    TransportRefusal::StreamingCalls,
                    format!(
                        "the server holds its {} concurrent streaming calls (health Watch, reflection)",
                        bounds.max_streaming_calls
                    ),
                ),
                StreamingRefused::PerConnection => (
                    TransportRefusal::StreamingCallsPerConnection,
                    format!(
                        "this connection holds its {} concurrent streaming calls (health Watch, reflection)",
                        bounds.max_streaming_calls_per_connection
                    ),
                ),
            };
            metrics.record_transport_refusal(refusal);
            Box::new(status(Status::resource_exhausted(message)))
        })
        .map(|call| Admitted {
            _call: call,
            _charge: charge,
        })
    }
}

impl hyper::service::Service<Request<Incoming>> for CallGate {
    type Response = Answer;
    type Error = Infallible;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, Infallible>> + Send>>;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let call = match self.admit(&request) {
            Ok(call) => call,
            Err(answer) => return Box::pin(std::future::ready(Ok(*answer))),
        };
        // Reflection and RLQS streams take any number of requests; every other method exactly
        // one.
        let path = request.uri().path();
        let reports = path == crate::service::rlqs::METHOD_PATH;
        let single = !is_reflection(path) && !reports;
        let deadline = grpc_timeout::requested(request.headers());
        let connection = self.connection.clone();
        let body_limits = if reports {
            self.bounds.report_body
        } else {
            self.bounds.body
        };
        if unary_rls::answers(path, request.headers()) {
            let rls = self.rls.clone();
            let request =
                request.map(|body| RequestBody::new(body, true, body_limits, &connection));
            return Box::pin(async move {
                let response = within(deadline, unary_rls::answer(rls, request)).await;
                Ok(response.map(|body| ResponseBody {
                    inner: Inner::Unary(body),
                    _call: Some(call),
                }))
            });
        }
        let mut request = request;
        if reports {
            request
                .extensions_mut()
                .insert(crate::service::rlqs::Connection(connection.id()));
        }
        let request = request.map(|body| {
            tonic::body::Body::new(RequestBody::new(body, single, body_limits, &connection))
        });
        let mut routes = self.routes.clone();
        Box::pin(async move {
            let answered = async {
                let ready = std::future::poll_fn(|cx| {
                    tower_service::Service::<Request<tonic::body::Body>>::poll_ready(
                        &mut routes,
                        cx,
                    )
                })
                .await;
                let Ok(()) = ready;
                let Ok(response) = routes.call(request).await;
                response
            };
            let response = within(deadline, answered).await;
            Ok(response.map(|body| ResponseBody {
                inner: Inner::Tonic(body),
                _call: Some(call),
            }))
        })
    }
}

/// What `answered` resolves to, or DEADLINE_EXCEEDED (a trailers-only answer) if the call's
/// `grpc-timeout` passes first.
async fn within<B: Default>(
    deadline: Option<std::time::Duration>,
    answered: impl Future<Output = Response<B>>,
) -> Response<B> {
    let Some(deadline) = deadline else {
        return answered.await;
    };
    tokio::time::timeout(deadline, answered)
        .await
        .unwrap_or_else(|_| {
            Status::deadline_exceeded(format!(
                "no answer within the call's grpc-timeout of {deadline:?}"
            ))
            .into_http()
        })
}

/// Whether `path` names a method whose calls stay open (health `Watch`, reflection).
fn streams(path: &str) -> bool {
    path == WATCH_PATH || is_reflection(path)
}

fn is_reflection(path: &str) -> bool {
    REFLECTION_PREFIXES
        .iter()
        .any(|prefix| path.starts_with(prefix))
}

/// `application/grpc` or `application/grpc+proto`, any case, optionally with parameters.
fn is_grpc_content_type(value: Option<&HeaderValue>) -> bool {
    value
        .and_then(|v| v.to_str().ok())
        .is_some_and(is_grpc_content_type_text)
}

/// [`is_grpc_content_type`] of a value as text.
pub fn is_grpc_content_type_text(value: &str) -> bool {
    let media_type = value.split(';').next().unwrap_or("").trim();
    media_type.eq_ignore_ascii_case("application/grpc")
        || media_type.eq_ignore_ascii_case("application/grpc+proto")
}

/// A plain-text HTTP answer (not a gRPC one: the request was not gRPC).
fn plain(code: StatusCode, text: &'static str) -> Answer {
    let mut response = Response::new(ResponseBody {
        inner: Inner::Tonic(tonic::body::Body::new(Full::new(Bytes::from_static(
            text.as_bytes(),
        )))),
        _call: None,
    });
    *response.status_mut() = code;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// A trailers-only gRPC answer with `status`.
fn status(status: Status) -> Answer {
    status
        .into_http::<tonic::body::Body>()
        .map(|body| ResponseBody {
            inner: Inner::Tonic(body),
            _call: None,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_content_types() {
        let ok = |v: &'static str| is_grpc_content_type(Some(&HeaderValue::from_static(v)));
        assert!(ok("application/grpc"));
        assert!(ok("application/grpc+proto"));
        assert!(ok("Application/GRPC; charset=utf-8"));
        assert!(!ok("application/grpc+json"));
        assert!(!ok("application/grpc-web"));
        assert!(!ok("application/json"));
        assert!(!ok("text/plain"));
        assert!(!ok(""));
        assert!(!is_grpc_content_type(None));
    }

    #[test]
    fn streaming_methods() {
        assert!(streams(WATCH_PATH));
        assert!(streams(
            "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"
        ));
        assert!(streams(
            "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"
        ));
        assert!(!streams("/grpc.health.v1.Health/Check"));
        assert!(!streams(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
        ));
    }
}
