//! Redis key names: `[<prefix>]rl1:{<tag>}:<algorithm>:<window_us>:<identity>`.
//!
//! - `prefix` is `--redis-key-prefix` (empty by default), the same for every key of a process: it
//!   keeps the mapping injective, and holds no `{` or `}` (see `key_layout`), so the tag below
//!   stays the key's hash tag.
//! - `rl1` versions the layout: a change of state format takes a new prefix, never a reinterpretation.
//! - `tag` is the first 16 hex digits of SHA-256 of the counter identity, inside `{}` so a Redis
//!   Cluster hashes only it: the code picks the slot, never a value sent by a client, and every key
//!   of one descriptor (whatever its algorithm or window) shares it.
//! - A fixed window's count is not stored under this key but under the key followed by
//!   `@<window index>` (see [`state_key`]): the script appends it, since Redis's clock decides the
//!   window. An identity never holds `@` (it is percent-encoded), so keys stay injective, and the
//!   suffix keeps the key's hash tag.
//! - `identity` is [`CounterKey::as_str`], already injective and percent-encoded (it never holds `{`
//!   or `}`); longer than [`MAX_IDENTITY_LEN`] bytes it becomes `h:<sha256 hex>`, which bounds the
//!   key length. No plain identity looks like that (an identity with a `:` always has an `=` after
//!   it), so the mapping stays injective up to SHA-256 collisions.

use std::fmt::Write as _;

use sha2::{Digest, Sha256};

use crate::limiter::counter_key::CounterKey;
use crate::limiter::rate::{Algorithm, Rate};

/// Version prefix of every key this store writes.
pub const KEY_PREFIX: &str = "rl1";

/// Identities longer than this many bytes are replaced by their hash.
pub const MAX_IDENTITY_LEN: usize = 200;

/// Hex digits in a hash tag.
const TAG_LEN: usize = 16;

/// Upper bound on the length of a key built by [`redis_key`] besides its identity part.
const MAX_LEN_BESIDES_IDENTITY: usize = KEY_PREFIX.len()
    + 3 // ":{" and "}"
    + TAG_LEN
    + 1
    + 22 // "sliding_window_counter", the longest algorithm name
    + 1
    + 20 // window_us, a u64
    + 1
    + 21; // a fixed window's "@<window index>" (see `state_key`)

/// Upper bound on the length of any key this store writes, built by [`redis_key`] or
/// [`state_key`] (a hashed identity, 66 bytes, is shorter than [`MAX_IDENTITY_LEN`]); a prefix adds
/// its own length.
pub const MAX_KEY_LEN: usize = MAX_LEN_BESIDES_IDENTITY + MAX_IDENTITY_LEN;

/// The cluster hash tag of a counter (without braces): 16 hex digits of SHA-256 of its identity.
pub fn hash_tag(key: &CounterKey) -> String {
    let mut tag = String::with_capacity(TAG_LEN);
    push_hash_tag(&mut tag, key);
    tag
}

fn push_hash_tag(out: &mut String, key: &CounterKey) {
    let digest = Sha256::digest(key.as_str().as_bytes());
    push_hex(out, &digest[..TAG_LEN / 2]);
}

fn push_hex(out: &mut String, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
}

/// The identity part of the key: the counter identity itself, or `h:<sha256 hex>` when longer than
/// [`MAX_IDENTITY_LEN`].
pub fn identity(key: &CounterKey) -> String {
    let mut out = String::new();
    push_identity(&mut out, key);
    out
}

fn push_identity(out: &mut String, key: &CounterKey) {
    let text = key.as_str();
    if text.len() <= MAX_IDENTITY_LEN {
        out.push_str(text);
    } else {
        out.push_str("h:");
        push_hex(out, &Sha256::digest(text.as_bytes()));
    }
}

/// The Redis key holding the state of `key` under `rate` (algorithm and window are part of it),
/// without a prefix.
pub fn redis_key(key: &CounterKey, rate: &Rate) -> String {
    prefixed_redis_key("", key, rate)
}

/// [`redis_key`] after `prefix`. Built in one allocation: every check of every request makes one.
pub fn prefixed_redis_key(prefix: &str, key: &CounterKey, rate: &Rate) -> String {
    let mut out = String::with_capacity(
        prefix.len() + MAX_LEN_BESIDES_IDENTITY + key.as_str().len().min(MAX_IDENTITY_LEN),
    );
    out.push_str(prefix);
    out.push_str(KEY_PREFIX);
    out.push_str(":{");
    push_hash_tag(&mut out, key);
    out.push_str("}:");
    out.push_str(rate.algorithm().as_str());
    out.push(':');
    // Writing to a String cannot fail.
    let _ = write!(out, "{}:", rate.window_us());
    push_identity(&mut out, key);
    out
}

/// The key that holds the state of the counter whose key is `key` under `rate` at `now_us` (Redis
/// time): `key` itself, or for `fixed_window` the key of the window containing `now_us`,
/// `<key>@<window index>` (`lua/fixed_window.lua` writes it; the index is the window's start / W).
/// For what reads stored states from outside the scripts: tests and tools.
pub fn state_key(key: &str, rate: &Rate, now_us: u64) -> String {
    if rate.algorithm() != Algorithm::FixedWindow {
        return key.to_owned();
    }
    format!("{key}@{}", now_us / rate.window_us())
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

    fn rate(algorithm: Algorithm) -> Rate {
        Rate::new(algorithm, 10, Unit::Minute, 1, None).unwrap()
    }

    #[test]
    fn layout_is_prefix_tag_algorithm_window_identity() {
        let key = counter("edge", &[("remote_address", "10.0.0.1")]);
        let name = redis_key(&key, &rate(Algorithm::Gcra));
        let tag = hash_tag(&key);
        assert_eq!(tag.len(), 16);
        assert_eq!(
            name,
            format!("rl1:{{{tag}}}:gcra:60000000:edge:remote_address=10.0.0.1")
        );
    }

    #[test]
    fn long_identities_are_hashed_and_bounded() {
        let long = "x".repeat(10_000);
        let key = counter("d", &[("k", &long)]);
        for algorithm in Algorithm::ALL {
            let name = redis_key(&key, &rate(algorithm));
            assert!(name.len() <= MAX_KEY_LEN, "{name}");
            assert!(name.contains(":h:"), "{name}");
        }
        let exactly = counter("d", &[("k", &"y".repeat(MAX_IDENTITY_LEN - 4))]);
        assert_eq!(identity(&exactly).len(), MAX_IDENTITY_LEN);
        assert_eq!(identity(&exactly), exactly.as_str());
    }

    #[test]
    fn a_prefix_goes_first_and_changes_nothing_else() {
        let key = counter("edge", &[("remote_address", "10.0.0.1")]);
        let rate = rate(Algorithm::FixedWindow);
        let plain = redis_key(&key, &rate);
        assert_eq!(
            prefixed_redis_key("app1:", &key, &rate),
            format!("app1:{plain}")
        );
        assert_eq!(prefixed_redis_key("", &key, &rate), plain);
    }

    #[test]
    fn braces_never_come_from_values() {
        let key = counter("d", &[("k", "{slot}")]);
        let name = redis_key(&key, &rate(Algorithm::FixedWindow));
        assert_eq!(name.matches('{').count(), 1);
        assert_eq!(name.matches('}').count(), 1);
    }
}
