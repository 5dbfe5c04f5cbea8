//! The ADS stream's response bytes as they arrive, so that the client can tell a server that
//! stalls in the middle of a message from a stream that is merely idle.
//!
//! gRPC frames each message with a 5-byte prefix: a compression flag and the message's length
//! (4 bytes, big-endian). [`Progress`] follows that framing over the DATA frames of the response
//! body and knows whether a message is partly received, since when, and how much of it. tonic's
//! decoder only ever shows whole messages, hence [`Watched`], a channel whose response bodies
//! pass through [`WatchedBody`] unchanged on their way to the decoder.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use hyper::body::{Body, Frame, SizeHint};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::codegen::http;
use tonic::transport::Channel;
use tower_service::Service;

/// Length of the prefix of a gRPC message.
const PREFIX: usize = 5;

/// Where the response bytes stand: between messages, or within one since an instant.
#[derive(Debug, Default)]
pub struct Progress {
    framing: Mutex<Framing>,
    /// Woken when a message starts to arrive.
    started: Notify,
}

#[derive(Debug, Default)]
struct Framing {
    prefix: [u8; PREFIX],
    /// Bytes of the current message's prefix received (`PREFIX`: the prefix is whole and the
    /// message's own bytes are coming).
    prefix_len: usize,
    /// The current message's length, as its prefix declares it.
    declared: u64,
    /// Of those, the bytes still to come.
    remaining: u64,
    /// When the current message's first byte arrived; `None` between messages.
    since: Option<Instant>,
}

/// A message partly received.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partial {
    /// When its first byte arrived.
    pub since: Instant,
    /// Its bytes received so far, prefix included.
    pub received: u64,
    /// Its whole length, prefix included; `None` while the prefix itself is incomplete.
    pub length: Option<u64>,
}

impl Progress {
    /// Takes in the next bytes of the body.
    pub fn feed(&self, mut data: &[u8]) {
        let mut started = false;
        {
            let mut framing = self.framing.lock();
            while !data.is_empty() {
                if framing.prefix_len < PREFIX {
                    if framing.prefix_len == 0 {
                        framing.since = Some(Instant::now());
                        started = true;
                    }
                    let take = (PREFIX - framing.prefix_len).min(data.len());
                    let at = framing.prefix_len;
                    framing.prefix[at..at + take].copy_from_slice(&data[..take]);
                    framing.prefix_len += take;
                    data = &data[take..];
                    if framing.prefix_len == PREFIX {
                        let length = [1, 2, 3, 4].map(|i| framing.prefix[i]);
                        framing.declared = u64::from(u32::from_be_bytes(length));
                        framing.remaining = framing.declared;
                    }
                } else {
                    let take = usize::try_from(framing.remaining)
                        .unwrap_or(usize::MAX)
                        .min(data.len());
                    framing.remaining -= take as u64;
                    data = &data[take..];
                }
                if framing.prefix_len == PREFIX && framing.remaining == 0 {
                    framing.prefix_len = 0;
                    framing.since = None;
                }
            }
        }
        if started {
            self.started.notify_one();
        }
    }

    /// The message partly received, if one is.
    pub fn partial(&self) -> Option<Partial> {
        let framing = self.framing.lock();
        let since = framing.since?;
        Some(if framing.prefix_len < PREFIX {
            Partial {
                since,
                received: framing.prefix_len as u64,
                length: None,
            }
        } else {
            let length = PREFIX as u64 + framing.declared;
            Partial {
                since,
                received: length - framing.remaining,
                length: Some(length),
            }
        })
    }

    /// Completes when a message has started to arrive since the last time it completed (at once
    /// if one started meanwhile).
    pub async fn started(&self) {
        self.started.notified().await;
    }
}

/// A channel whose response bodies feed `progress`.
#[derive(Clone)]
pub struct Watched {
    channel: Channel,
    progress: Arc<Progress>,
}

impl Watched {
    pub fn new(channel: Channel, progress: Arc<Progress>) -> Watched {
        Watched { channel, progress }
    }
}

impl Service<http::Request<tonic::body::Body>> for Watched {
    type Response = http::Response<WatchedBody<tonic::body::Body>>;
    type Error = tonic::transport::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Service::poll_ready(&mut self.channel, cx)
    }

    fn call(&mut self, request: http::Request<tonic::body::Body>) -> Self::Future {
        let progress = self.progress.clone();
        let call = Service::call(&mut self.channel, request);
        Box::pin(async move {
            let response = call.await?;
            Ok(response.map(|inner| WatchedBody { inner, progress }))
        })
    }
}

/// A response body passed on unchanged, its data fed to a [`Progress`] on the way.
pub struct WatchedBody<B> {
    inner: B,
    progress: Arc<Progress>,
}

impl<B> Body for WatchedBody<B>
where
    B: Body<Data = Bytes> + Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled {
            if let Some(data) = frame.data_ref() {
                self.progress.feed(data);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(length: u32) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend(length.to_be_bytes());
        bytes.extend(std::iter::repeat_n(7, length as usize));
        bytes
    }

    #[test]
    fn a_message_is_partial_from_its_first_byte_to_its_last() {
        let progress = Progress::default();
        assert_eq!(progress.partial(), None);
        let bytes = message(10);
        progress.feed(&bytes[..3]);
        let partial = progress.partial().expect("partial");
        assert_eq!((partial.received, partial.length), (3, None));
        progress.feed(&bytes[3..8]);
        let partial = progress.partial().expect("partial");
        assert_eq!((partial.received, partial.length), (8, Some(15)));
        progress.feed(&bytes[8..]);
        assert_eq!(progress.partial(), None);
    }

    #[test]
    fn frames_may_hold_several_messages_and_empty_ones() {
        let progress = Progress::default();
        let mut bytes = message(4);
        bytes.extend(message(0));
        bytes.extend(message(3));
        progress.feed(&bytes);
        assert_eq!(progress.partial(), None);
        let next = message(100);
        let mut tail = message(1);
        tail.extend(&next[..50]);
        progress.feed(&tail);
        let partial = progress.partial().expect("the next one is partial");
        assert_eq!((partial.received, partial.length), (50, Some(105)));
    }
}
