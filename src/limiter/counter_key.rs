//! The identity of a counter: a domain and a descriptor's entries, encoded injectively.

use std::fmt;

use super::request::Entry;

/// Canonical, injective text form of `domain` + entries: components are percent-encoded (every
/// byte outside `[A-Za-z0-9_.-]` and `/`) and joined with `:` between levels and `=` inside an entry, so
/// no two distinct identities share an encoding whatever their values contain.
///
/// Stores build their own keys from it (adding algorithm, window, prefix, hash tag, length bound).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CounterKey(String);

impl CounterKey {
    pub fn new(domain: &str, entries: &[Entry]) -> CounterKey {
        CounterKey::with_shared(domain, entries, &[])
    }

    /// The key of a counter some of whose entries are shared: `shared` lists, by entry index,
    /// the wildcard (`share_threshold: true`) that stands for the entry's value, so every value
    /// that wildcard matches gets the same key.
    ///
    /// A shared entry is written `key*=pattern`. Escaping never emits a bare `*`, so a shared
    /// entry cannot be mistaken for a value, not even one that spells the pattern itself.
    pub fn with_shared(domain: &str, entries: &[Entry], shared: &[(usize, &str)]) -> CounterKey {
        let mut encoded = String::with_capacity(
            domain.len()
                + entries
                    .iter()
                    .map(|e| e.key.len() + e.value.len() + 2)
                    .sum::<usize>(),
        );
        escape_into(domain, &mut encoded);
        for (index, entry) in entries.iter().enumerate() {
            encoded.push(':');
            escape_into(&entry.key, &mut encoded);
            match shared.iter().find(|(at, _)| *at == index) {
                Some((_, pattern)) => {
                    encoded.push_str("*=");
                    escape_into(pattern, &mut encoded);
                }
                None => {
                    encoded.push('=');
                    escape_into(&entry.value, &mut encoded);
                }
            }
        }
        CounterKey(encoded)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The domain the identity was built from, decoded.
    pub fn domain(&self) -> String {
        let first = self.0.split([':', '=']).next().unwrap_or_default();
        let mut out = Vec::with_capacity(first.len());
        unescape_into(first, &mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Writes the strings the identity was built from to `out`, decoded and in order, with
    /// `separator` between them: the domain, then each entry's key and its value (a shared
    /// entry's wildcard pattern in place of the value). Other stores' key formats are built from
    /// them; `separator` may occur inside them, so the result is injective only when it does not.
    pub fn write_components(&self, separator: u8, out: &mut Vec<u8>) {
        for (index, component) in self.0.split([':', '=']).enumerate() {
            if index > 0 {
                out.push(separator);
            }
            // Escaping never emits a bare `*`: one ending a component marks a shared entry's key.
            unescape_into(component.strip_suffix('*').unwrap_or(component), out);
        }
    }
}

impl fmt::Display for CounterKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn escape_into(component: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for &byte in component.as_bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'-' | b'/') {
            out.push(byte as char);
        } else {
            out.push('%');
            out.push(HEX[usize::from(byte >> 4)] as char);
            out.push(HEX[usize::from(byte & 0xf)] as char);
        }
    }
}

/// The inverse of [`escape_into`] (which emits only valid, upper-case `%XX` sequences).
fn unescape_into(component: &str, out: &mut Vec<u8>) {
    let bytes = component.as_bytes();
    let mut at = 0;
    while let Some(&byte) = bytes.get(at) {
        let digit = |offset: usize| bytes.get(at + offset).copied().and_then(hex_digit);
        if let (b'%', Some(high), Some(low)) = (byte, digit(1), digit(2)) {
            out.push(high << 4 | low);
            at += 3;
        } else {
            out.push(byte);
            at += 1;
        }
    }
}

fn hex_digit(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }

    #[test]
    fn separators_inside_values_cannot_forge_another_identity() {
        let joined = CounterKey::new("d", &[entry("a", "b:c=d")]);
        let split = CounterKey::new("d", &[entry("a", "b"), entry("c", "d")]);
        assert_ne!(joined, split);
        let braces = CounterKey::new("d", &[entry("k", "{x}_y%")]);
        assert_eq!(braces.as_str(), "d:k=%7Bx%7D_y%25");
    }

    #[test]
    fn shared_entries_get_one_key_that_no_value_can_forge() {
        let shared = |value: &str| {
            CounterKey::with_shared(
                "d",
                &[entry("tenant", "acme"), entry("file", value)],
                &[(1, "logs-*")],
            )
        };
        assert_eq!(shared("logs-a"), shared("logs-b"));
        assert_eq!(shared("logs-a").as_str(), "d:tenant=acme:file*=logs-%2A");
        assert_ne!(
            shared("logs-a"),
            CounterKey::new("d", &[entry("tenant", "acme"), entry("file", "logs-*")])
        );
        assert_ne!(
            CounterKey::with_shared("d", &[entry("a", "x")], &[(0, "x*")]),
            CounterKey::with_shared("d", &[entry("a", "y")], &[(0, "y*")])
        );
        assert_eq!(
            CounterKey::with_shared("d", &[entry("a", "x")], &[]),
            CounterKey::new("d", &[entry("a", "x")])
        );
    }

    fn components(key: &CounterKey) -> String {
        let mut out = Vec::new();
        key.write_components(b'|', &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn components_are_the_strings_the_identity_was_built_from() {
        let key = CounterKey::new("d:x", &[entry("a=b", "%7B {ü}*"), entry("", "")]);
        assert_eq!(components(&key), "d:x|a=b|%7B {ü}*||");
        let shared = CounterKey::with_shared(
            "d",
            &[entry("tenant", "acme"), entry("file", "logs-a")],
            &[(1, "logs-*")],
        );
        assert_eq!(components(&shared), "d|tenant|acme|file|logs-*");
        assert_eq!(components(&CounterKey::new("", &[])), "");
        assert_eq!(components(&CounterKey::new("d", &[])), "d");
    }

    #[test]
    fn empty_value_differs_from_missing_entry() {
        assert_ne!(
            CounterKey::new("d", &[entry("k", "")]),
            CounterKey::new("d", &[])
        );
        assert_ne!(
            CounterKey::new("d:k=", &[]),
            CounterKey::new("d", &[entry("k", "")])
        );
    }
}
