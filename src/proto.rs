//! Generated code for the hand-written protos in `proto/`: RLS v3, the rate limit quota service
//! (RLQS), and the xDS subscription to the
//! rate-limit configuration (discovery messages and envoyproxy/ratelimit's `RateLimitConfig`).
#![allow(clippy::all, missing_docs)]

pub mod codec;

pub mod envoy {
    pub mod config {
        pub mod core {
            pub mod v3 {
                tonic::include_proto!("envoy.config.core.v3");
            }
        }
    }
    pub mod extensions {
        pub mod common {
            pub mod ratelimit {
                pub mod v3 {
                    tonic::include_proto!("envoy.extensions.common.ratelimit.v3");
                }
            }
        }
    }
    pub mod r#type {
        pub mod v3 {
            tonic::include_proto!("envoy.r#type.v3");
        }
    }
    pub mod service {
        pub mod discovery {
            pub mod v3 {
                tonic::include_proto!("envoy.service.discovery.v3");
            }
        }
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("envoy.service.ratelimit.v3");
            }
        }
        pub mod rate_limit_quota {
            pub mod v3 {
                tonic::include_proto!("envoy.service.rate_limit_quota.v3");
            }
        }
    }
}

pub mod google {
    pub mod rpc {
        tonic::include_proto!("google.rpc");
    }
}

/// envoyproxy/ratelimit's configuration resource (`ratelimit.config.ratelimit.v3`).
pub mod ratelimit {
    pub mod config {
        pub mod ratelimit {
            pub mod v3 {
                tonic::include_proto!("ratelimit.config.ratelimit.v3");
            }
        }
    }
}

pub use self::ratelimit::config::ratelimit::v3 as rls_config;
pub use envoy::extensions::common::ratelimit::v3 as common;
pub use envoy::service::discovery::v3 as discovery;
pub use envoy::service::rate_limit_quota::v3 as rlqs;
pub use envoy::service::ratelimit::v3 as rls;

#[cfg(test)]
mod rlqs_wire_tests;

/// Encoded `FileDescriptorSet` of the protos, served by gRPC reflection.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("rls_descriptor");
