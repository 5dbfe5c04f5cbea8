//! What an accept loop does when `accept(2)` fails: back off exponentially and log at most once a
//! second.
//!
//! Out of descriptors (EMFILE, ENFILE), the pending connection stays in the listen backlog and
//! the listener stays readable, so retrying at once spins a core and floods the log with the
//! same error. Waiting 10 ms, doubling to 1 s while failures last, lets connections close; the
//! first success resets the delay.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use crate::service::throttle::WarnThrottle;
use crate::service::transport_refusal::Port;
use crate::service::Metrics;

/// First wait after a failed accept.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(10);
/// Longest wait between accepts while they keep failing.
pub const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// Backoff state of one accept loop.
pub struct AcceptBackoff {
    port: Port,
    delay: Duration,
    warnings: WarnThrottle,
    metrics: Arc<Metrics>,
}

impl AcceptBackoff {
    pub fn new(port: Port, metrics: Arc<Metrics>) -> AcceptBackoff {
        AcceptBackoff {
            port,
            delay: Duration::ZERO,
            warnings: WarnThrottle::new(),
            metrics,
        }
    }

    /// An accept succeeded: the next failure starts again from [`FIRST_BACKOFF`].
    pub fn succeeded(&mut self) {
        self.delay = Duration::ZERO;
    }

    /// How long to wait after one more failure.
    pub fn next_delay(&mut self) -> Duration {
        self.delay = if self.delay.is_zero() {
            FIRST_BACKOFF
        } else {
            (self.delay * 2).min(MAX_BACKOFF)
        };
        self.delay
    }

    /// Counts and (rate-limited) logs `error`, then waits the next backoff delay.
    pub async fn failed(&mut self, error: io::Error) {
        self.metrics.record_accept_error(self.port);
        let delay = self.next_delay();
        if let Some(suppressed) = self.warnings.admit() {
            tracing::warn!(
                port = self.port.label(),
                %error,
                retry_in = ?delay,
                suppressed,
                "accept failed"
            );
        }
        tokio::time::sleep(delay).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delay_doubles_to_a_second_and_resets_on_success() {
        let mut backoff = AcceptBackoff::new(Port::Http, Arc::new(Metrics::default()));
        let delays: Vec<u64> = (0..10)
            .map(|_| backoff.next_delay().as_millis() as u64)
            .collect();
        assert_eq!(delays, [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000]);
        backoff.succeeded();
        assert_eq!(backoff.next_delay(), FIRST_BACKOFF);
    }
}
