//! Serving status, shared by gRPC health and the HTTP `/healthcheck`.

use std::sync::atomic::{AtomicBool, Ordering};

use tonic_health::server::HealthReporter;
use tonic_health::ServingStatus;

/// gRPC health service names answered: the overall server, the RLS service by its full name,
/// and `ratelimit`, the name envoyproxy/ratelimit registers.
pub const SERVICE_NAMES: [&str; 3] = [
    "",
    "envoy.service.ratelimit.v3.RateLimitService",
    "ratelimit",
];

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

/// Asks the gRPC health service at `addr` (e.g. `127.0.0.1:8081`) for `service`'s status, within
/// `timeout`. Used by `ratelimitd health`, so container images need no separate probe binary.
pub async fn probe(
    addr: &str,
    service: &str,
    timeout: std::time::Duration,
) -> Result<bool, String> {
    use tonic_health::pb::health_check_response::ServingStatus as Status;
    use tonic_health::pb::health_client::HealthClient;
    use tonic_health::pb::HealthCheckRequest;

    let check = async {
        let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| format!("bad address {addr}: {e}"))?;
        let channel = endpoint
            .connect()
            .await
            .map_err(|e| format!("cannot connect to {addr}: {e}"))?;
        let response = HealthClient::new(channel)
            .check(HealthCheckRequest {
                service: service.to_owned(),
            })
            .await
            .map_err(|status| format!("health check failed: {}", status.message()))?;
        Ok(response.into_inner().status == Status::Serving as i32)
    };
    tokio::time::timeout(timeout, check)
        .await
        .map_err(|_| format!("no answer from {addr} within {timeout:?}"))?
}
