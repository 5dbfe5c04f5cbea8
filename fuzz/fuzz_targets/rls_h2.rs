//! The RLS port's HTTP/2 connection (`ratelimitd::server::rls_port::h2`), fed whatever a client
//! may send: nothing may panic it, every call it hands over is answered, and what it writes is
//! whole frames no larger than the client may take.
//!
//! Input: one byte whose low bit says whether the connection preface and an empty SETTINGS come
//! first (so most inputs get past them) and whose upper bits choose the size of the pieces the
//! rest arrives in; then the bytes the client sends.
#![no_main]

use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use libfuzzer_sys::fuzz_target;
use ratelimitd::server::rls_port::frame::{self, FrameHeader, HEADER_LEN};
use ratelimitd::server::rls_port::h2::{Connection, Event, Limits, Reply};

const LIMITS: Limits = Limits {
    max_concurrent_streams: 8,
    stream_window: 65_535,
    connection_window: 1 << 20,
    max_body: 4096,
    max_header_list: 16 << 10,
};

fuzz_target!(|data: &[u8]| {
    let Some((&control, sent)) = data.split_first() else {
        return;
    };
    let mut connection = Connection::new(LIMITS);
    let mut input = BytesMut::new();
    if control & 1 == 1 {
        input.extend_from_slice(frame::PREFACE);
        frame::put_settings(&mut input, &[]);
    }
    let piece = usize::from(control >> 1).max(1);
    let start = Instant::now();
    let mut events = Vec::new();
    let mut answered = 0u32;
    for (index, chunk) in sent.chunks(piece).enumerate() {
        input.extend_from_slice(chunk);
        connection.receive(&mut input, start, &mut events);
        for event in events.drain(..) {
            let (stream, reply) = match event {
                Event::Call { stream, body, .. } => (stream, Reply::Message(framed(&body))),
                Event::BodyTooLarge { stream } | Event::HeadTooLarge { stream, .. } => (
                    stream,
                    Reply::Status(tonic::Status::resource_exhausted("too large")),
                ),
            };
            connection.respond(stream, reply);
            answered += 1;
        }
        if index % 7 == 6 {
            for stream in connection.expire(start + Duration::from_secs(1)) {
                connection.respond(
                    stream,
                    Reply::Status(tonic::Status::deadline_exceeded("late")),
                );
            }
        }
        assert!(connection.buffered() <= 8 * 4096);
        whole_frames(connection.output().split().freeze());
    }
    connection.go_away(frame::ErrorCode::NoError, "");
    whole_frames(connection.output().split().freeze());
    let _ = answered;
});

/// An answer echoing the request body's length.
fn framed(body: &Bytes) -> Bytes {
    let mut out = vec![0, 0, 0, 0, 2];
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    Bytes::from(out)
}

/// Asserts `out` is a sequence of whole frames.
fn whole_frames(mut out: Bytes) {
    while !out.is_empty() {
        assert!(out.len() >= HEADER_LEN, "a partial frame header");
        let header = FrameHeader::read(&out);
        out.advance(HEADER_LEN);
        assert!(out.len() >= header.length, "a partial frame");
        out.advance(header.length);
    }
}
