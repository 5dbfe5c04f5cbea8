//! The hash `/top` shows instead of a descriptor's values: HMAC-SHA256 (RFC 2104) of its
//! entries, cut to 128 bits. Written over `sha2` in a few lines rather than with another crate.
//!
//! The entries are encoded as each key then each value, each preceded by its length in bytes
//! (4 bytes, big-endian), so that no two descriptors encode alike.

use sha2::{Digest, Sha256};

use crate::limiter::Descriptor;

const BLOCK: usize = 64;

/// An HMAC-SHA256 key: random per process, or read from a file so that replicas agree.
#[derive(Clone)]
pub struct HashKey {
    block: [u8; BLOCK],
}

impl std::fmt::Debug for HashKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashKey(..)")
    }
}

impl HashKey {
    /// Shortest key accepted from a file.
    pub const MIN_BYTES: usize = 16;

    pub fn new(key: &[u8]) -> HashKey {
        let mut block = [0; BLOCK];
        if key.len() > BLOCK {
            block[..32].copy_from_slice(&Sha256::digest(key));
        } else {
            block[..key.len()].copy_from_slice(key);
        }
        HashKey { block }
    }

    /// A key of 32 bytes drawn from std's `RandomState`, whose SipHash keys (128 bits) come from
    /// the operating system's randomness.
    pub fn random() -> HashKey {
        use std::hash::BuildHasher;
        let seed = std::collections::hash_map::RandomState::new();
        let mut key = [0; 32];
        for (i, chunk) in key.chunks_mut(8).enumerate() {
            chunk.copy_from_slice(&seed.hash_one(i).to_le_bytes());
        }
        HashKey::new(&key)
    }

    /// HMAC-SHA256 of `message` under this key.
    pub fn mac(&self, message: &[u8]) -> [u8; 32] {
        self.mac_parts(&[message])
    }

    fn mac_parts(&self, parts: &[&[u8]]) -> [u8; 32] {
        let pad = |byte: u8| self.block.map(|k| k ^ byte);
        let mut inner = Sha256::new();
        inner.update(pad(0x36));
        for part in parts {
            inner.update(part);
        }
        let mut outer = Sha256::new();
        outer.update(pad(0x5c));
        outer.update(inner.finalize());
        outer.finalize().into()
    }

    /// The first 128 bits of the HMAC of `descriptor`'s encoded entries.
    pub fn descriptor(&self, descriptor: &Descriptor) -> [u8; 16] {
        let mut message = Vec::new();
        for entry in &descriptor.entries {
            for text in [&entry.key, &entry.value] {
                message.extend_from_slice(&(text.len() as u32).to_be_bytes());
                message.extend_from_slice(text.as_bytes());
            }
        }
        let mac = self.mac(&message);
        let mut cut = [0; 16];
        cut.copy_from_slice(&mac[..16]);
        cut
    }
}

/// Lower-case hexadecimal.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Entry;

    #[test]
    fn matches_the_rfc_4231_test_vectors() {
        let key = HashKey::new(&[0x0b; 20]);
        assert_eq!(
            hex(&key.mac(b"Hi There")),
            "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"
        );
        let long = HashKey::new(&[0xaa; 131]);
        assert_eq!(
            hex(&long.mac(b"Test Using Larger Than Block-Size Key - Hash Key First")),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn a_descriptor_hashes_alike_under_one_key_and_apart_under_another() {
        let descriptor = |key: &str, value: &str| Descriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            limit_override: None,
            hits_addend: None,
        };
        let key = HashKey::new(b"0123456789abcdef");
        let same = HashKey::new(b"0123456789abcdef");
        let other = HashKey::new(b"fedcba9876543210");
        let alice = descriptor("user", "alice");
        assert_eq!(key.descriptor(&alice), same.descriptor(&alice));
        assert_ne!(key.descriptor(&alice), other.descriptor(&alice));
        assert_ne!(
            key.descriptor(&alice),
            key.descriptor(&descriptor("use", "ralice"))
        );
    }
}
