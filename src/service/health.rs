//! Serving status, shared by gRPC health and the HTTP `/healthcheck`.

use std::sync::atomic::{AtomicBool, Ordering};

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

use super::probe_transport::{ProbeAddress, ProbeTarget};

/// gRPC health service names answered: the overall server, the RLS service by its full name,
/// `ratelimit`, the name envoyproxy/ratelimit registers, and the RLQS service by its full name.
/// All follow the same rules (store and configuration).
pub const SERVICE_NAMES: [&str; 4] = [
    "",
    "envoy.service.ratelimit.v3.RateLimitService",
    "ratelimit",
    crate::service::rlqs::SERVICE_NAME,
];

/// gRPC health service name for liveness probes: SERVING from the moment the port answers until
/// the process exits, whatever the store and configuration. The names above follow them, so a
/// liveness probe on one of those would restart every replica during a Redis outage, which no
/// restart can cure.
pub const LIVENESS_SERVICE: &str = "ratelimitd.liveness";

/// One switch for every health surface, so gRPC and HTTP never disagree.
pub struct Health {
    reporter: HealthReporter,
    serving: AtomicBool,
    closed: AtomicBool,
}

impl Health {
    /// Starts NOT_SERVING: the server flips it once configuration and store are ready.
    pub async fn new(reporter: HealthReporter) -> Health {
        let health = Health {
            reporter,
            serving: AtomicBool::new(true),
            closed: AtomicBool::new(false),
        };
        health
            .reporter
            .set_service_status(LIVENESS_SERVICE, ServingStatus::Serving)
            .await;
        health.set_serving(false).await;
        health
    }

    pub fn is_serving(&self) -> bool {
        self.serving.load(Ordering::SeqCst)
    }

    /// Turns NOT_SERVING for good: called when shutdown starts, before draining, so load
    /// balancers stop sending while in-flight calls finish. Later `set_serving` calls are ignored.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
        self.apply(false).await;
    }

    /// Sets every service name's status; a no-op when nothing changes or after [`Health::close`].
    pub async fn set_serving(&self, serving: bool) {
        if self.closed.load(Ordering::SeqCst) {
            return;
        }
        self.apply(serving).await;
    }

    async fn apply(&self, serving: bool) {
        if self.serving.swap(serving, Ordering::SeqCst) == serving {
            return;
        }
        let status = if serving {
            ServingStatus::Serving
        } else {
            ServingStatus::NotServing
        };
        for name in SERVICE_NAMES {
            self.reporter.set_service_status(name, status).await;
        }
    }
}

/// Asks the gRPC health service of `target` for `service`'s status, within `timeout`. Used by
/// `ratelimitd health`, so container images need no separate probe binary. Errors say what
/// failed down to its cause (an unreachable socket, a certificate the CA did not sign).
pub async fn probe(
    target: &ProbeTarget,
    service: &str,
    timeout: std::time::Duration,
) -> Result<bool, String> {
    use tonic_health::pb::health_check_response::ServingStatus as Status;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let place = target.describe();
    let connector = target.connector()?;
    let check = async {
        let authority = match &target.address {
            ProbeAddress::Tcp(addr) => addr.clone(),
            ProbeAddress::Unix(_) => "localhost".to_owned(),
        };
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{authority}"))
            .map_err(|e| format!("bad address {place}: {e}"))?;
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| format!("cannot connect to {place}: {}", causes(&e)))?;
        let response = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .map_err(|status| match std::error::Error::source(&status) {
                Some(cause) => format!(
                    "health check failed: {}: {}",
                    status.message(),
                    causes(cause)
                ),
                None => format!("health check failed: {}", status.message()),
            })?;
        Ok(response.into_inner().status == Status::Serving as i32)
    };
    tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| format!("no answer from {place} within {timeout:?}"))?
}

/// `error` and its causes, joined by `: ` (tonic's transport errors say only "transport error"
/// and keep the reason in their sources).
fn causes(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}
