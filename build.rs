//! Compiles the hand-written RLS v3 protos with protox (pure Rust), so a fresh machine needs no
//! system `protoc`, and writes the descriptor set that gRPC reflection serves.

use std::{env, path::PathBuf};

const PROTOS: &[&str] = &["envoy/service/ratelimit/v3/rls.proto"];

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let out_dir = PathBuf::from(env::var("OUT_DIR")?);
    let file_descriptors = protox::compile(PROTOS, ["proto"])?;
    let descriptor_path = out_dir.join("rls_descriptor.bin");
    std::fs::write(
        &descriptor_path,
        prost::Message::encode_to_vec(&file_descriptors),
    )?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // Per-RPC buffers sized for rate-limit messages (src/proto/codec.rs).
        .codec_path("crate::proto::codec::RateLimitCodec")
        .compile_fds(file_descriptors)?;
    Ok(())
}
