//! envoyproxy/ratelimit's Redis key of a fixed-window counter (`--key-format envoyproxy`):
//! `<prefix><domain>_<key1>_<value1>_..._<keyN>_<valueN>_<window start>`.
//!
//! Its `GenerateCacheKey` (src/limiter/cache_key.go) joins the raw strings with `_`, a shared
//! entry (`share_threshold`) contributing its wildcard pattern instead of its value, and ends with
//! the start of the window in Unix seconds: `(now / W) * W` for a window of W seconds, taken
//! from the calling host's clock. Nothing is escaped and nothing is hashed, so the key is
//! byte-identical to upstream's and the two share one counter, but the mapping is not injective:
//! `a_b` + `c` and `a` + `b_c` (or two units whose windows start at the same second) name the same
//! key. Its length follows the request's (bounded by the request limits: entries and their
//! bytes), and it has no hash tag: a Redis Cluster places it by the CRC16 of the whole key.

use std::fmt::Write as _;

use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::{Rate, MICROS_PER_SECOND};

/// Digits of the longest window start (a u64) and its `_`.
const MAX_SUFFIX_LEN: usize = 21;

/// The key envoyproxy/ratelimit writes for `counter` under `rate` (a fixed window) at `now_s`
/// (Unix seconds), after `prefix` (its `CACHE_KEY_PREFIX`).
pub fn envoyproxy_key(prefix: &str, counter: &CounterKey, rate: &Rate, now_s: u64) -> String {
    let mut bytes = Vec::with_capacity(prefix.len() + counter.as_str().len() + MAX_SUFFIX_LEN);
    bytes.extend_from_slice(prefix.as_bytes());
    counter.write_components(b'_', &mut bytes);
    // Every component is a whole string of the request or the configuration, so the bytes are
    // UTF-8; the lossy path never runs.
    let mut key = String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned());
    let _ = write!(key, "_{}", window_start_s(rate, now_s));
    key
}

/// The start (Unix seconds) of `rate`'s epoch-aligned window containing `now_s`. Windows are
/// whole seconds (unit × multiplier).
pub fn window_start_s(rate: &Rate, now_s: u64) -> u64 {
    let window_s = (rate.window_us() / MICROS_PER_SECOND).max(1);
    now_s - now_s % window_s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::rate::{Algorithm, Unit};
    use crate::limiter::request::Entry;

    fn counter(domain: &str, entries: &[(&str, &str)]) -> CounterKey {
        let entries: Vec<Entry> = entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect();
        CounterKey::new(domain, &entries)
    }

    fn rate(unit: Unit, multiplier: u32) -> Rate {
        Rate::new(Algorithm::FixedWindow, 10, unit, multiplier, None).unwrap()
    }

    /// The keys envoyproxy/ratelimit's own tests expect (test/redis/fixed_cache_impl_test.go,
    /// test/limiter/base_limiter_test.go, test/limiter/cache_key_test.go).
    #[test]
    fn keys_are_those_envoyproxy_ratelimit_expects() {
        let simple = counter("domain", &[("key", "value")]);
        assert_eq!(
            envoyproxy_key("", &simple, &rate(Unit::Second, 1), 1234),
            "domain_key_value_1234"
        );
        assert_eq!(
            envoyproxy_key("prefix:", &simple, &rate(Unit::Second, 1), 1234),
            "prefix:domain_key_value_1234"
        );
        let nested = counter("domain", &[("key2", "value2"), ("subkey2", "subvalue2")]);
        assert_eq!(
            envoyproxy_key("", &nested, &rate(Unit::Minute, 1), 1234),
            "domain_key2_value2_subkey2_subvalue2_1200"
        );
        let hour = counter("domain", &[("key3", "value3")]);
        assert_eq!(
            envoyproxy_key("", &hour, &rate(Unit::Hour, 1), 1_000_000),
            "domain_key3_value3_997200"
        );
        let day = counter("domain", &[("key3", "value3"), ("subkey3", "subvalue3")]);
        assert_eq!(
            envoyproxy_key("", &day, &rate(Unit::Day, 1), 1_000_000),
            "domain_key3_value3_subkey3_subvalue3_950400"
        );
        // 2024-05-04 12:30:15 UTC, a minute and five-minute windows.
        assert_eq!(
            envoyproxy_key("", &simple, &rate(Unit::Minute, 1), 1_714_825_815),
            "domain_key_value_1714825800"
        );
        assert_eq!(
            envoyproxy_key("", &simple, &rate(Unit::Minute, 5), 1_714_825_815),
            "domain_key_value_1714825800"
        );
        assert_eq!(
            envoyproxy_key("", &simple, &rate(Unit::Minute, 5), 1_714_826_115),
            "domain_key_value_1714826100"
        );
    }

    #[test]
    fn a_shared_entry_contributes_its_pattern() {
        let entries = [Entry {
            key: "files".into(),
            value: "files/a.pdf".into(),
        }];
        let shared = CounterKey::with_shared("domain", &entries, &[(0, "files/*")]);
        assert_eq!(
            envoyproxy_key("", &shared, &rate(Unit::Second, 1), 1234),
            "domain_files_files/*_1234"
        );
    }

    #[test]
    fn raw_strings_are_joined_unescaped_so_distinct_descriptors_can_collide() {
        let second = rate(Unit::Second, 1);
        let a = envoyproxy_key("", &counter("d", &[("a_b", "c")]), &second, 7);
        let b = envoyproxy_key("", &counter("d", &[("a", "b_c")]), &second, 7);
        assert_eq!(a, "d_a_b_c_7");
        assert_eq!(a, b);
        assert_eq!(
            envoyproxy_key("", &counter("d", &[("k", "{x}: %41")]), &second, 7),
            "d_k_{x}: %41_7"
        );
        assert_eq!(envoyproxy_key("", &counter("d", &[]), &second, 7), "d_7");
    }
}
