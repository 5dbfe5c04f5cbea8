//! A quota bucket's identity as Envoy's rate_limit_quota filter names it: an unordered map of
//! string keys to string values.

use std::fmt;

/// A bucket id in canonical form: its entries sorted by key, so `{a: A, b: B}` and
/// `{b: B, a: A}` are equal and hash alike (Envoy treats them as the same bucket).
///
/// Never empty: a bucket without entries cannot name a rule, and Envoy's own validation requires
/// at least one.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketId {
    entries: Vec<(String, String)>,
}

/// Why a bucket id was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BucketIdError {
    #[error("the bucket id has no entries: a bucket needs at least one key")]
    Empty,
    #[error("the bucket id has the key `{key}` twice")]
    DuplicateKey { key: String },
}

impl BucketId {
    /// The bucket of these `key` → `value` entries, in any order. A key given twice is refused
    /// (a map on the wire cannot carry it; a hand-built id could).
    pub fn new<K, V>(entries: impl IntoIterator<Item = (K, V)>) -> Result<BucketId, BucketIdError>
    where
        K: Into<String>,
        V: Into<String>,
    {
        let mut entries: Vec<(String, String)> = entries
            .into_iter()
            .map(|(key, value)| (key.into(), value.into()))
            .collect();
        if entries.is_empty() {
            return Err(BucketIdError::Empty);
        }
        entries.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        if let Some(pair) = entries.windows(2).find(|pair| pair[0].0 == pair[1].0) {
            return Err(BucketIdError::DuplicateKey {
                key: pair[0].0.clone(),
            });
        }
        Ok(BucketId { entries })
    }

    /// The entries, sorted by key.
    pub fn entries(&self) -> &[(String, String)] {
        &self.entries
    }

    /// How many keys the bucket has (at least one).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Always false: a bucket id has at least one entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// `{key=value, ...}` in key order, for logs and errors.
impl fmt::Display for BucketId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{")?;
        for (index, (key, value)) in self.entries.iter().enumerate() {
            if index > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}={value}")?;
        }
        f.write_str("}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_order_does_not_change_the_bucket() {
        let ab = BucketId::new([("a", "A"), ("b", "B")]).expect("a bucket");
        let ba = BucketId::new([("b", "B"), ("a", "A")]).expect("a bucket");
        assert_eq!(ab, ba);
        assert_eq!(ab.to_string(), "{a=A, b=B}");
        assert_eq!(ab.len(), 2);
    }

    #[test]
    fn an_empty_or_repeated_key_bucket_is_refused() {
        assert_eq!(
            BucketId::new(Vec::<(String, String)>::new()),
            Err(BucketIdError::Empty)
        );
        assert_eq!(
            BucketId::new([("a", "1"), ("b", "2"), ("a", "3")]),
            Err(BucketIdError::DuplicateKey { key: "a".into() })
        );
    }
}
