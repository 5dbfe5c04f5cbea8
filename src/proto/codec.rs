//! The protobuf codec of the rate-limit service: tonic-prost's, with per-RPC buffers sized for
//! rate-limit messages.
//!
//! tonic gives every RPC an 8 KiB encode buffer and an 8 KiB decode buffer. A `ShouldRateLimit`
//! request or response is a few hundred bytes, and two 8 KiB allocations per RPC are beyond
//! glibc's per-thread cache: each one goes through its bins, and a batch of concurrent RPCs
//! freeing theirs together makes it consolidate. The buffers here start at [`BUFFER_SIZE`] and
//! grow when a message needs more, as tonic's do past 8 KiB.

use std::marker::PhantomData;

use prost::Message;
use tonic::codec::{BufferSettings, Codec};
use tonic_prost::{ProstDecoder, ProstEncoder};

/// Initial capacity of each RPC's encode and decode buffer, bytes: room for the gRPC frame header
/// and a typical request or response.
pub const BUFFER_SIZE: usize = 512;

/// Bytes a streaming response encodes before yielding to the runtime (tonic's default).
const YIELD_THRESHOLD: usize = 32 * 1024;

/// `application/grpc+proto` via prost, with [`BUFFER_SIZE`] buffers (named by the generated
/// service code through `codec_path` in `build.rs`).
#[derive(Debug, Clone)]
pub struct RateLimitCodec<T, U> {
    _messages: PhantomData<(T, U)>,
}

impl<T, U> Default for RateLimitCodec<T, U> {
    fn default() -> Self {
        RateLimitCodec {
            _messages: PhantomData,
        }
    }
}

fn buffer_settings() -> BufferSettings {
    BufferSettings::new(BUFFER_SIZE, YIELD_THRESHOLD)
}

impl<T, U> Codec for RateLimitCodec<T, U>
where
    T: Message + Send + 'static,
    U: Message + Default + Send + 'static,
{
    type Encode = T;
    type Decode = U;
    type Encoder = ProstEncoder<T>;
    type Decoder = ProstDecoder<U>;

    fn encoder(&mut self) -> Self::Encoder {
        ProstEncoder::new(buffer_settings())
    }

    fn decoder(&mut self) -> Self::Decoder {
        ProstDecoder::new(buffer_settings())
    }
}
