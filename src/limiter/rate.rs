//! The arithmetic side of a limit: window, capacity, algorithm.

use std::fmt;

/// Microseconds in one second: every duration and instant inside the domain is an integer of µs.
pub const MICROS_PER_SECOND: u64 = 1_000_000;

/// The longest window a limit may have (100 years). Bounds every product of the algorithms so that
/// the Lua scripts, whose numbers are IEEE doubles, stay exact (all values stay below 2^53).
pub const MAX_WINDOW_US: u64 = 100 * 365 * 86_400 * MICROS_PER_SECOND;

/// Time unit of a limit. `Month` is 30 days and `Year` 365 days, as envoyproxy/ratelimit counts them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Unit {
    Second,
    Minute,
    Hour,
    Day,
    Week,
    Month,
    Year,
}

impl Unit {
    /// Every unit, in increasing length.
    pub const ALL: [Unit; 7] = [
        Unit::Second,
        Unit::Minute,
        Unit::Hour,
        Unit::Day,
        Unit::Week,
        Unit::Month,
        Unit::Year,
    ];

    /// Length of one unit in seconds.
    pub fn seconds(self) -> u64 {
        match self {
            Unit::Second => 1,
            Unit::Minute => 60,
            Unit::Hour => 3_600,
            Unit::Day => 86_400,
            Unit::Week => 7 * 86_400,
            Unit::Month => 30 * 86_400,
            Unit::Year => 365 * 86_400,
        }
    }

    /// The lowercase name used in configuration files (`second`, `minute`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Unit::Second => "second",
            Unit::Minute => "minute",
            Unit::Hour => "hour",
            Unit::Day => "day",
            Unit::Week => "week",
            Unit::Month => "month",
            Unit::Year => "year",
        }
    }

    /// Parses a configuration unit name; case-insensitive like envoyproxy/ratelimit.
    pub fn parse(name: &str) -> Option<Unit> {
        Unit::ALL
            .into_iter()
            .find(|unit| unit.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The algorithm that decides a limit. `FixedWindow` is the default, as in envoyproxy/ratelimit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Algorithm {
    #[default]
    FixedWindow,
    SlidingWindowLog,
    SlidingWindowCounter,
    TokenBucket,
    Gcra,
}

impl Algorithm {
    /// Every algorithm, in the order of their wire codes.
    pub const ALL: [Algorithm; 5] = [
        Algorithm::FixedWindow,
        Algorithm::SlidingWindowLog,
        Algorithm::SlidingWindowCounter,
        Algorithm::TokenBucket,
        Algorithm::Gcra,
    ];

    /// The snake_case name used in configuration files and in store keys.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::FixedWindow => "fixed_window",
            Algorithm::SlidingWindowLog => "sliding_window_log",
            Algorithm::SlidingWindowCounter => "sliding_window_counter",
            Algorithm::TokenBucket => "token_bucket",
            Algorithm::Gcra => "gcra",
        }
    }

    /// Parses a configuration algorithm name.
    pub fn parse(name: &str) -> Option<Algorithm> {
        Algorithm::ALL.into_iter().find(|a| a.as_str() == name)
    }

    /// Whether the algorithm takes a `burst` (capacity different from the rate).
    pub fn uses_burst(self) -> bool {
        matches!(self, Algorithm::TokenBucket | Algorithm::Gcra)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a rate cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RateError {
    #[error("requests_per_unit must be positive")]
    ZeroLimit,
    #[error("unit_multiplier must be positive")]
    ZeroMultiplier,
    #[error("burst must be positive")]
    ZeroBurst,
    #[error("window of {seconds} s is longer than the supported maximum of 100 years")]
    WindowTooLong { seconds: u128 },
    #[error(
        "burst {burst} takes {seconds} s to refill, longer than the supported maximum of 100 years"
    )]
    BurstTooLong { burst: u32, seconds: u128 },
}

/// Everything an algorithm needs to decide: which algorithm, how many requests per window, the
/// window length and the burst capacity (token bucket and GCRA; equal to `limit` otherwise).
///
/// Built only through [`Rate::new`], which bounds every value so that no algorithm overflows or
/// loses precision, in Rust or in Lua.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rate {
    algorithm: Algorithm,
    limit: u32,
    window_us: u64,
    burst: u32,
}

impl Rate {
    /// Builds a rate of `limit` requests per `unit × unit_multiplier`, with an optional burst
    /// (defaults to `limit`; ignored by the window algorithms).
    pub fn new(
        algorithm: Algorithm,
        limit: u32,
        unit: Unit,
        unit_multiplier: u32,
        burst: Option<u32>,
    ) -> Result<Rate, RateError> {
        if limit == 0 {
            return Err(RateError::ZeroLimit);
        }
        if unit_multiplier == 0 {
            return Err(RateError::ZeroMultiplier);
        }
        let seconds = u128::from(unit.seconds()) * u128::from(unit_multiplier);
        let window_us = seconds * u128::from(MICROS_PER_SECOND);
        if window_us > u128::from(MAX_WINDOW_US) {
            return Err(RateError::WindowTooLong { seconds });
        }
        let window_us = window_us as u64;
        let burst = if algorithm.uses_burst() {
            burst.unwrap_or(limit)
        } else {
            limit
        };
        if burst == 0 {
            return Err(RateError::ZeroBurst);
        }
        let rate = Rate {
            algorithm,
            limit,
            window_us,
            burst,
        };
        if algorithm.uses_burst() {
            let span = u128::from(burst) * u128::from(rate.emission_interval_us());
            if span > u128::from(MAX_WINDOW_US) {
                return Err(RateError::BurstTooLong {
                    burst,
                    seconds: span / u128::from(MICROS_PER_SECOND),
                });
            }
        }
        Ok(rate)
    }

    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// Requests admitted per window (`requests_per_unit`).
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Window length in microseconds (`unit × unit_multiplier`).
    pub fn window_us(&self) -> u64 {
        self.window_us
    }

    /// Capacity: the most requests admitted at once from idle. Equals `limit` for window algorithms.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// GCRA's emission interval T = W / L, rounded up to whole microseconds (at least 1 µs), so the
    /// state stays an exact integer. Rounding up can only slow the rate, never exceed it.
    pub fn emission_interval_us(&self) -> u64 {
        self.window_us.div_ceil(u64::from(self.limit)).max(1)
    }
}
