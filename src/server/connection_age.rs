//! `--grpc-max-connection-age` / `--grpc-max-connection-age-grace`, as grpc-go's
//! `MaxConnectionAge` / `MaxConnectionAgeGrace` (which envoyproxy/ratelimit sets): a connection
//! older than its age is sent GOAWAY, so the client opens a new one (and a load balancer such as
//! Envoy spreads the new connections over every replica, including ones started since); calls
//! in flight finish; once the grace has passed too, the connection is closed whatever is open.
//!
//! Each connection's age is the limit plus or minus up to 10 % (grpc-go's jitter), so the
//! connections opened together by a client at startup do not all reconnect at the same moment.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// The age limit of gRPC connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionAge {
    /// Age (before jitter) at which a connection is sent GOAWAY.
    pub max_age: Duration,
    /// How long its calls may run after the GOAWAY before it is closed; `None`: as long as
    /// they take (grpc-go's default, infinity).
    pub grace: Option<Duration>,
}

impl ConnectionAge {
    /// The age of one connection: [`ConnectionAge::max_age`] ±10 %, drawn afresh per call.
    pub fn jittered(&self) -> Duration {
        let mut hasher = RandomState::new().build_hasher();
        hasher.write_u64(0);
        jitter(self.max_age, hasher.finish())
    }
}

/// `age` moved by `random` to somewhere in [0.9 × age, 1.1 × age].
fn jitter(age: Duration, random: u64) -> Duration {
    let nanos = age.as_nanos();
    let spread = nanos / 5;
    let offset = if spread == 0 {
        0
    } else {
        u128::from(random) % (spread + 1)
    };
    let jittered = nanos - nanos / 10 + offset;
    let seconds = u64::try_from(jittered / 1_000_000_000).unwrap_or(u64::MAX);
    Duration::new(seconds, (jittered % 1_000_000_000) as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_jitter_stays_within_ten_percent() {
        let age = Duration::from_secs(100);
        assert_eq!(jitter(age, 0), Duration::from_secs(90));
        assert_eq!(jitter(age, 20_000_000_000), Duration::from_secs(110));
        assert_eq!(jitter(age, 20_000_000_001), Duration::from_secs(90));
        assert_eq!(jitter(Duration::ZERO, 12345), Duration::ZERO);
        assert_eq!(jitter(Duration::from_nanos(1), 7), Duration::from_nanos(1));
        let huge = Duration::MAX;
        assert!(jitter(huge, u64::MAX) >= huge - huge / 10 - Duration::from_secs(1));
    }

    #[test]
    fn connections_get_different_ages() {
        let age = ConnectionAge {
            max_age: Duration::from_secs(60),
            grace: None,
        };
        let ages: Vec<Duration> = (0..50).map(|_| age.jittered()).collect();
        assert!(ages
            .iter()
            .all(|a| (Duration::from_secs(54)..=Duration::from_secs(66)).contains(a)));
        let first = ages[0];
        assert!(ages.iter().any(|a| *a != first), "{ages:?}");
    }
}
