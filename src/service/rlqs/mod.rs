//! The Rate Limit Quota Service (RLQS, `envoy.service.rate_limit_quota.v3`) for Envoy's
//! `rate_limit_quota` filter: protocol at the edge, the quota domain in `crate::limiter::quota`.
//! docs/rlqs.md is the reference.

pub mod bucket_key;
pub mod budget;
pub mod connection;
pub mod convert;
pub mod json;
pub mod refusals;
pub mod registry;
pub mod settings;
pub mod stream;

pub use connection::Connection;
pub use registry::QuotaRegistry;
pub use settings::{RlqsSettings, REBALANCE_GAP};
pub use stream::RlqsService;

/// The gRPC service name, also a gRPC health service name.
pub const SERVICE_NAME: &str = "envoy.service.rate_limit_quota.v3.RateLimitQuotaService";

/// `:path` of the one method.
pub const METHOD_PATH: &str =
    "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas";
