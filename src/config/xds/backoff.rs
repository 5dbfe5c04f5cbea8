//! How long the xDS client waits before it reconnects.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Reconnect delays after a stream to the xDS server ended (envoyproxy/ratelimit's
/// `XDS_CLIENT_BACKOFF_*`): the first wait is `initial`, each further one twice the one before,
/// at most `max`; with `jitter`, each wait is drawn uniformly from `wait × (1 ± random_factor)`
/// (still at most `max`), so that many replicas that lost the same server do not come back in
/// step. The delays start over once the server answers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffPolicy {
    pub initial: Duration,
    pub max: Duration,
    /// Between 0 and 1.
    pub random_factor: f64,
    pub jitter: bool,
}

impl BackoffPolicy {
    /// envoyproxy/ratelimit's defaults: 10 s, at most 60 s, ± 50 %, with jitter.
    pub const DEFAULT: BackoffPolicy = BackoffPolicy {
        initial: Duration::from_secs(10),
        max: Duration::from_secs(60),
        random_factor: 0.5,
        jitter: true,
    };
}

impl Default for BackoffPolicy {
    fn default() -> Self {
        BackoffPolicy::DEFAULT
    }
}

/// The delays of one [`BackoffPolicy`], from the first wait on.
#[derive(Debug)]
pub struct Backoff {
    policy: BackoffPolicy,
    next: Duration,
    random: RandomState,
    draws: u64,
}

impl Backoff {
    pub fn new(policy: BackoffPolicy) -> Backoff {
        Backoff {
            policy,
            next: policy.initial.min(policy.max),
            random: RandomState::new(),
            draws: 0,
        }
    }

    /// The next wait.
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next;
        self.next = base.saturating_mul(2).min(self.policy.max);
        if !self.policy.jitter || self.policy.random_factor <= 0.0 {
            return base;
        }
        let factor = self.policy.random_factor.min(1.0);
        let spread = 1.0 - factor + 2.0 * factor * self.uniform();
        base.mul_f64(spread).min(self.policy.max)
    }

    /// Starts over from the initial wait (the server answered).
    pub fn reset(&mut self) {
        self.next = self.policy.initial.min(self.policy.max);
    }

    /// A number in [0, 1), from the process's hash keys (randomness enough to spread replicas).
    fn uniform(&mut self) -> f64 {
        self.draws += 1;
        let mut hasher = self.random.build_hasher();
        hasher.write_u64(self.draws);
        (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(jitter: bool) -> BackoffPolicy {
        BackoffPolicy {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(5),
            random_factor: 0.5,
            jitter,
        }
    }

    #[test]
    fn without_jitter_waits_double_up_to_the_max_and_start_over_on_reset() {
        let mut backoff = Backoff::new(policy(false));
        let waits: Vec<u64> = (0..5).map(|_| backoff.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 5, 5]);
        backoff.reset();
        assert_eq!(backoff.next_delay(), Duration::from_secs(1));
    }

    #[test]
    fn jittered_waits_stay_within_the_random_factor_and_the_max() {
        let mut backoff = Backoff::new(policy(true));
        let mut firsts = Vec::new();
        for _ in 0..200 {
            backoff.reset();
            let first = backoff.next_delay();
            assert!(
                (Duration::from_millis(500)..=Duration::from_millis(1500)).contains(&first),
                "{first:?}"
            );
            firsts.push(first);
            for _ in 0..4 {
                assert!(backoff.next_delay() <= Duration::from_secs(5));
            }
        }
        firsts.sort();
        firsts.dedup();
        assert!(firsts.len() > 100, "the waits vary: {}", firsts.len());
    }
}
