//! `ShouldRateLimit` answered from the call gate: the one request message read from the checked
//! body ([`RequestBody`]), decoded with prost, decided by the RLS handler, and answered with the
//! encoded response as one DATA frame and `grpc-status: 0` as trailers. Envoy calls this method
//! for every request it forwards, so it skips what tonic adds around a unary call (its router,
//! boxed bodies, streaming decoder and encoder) and costs fewer instructions per decision.
//!
//! The answers are tonic's: the same statuses and messages for a compressed-flag without a
//! `grpc-encoding`, an unknown flag or a message prost cannot decode; a handler's error as a
//! trailers-only response. A call that names a `grpc-encoding` goes through tonic, which refuses
//! a compressed request as for every method.

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use http_body_util::BodyExt as _;
use hyper::body::{Body, Frame};
use hyper::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use hyper::{Request, Response};
use tonic::Status;

use super::request_body::{RequestBody, HEADER};
use crate::proto::rls::rate_limit_service_server::RateLimitService;
use crate::proto::rls::RateLimitRequest;

/// `:path` of `ShouldRateLimit`.
pub const PATH: &str = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit";

/// The request header naming a compressed request's encoding.
const GRPC_ENCODING: &str = "grpc-encoding";

/// Whether a call to `path` with `headers` is answered here rather than by tonic.
pub fn answers(path: &str, headers: &HeaderMap) -> bool {
    path == PATH && !headers.contains_key(GRPC_ENCODING)
}

/// The answer to one call: its response, or its status as a trailers-only response.
pub async fn answer(
    rls: Arc<dyn RateLimitService>,
    request: Request<RequestBody>,
) -> Response<UnaryBody> {
    match respond(rls, request).await {
        Ok(response) => response,
        Err(status) => status.into_http(),
    }
}

async fn respond(
    rls: Arc<dyn RateLimitService>,
    request: Request<RequestBody>,
) -> Result<Response<UnaryBody>, Status> {
    let (head, body) = request.into_parts();
    let message: RateLimitRequest = decode(read(body).await?)?;
    let request = tonic::Request::from_http(Request::from_parts(head, message));
    let (metadata, message, _) = rls.should_rate_limit(request).await?.into_parts();
    let mut response = Response::new(UnaryBody::message(frame(&message)?));
    *response.headers_mut() = metadata.into_headers();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    Ok(response)
}

/// The bytes of `body`: its one DATA frame as it came, or its frames joined.
async fn read(mut body: RequestBody) -> Result<Bytes, Status> {
    let mut first: Option<Bytes> = None;
    let mut joined: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.map_err(Status::from_error)?.into_data() else {
            continue;
        };
        match (&mut joined, first.take()) {
            (Some(joined), _) => joined.put(data),
            (None, None) => first = Some(data),
            (None, Some(before)) => {
                let mut both = BytesMut::with_capacity(before.len() + data.len());
                both.put(before);
                both.put(data);
                joined = Some(both);
            }
        }
    }
    Ok(joined.map(BytesMut::freeze).or(first).unwrap_or_default())
}

/// The message of a body [`RequestBody`] let through: exactly one, within its length bound.
pub fn unframe(mut framed: Bytes) -> Result<Bytes, Status> {
    if framed.len() < HEADER {
        return Err(Status::internal("Missing request message."));
    }
    match framed.get_u8() {
        0 => {}
        1 => {
            return Err(Status::internal(
                "protocol error: received message with compressed-flag but no grpc-encoding was specified",
            ))
        }
        flag => {
            return Err(Status::internal(format!(
                "protocol error: received message with invalid compression flag: {flag} (valid flags are 0 and 1), while sending request"
            )))
        }
    }
    let length = framed.get_u32() as usize;
    if framed.len() != length {
        return Err(Status::internal(format!(
            "a message of {length} bytes announced, {} received",
            framed.len()
        )));
    }
    Ok(framed)
}

/// The message behind `framed`'s gRPC prefix, decoded; refused as tonic refuses it.
pub fn decode<M: prost::Message + Default>(framed: Bytes) -> Result<M, Status> {
    M::decode(unframe(framed)?).map_err(|error| Status::internal(error.to_string()))
}

/// `message` after its gRPC prefix: uncompressed flag, big-endian length.
pub fn frame(message: &impl prost::Message) -> Result<Bytes, Status> {
    let length = message.encoded_len();
    let prefix = u32::try_from(length)
        .map_err(|_| Status::internal(format!("a response of {length} bytes")))?;
    let mut framed = BytesMut::with_capacity(HEADER + length);
    framed.put_u8(0);
    framed.put_u32(prefix);
    message
        .encode(&mut framed)
        .map_err(|error| Status::internal(error.to_string()))?;
    Ok(framed.freeze())
}

/// The response body of a call answered here: its message as one DATA frame, then
/// `grpc-status: 0`; empty for a trailers-only response (the [`Default`] tonic's
/// `Status::into_http` makes). Its size is left unknown, as tonic's is: an exact one would make
/// hyper add a `content-length` that tonic's answers do not carry.
#[derive(Debug, Default)]
pub struct UnaryBody {
    message: Option<Bytes>,
    trailers: bool,
}

impl UnaryBody {
    fn message(message: Bytes) -> UnaryBody {
        UnaryBody {
            message: Some(message),
            trailers: true,
        }
    }
}

impl Body for UnaryBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        let body = self.get_mut();
        if let Some(message) = body.message.take() {
            return Poll::Ready(Some(Ok(Frame::data(message))));
        }
        if std::mem::take(&mut body.trailers) {
            let mut trailers = HeaderMap::with_capacity(1);
            trailers.insert("grpc-status", HeaderValue::from_static("0"));
            return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
        }
        Poll::Ready(None)
    }

    fn is_end_stream(&self) -> bool {
        self.message.is_none() && !self.trailers
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::rls::rate_limit_response::Code;
    use crate::proto::rls::RateLimitResponse;
    use prost::Message as _;

    fn framed(flag: u8, message: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        out.put_u8(flag);
        out.put_u32(message.len() as u32);
        out.put_slice(message);
        out.freeze()
    }

    #[test]
    fn a_message_is_read_from_behind_its_prefix() {
        assert_eq!(
            unframe(framed(0, b"abc")).unwrap(),
            Bytes::from_static(b"abc")
        );
        assert_eq!(unframe(framed(0, b"")).unwrap(), Bytes::new());
    }

    #[test]
    fn flags_and_lengths_are_refused_as_tonic_refuses_them() {
        let compressed = unframe(framed(1, b"abc")).unwrap_err();
        assert_eq!(compressed.code(), tonic::Code::Internal);
        assert!(compressed.message().contains("no grpc-encoding"));
        let unknown = unframe(framed(7, b"abc")).unwrap_err();
        assert!(unknown.message().contains("invalid compression flag: 7"));
        assert_eq!(
            unframe(Bytes::from_static(&[0, 0])).unwrap_err().code(),
            tonic::Code::Internal
        );
        let mut short = BytesMut::from(&framed(0, b"abc")[..]);
        short.truncate(6);
        assert_eq!(
            unframe(short.freeze()).unwrap_err().code(),
            tonic::Code::Internal
        );
    }

    #[test]
    fn a_response_is_framed_as_one_message() {
        let response = RateLimitResponse {
            overall_code: Code::OverLimit as i32,
            ..RateLimitResponse::default()
        };
        let framed = frame(&response).unwrap();
        let message = unframe(framed).unwrap();
        assert_eq!(RateLimitResponse::decode(message).unwrap(), response);
    }

    #[test]
    fn only_uncompressed_should_rate_limit_calls_are_answered_here() {
        let mut headers = HeaderMap::new();
        assert!(answers(PATH, &headers));
        assert!(!answers("/grpc.health.v1.Health/Check", &headers));
        headers.insert(GRPC_ENCODING, HeaderValue::from_static("gzip"));
        assert!(!answers(PATH, &headers));
    }
}
