//! How a counted limit is decided when several replicas share one store.

use std::fmt;
use std::time::Duration;

use super::rate::Algorithm;

/// How long a replica holds a lease unless `--lease-period` says otherwise.
pub const DEFAULT_LEASE_PERIOD: Duration = Duration::from_millis(100);

/// The longest lease period accepted: hits reserved by a replica that stops sit unused for at
/// most one period, so a longer one would strand them for too long.
pub const MAX_LEASE_PERIOD: Duration = Duration::from_secs(10);

/// `exact` (the default) decides every request in the store; `leased` lets a replica decide
/// requests locally from hits it reserved in the store beforehand (a lease), never admitting more
/// than `exact` would. Only the store-backed deployment distinguishes them: the memory store
/// decides everything exactly whatever a rule says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Consistency {
    #[default]
    Exact,
    Leased,
}

impl Consistency {
    /// The configuration name (`exact`, `leased`).
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Exact => "exact",
            Consistency::Leased => "leased",
        }
    }

    /// Every consistency, in the order errors list them.
    pub const ALL: [Consistency; 2] = [Consistency::Exact, Consistency::Leased];

    /// Parses a configuration name, case-insensitively.
    pub fn parse(name: &str) -> Option<Consistency> {
        Consistency::ALL
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(name))
    }

    /// Whether a counter of `algorithm` can be leased: all but `sliding_window_log`, whose state
    /// is one entry per admitted hit with its time, so no number of hits can be reserved in it
    /// ahead of the requests.
    pub fn can_lease(algorithm: Algorithm) -> bool {
        algorithm != Algorithm::SlidingWindowLog
    }

    /// The consistency of a rule of `algorithm` that does not say, when the default
    /// (`--consistency`) is `self`: `self`, except that an algorithm that cannot be leased stays
    /// exact (a default is never an error).
    pub fn default_for(self, algorithm: Algorithm) -> Consistency {
        if Consistency::can_lease(algorithm) {
            self
        } else {
            Consistency::Exact
        }
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_case_insensitively() {
        for consistency in Consistency::ALL {
            assert_eq!(Consistency::parse(consistency.as_str()), Some(consistency));
        }
        assert_eq!(Consistency::parse("LEASED"), Some(Consistency::Leased));
        assert_eq!(Consistency::parse("eventual"), None);
    }

    #[test]
    fn a_leased_default_leaves_a_log_exact() {
        for algorithm in Algorithm::ALL {
            let expected = if algorithm == Algorithm::SlidingWindowLog {
                Consistency::Exact
            } else {
                Consistency::Leased
            };
            assert_eq!(Consistency::Leased.default_for(algorithm), expected);
            assert_eq!(
                Consistency::Exact.default_for(algorithm),
                Consistency::Exact
            );
        }
    }
}
