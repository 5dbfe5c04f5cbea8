//! A gRPC call's request body as the server reads it: gRPC message framing checked as the bytes
//! arrive, before tonic buffers them.
//!
//! - A message whose length prefix is above `max_message` is refused at its 5-byte header,
//!   before any of it is buffered: RESOURCE_EXHAUSTED, as gRPC specifies for "sent or received
//!   message was larger than configured limit".
//! - The message being received is charged, at the length its prefix declares (tonic reserves
//!   that much as soon as it reads the prefix), to the connection's budget, the global one and
//!   the memory budget of all calls ([`Buffered`]) until it is complete; a message that does not
//!   fit is refused at its prefix (RESOURCE_EXHAUSTED: "server temporarily out of resources").
//! - A call that takes one request (every method but reflection) must send exactly one message:
//!   a second one, or none, is a cardinality violation, UNIMPLEMENTED as gRPC's status-code table
//!   says (grpc-java answers INTERNAL; tonic would silently ignore a second message). Such a call
//!   must also send its request and end its request stream within the read timeout
//!   (DEADLINE_EXCEEDED), so that a peer cannot hold a call open by never finishing it.
//!
//! Errors are `tonic::Status` values, which tonic sends as the call's status.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use tokio::time::{Instant, Sleep};
use tonic::Status;

use super::connections::{BufferFull, BufferPool, Buffered, ConnectionHandle};
use crate::service::transport_refusal::TransportRefusal;
use crate::service::Metrics;

/// Length of a gRPC message header: compressed flag, 4-byte big-endian length.
pub(super) const HEADER: usize = 5;

/// The answer to a unary call with no request message.
pub(super) const NO_MESSAGE: &str = "no request message for a method that takes one";
/// The answer to a unary call with more than one request message.
pub(super) const SECOND_MESSAGE: &str = "more than one request message for a method that takes one";

/// The bounds a request body enforces.
#[derive(Debug, Clone, Copy)]
pub struct BodyBounds {
    /// Largest message length accepted.
    pub max_message: usize,
    /// The flags that set `max_message`, named when a message is refused.
    pub max_message_flags: &'static str,
    /// The caps of partly received messages the body counts against.
    pub pool: BufferPool,
    /// Bytes of partly received messages one connection may hold (at their declared length).
    pub per_connection: usize,
    /// Bytes of partly received messages all connections may hold (likewise).
    pub global: usize,
    /// For single-request calls: time to send the request and end the stream.
    pub read_timeout: Duration,
}

/// Where the message framing stands.
#[derive(Debug, Default)]
struct Framing {
    /// Header bytes of the current message read so far (all [`HEADER`] once in its body).
    header: [u8; HEADER],
    header_read: usize,
    /// Body bytes of the current message still to come.
    body_left: usize,
    /// Messages begun.
    messages: u32,
    /// Bytes of the current, incomplete message received (0 between messages).
    partial: usize,
}

/// What the framing refuses.
#[derive(Debug, PartialEq, Eq)]
enum Violation {
    TooLarge { length: usize },
    SecondMessage,
}

impl Framing {
    /// Follows the framing through `data`; stops at the first violation.
    fn feed(&mut self, mut data: &[u8], single: bool, max_message: usize) -> Result<(), Violation> {
        while !data.is_empty() {
            if self.header_read < HEADER {
                if self.header_read == 0 {
                    if single && self.messages > 0 {
                        return Err(Violation::SecondMessage);
                    }
                    self.messages += 1;
                }
                let take = (HEADER - self.header_read).min(data.len());
                self.header[self.header_read..self.header_read + take]
                    .copy_from_slice(&data[..take]);
                self.header_read += take;
                self.partial += take;
                data = &data[take..];
                if self.header_read == HEADER {
                    let length = u32::from_be_bytes([
                        self.header[1],
                        self.header[2],
                        self.header[3],
                        self.header[4],
                    ]) as usize;
                    if length > max_message {
                        return Err(Violation::TooLarge { length });
                    }
                    self.body_left = length;
                    if length == 0 {
                        self.complete();
                    }
                }
            } else {
                let take = self.body_left.min(data.len());
                self.body_left -= take;
                self.partial += take;
                data = &data[take..];
                if self.body_left == 0 {
                    self.complete();
                }
            }
        }
        Ok(())
    }

    fn complete(&mut self) {
        self.header_read = 0;
        self.partial = 0;
    }

    /// Bytes the current, incomplete message takes once whole: its prefix and the length the
    /// prefix declares (what has arrived of the prefix while it is incomplete; 0 between
    /// messages).
    fn reserved(&self) -> usize {
        self.partial + self.body_left
    }
}

/// When a single-request call's request must be complete. The timer is armed only the first
/// time the body has to wait: a request that arrives in one read (almost every one) never
/// touches the timer wheel.
enum Deadline {
    At(Instant),
    Armed(Pin<Box<Sleep>>),
}

impl Deadline {
    fn poll_expired(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        if let Deadline::At(at) = *self {
            *self = Deadline::Armed(Box::pin(tokio::time::sleep_until(at)));
        }
        match self {
            Deadline::Armed(sleep) => sleep.as_mut().poll(cx),
            Deadline::At(_) => Poll::Pending,
        }
    }
}

/// The request body handed to tonic.
pub struct RequestBody {
    inner: Incoming,
    framing: Framing,
    single: bool,
    bounds: BodyBounds,
    buffered: Buffered,
    /// Single-request calls: when the request must be complete; cleared at its end.
    deadline: Option<Deadline>,
    metrics: Arc<Metrics>,
    /// An error was returned: nothing more is read.
    failed: bool,
}

impl RequestBody {
    /// `single`: the method takes exactly one request message.
    pub fn new(
        inner: Incoming,
        single: bool,
        bounds: BodyBounds,
        connection: &ConnectionHandle,
    ) -> RequestBody {
        RequestBody {
            inner,
            framing: Framing::default(),
            single,
            bounds,
            buffered: Buffered::new(connection, bounds.pool),
            deadline: single.then(|| Deadline::At(Instant::now() + bounds.read_timeout)),
            metrics: connection.metrics().clone(),
            failed: false,
        }
    }

    fn fail(
        &mut self,
        refusal: TransportRefusal,
        status: Status,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        self.failed = true;
        self.deadline = None;
        let _ = self.buffered.hold(0, 0, 0);
        self.metrics.record_transport_refusal(refusal);
        Poll::Ready(Some(Err(Box::new(status))))
    }

    fn check(&mut self, data: &Bytes) -> Result<(), (TransportRefusal, Status)> {
        let max = self.bounds.max_message;
        match self.framing.feed(data.chunk(), self.single, max) {
            Err(Violation::TooLarge { length }) => {
                return Err((
                    TransportRefusal::RequestSize,
                    Status::resource_exhausted(format!(
                        "grpc: received message larger than max ({length} vs. {max}; {})",
                        self.bounds.max_message_flags
                    )),
                ))
            }
            Err(Violation::SecondMessage) => {
                return Err((
                    TransportRefusal::Cardinality,
                    Status::unimplemented(SECOND_MESSAGE),
                ))
            }
            Ok(()) => {}
        }
        let (per_connection, global) = (self.bounds.per_connection, self.bounds.global);
        self.buffered
            .hold(self.framing.reserved(), per_connection, global)
            .map_err(|full| buffer_refusal(full, &self.bounds, &self.buffered))
    }
}

/// What refuses a request not received within the read timeout.
pub(super) fn read_timeout(timeout: Duration) -> Status {
    Status::deadline_exceeded(format!("the request was not received within {timeout:?}"))
}

/// What refuses a message whose bytes do not fit `full`'s budget, and how it is counted.
pub(super) fn buffer_refusal(
    full: BufferFull,
    bounds: &BodyBounds,
    buffered: &Buffered,
) -> (TransportRefusal, Status) {
    match full {
        BufferFull::Connection => (
            TransportRefusal::ConnectionBuffer,
            Status::resource_exhausted(format!(
                "this connection's partly received messages reached {} bytes",
                bounds.per_connection
            )),
        ),
        BufferFull::Global => (
            TransportRefusal::BufferedBytes,
            Status::resource_exhausted(format!(
                "partly received messages reached the server's {} bytes",
                bounds.global
            )),
        ),
        BufferFull::Memory => (
            TransportRefusal::MemoryBudget,
            Status::resource_exhausted(buffered.budget().refusal()),
        ),
    }
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        if this.failed {
            return Poll::Ready(None);
        }
        let frame = match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => frame,
            Poll::Pending => {
                if let Some(deadline) = &mut this.deadline {
                    ready!(deadline.poll_expired(cx));
                    let timeout = this.bounds.read_timeout;
                    return this.fail(TransportRefusal::ReadTimeout, read_timeout(timeout));
                }
                return Poll::Pending;
            }
        };
        match frame {
            None => {
                this.deadline = None;
                let _ = this.buffered.hold(0, 0, 0);
                if this.single && this.framing.messages == 0 {
                    return this.fail(
                        TransportRefusal::Cardinality,
                        Status::unimplemented(NO_MESSAGE),
                    );
                }
                Poll::Ready(None)
            }
            Some(Err(error)) => {
                this.failed = true;
                Poll::Ready(Some(Err(Box::new(error))))
            }
            Some(Ok(frame)) => {
                if let Some(data) = frame.data_ref() {
                    if let Err((refusal, status)) = this.check(data) {
                        return this.fail(refusal, status);
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
        }
    }

    /// Not before a single-request call's missing message has been reported.
    fn is_end_stream(&self) -> bool {
        self.failed || (self.inner.is_end_stream() && !(self.single && self.framing.messages == 0))
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(length: usize) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&(length as u32).to_be_bytes());
        bytes.extend(std::iter::repeat_n(7u8, length));
        bytes
    }

    #[test]
    fn framing_follows_messages_split_anywhere() {
        let mut two = message(3);
        two.extend(message(0));
        two.extend(message(10));
        for split in 0..two.len() {
            let mut framing = Framing::default();
            framing.feed(&two[..split], false, 10).unwrap();
            framing.feed(&two[split..], false, 10).unwrap();
            assert_eq!(framing.messages, 3, "split at {split}");
            assert_eq!(framing.partial, 0, "split at {split}");
        }
        let mut framing = Framing::default();
        framing.feed(&message(10)[..8], false, 10).unwrap();
        assert_eq!(framing.partial, 8);
        assert_eq!(framing.reserved(), 15);
        let mut framing = Framing::default();
        framing.feed(&message(10)[..3], false, 10).unwrap();
        assert_eq!(framing.reserved(), 3);
        framing.feed(&message(10)[3..], false, 10).unwrap();
        assert_eq!(framing.reserved(), 0);
    }

    #[test]
    fn a_length_above_the_limit_is_refused_at_the_header() {
        let mut framing = Framing::default();
        assert_eq!(
            framing.feed(&message(11)[..5], false, 10),
            Err(Violation::TooLarge { length: 11 })
        );
        let mut framing = Framing::default();
        assert_eq!(framing.feed(&message(10), true, 10), Ok(()));
    }

    #[test]
    fn a_second_message_is_refused_for_single_request_calls() {
        let mut two = message(3);
        two.extend(message(3));
        let mut framing = Framing::default();
        assert_eq!(framing.feed(&two, true, 10), Err(Violation::SecondMessage));
        let mut framing = Framing::default();
        assert_eq!(framing.feed(&two, false, 10), Ok(()));
        assert_eq!(framing.messages, 2);
    }
}
