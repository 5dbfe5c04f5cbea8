//! The HTTP port:
//!
//! - `/healthcheck`: 200 `OK` while serving, 503 otherwise; with configuration over xDS, a second
//!   line on the xDS stream (`xDS stream: up`, or down since when and why);
//! - `/metrics`: Prometheus text (see [`super::metrics`]); on the envoyproxy-format metrics port,
//!   envoyproxy/ratelimit's families instead (see [`super::statsd_exporter`]);
//! - `/json`: envoyproxy/ratelimit's JSON endpoint: POST a proto3-JSON `RateLimitRequest`, get the
//!   proto3-JSON `RateLimitResponse` with 200 (OK) or 429 (OVER_LIMIT); 400 with a message for a
//!   body that is not a valid request, 413 for one over the size cap (at once when its declared
//!   `Content-Length` is over it), 503 with a message when the store failed (and the
//!   store-failure policy is `unavailable`);
//! - `/rlqs`: the current RLQS assignments as JSON, per bucket and stream, a bounded page at a
//!   time (`?limit=N&after=CURSOR`, docs/rlqs.md);
//! - `/rlconfig`: the loaded limits, one per line, in envoyproxy/ratelimit's format
//!   (`edge.api_key_free.path: unit=SECOND requests_per_unit=10, shadow_mode: false`), sorted by
//!   path, with this service's extensions appended when they differ from the defaults
//!   (`, unit_multiplier: 5`, `, algorithm: gcra`, `, burst: 20`, `, consistency: leased`,
//!   `, unlimited: true`); with configuration over xDS, headed by `# xDS version: <version_info
//!   in force>`.
//! - `/top`: per rule, the descriptor values hit and denied the most over the last 1, 5 or 15
//!   minutes as JSON (`?window=1m|5m|15m&domain=D&rule=PATH`, see [`super::top_values`]); 400
//!   naming the parameter that is wrong.
//! - `/`: the status page, one self-contained HTML document under a strict
//!   Content-Security-Policy, and `/status.json`, what it draws (see [`super::status_page`]).
//! - `/counters`: per descriptor of `?domain=D&descriptor=k=v,k2=v2`, its rule and its counter's
//!   state, read from the store without consuming; `POST /counters/reset` with the same selector
//!   deletes that state, only with the bearer token of `--admin-token-file` (see
//!   [`super::counters`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::header::{
    HeaderValue, ALLOW, AUTHORIZATION, CACHE_CONTROL, CONNECTION, CONTENT_TYPE, WWW_AUTHENTICATE,
};
use hyper::{Method, Request, Response, StatusCode};

use super::counters::{self, AdminToken};
use super::health::Health;
use super::json::{request_from_json, response_to_json};
use super::metrics::Metrics;
use super::query_text;
use super::rlconfig::rlconfig;
use super::rlqs;
use super::rls::RateLimitEdge;
use super::statsd_exporter::EnvoyproxyMetrics;
use super::status_page::{self, StatusPage};
use super::top_values::TopQuery;
use super::transport_refusal::TransportRefusal;
use crate::config::xds::XdsConfig;
use crate::limiter::Rules;
use crate::proto::rls::rate_limit_response::Code;
use crate::store::Store;

/// Largest `/json` body accepted by default (the gRPC port's message limit, see
/// `--max-request-size`).
pub const DEFAULT_MAX_JSON_BODY: usize = 64 << 10;

/// Where the HTTP port serves the Prometheus text.
pub const DEFAULT_METRICS_PATH: &str = "/metrics";

/// What the HTTP port serves from.
pub struct HttpState<S> {
    pub health: Arc<Health>,
    pub metrics: Option<Arc<Metrics>>,
    pub edge: Option<Arc<RateLimitEdge<S>>>,
    /// Largest `/json` body accepted (413 above).
    pub max_json_body: usize,
    /// Where the Prometheus text is served (`/metrics`; a metrics port may name another path,
    /// as envoyproxy/ratelimit's `PROMETHEUS_PATH`).
    pub metrics_path: String,
    /// With configuration over xDS: its version in force heads `/rlconfig`.
    pub xds: Option<Arc<XdsConfig>>,
    /// `/rlqs`: the current RLQS assignments as JSON, a page at a time.
    pub rlqs: Option<Arc<dyn rlqs::json::Pages>>,
    /// Served at `metrics_path` instead of `metrics`: envoyproxy/ratelimit's families, as its
    /// `USE_PROMETHEUS` port serves them.
    pub envoyproxy_metrics: Option<Arc<EnvoyproxyMetrics>>,
    /// `/` and `/status.json`: the status page (with `metrics` and `edge`).
    pub status_page: Option<Arc<StatusPage>>,
    /// The token `POST /counters/reset` requires; `None`: resets are off.
    pub admin_token: Option<Arc<AdminToken>>,
}

/// The address of the peer an HTTP request came from, put in the request's extensions by the
/// port that accepted the connection (logged with every counter reset).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

impl<S> HttpState<S> {
    /// Only `/healthcheck`.
    pub fn health_only(health: Arc<Health>) -> HttpState<S> {
        HttpState {
            health,
            metrics: None,
            edge: None,
            max_json_body: DEFAULT_MAX_JSON_BODY,
            metrics_path: DEFAULT_METRICS_PATH.to_owned(),
            xds: None,
            rlqs: None,
            envoyproxy_metrics: None,
            status_page: None,
            admin_token: None,
        }
    }
}

/// The body of every answer of the HTTP port: whole, or (`/rlqs`) written as it is read.
pub type HttpBody = UnsyncBoxBody<Bytes, Infallible>;

fn text(status: StatusCode, body: impl Into<Bytes>) -> Response<HttpBody> {
    let mut response = Response::new(Full::new(body.into()).boxed_unsync());
    *response.status_mut() = status;
    response.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

/// The answer to one HTTP request.
pub async fn respond<S: Store>(
    state: Arc<HttpState<S>>,
    request: Request<Incoming>,
) -> Response<HttpBody> {
    let get = matches!(*request.method(), Method::GET | Method::HEAD);
    let path = request.uri().path();
    let exposition = state.envoyproxy_metrics.is_some() || state.metrics.is_some();
    if path == state.metrics_path && exposition {
        if !get {
            return method_not_allowed();
        }
        let envoyproxy = state.envoyproxy_metrics.clone();
        let metrics = state.metrics.clone();
        // Off the serving thread: its RLS calls go on while a large text is built.
        let rendered = tokio::task::spawn_blocking(move || match (envoyproxy, metrics) {
            (Some(envoyproxy), _) => envoyproxy.render(),
            (None, Some(metrics)) => metrics.render(),
            (None, None) => String::new(),
        })
        .await;
        let Ok(body) = rendered else {
            return text(StatusCode::INTERNAL_SERVER_ERROR, "metrics not rendered");
        };
        let mut response = text(StatusCode::OK, body);
        response.headers_mut().insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
        );
        return response;
    }
    match path {
        "/healthcheck" if get => {
            let (status, verdict) = if state.health.is_serving() {
                (StatusCode::OK, "OK")
            } else {
                (StatusCode::SERVICE_UNAVAILABLE, "NOT SERVING")
            };
            match &state.xds {
                None => text(status, verdict),
                Some(xds) => text(status, format!("{verdict}\n{}\n", xds_stream_line(xds))),
            }
        }
        "/rlconfig" if get => match &state.edge {
            Some(edge) => {
                let limits = rlconfig(&edge.rules().load());
                match state.xds.as_ref().map(|xds| xds.version()) {
                    None => text(StatusCode::OK, limits),
                    Some(version) => text(
                        StatusCode::OK,
                        format!(
                            "# xDS version: {}\n{limits}",
                            version.as_deref().map_or_else(
                                || "(none received yet)".to_owned(),
                                super::version_info::shown
                            )
                        ),
                    ),
                }
            }
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/top" if get => match (&state.metrics, &state.edge) {
            (Some(metrics), Some(_)) => top(metrics.clone(), request.uri().query()).await,
            _ => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/" if get => match &state.status_page {
            Some(_) => status_document(),
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/status.json" if get => match (&state.status_page, &state.metrics, &state.edge) {
            (Some(page), Some(metrics), Some(edge)) => {
                status_json(
                    &state,
                    page.clone(),
                    metrics.clone(),
                    edge.rules().load_full(),
                )
                .await
            }
            _ => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/counters" if get => match &state.edge {
            Some(edge) => answer(counters::read(edge, request.uri().query()).await),
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/counters/reset" if *request.method() == Method::POST => match &state.edge {
            Some(edge) => {
                let caller = counters::Caller {
                    authorization: request
                        .headers()
                        .get(AUTHORIZATION)
                        .map(HeaderValue::as_bytes),
                    peer: request.extensions().get::<PeerAddr>().map(|peer| peer.0),
                };
                answer(
                    counters::reset(
                        edge,
                        state.admin_token.as_ref(),
                        state.metrics.as_deref(),
                        caller,
                        request.uri().query(),
                    )
                    .await,
                )
            }
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/counters/reset" if state.edge.is_some() => {
            let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            response
                .headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            response
        }
        "/rlqs" if get => match &state.rlqs {
            Some(pages) => rlqs_page(pages.clone(), request.uri().query()),
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        // Like envoyproxy/ratelimit, any method: the body is what matters.
        "/json" => match &state.edge {
            Some(edge) => json(&state, edge, request).await,
            None => text(StatusCode::NOT_FOUND, "not found"),
        },
        "/healthcheck" | "/rlconfig" | "/rlqs" | "/top" | "/counters" => method_not_allowed(),
        "/" | "/status.json" if state.status_page.is_some() => method_not_allowed(),
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

/// The line `/healthcheck` adds with configuration over xDS: whether the stream is up, and
/// while it is down, for how long and why. A stale configuration does not make health
/// NOT_SERVING: it keeps serving, and every replica would leave its Service at once when the
/// control plane stalls.
fn xds_stream_line(xds: &XdsConfig) -> String {
    let stream = xds.stream();
    if stream.is_up() {
        return "xDS stream: up".to_owned();
    }
    let down_for =
        humantime::format_duration(std::time::Duration::from_secs(stream.stale_for().as_secs()));
    match stream.last_end() {
        Some(reason) => format!(
            "xDS stream: down for {down_for}, the configuration in force may be stale: {}",
            super::version_info::shown(&reason)
        ),
        None => format!("xDS stream: not open yet ({down_for})"),
    }
}

/// Streams on one page of `/rlqs` by default.
pub const RLQS_PAGE: usize = 1000;
/// Most streams on one page of `/rlqs`, whatever `limit` asks.
pub const RLQS_MAX_PAGE: usize = 10_000;

/// `GET /rlqs[?limit=N][&after=CURSOR]`: the buckets after the cursor, as many as hold at most
/// `limit` streams (at least one bucket), written as they are read ([`rlqs::json::page`]); 400
/// for a parameter it does not take or a value it cannot read.
fn rlqs_page(pages: Arc<dyn rlqs::json::Pages>, query: Option<&str>) -> Response<HttpBody> {
    let mut limit = RLQS_PAGE;
    let mut after = None;
    for (name, value) in query_text::pairs(query) {
        match name {
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=RLQS_MAX_PAGE).contains(&n) => limit = n,
                _ => {
                    return text(
                        StatusCode::BAD_REQUEST,
                        format!("`limit` takes 1 to {RLQS_MAX_PAGE} streams\n"),
                    )
                }
            },
            "after" => match rlqs::json::parse_cursor(value) {
                Ok(key) => after = Some(key),
                Err(message) => return text(StatusCode::BAD_REQUEST, format!("{message}\n")),
            },
            _ => {
                return text(
                    StatusCode::BAD_REQUEST,
                    "/rlqs takes `limit` and `after` only\n",
                )
            }
        }
    }
    let body = StreamBody::new(
        rlqs::json::page(pages, after, limit).map(|bytes| Ok::<_, Infallible>(Frame::data(bytes))),
    );
    let mut response = Response::new(body.boxed_unsync());
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// `GET /top`: the rankings as JSON, built off the serving thread; 400 naming a parameter it
/// does not take or a value it cannot read.
async fn top(metrics: Arc<Metrics>, query: Option<&str>) -> Response<HttpBody> {
    let query = match TopQuery::parse(query) {
        Ok(query) => query,
        Err(message) => return text(StatusCode::BAD_REQUEST, format!("{message}\n")),
    };
    let Ok(body) = tokio::task::spawn_blocking(move || metrics.top_json(&query)).await else {
        return text(StatusCode::INTERNAL_SERVER_ERROR, "/top not rendered");
    };
    let mut response = text(StatusCode::OK, body);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

/// The headers every answer of the status page carries: nothing sniffed, cached, framed or
/// sent as a referrer.
fn status_headers(response: &mut Response<HttpBody>) {
    let headers = response.headers_mut();
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
}

/// `GET /`: the status page, under the Content-Security-Policy that allows its inline style and
/// script by hash.
fn status_document() -> Response<HttpBody> {
    let document = status_page::document::document();
    let mut response = Response::new(Full::new(document.html.clone()).boxed_unsync());
    status_headers(&mut response);
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    if let Ok(policy) = HeaderValue::from_str(&document.policy) {
        headers.insert("content-security-policy", policy);
    }
    response
}

/// The response of a `/counters` endpoint's [`counters::Answer`].
fn answer(answer: counters::Answer) -> Response<HttpBody> {
    let mut response = text(answer.status, answer.body);
    if answer.json {
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    if answer.challenge {
        response
            .headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
}

/// `GET /status.json`: what the status page draws, built off the serving thread.
async fn status_json<S: Store>(
    state: &HttpState<S>,
    page: Arc<StatusPage>,
    metrics: Arc<Metrics>,
    rules: Arc<Rules>,
) -> Response<HttpBody> {
    let rlqs = state.rlqs.clone();
    let xds = state.xds.clone();
    let serving = state.health.is_serving();
    let built = tokio::task::spawn_blocking(move || {
        let sources = status_page::status_json::Sources {
            rules,
            metrics: &metrics,
            rlqs: rlqs.as_deref(),
            xds: xds.as_deref(),
            serving,
        };
        status_page::status_json::render(&page, &sources).to_string()
    })
    .await;
    let Ok(body) = built else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            "/status.json not rendered",
        );
    };
    let mut response = text(StatusCode::OK, body);
    status_headers(&mut response);
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}

fn method_not_allowed() -> Response<HttpBody> {
    let mut response = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
    response
        .headers_mut()
        .insert("allow", HeaderValue::from_static("GET, HEAD"));
    response
}

async fn json<S: Store>(
    state: &HttpState<S>,
    edge: &RateLimitEdge<S>,
    request: Request<Incoming>,
) -> Response<HttpBody> {
    let max = state.max_json_body;
    if request.body().size_hint().lower() > max as u64 {
        return too_large(state);
    }
    let body = match http_body_util::Limited::new(request.into_body(), max)
        .collect()
        .await
    {
        Ok(body) => body.to_bytes(),
        Err(error) => {
            return if error.is::<http_body_util::LengthLimitError>() {
                too_large(state)
            } else {
                text(
                    StatusCode::BAD_REQUEST,
                    format!("cannot read the request body: {error}\n"),
                )
            };
        }
    };
    let request = match request_from_json(&body) {
        Ok(request) => request,
        Err(message) => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("invalid RateLimitRequest: {message}\n"),
            )
        }
    };
    match edge.decide(request).await {
        Ok(response) => {
            let status = match Code::try_from(response.overall_code) {
                Ok(Code::Ok) => StatusCode::OK,
                Ok(Code::OverLimit) => StatusCode::TOO_MANY_REQUESTS,
                _ => StatusCode::INTERNAL_SERVER_ERROR,
            };
            let mut http =
                Response::new(Full::new(Bytes::from(response_to_json(&response))).boxed_unsync());
            *http.status_mut() = status;
            http.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            http
        }
        Err(status) if status.code() == tonic::Code::InvalidArgument => text(
            StatusCode::BAD_REQUEST,
            format!("invalid RateLimitRequest: {}\n", status.message()),
        ),
        Err(status) if status.code() == tonic::Code::Unavailable => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}\n", status.message()),
        ),
        Err(status) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{}\n", status.message()),
        ),
    }
}

/// 413 for a `/json` body over the cap: answered as soon as the declared `Content-Length` says
/// so (before any of the body is read, so a client sending it slowly holds nothing), or when a
/// chunked body reaches the cap. The rest of the body is never read, so the connection closes
/// after the answer (`Connection: close` says so).
fn too_large<S>(state: &HttpState<S>) -> Response<HttpBody> {
    if let Some(metrics) = &state.metrics {
        metrics.record_transport_refusal(TransportRefusal::RequestSize);
    }
    let mut response = text(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!("request body larger than {} bytes\n", state.max_json_body),
    );
    response
        .headers_mut()
        .insert(CONNECTION, HeaderValue::from_static("close"));
    response
}
