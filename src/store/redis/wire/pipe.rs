//! A pipelined RESP2 connection over plain TCP: the transport of the store's script calls.
//!
//! Callers encode their commands straight into the connection's output buffer (under a lock,
//! see [`Pipe::call`]) and wait for their replies, which a driver task cuts out of its read
//! buffer as whole frames ([`resp::frame_len`]) and hands over without parsing them: the script
//! reply is read in place by its decoder, with no `redis::Value` tree, no per-call command
//! buffer and no second copy. Every call's commands and replies are in order, so any number of
//! calls share the socket; the driver writes everything queued since its last write at once.
//!
//! The redis crate still does everything but the hot path: the connection handshake (`AUTH`,
//! `SELECT`, `CLIENT SETINFO`, run by [`redis::aio::MultiplexedConnection::new_with_config`]
//! over the stream before this module takes it back, see [`Pipe::connect`]), and the encoding
//! and parsing of every other command (see the [`ConnectionLike`] implementation). TLS and
//! RESP3 connections are left to the redis crate's multiplexed connection altogether (see
//! [`Pipe::serves`]).

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{
    AsyncConnectionConfig, Cmd, ConnectionAddr, ConnectionInfo, ProtocolVersion, RedisError,
    RedisFuture, Value,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::time::{Instant, Sleep};

use super::resp;

/// Bytes the read buffer grows by when it runs short.
const READ_CHUNK: usize = 16 * 1024;

/// Largest reply accepted: a longer one closes the connection as a protocol error. Script
/// replies are at most a few tens of KiB (3 integers per check of a call).
const MAX_REPLY_LEN: usize = 64 * 1024 * 1024;

/// Output buffer capacity kept between writes; a larger one (after a burst) is released.
const KEPT_OUTPUT_CAPACITY: usize = 256 * 1024;

/// Why a call got no reply: the connection is closed, for the reason given.
#[derive(Debug, Clone)]
pub struct Closed {
    kind: io::ErrorKind,
    reason: Arc<str>,
}

impl Closed {
    fn new(kind: io::ErrorKind, reason: impl Into<Arc<str>>) -> Closed {
        Closed {
            kind,
            reason: reason.into(),
        }
    }
}

/// A connection error, as the redis crate reports them (`is_io_error`, and so
/// `connection::is_connection_error`, hold).
impl From<Closed> for RedisError {
    fn from(closed: Closed) -> RedisError {
        RedisError::from(io::Error::new(closed.kind, closed.reason.to_string()))
    }
}

/// Why a [`Pipe::call`] got no reply.
#[derive(Debug, Clone)]
pub enum CallError {
    /// The connection is closed.
    Closed(Closed),
    /// The call's deadline passed first. Its replies, when they come, are dropped.
    TimedOut,
}

impl From<CallError> for RedisError {
    fn from(error: CallError) -> RedisError {
        match error {
            CallError::Closed(closed) => closed.into(),
            CallError::TimedOut => RedisError::from(io::Error::new(
                io::ErrorKind::TimedOut,
                "no redis reply by the deadline",
            )),
        }
    }
}

/// A caller waiting for the next `frames` replies; `reply` is taken once it is answered
/// before they arrive (its deadline passed), and the replies are then dropped.
struct Waiter {
    frames: usize,
    deadline: Option<Instant>,
    reply: Option<oneshot::Sender<Result<Bytes, CallError>>>,
}

/// What callers and the driver share.
struct State {
    /// Commands encoded since the driver last took them.
    output: Vec<u8>,
    /// Callers in the order of their commands.
    waiting: VecDeque<Waiter>,
    /// The driver, to wake when there is output.
    driver: Option<Waker>,
    /// Set once the connection is closed: every later call fails with it.
    closed: Option<Closed>,
    /// Every handle is gone (a call in flight holds one): the driver closes the connection.
    abandoned: bool,
}

struct Shared {
    state: Mutex<State>,
    db: i64,
}

/// Ends the driver when the last [`Pipe`] clone is dropped.
struct Handle(Arc<Shared>);

impl Drop for Handle {
    fn drop(&mut self) {
        let mut state = self.0.state.lock();
        state.abandoned = true;
        if let Some(driver) = state.driver.take() {
            driver.wake();
        }
    }
}

/// A pipelined connection; clones share it. Its driver task runs on the runtime that connected
/// it and closes the connection when every clone is dropped (a call holds its clone until
/// answered) or the connection fails.
#[derive(Clone)]
pub struct Pipe {
    handle: Arc<Handle>,
}

impl Pipe {
    /// Whether a connection to `info` is made by this module: plain TCP speaking RESP2 (TLS,
    /// Unix sockets and RESP3 stay with the redis crate's multiplexed connection).
    pub fn serves(info: &ConnectionInfo) -> bool {
        matches!(info.addr(), ConnectionAddr::Tcp(..))
            && info.redis_settings().protocol() == ProtocolVersion::RESP2
    }

    /// Connects to `info` (which [`Pipe::serves`]) with `TCP_NODELAY` (each write carries every
    /// command queued by then, so Nagle's algorithm would only delay calls), runs the redis
    /// crate's handshake over the stream, then drives the stream itself. The handshake is a
    /// strict exchange of commands and replies, so the crate's reader holds no unread byte when
    /// it gives the stream back.
    pub async fn connect(
        info: &ConnectionInfo,
        config: &AsyncConnectionConfig,
    ) -> Result<Pipe, RedisError> {
        let ConnectionAddr::Tcp(host, port) = info.addr() else {
            return Err(RedisError::from(io::Error::new(
                io::ErrorKind::Unsupported,
                "only plain TCP connections are pipelined here",
            )));
        };
        let stream = TcpStream::connect((host.as_str(), *port)).await?;
        stream.set_nodelay(true)?;
        let lent = Lent::new(stream);
        let (connection, unused_driver) = MultiplexedConnection::new_with_config(
            info.redis_settings(),
            lent.clone(),
            config.clone(),
        )
        .await?;
        drop(unused_driver);
        drop(connection);
        let stream = lent.take().ok_or_else(|| {
            RedisError::from(io::Error::other("the redis handshake kept the stream"))
        })?;
        Ok(Pipe::start(stream, info.redis_settings().db()))
    }

    fn start(stream: TcpStream, db: i64) -> Pipe {
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                output: Vec::new(),
                waiting: VecDeque::new(),
                driver: None,
                closed: None,
                abandoned: false,
            }),
            db,
        });
        tokio::spawn(Driver::new(stream, shared.clone()));
        Pipe {
            handle: Arc::new(Handle(shared)),
        }
    }

    /// Sends what `encode` appends to the output buffer (one or more whole commands) and waits
    /// for their `frames` replies, returned back to back, until `deadline`. Dropping the future
    /// does not unsend the commands: their replies are then read and dropped.
    ///
    /// The driver keeps the deadlines of every call with one timer, moved from call to call,
    /// instead of a timer per call: registering a timer earlier than any other costs the
    /// runtime a wake-up of its I/O driver (an eventfd write), once per call when calls do not
    /// overlap.
    pub fn call(
        &self,
        frames: usize,
        deadline: Option<Instant>,
        encode: impl FnOnce(&mut Vec<u8>),
    ) -> impl Future<Output = Result<Bytes, CallError>> + Send + 'static {
        let (reply, replied) = oneshot::channel();
        let failed = {
            let mut state = self.handle.0.state.lock();
            match &state.closed {
                Some(closed) => Some(closed.clone()),
                None => {
                    encode(&mut state.output);
                    state.waiting.push_back(Waiter {
                        frames,
                        deadline,
                        reply: Some(reply),
                    });
                    if let Some(driver) = state.driver.take() {
                        driver.wake();
                    }
                    None
                }
            }
        };
        let held = self.handle.clone();
        async move {
            let _held = held;
            if let Some(closed) = failed {
                return Err(CallError::Closed(closed));
            }
            replied.await.unwrap_or_else(|_| {
                Err(CallError::Closed(Closed::new(
                    io::ErrorKind::BrokenPipe,
                    "the redis connection's driver stopped",
                )))
            })
        }
    }

    /// Sends `packed` (whole commands) and parses the last `keep` of its `frames` replies with
    /// the redis crate's parser; a server error in a skipped reply of a transaction is returned
    /// as that error, as the crate does.
    async fn query(
        &self,
        packed: Vec<u8>,
        frames: usize,
        keep: usize,
        transaction: bool,
    ) -> Result<Vec<Value>, RedisError> {
        let replies = self
            .call(frames, None, |output| output.extend_from_slice(&packed))
            .await?;
        let mut values = Vec::with_capacity(keep);
        let mut rest = &replies[..];
        for index in 0..frames {
            let len = resp::frame_len(rest)
                .ok()
                .flatten()
                .ok_or_else(|| io::Error::other("a reply the driver delimited is incomplete"))?;
            let value = redis::parse_redis_value(&rest[..len])?;
            rest = &rest[len..];
            if index + keep >= frames {
                values.push(value);
            } else if transaction {
                value.extract_error()?;
            }
        }
        Ok(values)
    }
}

/// The redis crate's commands over the pipe: encoded and parsed by the crate, as on its own
/// connections.
impl ConnectionLike for Pipe {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let mut values = self.query(cmd.get_packed_command(), 1, 1, false).await?;
            values
                .pop()
                .ok_or_else(|| RedisError::from(io::Error::other("no reply")))
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            self.query(
                pipeline.get_packed_pipeline(),
                offset + count,
                count,
                pipeline.is_transaction(),
            )
            .await
        })
    }

    fn get_db(&self) -> i64 {
        self.handle.0.db
    }
}

/// The task that writes the callers' commands and answers them with their replies.
struct Driver {
    stream: TcpStream,
    shared: Arc<Shared>,
    /// Commands being written, and how much of them has been.
    writing: Vec<u8>,
    written: usize,
    read: BytesMut,
    deadlines: Deadlines,
}

/// One timer for the deadlines of every caller waiting, at the earliest (`armed`).
#[derive(Default)]
struct Deadlines {
    timer: Option<Pin<Box<Sleep>>>,
    armed: Option<Instant>,
}

impl Deadlines {
    /// Answers the callers whose deadline has passed and keeps the timer on the earliest
    /// deadline left. Moving the timer later costs no registration (tokio extends it in
    /// place), so in the steady state a call costs none.
    fn poll(&mut self, cx: &mut Context<'_>, state: &mut State) {
        loop {
            let earliest = state
                .waiting
                .iter()
                .filter(|waiter| waiter.reply.is_some())
                .filter_map(|waiter| waiter.deadline)
                .min();
            let Some(earliest) = earliest else {
                return;
            };
            let timer = self
                .timer
                .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(earliest)));
            if self.armed != Some(earliest) {
                timer.as_mut().reset(earliest);
                self.armed = Some(earliest);
            }
            if timer.as_mut().poll(cx).is_pending() {
                return;
            }
            let now = Instant::now();
            for waiter in state.waiting.iter_mut() {
                if waiter.deadline.is_some_and(|deadline| deadline <= now) {
                    if let Some(reply) = waiter.reply.take() {
                        let _ = reply.send(Err(CallError::TimedOut));
                    }
                }
            }
            self.armed = None;
        }
    }
}

impl Driver {
    fn new(stream: TcpStream, shared: Arc<Shared>) -> Driver {
        Driver {
            stream,
            shared,
            writing: Vec::new(),
            written: 0,
            read: BytesMut::with_capacity(READ_CHUNK),
            deadlines: Deadlines::default(),
        }
    }

    /// Closes the connection: every caller waiting and every later call gets `closed`.
    fn close(&mut self, closed: Closed) -> Poll<()> {
        let waiting = {
            let mut state = self.shared.state.lock();
            state.closed = Some(closed.clone());
            state.output = Vec::new();
            std::mem::take(&mut state.waiting)
        };
        for waiter in waiting {
            if let Some(reply) = waiter.reply {
                let _ = reply.send(Err(CallError::Closed(closed.clone())));
            }
        }
        Poll::Ready(())
    }

    /// Writes what is queued until done or the socket is full.
    fn poll_write(&mut self, cx: &mut Context<'_>) -> Result<(), Closed> {
        while self.written < self.writing.len() {
            match Pin::new(&mut self.stream).poll_write(cx, &self.writing[self.written..]) {
                Poll::Ready(Ok(0)) => {
                    return Err(Closed::new(
                        io::ErrorKind::WriteZero,
                        "redis stopped reading",
                    ))
                }
                Poll::Ready(Ok(n)) => self.written += n,
                Poll::Ready(Err(error)) => return Err(io_closed(&error)),
                Poll::Pending => return Ok(()),
            }
        }
        self.writing.clear();
        self.written = 0;
        if self.writing.capacity() > KEPT_OUTPUT_CAPACITY {
            self.writing = Vec::new();
        }
        Ok(())
    }

    /// Reads what has arrived and answers every caller whose replies are complete.
    fn poll_read(&mut self, cx: &mut Context<'_>) -> Result<(), Closed> {
        loop {
            if self.read.capacity() - self.read.len() < READ_CHUNK / 4 {
                self.read.reserve(READ_CHUNK);
            }
            match tokio_util::io::poll_read_buf(Pin::new(&mut self.stream), cx, &mut self.read) {
                Poll::Ready(Ok(0)) => {
                    return Err(Closed::new(
                        io::ErrorKind::UnexpectedEof,
                        "redis closed the connection",
                    ));
                }
                Poll::Ready(Ok(_)) => self.answer()?,
                Poll::Ready(Err(error)) => return Err(io_closed(&error)),
                Poll::Pending => return Ok(()),
            }
        }
    }

    /// Hands every complete set of replies to its caller.
    fn answer(&mut self) -> Result<(), Closed> {
        let protocol =
            |error: resp::RespError| Closed::new(io::ErrorKind::InvalidData, error.to_string());
        loop {
            if self.read.is_empty() {
                return Ok(());
            }
            let mut state = self.shared.state.lock();
            let Some(front) = state.waiting.front() else {
                return Err(Closed::new(
                    io::ErrorKind::InvalidData,
                    "redis sent a reply nobody asked for",
                ));
            };
            let mut len = 0;
            for _ in 0..front.frames {
                match resp::frame_len(&self.read[len..]).map_err(protocol)? {
                    Some(frame) => len += frame,
                    None if self.read.len() > MAX_REPLY_LEN => {
                        return Err(Closed::new(
                            io::ErrorKind::InvalidData,
                            format!("a redis reply longer than {MAX_REPLY_LEN} bytes"),
                        ))
                    }
                    None => return Ok(()),
                }
            }
            let waiter = state.waiting.pop_front();
            drop(state);
            let replies = self.read.split_to(len).freeze();
            if let Some(reply) = waiter.and_then(|waiter| waiter.reply) {
                let _ = reply.send(Ok(replies));
            }
        }
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        loop {
            if let Err(closed) = this.poll_write(cx).and_then(|()| this.poll_read(cx)) {
                return this.close(closed);
            }
            let mut state = this.shared.state.lock();
            if this.writing.is_empty() && !state.output.is_empty() {
                std::mem::swap(&mut this.writing, &mut state.output);
                continue;
            }
            if state.abandoned {
                drop(state);
                return this.close(Closed::new(
                    io::ErrorKind::NotConnected,
                    "the redis connection was dropped",
                ));
            }
            this.deadlines.poll(cx, &mut state);
            match &state.driver {
                Some(waker) if waker.will_wake(cx.waker()) => {}
                _ => state.driver = Some(cx.waker().clone()),
            }
            return Poll::Pending;
        }
    }
}

fn io_closed(error: &io::Error) -> Closed {
    Closed::new(error.kind(), error.to_string())
}

/// A stream lent to the redis crate for the handshake and taken back afterwards.
struct Lent<S>(Arc<Mutex<Option<S>>>);

impl<S> Clone for Lent<S> {
    fn clone(&self) -> Lent<S> {
        Lent(self.0.clone())
    }
}

impl<S> Lent<S> {
    fn new(stream: S) -> Lent<S> {
        Lent(Arc::new(Mutex::new(Some(stream))))
    }

    /// The stream back; the crate's clones of the lender fail every later use.
    fn take(&self) -> Option<S> {
        self.0.lock().take()
    }

    fn with<T>(
        &self,
        use_stream: impl FnOnce(Pin<&mut S>) -> Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>>
    where
        S: Unpin,
    {
        match self.0.lock().as_mut() {
            Some(stream) => use_stream(Pin::new(stream)),
            None => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::NotConnected,
                "the stream was taken back",
            ))),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Lent<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.with(|stream| stream.poll_read(cx, buf))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Lent<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.with(|stream| stream.poll_write(cx, buf))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|stream| stream.poll_flush(cx))
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with(|stream| stream.poll_shutdown(cx))
    }
}
