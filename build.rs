//! Compiles the hand-written protos with protox (pure Rust), so a fresh machine needs no system
//! `protoc`, and writes the descriptor set that gRPC reflection serves: RLS and the rate limit
//! quota service (RLQS), not the discovery protos, which describe the xDS client's side of
//! another server.

use std::{env, path::PathBuf};

/// The services ratelimitd serves (and reflection describes).
const SERVED: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
];

/// Every proto code is generated for: the served ones, the xDS subscription to the
/// rate-limit configuration, and the rate limit quota service.
const ALL: &[&str] = &[
    "envoy/service/ratelimit/v3/rls.proto",
    "envoy/service/rate_limit_quota/v3/rlqs.proto",
    "envoy/service/discovery/v3/ads.proto",
    "ratelimit/config/ratelimit/v3/ratelimit_config.proto",
];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let served = protox::compile(SERVED, ["proto"])?;
    let descriptor_path = out_dir.join("rls_descriptor.bin");
    std::fs::write(&descriptor_path, prost::Message::encode_to_vec(&served))?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Per-RPC buffers sized for rate-limit messages (src/proto/codec.rs); they grow for
        // larger ones (discovery responses).
        .codec_path("crate::proto::codec::RateLimitCodec")
        .compile_fds(protox::compile(ALL, ["proto"])?)?;
    Ok(())
}
