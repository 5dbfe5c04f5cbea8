//! The network edge: gRPC (RLS v3, health) and the HTTP port. Protocol conversion happens here and
//! only here; the edge never touches Redis.

pub mod call_span;
pub mod convert;
pub mod counters;
pub mod decision_log;
pub mod descriptor_label;
pub mod go_regex;
pub mod headers;
pub mod health;
pub mod http;
pub mod json;
pub mod metrics;
pub mod probe_transport;
pub mod query_text;
pub mod rlconfig;
pub mod rlqs;
pub mod rls;
pub mod statsd;
pub mod statsd_exporter;
pub mod status_page;
pub mod store_error_policy;
pub mod throttle;
pub mod top_values;
pub mod transport_refusal;
pub mod unknown_domains;
pub mod version_info;

pub use headers::ResponseHeaders;
pub use health::Health;
pub use metrics::Metrics;
pub use rls::RateLimitEdge;
