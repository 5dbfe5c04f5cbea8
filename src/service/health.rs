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
