//! A test OTLP collector: receives trace exports over gRPC (`TraceService/Export`, a tonic
//! server) or HTTP/protobuf (`POST /v1/traces`, a hyper server) on a free loopback port, and keeps
//! every span it was sent, flattened, for the test to look at; or, as a benchmark's sink
//! ([`OtlpCollector::http_sink`]), answers every HTTP export and keeps nothing.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// One received span, its ids in lower-case hex as `traceparent` writes them.
#[derive(Debug, Clone)]
pub struct ReceivedSpan {
    /// `service.name` of the resource that sent it.
    pub service: String,
    pub name: String,
    pub trace_id: String,
    pub span_id: String,
    /// Empty for a root span.
    pub parent_span_id: String,
    /// `SpanKind` as a number (2 = SERVER, 3 = CLIENT).
    pub kind: i32,
    /// Attributes as text (numbers in decimal).
    pub attributes: HashMap<String, String>,
    /// `Status.code`: 0 unset, 1 ok, 2 error.
    pub status_code: i32,
}

impl ReceivedSpan {
    pub fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes.get(key).map(String::as_str)
    }
}

#[derive(Clone, Default)]
struct Received {
    /// Answer every export without decoding or keeping it ([`OtlpCollector::http_sink`]).
    discard: bool,
    spans: Arc<Mutex<Vec<ReceivedSpan>>>,
    /// Metadata / headers of every export, lower-case names.
    headers: Arc<Mutex<Vec<HashMap<String, String>>>>,
}

impl Received {
    fn keep(&self, export: ExportTraceServiceRequest, headers: HashMap<String, String>) {
        let mut spans = self.spans.lock().unwrap();
        for resource_spans in export.resource_spans {
            let service = resource_spans
                .resource
                .as_ref()
                .and_then(|resource| text_of(&resource.attributes, "service.name"))
                .unwrap_or_default();
            for scope in resource_spans.scope_spans {
                for span in scope.spans {
                    spans.push(ReceivedSpan {
                        service: service.clone(),
                        name: span.name,
                        trace_id: hex(&span.trace_id),
                        span_id: hex(&span.span_id),
                        parent_span_id: hex(&span.parent_span_id),
                        kind: span.kind,
                        attributes: span
                            .attributes
                            .iter()
                            .filter_map(|kv| Some((kv.key.clone(), text(kv)?)))
                            .collect(),
                        status_code: span.status.map_or(0, |status| status.code),
                    });
                }
            }
        }
        self.headers.lock().unwrap().push(headers);
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

fn text(kv: &KeyValue) -> Option<String> {
    match kv.value.as_ref()?.value.as_ref()? {
        Value::StringValue(text) => Some(text.clone()),
        Value::BoolValue(value) => Some(value.to_string()),
        Value::IntValue(value) => Some(value.to_string()),
        Value::DoubleValue(value) => Some(value.to_string()),
        other => Some(format!("{other:?}")),
    }
}

fn text_of(attributes: &[KeyValue], key: &str) -> Option<String> {
    attributes.iter().find(|kv| kv.key == key).and_then(text)
}

/// A running collector; stops when dropped.
pub struct OtlpCollector {
    addr: SocketAddr,
    received: Received,
    task: JoinHandle<()>,
}

struct GrpcCollector(Received);

#[tonic::async_trait]
impl TraceService for GrpcCollector {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        let headers = request
            .metadata()
            .clone()
            .into_headers()
            .iter()
            .filter_map(|(name, value)| {
                Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
            })
            .collect();
        self.0.keep(request.into_inner(), headers);
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

impl OtlpCollector {
    /// A collector speaking OTLP/gRPC.
    pub async fn grpc() -> OtlpCollector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind collector");
        let addr = listener.local_addr().unwrap();
        let received = Received::default();
        let service = TraceServiceServer::new(GrpcCollector(received.clone()));
        let task = tokio::spawn(async move {
            let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
            let _ = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
        });
        OtlpCollector {
            addr,
            received,
            task,
        }
    }

    /// A collector speaking OTLP/HTTP with protobuf bodies at `/v1/traces`.
    pub async fn http() -> OtlpCollector {
        OtlpCollector::serve_http(Received::default()).await
    }

    /// An OTLP/HTTP endpoint for benchmarks: every export to `/v1/traces` is read and answered
    /// 200 with an empty `ExportTraceServiceResponse`, not decoded, nothing kept (its `spans()`
    /// stay empty), so what it costs does not grow with the spans.
    pub async fn http_sink() -> OtlpCollector {
        OtlpCollector::serve_http(Received {
            discard: true,
            ..Received::default()
        })
        .await
    }

    async fn serve_http(received: Received) -> OtlpCollector {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind collector");
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn({
            let received = received.clone();
            async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let received = received.clone();
                    tokio::spawn(async move {
                        let service = hyper::service::service_fn(move |request| {
                            accept_http_export(received.clone(), request)
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            }
        });
        OtlpCollector {
            addr,
            received,
            task,
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT`: the gRPC endpoint, or the HTTP base URL (`/v1/traces` below it).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        self.received.spans.lock().unwrap().clone()
    }

    /// The headers (gRPC metadata) of every export so far.
    pub fn export_headers(&self) -> Vec<HashMap<String, String>> {
        self.received.headers.lock().unwrap().clone()
    }

    /// Waits until the spans received satisfy `done` (exporters batch: a span may arrive
    /// seconds after it ended); panics with what arrived after `timeout`.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&[ReceivedSpan]) -> bool,
    ) -> Vec<ReceivedSpan> {
        let deadline = Instant::now() + timeout;
        loop {
            let spans = self.spans();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < deadline,
                "the collector did not receive the expected spans within {timeout:?}; it has {spans:#?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

impl Drop for OtlpCollector {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept_http_export(
    received: Received,
    request: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let reply = |status: StatusCode, body: Vec<u8>| {
        let mut response = Response::new(Full::new(Bytes::from(body)));
        *response.status_mut() = status;
        response
    };
    if request.method() != hyper::Method::POST || request.uri().path() != "/v1/traces" {
        return Ok(reply(StatusCode::NOT_FOUND, Vec::new()));
    }
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    if content_type != "application/x-protobuf" {
        return Ok(reply(StatusCode::UNSUPPORTED_MEDIA_TYPE, Vec::new()));
    }
    let headers = request
        .headers()
        .iter()
        .filter_map(|(name, value)| {
            Some((name.as_str().to_owned(), value.to_str().ok()?.to_owned()))
        })
        .collect();
    let Ok(body) = request.into_body().collect().await else {
        return Ok(reply(StatusCode::BAD_REQUEST, Vec::new()));
    };
    if received.discard {
        return Ok(reply(StatusCode::OK, Vec::new()));
    }
    match ExportTraceServiceRequest::decode(body.to_bytes()) {
        Ok(export) => {
            received.keep(export, headers);
            let answer = ExportTraceServiceResponse {
                partial_success: None,
            };
            Ok(reply(StatusCode::OK, answer.encode_to_vec()))
        }
        Err(_) => Ok(reply(StatusCode::BAD_REQUEST, Vec::new())),
    }
}
