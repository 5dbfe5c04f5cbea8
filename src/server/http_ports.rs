//! The HTTP port and the ports that serve part of it: the metrics port, envoyproxy/ratelimit's
//! Prometheus port and its debug port.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::http_port::{self, HttpBounds};
use super::shared::Shared;
use super::tasks::Tasks;
use crate::service::http::{HttpState, DEFAULT_METRICS_PATH};
use crate::service::statsd_exporter::EnvoyproxyMetrics;
use crate::store::Store;

/// The listeners of the HTTP ports.
pub struct HttpListeners {
    pub http: TcpListener,
    pub metrics: Option<TcpListener>,
    pub debug: Option<TcpListener>,
    pub envoyproxy_metrics: Option<TcpListener>,
}

/// The HTTP ports being served, and where.
pub struct HttpPorts {
    served: JoinHandle<()>,
    /// The HTTP port's address.
    pub http: SocketAddr,
    /// The other ports' names and addresses.
    pub others: Vec<(&'static str, SocketAddr)>,
}

impl HttpPorts {
    /// Serves every listener of `listeners` until `stopping`, at most `max_connections`
    /// connections together: the HTTP port and the debug port everything, the metrics port
    /// `/healthcheck` and the Prometheus text at `--metrics-path`, envoyproxy/ratelimit's port
    /// `/healthcheck` and its families at their path (refreshed by a task of `tasks`).
    pub fn start<S: Store>(
        listeners: HttpListeners,
        shared: &Shared<S>,
        max_connections: usize,
        tasks: &mut Tasks,
    ) -> std::io::Result<HttpPorts> {
        let bounds = &shared.settings.transport_bounds;
        let http = listeners.http.local_addr()?;
        let main = Arc::new(HttpState {
            health: shared.health.clone(),
            metrics: Some(shared.metrics.clone()),
            edge: Some(shared.edge.clone()),
            max_json_body: bounds.max_request_size,
            metrics_path: DEFAULT_METRICS_PATH.to_owned(),
            xds: shared.feed.xds(),
            rlqs: Some(shared.quotas.registry().clone()),
            envoyproxy_metrics: None,
            status_page: Some(shared.status_page.clone()),
            admin_token: shared.settings.admin_token.clone(),
        });
        let mut ports = vec![(listeners.http, main.clone())];
        let mut others = Vec::new();
        if let Some(listener) = listeners.metrics {
            others.push(("metrics", listener.local_addr()?));
            let mut state = HttpState::health_only(shared.health.clone());
            state.metrics = Some(shared.metrics.clone());
            state.max_json_body = bounds.max_request_size;
            state.metrics_path = shared.settings.metrics_path.clone();
            ports.push((listener, Arc::new(state)));
        }
        if let (Some(listener), Some(settings)) = (
            listeners.envoyproxy_metrics,
            &shared.settings.envoyproxy_metrics,
        ) {
            let families = Arc::new(EnvoyproxyMetrics::new(settings, shared.metrics.clone()));
            let path = settings.path.clone();
            others.push(("envoyproxy_metrics", listener.local_addr()?));
            tracing::info!(
                path,
                response_time = families.timer_kind(),
                "serving envoyproxy/ratelimit's Prometheus metrics"
            );
            tasks.spawn(families.clone().run(tasks.stopping()));
            let mut state = HttpState::health_only(shared.health.clone());
            state.metrics_path = path;
            state.envoyproxy_metrics = Some(families);
            ports.push((listener, Arc::new(state)));
        }
        if let Some(listener) = listeners.debug {
            others.push(("debug", listener.local_addr()?));
            ports.push((listener, main));
        }
        let bounds = HttpBounds {
            max_connections,
            header_read_timeout: bounds.http_header_read_timeout,
            connection_timeout: bounds.http_connection_timeout,
        };
        let stopping: CancellationToken = tasks.stopping();
        let served = tokio::spawn(http_port::serve(
            ports,
            bounds,
            shared.metrics.clone(),
            stopping.cancelled_owned(),
        ));
        Ok(HttpPorts {
            served,
            http,
            others,
        })
    }

    /// Completes once every port has closed (after shutdown started).
    pub async fn stopped(self) {
        let _ = self.served.await;
    }
}
