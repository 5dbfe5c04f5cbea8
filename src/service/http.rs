//! The HTTP port: `/healthcheck` (200 `OK` while serving, 503 otherwise).

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

use super::health::Health;

fn respond(health: &Health, request: &Request<Incoming>) -> Response<Full<Bytes>> {
    let (status, body) = match (request.method(), request.uri().path()) {
        (&Method::GET | &Method::HEAD, "/healthcheck") if health.is_serving() => {
            (StatusCode::OK, "OK")
        }
        (&Method::GET | &Method::HEAD, "/healthcheck") => {
            (StatusCode::SERVICE_UNAVAILABLE, "NOT SERVING")
        }
        _ => (StatusCode::NOT_FOUND, "not found"),
    };
    let mut response = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *response.status_mut() = status;
    response
}

/// Serves HTTP/1.1 on `listener` until `shutdown` completes.
pub async fn serve(listener: TcpListener, health: Arc<Health>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            _ = &mut shutdown => return,
            accepted = listener.accept() => accepted,
        };
        let (stream, _) = match accepted {
            Ok(connection) => connection,
            Err(error) => {
                tracing::warn!(%error, "http accept failed");
                continue;
            }
        };
        let health = health.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request: Request<Incoming>| {
                let response = respond(&health, &request);
                async move { Ok::<_, Infallible>(response) }
            });
            if let Err(error) = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%error, "http connection ended with an error");
            }
        });
    }
}
