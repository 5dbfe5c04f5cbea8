//! How startup waits for a Redis that does not answer yet (`--redis-startup-wait`,
//! envoyproxy/ratelimit's `REDIS_STARTUP_*`).
//!
//! By default ratelimitd exits when Redis cannot be reached at startup and lets its orchestrator
//! restart it. envoyproxy/ratelimit retries instead, with an exponential backoff that by default
//! never gives up: a fleet that starts before its Redis (a fresh namespace, a Redis being
//! rescheduled) comes up by itself. Drop-in mode takes that behaviour.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::store::StoreError;

/// The waits between startup attempts: `initial_interval`, each next one 1.5 times the one
/// before (as envoyproxy/ratelimit's backoff grows), at most `max_interval`; attempts stop once
/// `max_elapsed` has passed (`None`: never).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StartupRetry {
    pub initial_interval: Duration,
    pub max_interval: Duration,
    pub max_elapsed: Option<Duration>,
}

impl StartupRetry {
    /// One attempt: the first failure is the answer.
    pub const NONE: StartupRetry = StartupRetry {
        initial_interval: Duration::from_secs(1),
        max_interval: Duration::from_secs(30),
        max_elapsed: Some(Duration::ZERO),
    };

    /// Whether a failed attempt is followed by another at all.
    pub fn retries(&self) -> bool {
        self.max_elapsed != Some(Duration::ZERO)
    }

    /// The wait after `failures` failed attempts (1 for the first).
    pub fn pause_after(&self, failures: u32) -> Duration {
        let mut pause = self.initial_interval.min(self.max_interval);
        for _ in 1..failures {
            pause = pause.mul_f64(1.5).min(self.max_interval);
            if pause == self.max_interval {
                break;
            }
        }
        pause
    }

    /// Runs `attempt` until it succeeds or the time is up; each failure is logged at WARN with
    /// `target` (the Redis address, never its password). The last error is returned.
    pub async fn run<T, F, Fut>(&self, target: &str, attempt: F) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        self.run_observed(target, attempt, &|_| {}).await
    }

    /// [`StartupRetry::run`], telling `on_failure` of each failed attempt (the server opens its
    /// ports once the first one failed, and keeps waiting behind them).
    pub async fn run_observed<T, F, Fut>(
        &self,
        target: &str,
        mut attempt: F,
        on_failure: &(dyn Fn(&StoreError) + Sync),
    ) -> Result<T, StoreError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, StoreError>>,
    {
        let started = Instant::now();
        let mut failures = 0u32;
        loop {
            let error = match attempt().await {
                Ok(value) => {
                    if failures > 0 {
                        tracing::warn!(
                            redis = target,
                            failed_attempts = failures,
                            waited = %humantime::format_duration(whole_ms(started.elapsed())),
                            "redis reachable; starting"
                        );
                    }
                    return Ok(value);
                }
                Err(error) => error,
            };
            on_failure(&error);
            failures = failures.saturating_add(1);
            let pause = self.pause_after(failures);
            let out_of_time = self
                .max_elapsed
                .is_some_and(|max| started.elapsed() + pause > max);
            if out_of_time {
                return Err(self.gave_up(error, started.elapsed()));
            }
            tracing::warn!(
                redis = target,
                %error,
                retry_in = %humantime::format_duration(whole_ms(pause)),
                "redis not reachable at startup; retrying (--redis-startup-wait)"
            );
            tokio::time::sleep(pause).await;
        }
    }
}

impl StartupRetry {
    /// The last error of a start that stops trying, saying how to wait for Redis (longer): a
    /// Redis that comes up after ratelimitd is the common case behind it.
    fn gave_up(&self, error: StoreError, waited: Duration) -> StoreError {
        let advice = if self.retries() {
            format!(
                "gave up after {} (--redis-startup-wait: a longer duration, or `forever`)",
                humantime::format_duration(whole_ms(waited))
            )
        } else {
            "startup does not wait for Redis unless --redis-startup-wait says how long \
             (a duration, or `forever`)"
                .to_owned()
        };
        match error {
            StoreError::Unavailable(message) => {
                StoreError::Unavailable(format!("{message}; {advice}"))
            }
            StoreError::Timeout(after) => StoreError::Unavailable(format!(
                "no answer within {}; {advice}",
                humantime::format_duration(whole_ms(after))
            )),
            protocol @ StoreError::Protocol(_) => protocol,
        }
    }
}

impl Default for StartupRetry {
    fn default() -> StartupRetry {
        StartupRetry::NONE
    }
}

fn whole_ms(duration: Duration) -> Duration {
    Duration::from_millis(duration.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_grow_by_half_up_to_the_cap() {
        let retry = StartupRetry {
            initial_interval: Duration::from_secs(1),
            max_interval: Duration::from_secs(30),
            max_elapsed: None,
        };
        let pauses: Vec<u64> = (1..=12)
            .map(|n| retry.pause_after(n).as_millis() as u64)
            .collect();
        assert_eq!(
            pauses,
            [1000, 1500, 2250, 3375, 5062, 7593, 11390, 17085, 25628, 30000, 30000, 30000]
        );
        assert!(retry.retries());
        assert!(!StartupRetry::NONE.retries());
    }

    #[tokio::test(start_paused = true)]
    async fn gives_up_when_the_next_wait_would_pass_the_limit() {
        let retry = StartupRetry {
            initial_interval: Duration::from_secs(1),
            max_interval: Duration::from_secs(2),
            max_elapsed: Some(Duration::from_secs(4)),
        };
        let mut attempts = 0;
        let result: Result<(), StoreError> = retry
            .run("redis://127.0.0.1:1", || {
                attempts += 1;
                async { Err(StoreError::Unavailable("refused".into())) }
            })
            .await;
        assert_eq!(
            result,
            Err(StoreError::Unavailable(
                "refused; gave up after 2s 500ms (--redis-startup-wait: a longer duration, or \
                 `forever`)"
                    .into()
            ))
        );
        // Waits of 1 s and 1.5 s fit in 4 s; a third (2 s) would end at 4.5 s.
        assert_eq!(attempts, 3);
    }

    #[tokio::test(start_paused = true)]
    async fn succeeds_once_redis_answers() {
        let retry = StartupRetry {
            initial_interval: Duration::from_millis(10),
            max_interval: Duration::from_millis(10),
            max_elapsed: None,
        };
        let mut attempts = 0;
        let result = retry
            .run("redis://127.0.0.1:1", || {
                attempts += 1;
                let now = attempts;
                async move {
                    if now < 5 {
                        Err(StoreError::Unavailable("refused".into()))
                    } else {
                        Ok(now)
                    }
                }
            })
            .await;
        assert_eq!(result, Ok(5));
    }
}
