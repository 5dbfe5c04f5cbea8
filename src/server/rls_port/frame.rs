//! HTTP/2 frames as RFC 9113 lays them out: the 9-byte frame header, the frame types, flags and
//! error codes the RLS port uses, and the writing of the frames it sends. Header blocks are
//! written as HPACK literals without indexing (RFC 7541 §6.2.2) and without Huffman coding, so
//! the server keeps no encoder state: its answers are a handful of short, fixed headers.

use bytes::{BufMut, BytesMut};

/// Bytes of a frame header.
pub const HEADER_LEN: usize = 9;

/// The client connection preface (RFC 9113 §3.4).
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// The largest frame payload a peer may send before SETTINGS_MAX_FRAME_SIZE raises it; the RLS
/// port never raises it.
pub const DEFAULT_MAX_FRAME: usize = 16_384;

/// The flow-control window of a connection or stream before any WINDOW_UPDATE or SETTINGS.
pub const DEFAULT_WINDOW: i64 = 65_535;

/// The largest flow-control window (2^31 − 1).
pub const MAX_WINDOW: i64 = (1 << 31) - 1;

/// Frame types.
pub mod kind {
    pub const DATA: u8 = 0x0;
    pub const HEADERS: u8 = 0x1;
    pub const PRIORITY: u8 = 0x2;
    pub const RST_STREAM: u8 = 0x3;
    pub const SETTINGS: u8 = 0x4;
    pub const PUSH_PROMISE: u8 = 0x5;
    pub const PING: u8 = 0x6;
    pub const GOAWAY: u8 = 0x7;
    pub const WINDOW_UPDATE: u8 = 0x8;
    pub const CONTINUATION: u8 = 0x9;
}

/// Frame flags.
pub mod flag {
    pub const END_STREAM: u8 = 0x1;
    pub const ACK: u8 = 0x1;
    pub const END_HEADERS: u8 = 0x4;
    pub const PADDED: u8 = 0x8;
    pub const PRIORITY: u8 = 0x20;
}

/// SETTINGS parameters.
pub mod setting {
    pub const HEADER_TABLE_SIZE: u16 = 0x1;
    pub const ENABLE_PUSH: u16 = 0x2;
    pub const MAX_CONCURRENT_STREAMS: u16 = 0x3;
    pub const INITIAL_WINDOW_SIZE: u16 = 0x4;
    pub const MAX_FRAME_SIZE: u16 = 0x5;
    pub const MAX_HEADER_LIST_SIZE: u16 = 0x6;
}

/// Error codes of RST_STREAM and GOAWAY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum ErrorCode {
    NoError = 0x0,
    Protocol = 0x1,
    FlowControl = 0x3,
    StreamClosed = 0x5,
    FrameSize = 0x6,
    RefusedStream = 0x7,
    Compression = 0x9,
    EnhanceYourCalm = 0xb,
}

/// A frame header as read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub length: usize,
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
}

impl FrameHeader {
    /// The header at the start of `bytes` (at least [`HEADER_LEN`] long); the stream
    /// identifier's reserved bit is ignored, as RFC 9113 §4.1 asks.
    pub fn read(bytes: &[u8]) -> FrameHeader {
        FrameHeader {
            length: usize::from(bytes[0]) << 16
                | usize::from(bytes[1]) << 8
                | usize::from(bytes[2]),
            kind: bytes[3],
            flags: bytes[4],
            stream: u32::from_be_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]) & 0x7fff_ffff,
        }
    }
}

/// Appends a frame header to `out`.
pub fn put_header(out: &mut BytesMut, length: usize, kind: u8, flags: u8, stream: u32) {
    let length = length as u32;
    out.put_slice(&length.to_be_bytes()[1..]);
    out.put_u8(kind);
    out.put_u8(flags);
    out.put_u32(stream);
}

/// Appends a SETTINGS frame with `settings`.
pub fn put_settings(out: &mut BytesMut, settings: &[(u16, u32)]) {
    put_header(out, settings.len() * 6, kind::SETTINGS, 0, 0);
    for (id, value) in settings {
        out.put_u16(*id);
        out.put_u32(*value);
    }
}

/// Appends a WINDOW_UPDATE frame.
pub fn put_window_update(out: &mut BytesMut, stream: u32, increment: u32) {
    put_header(out, 4, kind::WINDOW_UPDATE, 0, stream);
    out.put_u32(increment);
}

/// Appends an RST_STREAM frame.
pub fn put_reset(out: &mut BytesMut, stream: u32, code: ErrorCode) {
    put_header(out, 4, kind::RST_STREAM, 0, stream);
    out.put_u32(code as u32);
}

/// Appends a GOAWAY frame naming the last stream the server processes, with `debug` text.
pub fn put_goaway(out: &mut BytesMut, last_stream: u32, code: ErrorCode, debug: &str) {
    put_header(out, 8 + debug.len(), kind::GOAWAY, 0, 0);
    out.put_u32(last_stream);
    out.put_u32(code as u32);
    out.put_slice(debug.as_bytes());
}

/// Appends a PING frame (an answer when `ack`).
pub fn put_ping(out: &mut BytesMut, ack: bool, payload: [u8; 8]) {
    put_header(out, 8, kind::PING, if ack { flag::ACK } else { 0 }, 0);
    out.put_slice(&payload);
}

/// An HPACK integer with an `prefix_bits`-bit prefix whose upper bits are `first` (RFC 7541 §5.1).
pub fn put_integer(out: &mut BytesMut, first: u8, prefix_bits: u32, value: usize) {
    let max = (1usize << prefix_bits) - 1;
    if value < max {
        out.put_u8(first | value as u8);
        return;
    }
    out.put_u8(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.put_u8((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.put_u8(rest as u8);
}

/// An HPACK string literal without Huffman coding.
fn put_string(out: &mut BytesMut, text: &[u8]) {
    put_integer(out, 0, 7, text.len());
    out.put_slice(text);
}

/// A header field as a literal without indexing whose name is the static table's entry `index`.
pub fn put_indexed_name(out: &mut BytesMut, index: usize, value: &[u8]) {
    put_integer(out, 0, 4, index);
    put_string(out, value);
}

/// A header field as a literal without indexing, name and value spelled out.
pub fn put_literal(out: &mut BytesMut, name: &[u8], value: &[u8]) {
    out.put_u8(0);
    put_string(out, name);
    put_string(out, value);
}

/// Static table entries (RFC 7541 Appendix A) the answers name.
pub mod static_index {
    /// `:status: 200`, the whole field.
    pub const STATUS_200: u8 = 0x80 | 8;
    /// `:status`, the name.
    pub const STATUS: usize = 8;
    /// `allow`, the name.
    pub const ALLOW: usize = 22;
    /// `content-type`, the name.
    pub const CONTENT_TYPE: usize = 31;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_header_reads_back_as_written() {
        let mut out = BytesMut::new();
        put_header(
            &mut out,
            70_000,
            kind::HEADERS,
            flag::END_HEADERS,
            0x7fff_ffff,
        );
        assert_eq!(out.len(), HEADER_LEN);
        let read = FrameHeader::read(&out);
        assert_eq!(
            read,
            FrameHeader {
                length: 70_000,
                kind: kind::HEADERS,
                flags: flag::END_HEADERS,
                stream: 0x7fff_ffff
            }
        );
        out[5] |= 0x80;
        assert_eq!(FrameHeader::read(&out).stream, 0x7fff_ffff);
    }

    #[test]
    fn integers_use_the_prefix_then_continuation_bytes() {
        // RFC 7541 C.1.1 and C.1.2.
        let mut out = BytesMut::new();
        put_integer(&mut out, 0, 5, 10);
        assert_eq!(&out[..], &[0b0000_1010]);
        out.clear();
        put_integer(&mut out, 0, 5, 1337);
        assert_eq!(&out[..], &[0b0001_1111, 0b1001_1010, 0b0000_1010]);
        out.clear();
        put_integer(&mut out, 0, 4, 31);
        assert_eq!(&out[..], &[0x0f, 0x10]);
    }

    #[test]
    fn literals_decode_with_an_hpack_decoder() {
        let mut block = BytesMut::new();
        block.put_u8(static_index::STATUS_200);
        put_indexed_name(&mut block, static_index::CONTENT_TYPE, b"application/grpc");
        put_literal(&mut block, b"grpc-message", "x".repeat(300).as_bytes());
        let mut headers = Vec::new();
        crate::server::rls_port::hpack::Decoder::default()
            .decode(&block, |n, v| headers.push((n.to_vec(), v.to_vec())))
            .unwrap();
        assert_eq!(
            headers,
            vec![
                (b":status".to_vec(), b"200".to_vec()),
                (b"content-type".to_vec(), b"application/grpc".to_vec()),
                (b"grpc-message".to_vec(), "x".repeat(300).into_bytes()),
            ]
        );
    }
}
