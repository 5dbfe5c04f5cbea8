use bytes::BufMut;

use super::*;
use crate::server::rls_port::frame::{put_header, put_literal, static_index};
use crate::server::unary_rls;

const LIMITS: Limits = Limits {
    max_concurrent_streams: 4,
    stream_window: 1 << 20,
    connection_window: 1 << 20,
    max_body: 100,
    max_header_list: 16 << 10,
};

/// A frame the server wrote.
#[derive(Debug)]
struct Written {
    header: FrameHeader,
    payload: Bytes,
}

fn written(connection: &mut Connection) -> Vec<Written> {
    let mut out = connection.output().split().freeze();
    let mut frames = Vec::new();
    while out.len() >= HEADER_LEN {
        let header = FrameHeader::read(&out);
        out.advance(HEADER_LEN);
        let payload = out.split_to(header.length);
        frames.push(Written { header, payload });
    }
    assert!(out.is_empty(), "a partial frame written");
    frames
}

fn kinds(frames: &[Written]) -> Vec<u8> {
    frames.iter().map(|f| f.header.kind).collect()
}

/// A client: the preface and its SETTINGS sent, the server's answer read.
fn open(limits: Limits) -> (Connection, Vec<Event>) {
    let mut connection = Connection::new(limits);
    let greeting = written(&mut connection);
    assert_eq!(greeting[0].header.kind, kind::SETTINGS);
    let raised = limits.connection_window > 65_535;
    assert_eq!(greeting.len(), 1 + usize::from(raised));
    let mut input = BytesMut::new();
    input.put_slice(frame::PREFACE);
    frame::put_settings(&mut input, &[]);
    let mut events = Vec::new();
    connection.receive(&mut input, Instant::now(), &mut events);
    let ack = written(&mut connection);
    assert_eq!(kinds(&ack), vec![kind::SETTINGS]);
    assert_eq!(ack[0].header.flags, flag::ACK);
    (connection, events)
}

fn request_block(path: &str) -> BytesMut {
    let mut block = BytesMut::new();
    for (name, value) in [
        (":method", "POST"),
        (":scheme", "http"),
        (":path", path),
        (":authority", "ratelimit"),
        ("content-type", "application/grpc"),
        ("te", "trailers"),
    ] {
        put_literal(&mut block, name.as_bytes(), value.as_bytes());
    }
    block
}

fn headers(input: &mut BytesMut, stream: u32, flags: u8) {
    let block = request_block(unary_rls::PATH);
    put_header(
        input,
        block.len(),
        kind::HEADERS,
        flags | flag::END_HEADERS,
        stream,
    );
    input.put_slice(&block);
}

fn data(input: &mut BytesMut, stream: u32, bytes: &[u8], end: bool) {
    put_header(
        input,
        bytes.len(),
        kind::DATA,
        if end { flag::END_STREAM } else { 0 },
        stream,
    );
    input.put_slice(bytes);
}

fn feed(connection: &mut Connection, input: &mut BytesMut) -> Vec<Event> {
    let mut events = Vec::new();
    connection.receive(input, Instant::now(), &mut events);
    events
}

fn decode_block(decoder: &mut Decoder, block: &[u8]) -> Vec<(String, String)> {
    let mut fields = Vec::new();
    decoder
        .decode(block, |n, v| {
            fields.push((
                String::from_utf8(n.to_vec()).unwrap(),
                String::from_utf8(v.to_vec()).unwrap(),
            ))
        })
        .unwrap();
    fields
}

#[test]
fn a_request_is_handed_over_whole_and_answered_with_headers_data_and_trailers() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    headers(&mut input, 1, 0);
    data(&mut input, 1, b"\0\0\0\0\x03abc", true);
    let events = feed(&mut connection, &mut input);
    let [Event::Call {
        stream: 1,
        head,
        body,
    }] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(head.route, super::head::Route::ShouldRateLimit);
    assert_eq!(&body[..], b"\0\0\0\0\x03abc");
    connection.respond(1, Reply::Message(Bytes::from_static(b"\0\0\0\0\x01z")));
    let frames = written(&mut connection);
    assert_eq!(
        kinds(&frames),
        vec![kind::HEADERS, kind::DATA, kind::HEADERS]
    );
    let mut decoder = Decoder::default();
    assert_eq!(
        decode_block(&mut decoder, &frames[0].payload),
        vec![
            (":status".into(), "200".into()),
            ("content-type".into(), "application/grpc".into())
        ]
    );
    assert_eq!(frames[0].header.flags, flag::END_HEADERS);
    assert_eq!(&frames[1].payload[..], b"\0\0\0\0\x01z");
    assert_eq!(frames[1].header.flags, 0);
    assert_eq!(
        decode_block(&mut decoder, &frames[2].payload),
        vec![("grpc-status".into(), "0".into())]
    );
    assert_eq!(frames[2].header.flags, flag::END_HEADERS | flag::END_STREAM);
    assert!(!connection.finished());
}

#[test]
fn a_header_block_may_continue_and_a_body_may_come_in_pieces() {
    let (mut connection, _) = open(LIMITS);
    let block = request_block(unary_rls::PATH);
    let (first, rest) = block.split_at(7);
    let mut input = BytesMut::new();
    put_header(&mut input, first.len(), kind::HEADERS, 0, 3);
    input.put_slice(first);
    put_header(
        &mut input,
        rest.len(),
        kind::CONTINUATION,
        flag::END_HEADERS,
        3,
    );
    input.put_slice(rest);
    data(&mut input, 3, b"\0\0\0", false);
    data(&mut input, 3, b"\0\x01", false);
    // A partial frame stays in the input until the rest arrives.
    let mut last = BytesMut::new();
    data(&mut last, 3, b"q", true);
    input.put_slice(&last[..5]);
    assert!(feed(&mut connection, &mut input).is_empty());
    input.put_slice(&last[5..]);
    let events = feed(&mut connection, &mut input);
    let [Event::Call {
        stream: 3, body, ..
    }] = &events[..]
    else {
        panic!("{events:?}");
    };
    assert_eq!(&body[..], b"\0\0\0\0\x01q");
}

#[test]
fn streams_past_the_limit_are_refused_and_reset_calls_keep_their_place() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    for stream in [1, 3, 5, 7, 9] {
        headers(&mut input, stream, flag::END_STREAM);
    }
    let events = feed(&mut connection, &mut input);
    assert_eq!(events.len(), 4);
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::RST_STREAM]);
    assert_eq!(frames[0].header.stream, 9);
    assert_eq!(
        &frames[0].payload[..],
        &(ErrorCode::RefusedStream as u32).to_be_bytes()
    );
    // The client resets stream 1: its call still runs, so it still counts.
    put_header(&mut input, 4, kind::RST_STREAM, 0, 1);
    input.put_u32(ErrorCode::NoError as u32);
    headers(&mut input, 11, flag::END_STREAM);
    assert!(feed(&mut connection, &mut input).is_empty());
    assert_eq!(kinds(&written(&mut connection)), vec![kind::RST_STREAM]);
    // Its answer is dropped, and then there is room again.
    connection.respond(1, Reply::Message(Bytes::from_static(b"\0\0\0\0\0")));
    assert!(written(&mut connection).is_empty());
    headers(&mut input, 13, flag::END_STREAM);
    assert_eq!(feed(&mut connection, &mut input).len(), 1);
}

#[test]
fn a_body_over_the_limit_is_refused_without_being_held() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    headers(&mut input, 1, 0);
    data(&mut input, 1, &[0; 60], false);
    assert!(feed(&mut connection, &mut input).is_empty());
    assert_eq!(connection.buffered(), 60);
    data(&mut input, 1, &[0; 60], false);
    let events = feed(&mut connection, &mut input);
    assert!(matches!(events[..], [Event::BodyTooLarge { stream: 1 }]));
    assert_eq!(connection.buffered(), 0);
    data(&mut input, 1, &[0; 60], false);
    assert!(feed(&mut connection, &mut input).is_empty());
    connection.respond(
        1,
        Reply::Status(tonic::Status::resource_exhausted("too large")),
    );
    let frames = written(&mut connection);
    // Trailers-only, then NO_ERROR: the client was still sending.
    assert_eq!(kinds(&frames), vec![kind::HEADERS, kind::RST_STREAM]);
    let fields = decode_block(&mut Decoder::default(), &frames[0].payload);
    assert!(
        fields.contains(&("grpc-status".into(), "8".into())),
        "{fields:?}"
    );
    assert!(
        fields.contains(&("grpc-message".into(), "too%20large".into())),
        "{fields:?}"
    );
}

#[test]
fn windows_are_given_back_as_data_arrives() {
    let limits = Limits {
        connection_window: 65_535,
        stream_window: 65_535,
        max_body: 1 << 20,
        ..LIMITS
    };
    let (mut connection, _) = open(limits);
    let mut input = BytesMut::new();
    headers(&mut input, 1, 0);
    let mut message = vec![0, 0, 0x02, 0, 0];
    message.resize(5 + (2 << 16), 7);
    for chunk in message.chunks(16_384) {
        data(&mut input, 1, chunk, false);
    }
    assert!(feed(&mut connection, &mut input).is_empty());
    assert!(connection.failed().is_none());
    assert_eq!(connection.buffered(), message.len());
    assert_eq!(connection.take_grown(), vec![1]);
    let updates: Vec<u32> = written(&mut connection)
        .iter()
        .filter(|f| f.header.kind == kind::WINDOW_UPDATE)
        .map(|f| f.header.stream)
        .collect();
    assert!(updates.contains(&0) && updates.contains(&1), "{updates:?}");
    // Refused while still arriving: its bytes are dropped.
    assert!(connection.abandon(1));
    assert_eq!(connection.buffered(), 0);
    assert!(!connection.abandon(1));
}

#[test]
fn a_body_announcing_more_than_the_limit_is_refused_at_its_prefix() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    headers(&mut input, 1, 0);
    data(&mut input, 1, &[0, 0, 0, 1, 0], false);
    let events = feed(&mut connection, &mut input);
    assert!(
        matches!(events[..], [Event::BodyTooLarge { stream: 1 }]),
        "{events:?}"
    );
}

#[test]
fn answers_wait_for_the_clients_window() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    frame::put_settings(&mut input, &[(setting::INITIAL_WINDOW_SIZE, 0)]);
    headers(&mut input, 1, 0);
    data(&mut input, 1, b"\0\0\0\0\0", true);
    assert_eq!(feed(&mut connection, &mut input).len(), 1);
    written(&mut connection);
    connection.respond(1, Reply::Message(Bytes::from_static(b"\0\0\0\0\x02hi")));
    assert_eq!(kinds(&written(&mut connection)), vec![kind::HEADERS]);
    frame::put_window_update(&mut input, 1, 3);
    feed(&mut connection, &mut input);
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::DATA]);
    assert_eq!(&frames[0].payload[..], b"\0\0\0");
    frame::put_window_update(&mut input, 1, 100);
    feed(&mut connection, &mut input);
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::DATA, kind::HEADERS]);
    assert_eq!(&frames[0].payload[..], b"\0\x02hi");
}

#[test]
fn going_away_ignores_new_streams_and_finishes_with_the_open_ones() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    headers(&mut input, 1, flag::END_STREAM);
    assert_eq!(feed(&mut connection, &mut input).len(), 1);
    connection.go_away(ErrorCode::NoError, "");
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::GOAWAY]);
    assert_eq!(&frames[0].payload[..4], &1u32.to_be_bytes());
    headers(&mut input, 3, flag::END_STREAM);
    assert!(feed(&mut connection, &mut input).is_empty());
    assert!(!connection.finished());
    connection.respond(1, Reply::Message(Bytes::from_static(b"\0\0\0\0\0")));
    assert!(connection.finished());
}

#[test]
fn pings_are_answered_and_protocol_errors_end_the_connection() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    frame::put_ping(&mut input, false, *b"12345678");
    feed(&mut connection, &mut input);
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::PING]);
    assert_eq!(frames[0].header.flags, flag::ACK);
    assert_eq!(&frames[0].payload[..], b"12345678");

    type Send = Box<dyn Fn(&mut BytesMut)>;
    let cases: Vec<(Send, ErrorCode)> = vec![
        (
            Box::new(|i| put_header(i, 20_000, kind::DATA, 0, 1)),
            ErrorCode::FrameSize,
        ),
        (Box::new(|i| data(i, 5, b"x", true)), ErrorCode::Protocol),
        (
            Box::new(|i| {
                headers(i, 3, flag::END_STREAM);
                headers(i, 1, flag::END_STREAM);
            }),
            ErrorCode::Protocol,
        ),
        (
            Box::new(|i| headers(i, 2, flag::END_STREAM)),
            ErrorCode::Protocol,
        ),
        (
            Box::new(|i| {
                put_header(i, 3, kind::CONTINUATION, flag::END_HEADERS, 1);
                i.put_slice(b"abc");
            }),
            ErrorCode::Protocol,
        ),
        (
            Box::new(|i| {
                put_header(i, 1, kind::HEADERS, flag::END_HEADERS, 1);
                i.put_u8(0xff);
            }),
            ErrorCode::Compression,
        ),
        (
            Box::new(|i| frame::put_window_update(i, 0, 0)),
            ErrorCode::Protocol,
        ),
        (
            Box::new(|i| {
                put_header(i, 0, kind::PUSH_PROMISE, 0, 1);
            }),
            ErrorCode::Protocol,
        ),
    ];
    for (index, (send, code)) in cases.into_iter().enumerate() {
        let (mut connection, _) = open(LIMITS);
        let mut input = BytesMut::new();
        send(&mut input);
        feed(&mut connection, &mut input);
        assert_eq!(
            connection.failed().map(|f| f.code),
            Some(code),
            "case {index}"
        );
        let frames = written(&mut connection);
        assert_eq!(frames.last().map(|f| f.header.kind), Some(kind::GOAWAY));
    }
}

#[test]
fn a_client_that_does_not_speak_http2_is_refused() {
    let mut connection = Connection::new(LIMITS);
    written(&mut connection);
    let mut input = BytesMut::from(&b"GET / HTTP/1.1\r\n\r\n"[..]);
    feed(&mut connection, &mut input);
    assert_eq!(
        connection.failed().map(|f| f.code),
        Some(ErrorCode::Protocol)
    );
}

#[test]
fn plain_http_answers_end_with_their_text() {
    let (mut connection, _) = open(LIMITS);
    let mut input = BytesMut::new();
    headers(&mut input, 1, flag::END_STREAM);
    feed(&mut connection, &mut input);
    connection.respond(
        1,
        Reply::Http {
            status: 405,
            text: "gRPC calls are POSTs\n",
            allow_post: true,
        },
    );
    let frames = written(&mut connection);
    assert_eq!(kinds(&frames), vec![kind::HEADERS, kind::DATA]);
    let fields = decode_block(&mut Decoder::default(), &frames[0].payload);
    assert_eq!(fields[0], (":status".into(), "405".into()));
    assert!(fields.contains(&("allow".into(), "POST".into())));
    assert_eq!(frames[1].header.flags, flag::END_STREAM);
    assert_eq!(&frames[1].payload[..], b"gRPC calls are POSTs\n");
    let _ = static_index::STATUS;
}

#[test]
fn requests_still_arriving_expire_and_can_be_abandoned() {
    let (mut connection, _) = open(LIMITS);
    let start = Instant::now();
    let mut input = BytesMut::new();
    headers(&mut input, 1, 0);
    data(&mut input, 1, b"\0\0", false);
    let mut events = Vec::new();
    connection.receive(&mut input, start, &mut events);
    let timeout = Duration::from_secs(5);
    assert_eq!(connection.next_expiry(timeout), Some(start + timeout));
    assert!(connection.expire(start - Duration::from_secs(1)).is_empty());
    assert_eq!(connection.expire(start), vec![1]);
    assert_eq!(connection.next_expiry(timeout), None);
    assert_eq!(connection.buffered(), 0);
    headers(&mut input, 3, 0);
    connection.receive(&mut input, start, &mut events);
    assert_eq!(connection.abandon_all_receiving(), vec![3]);
}

#[test]
fn a_header_list_over_the_bound_is_refused_without_reading_it_all() {
    let (mut connection, _) = open(LIMITS);
    let mut block = request_block(unary_rls::PATH);
    // One 4 000-byte entry added to the table, then referred to 2 000 times.
    let indexed = block.len();
    put_literal(&mut block, b"x-big", "v".repeat(3_900).as_bytes());
    block[indexed] = 0x40;
    let referred = block.len();
    block.resize(referred + 2_000, 0x80 | 62);
    let mut input = BytesMut::new();
    let (first, rest) = block.split_at(block.len() / 2);
    put_header(&mut input, first.len(), kind::HEADERS, flag::END_STREAM, 1);
    input.put_slice(first);
    put_header(
        &mut input,
        rest.len(),
        kind::CONTINUATION,
        flag::END_HEADERS,
        1,
    );
    input.put_slice(rest);
    let events = feed(&mut connection, &mut input);
    let [Event::HeadTooLarge { stream: 1, size }] = events[..] else {
        panic!("{events:?}");
    };
    assert!(size > 2_000 * 3_900, "{size}");
    assert!(connection.failed().is_none());
}
