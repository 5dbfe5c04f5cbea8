//! Which keys the Redis store writes, and how it counts them: ratelimitd's own format (the
//! default), or envoyproxy/ratelimit's for fixed windows, so that a fleet rolling from one to the
//! other shares its counts (`--key-format`, `--redis-key-prefix`,
//! `--expiration-jitter-max-seconds`, `--stop-cache-key-increment-when-overlimit`).

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use super::envoyproxy_key::window_start_s;
use crate::limiter::rate::{Algorithm, Rate, MICROS_PER_SECOND};
use crate::store::Check;

/// The key format of fixed-window counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyFormat {
    /// ratelimitd's own keys for every algorithm (see [`super::keys`]): injective, bounded,
    /// tagged for Redis Cluster, written all or nothing.
    #[default]
    Ratelimitd,
    /// envoyproxy/ratelimit's keys, increments and expiry for `fixed_window` limits (see
    /// [`super::envoyproxy_key`] and `lua/envoyproxy_fixed_window.lua`); the other algorithms,
    /// which it does not have, keep ratelimitd's own keys.
    Envoyproxy,
}

impl KeyFormat {
    /// The name the command line uses.
    pub fn name(self) -> &'static str {
        match self {
            KeyFormat::Ratelimitd => "ratelimitd",
            KeyFormat::Envoyproxy => "envoyproxy",
        }
    }
}

impl fmt::Display for KeyFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for KeyFormat {
    type Err = String;

    fn from_str(name: &str) -> Result<KeyFormat, String> {
        match name {
            "ratelimitd" => Ok(KeyFormat::Ratelimitd),
            "envoyproxy" => Ok(KeyFormat::Envoyproxy),
            other => Err(format!(
                "`{other}` is not a key format (ratelimitd or envoyproxy)"
            )),
        }
    }
}

/// Why a layout was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyLayoutError {
    #[error("a key prefix of {len} bytes is longer than {max} bytes")]
    PrefixTooLong { len: usize, max: usize },
    #[error(
        "a key prefix must not contain `{{` or `}}`: Redis Cluster would hash every key by the \
         prefix's braces instead of the counter's own hash tag"
    )]
    PrefixBraces,
}

/// The keys the store writes and how the script counts them. Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KeyLayout {
    format: KeyFormat,
    prefix: Arc<str>,
    expiration_jitter_max_s: u32,
    stop_increment_when_over_limit: bool,
    /// Unix seconds from which envoyproxy-format counters move to ratelimitd's format, each at
    /// its first window starting then or later (see [`KeyLayout::until`]).
    until_s: Option<u64>,
}

impl KeyLayout {
    /// Longest `--redis-key-prefix`, in bytes: a prefix names a deployment, and every key of
    /// every request carries it.
    pub const MAX_PREFIX_LEN: usize = 128;

    /// A layout of `format` whose keys start with `prefix`. `expiration_jitter_max_s` and
    /// `stop_increment_when_over_limit` are envoyproxy/ratelimit's `EXPIRATION_JITTER_MAX_SECONDS`
    /// and `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`, for envoyproxy-format keys only.
    pub fn new(
        format: KeyFormat,
        prefix: &str,
        expiration_jitter_max_s: u32,
        stop_increment_when_over_limit: bool,
    ) -> Result<KeyLayout, KeyLayoutError> {
        KeyLayout::check_prefix(prefix)?;
        Ok(KeyLayout {
            format,
            prefix: prefix.into(),
            expiration_jitter_max_s,
            stop_increment_when_over_limit,
            until_s: None,
        })
    }

    /// Keeps the envoyproxy format only for windows that start before `until_s` (Unix seconds):
    /// each fixed-window limit moves to ratelimitd's own keys at its first window starting at
    /// or after that instant, so no window is ever counted under both formats, and a limit's
    /// count restarts only where its window would restart anyway. Every replica given the same
    /// instant switches together, whenever each was rolled out (`--key-format-until`). The
    /// instant is compared with this host's clock, as envoyproxy keys name their window by it.
    pub fn until(mut self, until_s: u64) -> KeyLayout {
        self.until_s = Some(until_s);
        self
    }

    /// The instant set by [`KeyLayout::until`].
    pub fn until_s(&self) -> Option<u64> {
        self.until_s
    }

    /// Refuses a prefix longer than [`KeyLayout::MAX_PREFIX_LEN`] or with a brace. A brace would
    /// make the prefix the hash tag of every key (Redis hashes the first `{...}`): one slot for
    /// the whole deployment, and a slot no longer chosen by the code.
    pub fn check_prefix(prefix: &str) -> Result<(), KeyLayoutError> {
        if prefix.len() > KeyLayout::MAX_PREFIX_LEN {
            return Err(KeyLayoutError::PrefixTooLong {
                len: prefix.len(),
                max: KeyLayout::MAX_PREFIX_LEN,
            });
        }
        if prefix.contains(['{', '}']) {
            return Err(KeyLayoutError::PrefixBraces);
        }
        Ok(())
    }

    pub fn format(&self) -> KeyFormat {
        self.format
    }

    /// What every key starts with (empty by default).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn expiration_jitter_max_s(&self) -> u32 {
        self.expiration_jitter_max_s
    }

    pub fn stop_increment_when_over_limit(&self) -> bool {
        self.stop_increment_when_over_limit
    }

    /// How envoyproxy-format counters are counted; `None` in ratelimitd's format.
    pub fn envoyproxy_counting(&self) -> Option<EnvoyproxyCounting> {
        (self.format == KeyFormat::Envoyproxy).then_some(EnvoyproxyCounting {
            stop_increment_when_over_limit: self.stop_increment_when_over_limit,
            expiration_jitter_max_s: self.expiration_jitter_max_s,
        })
    }

    /// Whether `check` is kept as envoyproxy/ratelimit keeps it in the envoyproxy format: a fixed
    /// window of a request's counter. The check a plan adds to veto a request that a
    /// `requests_per_unit: 0` limit denies has an empty identity (no request has an empty domain):
    /// it keeps a native key, which its algorithm denies without writing.
    pub fn counts_as_envoyproxy(check: &Check) -> bool {
        check.rate.algorithm() == Algorithm::FixedWindow && !check.key.as_str().is_empty()
    }

    /// Whether `check`, at `now_s` (Unix seconds, this host's clock), is counted under an
    /// envoyproxy-format key: the format is envoyproxy, the check counts as envoyproxy
    /// ([`KeyLayout::counts_as_envoyproxy`]) and its window started before the switch, if any.
    pub fn envoyproxy_at(&self, check: &Check, now_s: u64) -> bool {
        self.format == KeyFormat::Envoyproxy
            && KeyLayout::counts_as_envoyproxy(check)
            && self
                .until_s
                .is_none_or(|until| window_start_s(&check.rate, now_s) < until)
    }
}

/// What envoyproxy/ratelimit's settings make of its counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EnvoyproxyCounting {
    /// `STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT`: a denied request counts its hits only at the
    /// counters it is over the limit of. Without it (upstream's default) every hit asked for is
    /// counted, admitted or not.
    pub stop_increment_when_over_limit: bool,
    /// `EXPIRATION_JITTER_MAX_SECONDS`: each write sets the key's TTL to its window plus a random
    /// whole number of seconds below this (0: none).
    pub expiration_jitter_max_s: u32,
}

impl EnvoyproxyCounting {
    /// The TTL (seconds) of a key of `rate` written now: the window plus a random jitter in
    /// `[0, expiration_jitter_max_s)`, as envoyproxy/ratelimit's `EXPIRE` sets it.
    pub fn ttl_s(&self, rate: &Rate) -> u64 {
        let window_s = (rate.window_us() / MICROS_PER_SECOND).max(1);
        window_s + random_below(self.expiration_jitter_max_s)
    }
}

/// A random number in `[0, bound)` (0 when `bound` is 0), from the standard library's randomly
/// keyed hasher: each new `RandomState` is keyed differently.
fn random_below(bound: u32) -> u64 {
    use std::hash::BuildHasher;
    if bound == 0 {
        return 0;
    }
    std::collections::hash_map::RandomState::new().hash_one(0u8) % u64::from(bound)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_are_bounded_and_brace_free() {
        let longest = "p".repeat(KeyLayout::MAX_PREFIX_LEN);
        assert!(KeyLayout::new(KeyFormat::Envoyproxy, &longest, 0, false).is_ok());
        assert_eq!(
            KeyLayout::new(KeyFormat::Ratelimitd, &format!("{longest}p"), 0, false),
            Err(KeyLayoutError::PrefixTooLong {
                len: KeyLayout::MAX_PREFIX_LEN + 1,
                max: KeyLayout::MAX_PREFIX_LEN
            })
        );
        for braced in ["{app}:", "a{", "}"] {
            assert_eq!(
                KeyLayout::check_prefix(braced),
                Err(KeyLayoutError::PrefixBraces)
            );
        }
        assert_eq!(KeyLayout::default().prefix(), "");
        assert_eq!(KeyLayout::default().format(), KeyFormat::Ratelimitd);
    }

    fn check(unit: crate::limiter::rate::Unit, algorithm: Algorithm) -> Check {
        use crate::limiter::counter_key::CounterKey;
        use crate::limiter::rate::Rate;
        use crate::limiter::request::Entry;
        let entry = Entry {
            key: "user".into(),
            value: "alice".into(),
        };
        Check {
            key: CounterKey::new("edge", &[entry]),
            rate: Rate::new(algorithm, 10, unit, 1, None).unwrap(),
            hits: 1,
            shadow: false,
            consistency: crate::limiter::Consistency::Exact,
            rule: None,
        }
    }

    #[test]
    fn each_limit_switches_at_its_first_window_from_the_instant_on() {
        use crate::limiter::rate::Unit;
        // 2026-12-10T00:00:30Z: mid-minute, mid-hour, mid-day.
        let until = 1_796_860_830;
        let layout = KeyLayout::new(KeyFormat::Envoyproxy, "", 0, false)
            .unwrap()
            .until(until);
        let second = check(Unit::Second, Algorithm::FixedWindow);
        let minute = check(Unit::Minute, Algorithm::FixedWindow);
        let day = check(Unit::Day, Algorithm::FixedWindow);
        assert!(layout.envoyproxy_at(&second, until - 1));
        assert!(!layout.envoyproxy_at(&second, until));
        // The minute that holds the instant stays in envoyproxy's format to its end.
        assert!(layout.envoyproxy_at(&minute, until + 29));
        assert!(!layout.envoyproxy_at(&minute, until + 30));
        let next_day = until - 30 + 86_400;
        assert!(layout.envoyproxy_at(&day, next_day - 1));
        assert!(!layout.envoyproxy_at(&day, next_day));
        // Without a switch, always; other algorithms and formats, never.
        let always = KeyLayout::new(KeyFormat::Envoyproxy, "", 0, false).unwrap();
        assert!(always.envoyproxy_at(&day, u64::MAX / 2));
        assert!(!always.envoyproxy_at(&check(Unit::Minute, Algorithm::Gcra), until));
        assert!(!KeyLayout::default().envoyproxy_at(&minute, until));
    }

    #[test]
    fn only_the_envoyproxy_format_counts_as_envoyproxy() {
        assert_eq!(KeyLayout::default().envoyproxy_counting(), None);
        let layout = KeyLayout::new(KeyFormat::Envoyproxy, "", 300, true).unwrap();
        assert_eq!(
            layout.envoyproxy_counting(),
            Some(EnvoyproxyCounting {
                stop_increment_when_over_limit: true,
                expiration_jitter_max_s: 300
            })
        );
        assert_eq!("envoyproxy".parse(), Ok(KeyFormat::Envoyproxy));
        assert!("upstream".parse::<KeyFormat>().is_err());
    }
}
