//! The rate limit quota service's domain (RLQS, Envoy's `rate_limit_quota` filter): which rule
//! governs a bucket, how one rule's limit is shared among the Envoys reporting the bucket, and
//! the token buckets and lifetimes of their assignments. The service is `crate::service::rlqs`;
//! `docs/rlqs.md` describes the design.

pub mod bucket;
pub mod demand;
pub mod fair_share;
pub mod lifecycle;
pub mod rule;
pub mod strategy;
pub mod token_bucket;

pub use bucket::{BucketId, BucketIdError};
pub use demand::{Demand, DEFAULT_HALF_LIFE};
pub use fair_share::{fair_shares, DEFAULT_FLOOR_FRACTION};
pub use lifecycle::{
    assignment_ttl, should_abandon, DEFAULT_IDLE_ABANDON, DEFAULT_REPORT_PERIOD,
    DEFAULT_TTL_PERIODS,
};
pub use rule::{find_quota, QuotaMatch};
pub use strategy::{BlanketRule, QuotaRate, QuotaStrategy};
pub use token_bucket::{token_bucket, TokenBucketAssignment, DEFAULT_MAX_FILL_INTERVAL};
