//! The open gRPC connections: how many there are, what each is doing, and which one to close when
//! the cap is reached.
//!
//! Each connection counts its open calls in two kinds: *calls* that take one request and end
//! (unary RPCs) and *streaming calls* that stay open (health `Watch`, reflection). A connection
//! is idle while it has no call of the first kind; it has been idle since its last call ended
//! (or since it was accepted).
//!
//! At the cap, a new connection is taken by shedding the connection idle the longest: one
//! without any call first, else one that holds only streaming calls. The shed connection is sent
//! GOAWAY and closed [`SHED_GRACE`] later if its streams are still open. The scan that finds it
//! runs only at the cap (about 1 µs per thousand connections). When every connection has a call
//! in flight, or [`MAX_SHEDDING`] are already being closed, the new connection is closed at once.
//!
//! Calls and streaming calls are counted with atomics on the connection's own lane; the
//! registry's lock is taken only to accept, close and shed connections.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::memory_budget::MemoryBudget;
use crate::service::transport_refusal::TransportRefusal;
use crate::service::Metrics;

/// How long a connection told to close (shed or idle) may keep its open streams before it is
/// closed anyway.
pub const SHED_GRACE: Duration = Duration::from_secs(1);

/// Most connections being shed at once beyond the cap; the descriptor reserve covers them.
pub const MAX_SHEDDING: usize = 16;

/// Every open gRPC connection, and the budgets they share.
pub struct Registry {
    origin: Instant,
    cap: usize,
    open: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    shedding: AtomicUsize,
    streaming_calls: AtomicUsize,
    buffered: [AtomicUsize; BufferPool::COUNT],
    budget: Arc<MemoryBudget>,
    metrics: Arc<Metrics>,
}

/// One gRPC connection's state, shared by its calls and the registry.
pub struct Connection {
    id: u64,
    calls: AtomicU32,
    streaming: AtomicU32,
    /// Milliseconds after the registry's origin when the last call ended (or it was accepted).
    idle_since_ms: AtomicU64,
    buffered: [AtomicUsize; BufferPool::COUNT],
    shed: Notify,
    shedding: AtomicBool,
    /// A call was opened on it: it completed the HTTP/2 handshake and is a real client.
    used: AtomicBool,
}

/// Why a new connection was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

impl Registry {
    /// A registry for at most `cap` connections (plus up to [`MAX_SHEDDING`] being closed),
    /// whose calls share `budget`.
    pub fn new(cap: usize, budget: Arc<MemoryBudget>, metrics: Arc<Metrics>) -> Arc<Registry> {
        Arc::new(Registry {
            origin: Instant::now(),
            cap: cap.max(1),
            open: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            shedding: AtomicUsize::new(0),
            streaming_calls: AtomicUsize::new(0),
            buffered: Default::default(),
            budget,
            metrics,
        })
    }

    /// Open connections (those being shed included).
    pub fn open_connections(&self) -> usize {
        self.open.lock().len()
    }

    /// Connections admitted since startup.
    pub fn admitted(&self) -> u64 {
        self.next_id.load(Ordering::Relaxed)
    }

    /// Streaming calls open on all connections.
    pub fn streaming_calls(&self) -> usize {
        self.streaming_calls.load(Ordering::Relaxed)
    }

    /// Bytes of partly received request messages on all connections, both pools.
    pub fn buffered(&self) -> usize {
        self.buffered
            .iter()
            .map(|pool| pool.load(Ordering::Relaxed))
            .sum()
    }

    /// The memory budget every call of every connection is charged to.
    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.budget
    }

    fn now_ms(&self) -> u64 {
        self.origin.elapsed().as_millis() as u64
    }

    /// Registers a new connection, shedding the idle-most one when at the cap; the connection
    /// leaves the registry when the returned [`Registered`] is dropped.
    pub fn admit(self: &Arc<Registry>) -> Result<Registered, Refused> {
        let mut open = self.open.lock();
        if open.len() >= self.cap {
            if self.shedding.load(Ordering::Relaxed) >= MAX_SHEDDING {
                self.metrics
                    .record_transport_refusal(TransportRefusal::ConnectionRefused);
                return Err(Refused);
            }
            let victim = open
                .values()
                .filter(|c| !c.shedding.load(Ordering::Relaxed))
                .filter(|c| c.calls.load(Ordering::Relaxed) == 0)
                .min_by_key(|c| {
                    (
                        c.streaming.load(Ordering::Relaxed) > 0,
                        c.idle_since_ms.load(Ordering::Relaxed),
                    )
                });
            let Some(victim) = victim else {
                self.metrics
                    .record_transport_refusal(TransportRefusal::ConnectionRefused);
                return Err(Refused);
            };
            victim.shedding.store(true, Ordering::Relaxed);
            self.shedding.fetch_add(1, Ordering::Relaxed);
            victim.shed.notify_one();
            self.metrics
                .record_transport_refusal(TransportRefusal::ConnectionShed);
        }
        let connection = Arc::new(Connection {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            calls: AtomicU32::new(0),
            streaming: AtomicU32::new(0),
            idle_since_ms: AtomicU64::new(self.now_ms()),
            buffered: Default::default(),
            shed: Notify::new(),
            shedding: AtomicBool::new(false),
            used: AtomicBool::new(false),
        });
        open.insert(connection.id, connection.clone());
        Ok(Registered {
            registry: self.clone(),
            connection,
        })
    }
}

/// A connection's place in the registry, given up on drop.
pub struct Registered {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
}

/// What a connection's calls need of it: its counters and the registry's budgets.
#[derive(Clone)]
pub struct ConnectionHandle {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
}

impl ConnectionHandle {
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.registry.metrics
    }

    pub fn budget(&self) -> &Arc<MemoryBudget> {
        &self.registry.budget
    }

    /// The connection's number, unique in the process.
    pub fn id(&self) -> u64 {
        self.connection.id
    }
}

impl Registered {
    /// For the connection's calls: their counters and budgets, without the registration itself
    /// (which ends with the connection, not with its last call).
    pub fn handle(&self) -> ConnectionHandle {
        ConnectionHandle {
            registry: self.registry.clone(),
            connection: self.connection.clone(),
        }
    }

    /// Whether a call was ever opened on the connection. One that never had any may be closed
    /// at once: no request of its can be in flight, and it may not even speak HTTP/2.
    pub fn used(&self) -> bool {
        self.connection.used.load(Ordering::Relaxed)
    }

    /// Completes when the registry chose this connection to make room for a new one.
    pub async fn shed(&self) {
        self.connection.shed.notified().await;
    }

    /// Completes once the connection has had no call at all for `timeout`.
    pub async fn idle_for(&self, timeout: Duration) {
        loop {
            let connection = &self.connection;
            let wait = if connection.calls.load(Ordering::Acquire) == 0
                && connection.streaming.load(Ordering::Acquire) == 0
            {
                let since = connection.idle_since_ms.load(Ordering::Acquire);
                let idle = Duration::from_millis(self.registry.now_ms().saturating_sub(since));
                match timeout.checked_sub(idle) {
                    Some(left) if !left.is_zero() => left,
                    _ => return,
                }
            } else {
                timeout
            };
            tokio::time::sleep(wait).await;
        }
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.registry.open.lock().remove(&self.connection.id);
        if self.connection.shedding.load(Ordering::Relaxed) {
            self.registry.shedding.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Which kind of call a [`CallGuard`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallKind {
    /// Takes one request and ends (unary RPCs).
    Call,
    /// Stays open (health `Watch`, reflection).
    Streaming,
}

/// Why a streaming call was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamingRefused {
    Global,
    PerConnection,
}

/// One open call of a connection, counted until dropped (when its response ends or it is reset).
pub struct CallGuard {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    kind: CallKind,
}

impl CallGuard {
    /// Counts a call of `kind` on `registered`'s connection. A streaming call is refused when
    /// the connection already has `per_connection` of them or all connections `global`.
    /// `max_streams` is the connection's stream limit: reaching it is counted in the metrics.
    pub fn open(
        handle: &ConnectionHandle,
        kind: CallKind,
        max_streams: u32,
        global: usize,
        per_connection: u32,
    ) -> Result<CallGuard, StreamingRefused> {
        let (registry, connection) = (&handle.registry, &handle.connection);
        if kind == CallKind::Streaming {
            if connection.streaming.fetch_add(1, Ordering::AcqRel) >= per_connection {
                connection.streaming.fetch_sub(1, Ordering::AcqRel);
                return Err(StreamingRefused::PerConnection);
            }
            if registry.streaming_calls.fetch_add(1, Ordering::AcqRel) >= global {
                registry.streaming_calls.fetch_sub(1, Ordering::AcqRel);
                connection.streaming.fetch_sub(1, Ordering::AcqRel);
                return Err(StreamingRefused::Global);
            }
        } else {
            connection.calls.fetch_add(1, Ordering::AcqRel);
        }
        connection.used.store(true, Ordering::Relaxed);
        let open =
            connection.calls.load(Ordering::Relaxed) + connection.streaming.load(Ordering::Relaxed);
        if open >= max_streams {
            registry
                .metrics
                .record_transport_refusal(TransportRefusal::ConcurrentStreams);
        }
        Ok(CallGuard {
            registry: registry.clone(),
            connection: connection.clone(),
            kind,
        })
    }
}

impl Drop for CallGuard {
    fn drop(&mut self) {
        let connection = &self.connection;
        let calls_left = match self.kind {
            CallKind::Call => connection.calls.fetch_sub(1, Ordering::AcqRel) - 1,
            CallKind::Streaming => {
                connection.streaming.fetch_sub(1, Ordering::AcqRel);
                self.registry.streaming_calls.fetch_sub(1, Ordering::AcqRel);
                connection.calls.load(Ordering::Acquire)
            }
        };
        if calls_left == 0 {
            connection
                .idle_since_ms
                .store(self.registry.now_ms(), Ordering::Release);
        }
    }
}

/// Which budget refused bytes of a partly received message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferFull {
    Connection,
    Global,
    /// The memory budget of all calls ([`MemoryBudget`]).
    Memory,
}

/// Which caps of partly received messages a call's messages count against. RLQS usage reports
/// may be far larger than any other request (a report names every bucket of an Envoy), so they
/// have caps of their own: a large report being received never takes the room of the small
/// messages of the connection's other calls (Envoy may send its RLS calls on the same
/// connection), nor theirs its room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferPool {
    /// Request messages of every method but RLQS (`--max-request-size` each).
    Requests,
    /// RLQS usage reports.
    Reports,
}

impl BufferPool {
    const COUNT: usize = 2;

    fn index(self) -> usize {
        match self {
            BufferPool::Requests => 0,
            BufferPool::Reports => 1,
        }
    }
}

/// Bytes of partly received request messages held by one call, charged to its connection's
/// budget and the global one of its [`BufferPool`] and to the memory budget, and given back on
/// drop.
pub struct Buffered {
    registry: Arc<Registry>,
    connection: Arc<Connection>,
    pool: usize,
    held: usize,
}

impl Buffered {
    /// The memory budget it charges, for refusals to name.
    pub fn budget(&self) -> &MemoryBudget {
        &self.registry.budget
    }

    pub fn new(handle: &ConnectionHandle, pool: BufferPool) -> Buffered {
        Buffered {
            registry: handle.registry.clone(),
            connection: handle.connection.clone(),
            pool: pool.index(),
            held: 0,
        }
    }

    /// Holds `bytes` in total from now on: more is charged (refused, and nothing changed, when
    /// the connection would pass `per_connection`, all connections `global`, or the memory
    /// budget its limit), less given back.
    pub fn hold(
        &mut self,
        bytes: usize,
        per_connection: usize,
        global: usize,
    ) -> Result<(), BufferFull> {
        let connection = &self.connection.buffered[self.pool];
        let all = &self.registry.buffered[self.pool];
        if bytes <= self.held {
            let back = self.held - bytes;
            connection.fetch_sub(back, Ordering::AcqRel);
            all.fetch_sub(back, Ordering::AcqRel);
            self.registry.budget.release(back);
            self.held = bytes;
            return Ok(());
        }
        let more = bytes - self.held;
        if connection.fetch_add(more, Ordering::AcqRel) + more > per_connection {
            connection.fetch_sub(more, Ordering::AcqRel);
            return Err(BufferFull::Connection);
        }
        if all.fetch_add(more, Ordering::AcqRel) + more > global {
            all.fetch_sub(more, Ordering::AcqRel);
            connection.fetch_sub(more, Ordering::AcqRel);
            return Err(BufferFull::Global);
        }
        if self.registry.budget.charge(more).is_err() {
            all.fetch_sub(more, Ordering::AcqRel);
            connection.fetch_sub(more, Ordering::AcqRel);
            return Err(BufferFull::Memory);
        }
        self.held = bytes;
        Ok(())
    }
}

impl Drop for Buffered {
    fn drop(&mut self) {
        if self.held > 0 {
            self.connection.buffered[self.pool].fetch_sub(self.held, Ordering::AcqRel);
            self.registry.buffered[self.pool].fetch_sub(self.held, Ordering::AcqRel);
            self.registry.budget.release(self.held);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry(cap: usize) -> Arc<Registry> {
        registry_with_budget(cap, 1 << 30)
    }

    fn registry_with_budget(cap: usize, budget: usize) -> Arc<Registry> {
        Registry::new(cap, MemoryBudget::new(budget), Arc::new(Metrics::default()))
    }

    #[test]
    fn at_the_cap_the_idle_most_connection_is_shed() {
        let registry = registry(3);
        let busy = registry.admit().unwrap();
        let watching = registry.admit().unwrap();
        let idle = registry.admit().unwrap();
        let _call = CallGuard::open(&busy.handle(), CallKind::Call, 100, 10, 10).unwrap();
        let _watch = CallGuard::open(&watching.handle(), CallKind::Streaming, 100, 10, 10).unwrap();

        let fourth = registry.admit().unwrap();
        assert!(idle.connection.shedding.load(Ordering::Relaxed));
        assert!(!watching.connection.shedding.load(Ordering::Relaxed));
        assert!(!busy.connection.shedding.load(Ordering::Relaxed));
        drop(idle);

        // No connection without calls left: the one holding only a streaming call goes next.
        let _c1 = CallGuard::open(&fourth.handle(), CallKind::Call, 100, 10, 10).unwrap();
        let fifth = registry.admit().unwrap();
        assert!(watching.connection.shedding.load(Ordering::Relaxed));
        drop(watching);

        // Every connection has a call in flight: refused.
        let _c2 = CallGuard::open(&fifth.handle(), CallKind::Call, 100, 10, 10).unwrap();
        assert_eq!(registry.admit().err(), Some(Refused));
        assert_eq!(
            registry
                .metrics
                .transport_refusals(TransportRefusal::ConnectionShed),
            2
        );
        assert_eq!(
            registry
                .metrics
                .transport_refusals(TransportRefusal::ConnectionRefused),
            1
        );
        assert_eq!(registry.open_connections(), 3);
    }

    #[test]
    fn streaming_calls_are_capped_per_connection_and_globally() {
        let registry = registry(10);
        let a = registry.admit().unwrap();
        let b = registry.admit().unwrap();
        let a1 = CallGuard::open(&a.handle(), CallKind::Streaming, 100, 3, 2).unwrap();
        let _a2 = CallGuard::open(&a.handle(), CallKind::Streaming, 100, 3, 2).unwrap();
        assert_eq!(
            CallGuard::open(&a.handle(), CallKind::Streaming, 100, 3, 2).err(),
            Some(StreamingRefused::PerConnection)
        );
        let _b1 = CallGuard::open(&b.handle(), CallKind::Streaming, 100, 3, 2).unwrap();
        assert_eq!(
            CallGuard::open(&b.handle(), CallKind::Streaming, 100, 3, 2).err(),
            Some(StreamingRefused::Global)
        );
        assert_eq!(registry.streaming_calls(), 3);
        drop(a1);
        assert!(CallGuard::open(&b.handle(), CallKind::Streaming, 100, 3, 2).is_ok());
    }

    #[test]
    fn buffered_bytes_are_charged_to_both_budgets_and_given_back() {
        let registry = registry(10);
        let a = registry.admit().unwrap();
        let b = registry.admit().unwrap();
        let mut a1 = Buffered::new(&a.handle(), BufferPool::Requests);
        let mut a2 = Buffered::new(&a.handle(), BufferPool::Requests);
        let mut b1 = Buffered::new(&b.handle(), BufferPool::Requests);
        assert_eq!(a1.hold(60, 100, 150), Ok(()));
        assert_eq!(a2.hold(50, 100, 150), Err(BufferFull::Connection));
        assert_eq!(a2.hold(40, 100, 150), Ok(()));
        assert_eq!(b1.hold(60, 100, 150), Err(BufferFull::Global));
        assert_eq!(registry.buffered(), 100);
        assert_eq!(a1.hold(10, 100, 150), Ok(()));
        assert_eq!(b1.hold(60, 100, 150), Ok(()));
        drop((a1, a2, b1));
        assert_eq!(registry.buffered(), 0);
        assert_eq!(a.connection.buffered[0].load(Ordering::Relaxed), 0);
        assert_eq!(registry.budget().held(), 0);
    }

    #[test]
    fn reports_have_caps_of_their_own_and_share_the_memory_budget() {
        let registry = registry_with_budget(10, 1000);
        let a = registry.admit().unwrap();
        let mut report = Buffered::new(&a.handle(), BufferPool::Reports);
        let mut request = Buffered::new(&a.handle(), BufferPool::Requests);
        assert_eq!(report.hold(500, 600, 600), Ok(()));
        assert_eq!(
            request.hold(90, 100, 100),
            Ok(()),
            "a report leaves the requests' room"
        );
        assert_eq!(registry.buffered(), 590);
        assert_eq!(request.hold(600, 1000, 1000), Err(BufferFull::Memory));
        drop((report, request));
        assert_eq!((registry.buffered(), registry.budget().held()), (0, 0));
    }

    #[test]
    fn buffered_bytes_are_charged_to_the_memory_budget() {
        let registry = registry_with_budget(10, 150);
        let a = registry.admit().unwrap();
        let b = registry.admit().unwrap();
        let call = registry.budget().clone();
        call.charge(50).unwrap();
        let mut a1 = Buffered::new(&a.handle(), BufferPool::Requests);
        let mut b1 = Buffered::new(&b.handle(), BufferPool::Requests);
        assert_eq!(a1.hold(90, 100, 1000), Ok(()));
        assert_eq!(b1.hold(20, 100, 1000), Err(BufferFull::Memory));
        assert_eq!((registry.buffered(), registry.budget().held()), (90, 140));
        assert_eq!(a1.hold(40, 100, 1000), Ok(()));
        assert_eq!(b1.hold(20, 100, 1000), Ok(()));
        drop((a1, b1));
        assert_eq!((registry.buffered(), registry.budget().held()), (0, 50));
    }
}
