//! Which bucket of which domain: the key the registry, its memory budget and the demands in the
//! store share.

use crate::limiter::quota::BucketId;

/// A bucket of a domain.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BucketKey {
    pub domain: String,
    pub bucket: BucketId,
}

impl BucketKey {
    /// The key of the bucket's demands in [`QuotaDemands`].
    pub(super) fn demands_key(&self) -> String {
        format!("{}\u{0}{}", self.domain, self.bucket)
    }
}
