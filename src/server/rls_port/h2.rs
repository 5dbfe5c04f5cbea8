//! One HTTP/2 connection of the RLS port as a state machine without I/O: bytes read go in
//! ([`Connection::receive`]), complete requests come out as [`Event`]s, answers go in
//! ([`Connection::respond`]) and the frames to write collect in [`Connection::output`]. The
//! driver (`super::connection`) owns the socket, the calls and the clock; this owns RFC 9113: the
//! preface, SETTINGS, flow control both ways, stream states and identifiers, header blocks
//! across CONTINUATION, PING, RST_STREAM and GOAWAY.
//!
//! Bounds a client cannot pass: at most `max_concurrent_streams` streams open (calls still being
//! answered count, also after the client reset them, so resetting does not make room for more
//! work); a request body of at most `max_body` bytes; a header block of at most
//! `max_header_list` bytes; frames of at most 16 384 bytes; everything a client sends before the
//! server reads it within the windows the server advertised.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};

use super::frame::{self, flag, kind, setting, ErrorCode, FrameHeader, HEADER_LEN};
use super::head::{self, CallHead, Malformed};
use super::hpack::Decoder;

/// What a connection may take on.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_concurrent_streams: u32,
    /// The window advertised for each stream.
    pub stream_window: u32,
    /// The window advertised for the connection.
    pub connection_window: u32,
    /// The largest request body (gRPC prefix and message).
    pub max_body: usize,
    /// The largest header block, and header list (SETTINGS_MAX_HEADER_LIST_SIZE).
    pub max_header_list: usize,
}

/// What the driver acts on.
#[derive(Debug)]
pub enum Event {
    /// A request received whole.
    Call {
        stream: u32,
        head: CallHead,
        body: Bytes,
    },
    /// A request whose body passed [`Limits::max_body`]; the rest of it is dropped.
    BodyTooLarge { stream: u32 },
    /// A request whose header list passed [`Limits::max_header_list`].
    HeadTooLarge { stream: u32, size: usize },
}

/// An answer to a call.
#[derive(Debug)]
pub enum Reply {
    /// `:status: 200`, the framed message as DATA, `grpc-status: 0` as trailers.
    Message(Bytes),
    /// A trailers-only gRPC answer.
    Status(tonic::Status),
    /// A plain-text HTTP answer to a request that is not gRPC.
    Http {
        status: u16,
        text: &'static str,
        allow_post: bool,
    },
}

/// How the connection failed: the GOAWAY it sent says so too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionError {
    pub code: ErrorCode,
    pub reason: &'static str,
}

#[derive(Debug)]
enum StreamState {
    /// Head read, body arriving.
    Receiving {
        head: CallHead,
        body: Body,
        since: Instant,
    },
    /// Handed to the driver; `reset` once the client reset it (its answer is then dropped).
    Answering { reset: bool },
    /// Answered, DATA waiting for window; then the trailer block.
    Sending { data: Bytes, trailers: Bytes },
}

#[derive(Debug)]
struct Stream {
    state: StreamState,
    /// Whether the client has not ended its side.
    remote_open: bool,
    recv_window: i64,
    send_window: i64,
}

/// A request body: usually one DATA frame's slice of the read buffer, kept without a copy.
#[derive(Debug, Default)]
enum Body {
    #[default]
    Empty,
    One(Bytes),
    Many(BytesMut),
}

impl Body {
    fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::One(bytes) => bytes.len(),
            Body::Many(bytes) => bytes.len(),
        }
    }

    fn push(&mut self, data: Bytes) {
        *self = match std::mem::take(self) {
            Body::Empty => Body::One(data),
            Body::One(first) => {
                let mut joined = BytesMut::with_capacity(first.len() + data.len());
                joined.extend_from_slice(&first);
                joined.extend_from_slice(&data);
                Body::Many(joined)
            }
            Body::Many(mut joined) => {
                joined.extend_from_slice(&data);
                Body::Many(joined)
            }
        }
    }

    fn into_bytes(self) -> Bytes {
        match self {
            Body::Empty => Bytes::new(),
            Body::One(bytes) => bytes,
            Body::Many(bytes) => bytes.freeze(),
        }
    }
}

/// A header block still waiting for its CONTINUATION frames.
struct PendingBlock {
    stream: u32,
    end_stream: bool,
    block: BytesMut,
}

/// One connection's HTTP/2 state.
pub struct Connection {
    limits: Limits,
    preface_read: bool,
    settings_seen: bool,
    decoder: Decoder,
    streams: HashMap<u32, Stream>,
    /// The highest stream identifier the client opened.
    highest: u32,
    pending_block: Option<PendingBlock>,
    recv_window: i64,
    /// Bytes consumed from the connection window and not yet given back.
    unreleased: u32,
    send_window: i64,
    peer_stream_window: i64,
    peer_max_frame: usize,
    /// The last stream of the GOAWAY sent, once sent.
    goaway: Option<u32>,
    peer_goaway: bool,
    failed: Option<ConnectionError>,
    /// See [`Connection::take_grown`].
    grown: Vec<u32>,
    out: BytesMut,
}

impl Connection {
    /// A connection whose server preface (SETTINGS, and the connection window's raise) is
    /// already in [`Connection::output`].
    pub fn new(limits: Limits) -> Connection {
        let mut out = BytesMut::with_capacity(4096);
        frame::put_settings(
            &mut out,
            &[
                (
                    setting::MAX_CONCURRENT_STREAMS,
                    limits.max_concurrent_streams,
                ),
                (setting::INITIAL_WINDOW_SIZE, limits.stream_window),
                (
                    setting::MAX_HEADER_LIST_SIZE,
                    u32::try_from(limits.max_header_list).unwrap_or(u32::MAX),
                ),
            ],
        );
        let raise = i64::from(limits.connection_window) - frame::DEFAULT_WINDOW;
        if raise > 0 {
            frame::put_window_update(&mut out, 0, raise as u32);
        }
        Connection {
            limits,
            preface_read: false,
            settings_seen: false,
            decoder: Decoder::default(),
            streams: HashMap::new(),
            highest: 0,
            pending_block: None,
            recv_window: frame::DEFAULT_WINDOW.max(i64::from(limits.connection_window)),
            unreleased: 0,
            send_window: frame::DEFAULT_WINDOW,
            peer_stream_window: frame::DEFAULT_WINDOW,
            peer_max_frame: frame::DEFAULT_MAX_FRAME,
            goaway: None,
            peer_goaway: false,
            failed: None,
            grown: Vec::new(),
            out,
        }
    }

    /// Frames to write; the driver takes them (and leaves the buffer empty).
    pub fn output(&mut self) -> &mut BytesMut {
        &mut self.out
    }

    /// The error the connection failed with; nothing more is read once it has.
    pub fn failed(&self) -> Option<&ConnectionError> {
        self.failed.as_ref()
    }

    /// Whether the connection has nothing left to do: failed, or going away (either side) with
    /// no stream left.
    pub fn finished(&self) -> bool {
        self.failed.is_some()
            || ((self.goaway.is_some() || self.peer_goaway) && self.streams.is_empty())
    }

    /// Bytes of request bodies held while they arrive.
    pub fn buffered(&self) -> usize {
        self.streams
            .values()
            .map(|stream| match &stream.state {
                StreamState::Receiving { body, .. } => body.len(),
                _ => 0,
            })
            .sum()
    }

    /// When the oldest request still arriving will have taken `timeout`.
    pub fn next_expiry(&self, timeout: Duration) -> Option<Instant> {
        self.streams
            .values()
            .filter_map(|stream| match &stream.state {
                StreamState::Receiving { since, .. } => Some(*since + timeout),
                _ => None,
            })
            .min()
    }

    /// The requests still arriving that began before `before`, now handed to the driver to be
    /// answered (their bodies dropped).
    pub fn expire(&mut self, before: Instant) -> Vec<u32> {
        self.abandon_receiving(|since| since <= before)
    }

    /// Every request still arriving, handed to the driver to be answered (their bodies dropped):
    /// the server cannot hold their bytes.
    pub fn abandon_all_receiving(&mut self) -> Vec<u32> {
        self.abandon_receiving(|_| true)
    }

    fn abandon_receiving(&mut self, which: impl Fn(Instant) -> bool) -> Vec<u32> {
        let mut abandoned = Vec::new();
        for (id, stream) in &mut self.streams {
            if let StreamState::Receiving { since, .. } = &stream.state {
                if which(*since) {
                    stream.state = StreamState::Answering { reset: false };
                    abandoned.push(*id);
                }
            }
        }
        abandoned.sort_unstable();
        abandoned
    }

    /// The streams whose partly received bodies grew in the last [`Connection::receive`], most
    /// recent last: those the driver refuses when their bytes do not fit its budgets.
    pub fn take_grown(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.grown)
    }

    /// Hands the request `id`, still arriving, to the driver to be answered (its body dropped);
    /// false when it is not arriving any more.
    pub fn abandon(&mut self, id: u32) -> bool {
        match self.streams.get_mut(&id) {
            Some(stream) if matches!(stream.state, StreamState::Receiving { .. }) => {
                stream.state = StreamState::Answering { reset: false };
                true
            }
            _ => false,
        }
    }

    /// Sends GOAWAY naming the last stream that will be answered; streams the client opens
    /// after it are ignored. The connection finishes once the open ones are answered.
    pub fn go_away(&mut self, code: ErrorCode, debug: &str) {
        if self.goaway.is_none() && self.failed.is_none() {
            self.goaway = Some(self.highest);
            frame::put_goaway(&mut self.out, self.highest, code, debug);
        }
    }

    /// Sends a PING whose answer shows the client is still there.
    pub fn ping(&mut self, payload: [u8; 8]) {
        frame::put_ping(&mut self.out, false, payload);
    }

    /// Reads every whole frame in `input` (consuming it), pushing the requests completed on
    /// `events`. After a connection error, GOAWAY is in the output and nothing more is read.
    pub fn receive(&mut self, input: &mut BytesMut, now: Instant, events: &mut Vec<Event>) {
        if self.failed.is_some() {
            input.clear();
            return;
        }
        if let Err(error) = self.read_frames(input, now, events) {
            input.clear();
            let last = self.goaway.unwrap_or(self.highest).min(self.highest);
            frame::put_goaway(&mut self.out, last, error.code, error.reason);
            self.failed = Some(error);
        }
    }

    fn read_frames(
        &mut self,
        input: &mut BytesMut,
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        if !self.preface_read {
            let seen = input.len().min(frame::PREFACE.len());
            if input[..seen] != frame::PREFACE[..seen] {
                return Err(error(
                    ErrorCode::Protocol,
                    "not the HTTP/2 connection preface",
                ));
            }
            if seen < frame::PREFACE.len() {
                return Ok(());
            }
            input.advance(frame::PREFACE.len());
            self.preface_read = true;
        }
        while input.len() >= HEADER_LEN {
            let header = FrameHeader::read(input);
            if header.length > frame::DEFAULT_MAX_FRAME {
                return Err(error(ErrorCode::FrameSize, "a frame over 16384 bytes"));
            }
            if input.len() < HEADER_LEN + header.length {
                input.reserve(HEADER_LEN + header.length - input.len());
                break;
            }
            input.advance(HEADER_LEN);
            let payload = input.split_to(header.length).freeze();
            self.frame(header, payload, now, events)?;
        }
        Ok(())
    }

    fn frame(
        &mut self,
        header: FrameHeader,
        payload: Bytes,
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        if !self.settings_seen && header.kind != kind::SETTINGS {
            return Err(error(
                ErrorCode::Protocol,
                "the first frame is not SETTINGS",
            ));
        }
        if self.pending_block.is_some() && header.kind != kind::CONTINUATION {
            return Err(error(ErrorCode::Protocol, "a header block left unfinished"));
        }
        match header.kind {
            kind::DATA => self.data(header, payload, events),
            kind::HEADERS => self.headers(header, payload, now, events),
            kind::CONTINUATION => self.continuation(header, payload, now, events),
            kind::PRIORITY => {
                if header.stream == 0 {
                    return Err(error(ErrorCode::Protocol, "PRIORITY on stream 0"));
                }
                if payload.len() != 5 {
                    self.reset(header.stream, ErrorCode::FrameSize);
                }
                Ok(())
            }
            kind::RST_STREAM => self.rst_stream(header, &payload),
            kind::SETTINGS => self.settings(header, &payload),
            kind::PUSH_PROMISE => Err(error(ErrorCode::Protocol, "PUSH_PROMISE from a client")),
            kind::PING => self.ping_frame(header, &payload),
            kind::GOAWAY => {
                if header.stream != 0 || payload.len() < 8 {
                    return Err(error(ErrorCode::Protocol, "a malformed GOAWAY"));
                }
                self.peer_goaway = true;
                Ok(())
            }
            kind::WINDOW_UPDATE => self.window_update(header, &payload),
            _ => Ok(()),
        }
    }

    fn data(
        &mut self,
        header: FrameHeader,
        mut payload: Bytes,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        if header.stream == 0 {
            return Err(error(ErrorCode::Protocol, "DATA on stream 0"));
        }
        let length = payload.len();
        if length as i64 > self.recv_window {
            return Err(error(
                ErrorCode::FlowControl,
                "DATA beyond the connection window",
            ));
        }
        self.recv_window -= length as i64;
        // The connection window is given back at once: what bodies hold is bounded by the
        // driver's budgets (as the gRPC port's request bodies are), not by the window.
        self.release(length);
        let data = unpad(header.flags, &mut payload)?;
        let end_stream = header.flags & flag::END_STREAM != 0;
        let Some(stream) = self.streams.get_mut(&header.stream) else {
            if header.stream > self.highest {
                return Err(error(ErrorCode::Protocol, "DATA on a stream never opened"));
            }
            return Ok(());
        };
        if length as i64 > stream.recv_window {
            self.reset(header.stream, ErrorCode::FlowControl);
            return Ok(());
        }
        stream.recv_window -= length as i64;
        if !stream.remote_open {
            self.reset(header.stream, ErrorCode::StreamClosed);
            return Ok(());
        }
        stream.remote_open = !end_stream;
        let StreamState::Receiving { body, .. } = &mut stream.state else {
            // Answered early (a body too large): the rest is dropped.
            return Ok(());
        };
        if !data.is_empty() {
            body.push(data);
        }
        if body.len() > self.limits.max_body || announced(body) > self.limits.max_body {
            stream.state = StreamState::Answering { reset: false };
            events.push(Event::BodyTooLarge {
                stream: header.stream,
            });
            return Ok(());
        }
        let window = i64::from(self.limits.stream_window);
        if !end_stream && stream.recv_window < window / 2 {
            let increment = window - stream.recv_window;
            stream.recv_window += increment;
            frame::put_window_update(&mut self.out, header.stream, increment as u32);
        }
        if !end_stream && self.grown.last() != Some(&header.stream) {
            self.grown.push(header.stream);
        }
        if end_stream {
            self.complete(header.stream, events);
        }
        Ok(())
    }

    /// Hands a request received whole to the driver.
    fn complete(&mut self, id: u32, events: &mut Vec<Event>) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let state = std::mem::replace(&mut stream.state, StreamState::Answering { reset: false });
        if let StreamState::Receiving { head, body, .. } = state {
            events.push(Event::Call {
                stream: id,
                head,
                body: body.into_bytes(),
            });
        }
    }

    fn headers(
        &mut self,
        header: FrameHeader,
        mut payload: Bytes,
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        if header.stream == 0 {
            return Err(error(ErrorCode::Protocol, "HEADERS on stream 0"));
        }
        let mut fragment = unpad(header.flags, &mut payload)?;
        if header.flags & flag::PRIORITY != 0 {
            if fragment.len() < 5 {
                return Err(error(
                    ErrorCode::FrameSize,
                    "HEADERS too short for its priority",
                ));
            }
            fragment.advance(5);
        }
        let end_stream = header.flags & flag::END_STREAM != 0;
        if fragment.len() > self.limits.max_header_list {
            return Err(error(
                ErrorCode::EnhanceYourCalm,
                "a header block over the limit",
            ));
        }
        if header.flags & flag::END_HEADERS != 0 {
            return self.header_block(header.stream, end_stream, &fragment, now, events);
        }
        self.pending_block = Some(PendingBlock {
            stream: header.stream,
            end_stream,
            block: BytesMut::from(&fragment[..]),
        });
        Ok(())
    }

    fn continuation(
        &mut self,
        header: FrameHeader,
        payload: Bytes,
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        let Some(pending) = &mut self.pending_block else {
            return Err(error(ErrorCode::Protocol, "CONTINUATION without HEADERS"));
        };
        if pending.stream != header.stream {
            return Err(error(ErrorCode::Protocol, "CONTINUATION on another stream"));
        }
        if pending.block.len() + payload.len() > self.limits.max_header_list {
            return Err(error(
                ErrorCode::EnhanceYourCalm,
                "a header block over the limit",
            ));
        }
        pending.block.extend_from_slice(&payload);
        if header.flags & flag::END_HEADERS == 0 {
            return Ok(());
        }
        let Some(PendingBlock {
            stream,
            end_stream,
            block,
        }) = self.pending_block.take()
        else {
            return Ok(());
        };
        self.header_block(stream, end_stream, &block, now, events)
    }

    fn header_block(
        &mut self,
        id: u32,
        end_stream: bool,
        block: &[u8],
        now: Instant,
        events: &mut Vec<Event>,
    ) -> Result<(), ConnectionError> {
        let compression = |_| {
            error(
                ErrorCode::Compression,
                "a header block that cannot be decoded",
            )
        };
        if let Some(stream) = self.streams.get_mut(&id) {
            let trailers = head::read_trailers(&mut self.decoder, block).map_err(compression)?;
            let receiving = matches!(stream.state, StreamState::Receiving { .. });
            if !stream.remote_open || !receiving {
                self.reset(id, ErrorCode::StreamClosed);
            } else if !end_stream || trailers.is_err() {
                self.reset(id, ErrorCode::Protocol);
            } else {
                stream.remote_open = false;
                self.complete(id, events);
            }
            return Ok(());
        }
        if id % 2 == 0 || id <= self.highest {
            return Err(error(
                ErrorCode::Protocol,
                "HEADERS opening a stream out of order",
            ));
        }
        let read = head::read(&mut self.decoder, block).map_err(compression)?;
        if self.goaway.is_some() {
            return Ok(());
        }
        self.highest = id;
        if self.streams.len() >= self.limits.max_concurrent_streams as usize {
            frame::put_reset(&mut self.out, id, ErrorCode::RefusedStream);
            return Ok(());
        }
        let head = match read {
            Ok(head) => head,
            Err(Malformed(_)) => {
                frame::put_reset(&mut self.out, id, ErrorCode::Protocol);
                return Ok(());
            }
        };
        let too_large = (head.list_size > self.limits.max_header_list).then_some(head.list_size);
        self.streams.insert(
            id,
            Stream {
                state: StreamState::Receiving {
                    head,
                    body: Body::Empty,
                    since: now,
                },
                remote_open: !end_stream,
                recv_window: i64::from(self.limits.stream_window).max(frame::DEFAULT_WINDOW),
                send_window: self.peer_stream_window,
            },
        );
        if let Some(size) = too_large {
            if let Some(stream) = self.streams.get_mut(&id) {
                stream.state = StreamState::Answering { reset: false };
            }
            events.push(Event::HeadTooLarge { stream: id, size });
        } else if end_stream {
            self.complete(id, events);
        }
        Ok(())
    }

    fn rst_stream(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream == 0 {
            return Err(error(ErrorCode::Protocol, "RST_STREAM on stream 0"));
        }
        if payload.len() != 4 {
            return Err(error(ErrorCode::FrameSize, "RST_STREAM not 4 bytes"));
        }
        if header.stream > self.highest {
            return Err(error(
                ErrorCode::Protocol,
                "RST_STREAM on a stream never opened",
            ));
        }
        let Some(stream) = self.streams.get_mut(&header.stream) else {
            return Ok(());
        };
        match &mut stream.state {
            StreamState::Answering { reset } => {
                *reset = true;
                stream.remote_open = false;
            }
            StreamState::Receiving { .. } => {
                self.streams.remove(&header.stream);
            }
            StreamState::Sending { .. } => {
                self.streams.remove(&header.stream);
            }
        }
        Ok(())
    }

    fn settings(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream != 0 {
            return Err(error(ErrorCode::Protocol, "SETTINGS on a stream"));
        }
        if header.flags & flag::ACK != 0 {
            if !payload.is_empty() {
                return Err(error(
                    ErrorCode::FrameSize,
                    "a SETTINGS acknowledgement with a payload",
                ));
            }
            return Ok(());
        }
        if payload.len() % 6 != 0 {
            return Err(error(
                ErrorCode::FrameSize,
                "SETTINGS not a multiple of 6 bytes",
            ));
        }
        self.settings_seen = true;
        for entry in payload.chunks_exact(6) {
            let id = u16::from_be_bytes([entry[0], entry[1]]);
            let value = u32::from_be_bytes([entry[2], entry[3], entry[4], entry[5]]);
            match id {
                setting::ENABLE_PUSH if value > 1 => {
                    return Err(error(
                        ErrorCode::Protocol,
                        "SETTINGS_ENABLE_PUSH not 0 or 1",
                    ))
                }
                setting::INITIAL_WINDOW_SIZE => {
                    let value = i64::from(value);
                    if value > frame::MAX_WINDOW {
                        return Err(error(
                            ErrorCode::FlowControl,
                            "SETTINGS_INITIAL_WINDOW_SIZE over 2^31-1",
                        ));
                    }
                    let delta = value - self.peer_stream_window;
                    self.peer_stream_window = value;
                    for stream in self.streams.values_mut() {
                        stream.send_window += delta;
                        if stream.send_window > frame::MAX_WINDOW {
                            return Err(error(
                                ErrorCode::FlowControl,
                                "a stream window over 2^31-1",
                            ));
                        }
                    }
                }
                setting::MAX_FRAME_SIZE => {
                    if !(16_384..=16_777_215).contains(&value) {
                        return Err(error(
                            ErrorCode::Protocol,
                            "SETTINGS_MAX_FRAME_SIZE out of range",
                        ));
                    }
                    self.peer_max_frame = value as usize;
                }
                setting::HEADER_TABLE_SIZE
                | setting::ENABLE_PUSH
                | setting::MAX_CONCURRENT_STREAMS
                | setting::MAX_HEADER_LIST_SIZE => {}
                _ => {}
            }
        }
        frame::put_header(&mut self.out, 0, kind::SETTINGS, flag::ACK, 0);
        self.flush_blocked();
        Ok(())
    }

    fn ping_frame(&mut self, header: FrameHeader, payload: &[u8]) -> Result<(), ConnectionError> {
        if header.stream != 0 {
            return Err(error(ErrorCode::Protocol, "PING on a stream"));
        }
        let Ok(opaque) = <[u8; 8]>::try_from(payload) else {
            return Err(error(ErrorCode::FrameSize, "PING not 8 bytes"));
        };
        if header.flags & flag::ACK == 0 {
            frame::put_ping(&mut self.out, true, opaque);
        }
        Ok(())
    }

    fn window_update(
        &mut self,
        header: FrameHeader,
        payload: &[u8],
    ) -> Result<(), ConnectionError> {
        let Ok(bytes) = <[u8; 4]>::try_from(payload) else {
            return Err(error(ErrorCode::FrameSize, "WINDOW_UPDATE not 4 bytes"));
        };
        let increment = i64::from(u32::from_be_bytes(bytes) & 0x7fff_ffff);
        if header.stream == 0 {
            if increment == 0 {
                return Err(error(ErrorCode::Protocol, "a WINDOW_UPDATE of 0"));
            }
            self.send_window += increment;
            if self.send_window > frame::MAX_WINDOW {
                return Err(error(
                    ErrorCode::FlowControl,
                    "the connection window over 2^31-1",
                ));
            }
        } else {
            if header.stream > self.highest {
                return Err(error(
                    ErrorCode::Protocol,
                    "WINDOW_UPDATE on a stream never opened",
                ));
            }
            let Some(stream) = self.streams.get_mut(&header.stream) else {
                return Ok(());
            };
            if increment == 0 {
                self.reset(header.stream, ErrorCode::Protocol);
                return Ok(());
            }
            stream.send_window += increment;
            if stream.send_window > frame::MAX_WINDOW {
                self.reset(header.stream, ErrorCode::FlowControl);
                return Ok(());
            }
        }
        self.flush_blocked();
        Ok(())
    }

    /// Answers `stream` (nothing, if the client reset it). Headers go out at once; DATA as far
    /// as the windows allow, the rest when they open.
    pub fn respond(&mut self, id: u32, reply: Reply) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        if matches!(stream.state, StreamState::Answering { reset: true }) {
            self.streams.remove(&id);
            return;
        }
        let max_frame = self.peer_max_frame;
        match reply {
            Reply::Message(data) => {
                let mut block = BytesMut::with_capacity(20);
                block.extend_from_slice(&[frame::static_index::STATUS_200]);
                frame::put_indexed_name(
                    &mut block,
                    frame::static_index::CONTENT_TYPE,
                    b"application/grpc",
                );
                put_block(&mut self.out, id, &block, false, max_frame);
                let mut trailers = BytesMut::with_capacity(16);
                frame::put_literal(&mut trailers, b"grpc-status", b"0");
                stream.state = StreamState::Sending {
                    data,
                    trailers: trailers.freeze(),
                };
                self.send(id);
            }
            Reply::Status(status) => {
                let mut block = BytesMut::with_capacity(64);
                block.extend_from_slice(&[frame::static_index::STATUS_200]);
                let answer = status.into_http::<()>();
                for (name, value) in answer.headers() {
                    if name == hyper::header::CONTENT_TYPE {
                        frame::put_indexed_name(
                            &mut block,
                            frame::static_index::CONTENT_TYPE,
                            value.as_bytes(),
                        );
                    } else {
                        frame::put_literal(&mut block, name.as_str().as_bytes(), value.as_bytes());
                    }
                }
                put_block(&mut self.out, id, &block, true, max_frame);
                self.finish_stream(id);
            }
            Reply::Http {
                status,
                text,
                allow_post,
            } => {
                let mut block = BytesMut::with_capacity(64);
                frame::put_indexed_name(
                    &mut block,
                    frame::static_index::STATUS,
                    status.to_string().as_bytes(),
                );
                frame::put_indexed_name(
                    &mut block,
                    frame::static_index::CONTENT_TYPE,
                    b"text/plain; charset=utf-8",
                );
                if allow_post {
                    frame::put_indexed_name(&mut block, frame::static_index::ALLOW, b"POST");
                }
                put_block(&mut self.out, id, &block, false, max_frame);
                let trailers = Bytes::new();
                stream.state = StreamState::Sending {
                    data: Bytes::from_static(text.as_bytes()),
                    trailers,
                };
                self.send(id);
            }
        }
    }

    /// Sends what the windows allow of `id`'s DATA, and its trailers once the DATA is out (an
    /// empty trailer block: END_STREAM on the last DATA frame instead).
    fn send(&mut self, id: u32) {
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        let StreamState::Sending { data, trailers } = &mut stream.state else {
            return;
        };
        while !data.is_empty() {
            let room = self
                .send_window
                .min(stream.send_window)
                .min(self.peer_max_frame as i64);
            if room <= 0 {
                return;
            }
            let chunk = data.split_to(data.len().min(room as usize));
            let last = data.is_empty() && trailers.is_empty();
            frame::put_header(
                &mut self.out,
                chunk.len(),
                kind::DATA,
                if last { flag::END_STREAM } else { 0 },
                id,
            );
            self.out.extend_from_slice(&chunk);
            self.send_window -= chunk.len() as i64;
            stream.send_window -= chunk.len() as i64;
        }
        if !trailers.is_empty() {
            let trailers = std::mem::take(trailers);
            put_block(&mut self.out, id, &trailers, true, self.peer_max_frame);
        }
        self.finish_stream(id);
    }

    /// Ends a stream the server has answered in full: reset with NO_ERROR when the client is
    /// still sending (RFC 9113 §8.1), forgotten either way.
    fn finish_stream(&mut self, id: u32) {
        if let Some(stream) = self.streams.remove(&id) {
            if stream.remote_open {
                frame::put_reset(&mut self.out, id, ErrorCode::NoError);
            }
        }
    }

    fn flush_blocked(&mut self) {
        if self.send_window <= 0 {
            return;
        }
        let mut blocked: Vec<u32> = self
            .streams
            .iter()
            .filter(|(_, stream)| matches!(stream.state, StreamState::Sending { .. }))
            .map(|(id, _)| *id)
            .collect();
        blocked.sort_unstable();
        for id in blocked {
            self.send(id);
        }
    }

    /// Resets `id` from the server's side.
    fn reset(&mut self, id: u32, code: ErrorCode) {
        frame::put_reset(&mut self.out, id, code);
        let Some(stream) = self.streams.get_mut(&id) else {
            return;
        };
        match &stream.state {
            StreamState::Answering { .. } => {
                stream.state = StreamState::Answering { reset: true };
                stream.remote_open = false;
            }
            StreamState::Receiving { .. } => {
                self.streams.remove(&id);
            }
            StreamState::Sending { .. } => {
                self.streams.remove(&id);
            }
        }
    }

    /// Gives `bytes` back to the connection window, in WINDOW_UPDATEs of at least half of it.
    fn release(&mut self, bytes: usize) {
        self.unreleased = self.unreleased.saturating_add(bytes as u32);
        if self.unreleased >= self.limits.connection_window / 2 && self.unreleased > 0 {
            frame::put_window_update(&mut self.out, 0, self.unreleased);
            self.recv_window += i64::from(self.unreleased);
            self.unreleased = 0;
        }
    }
}

/// The prefix and message a body's 5-byte gRPC prefix announces (0 before it has arrived).
fn announced(body: &Body) -> usize {
    let prefix: [u8; 5] = match body {
        Body::One(bytes) if bytes.len() >= 5 => [bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]],
        Body::Many(bytes) if bytes.len() >= 5 => [bytes[0], bytes[1], bytes[2], bytes[3], bytes[4]],
        _ => return 0,
    };
    5 + u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]) as usize
}

/// The data of a DATA or HEADERS payload without its padding (RFC 9113 §6.1).
fn unpad(flags: u8, payload: &mut Bytes) -> Result<Bytes, ConnectionError> {
    if flags & flag::PADDED == 0 {
        return Ok(std::mem::take(payload));
    }
    let Some(&pad) = payload.first() else {
        return Err(error(
            ErrorCode::FrameSize,
            "a padded frame without its pad length",
        ));
    };
    let pad = usize::from(pad);
    if pad >= payload.len() {
        return Err(error(ErrorCode::Protocol, "padding as long as the frame"));
    }
    let end = payload.len() - pad;
    Ok(payload.slice(1..end))
}

/// A header block as HEADERS and, past the client's frame size, CONTINUATION frames.
fn put_block(out: &mut BytesMut, stream: u32, block: &[u8], end_stream: bool, max_frame: usize) {
    let mut chunks = block.chunks(max_frame);
    let first = chunks.next().unwrap_or(&[]);
    let single = block.len() <= max_frame;
    let mut flags = if end_stream { flag::END_STREAM } else { 0 };
    if single {
        flags |= flag::END_HEADERS;
    }
    frame::put_header(out, first.len(), kind::HEADERS, flags, stream);
    out.extend_from_slice(first);
    let mut rest = chunks.peekable();
    while let Some(chunk) = rest.next() {
        let last = rest.peek().is_none();
        frame::put_header(
            out,
            chunk.len(),
            kind::CONTINUATION,
            if last { flag::END_HEADERS } else { 0 },
            stream,
        );
        out.extend_from_slice(chunk);
    }
}

fn error(code: ErrorCode, reason: &'static str) -> ConnectionError {
    ConnectionError { code, reason }
}

#[cfg(test)]
mod tests;
