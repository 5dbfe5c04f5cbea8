//! An open-loop HTTP/2 load generator for the tests that put a real Envoy under a steady rate:
//! `rate` GETs of one path per second, spread evenly, each sent at its scheduled time whatever
//! the answers before it do (many in flight at once), counted per second by outcome.
//!
//! Request k of a load is scheduled at `epoch + k / rate` and counted in second `⌊k / rate⌋`
//! since `epoch`, by the time it was *sent*, not answered: every second holds exactly `rate`
//! requests, and two loads started with the same epoch count the same seconds, so their tallies
//! add up second by second. The requests go over one HTTP/2 connection (prior knowledge, as
//! Envoy's `codec_type: AUTO` accepts); a connection that fails is replaced for the next request.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use h2::client::SendRequest;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tonic::codegen::http::Request;

/// How long one request may wait for its answer before it counts as failed.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What became of the requests sent in one second.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Second {
    pub sent: u64,
    /// Answered 200.
    pub admitted: u64,
    /// Answered 429.
    pub denied: u64,
    /// Answered with another status, or not at all (connection error, [`REQUEST_TIMEOUT`]).
    pub failed: u64,
}

impl Second {
    /// The requests of this second that have an outcome.
    pub fn answered(&self) -> u64 {
        self.admitted + self.denied + self.failed
    }

    fn add(&mut self, other: &Second) {
        self.sent += other.sent;
        self.admitted += other.admitted;
        self.denied += other.denied;
        self.failed += other.failed;
    }
}

/// Second-by-second counts: index i is `[epoch + i s, epoch + i+1 s)` by send time.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally(pub Vec<Second>);

impl Tally {
    /// Second `i`; all zeros when nothing was sent in it.
    pub fn second(&self, i: usize) -> Second {
        self.0.get(i).copied().unwrap_or_default()
    }

    /// The seconds `range` added up.
    pub fn sum(&self, range: std::ops::Range<usize>) -> Second {
        let mut total = Second::default();
        for i in range {
            total.add(&self.second(i));
        }
        total
    }

    /// The first second in which a request was denied.
    pub fn first_denied(&self) -> Option<usize> {
        self.0.iter().position(|s| s.denied > 0)
    }

    /// Second-by-second sum of several tallies (several Envoys under loads of one epoch).
    pub fn merged(tallies: &[Tally]) -> Tally {
        let len = tallies.iter().map(|t| t.0.len()).max().unwrap_or(0);
        let mut total = vec![Second::default(); len];
        for tally in tallies {
            for (i, second) in tally.0.iter().enumerate() {
                total[i].add(second);
            }
        }
        Tally(total)
    }

    /// Panics, naming `what`, unless every request sent in `range` has an outcome and every
    /// second of it holds `rate` requests: counts that lag or miss requests measure nothing.
    #[track_caller]
    pub fn assert_complete(&self, range: std::ops::Range<usize>, rate: u64, what: &str) {
        for i in range {
            let s = self.second(i);
            assert!(
                s.sent == rate && s.answered() == rate,
                "{what}: second {i} has {s:?}, expected {rate} requests sent and answered \
                 (the load generator fell behind or answers are still missing)"
            );
        }
    }

    /// One line per second, for failure messages.
    pub fn render(&self) -> String {
        self.0
            .iter()
            .enumerate()
            .map(|(i, s)| {
                format!(
                    "{i:>3}: sent {:>4} admitted {:>4} denied {:>4} failed {:>3}\n",
                    s.sent, s.admitted, s.denied, s.failed
                )
            })
            .collect()
    }
}

/// A load running on the test's runtime; stops on [`Load::finish`] or drop.
pub struct Load {
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    sender: JoinHandle<()>,
    in_flight: Arc<tokio::sync::Semaphore>,
    epoch: Instant,
}

/// Requests in flight at most per load: far above what a test sends, a bound on a stuck Envoy.
const MAX_IN_FLIGHT: u32 = 10_000;

impl Load {
    /// Starts sending `rate` (≥ 1) GETs of `path` per second to `addr`, counted from `epoch`:
    /// the first request is the first one scheduled at or after now.
    pub fn start(addr: SocketAddr, path: &str, rate: u32, epoch: Instant) -> Load {
        assert!(
            rate >= 1,
            "a load of {rate} requests per second sends nothing"
        );
        let tally = Arc::new(Mutex::new(Tally::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let in_flight = Arc::new(tokio::sync::Semaphore::new(MAX_IN_FLIGHT as usize));
        let uri = format!("http://{addr}{path}");
        let sender = tokio::spawn(send_loop(
            addr,
            uri,
            u64::from(rate),
            epoch,
            tally.clone(),
            stop.clone(),
            in_flight.clone(),
        ));
        Load {
            tally,
            stop,
            sender,
            in_flight,
            epoch,
        }
    }

    /// The counts so far (requests still in flight are in `sent` only).
    pub fn tally(&self) -> Tally {
        self.tally.lock().expect("tally lock").clone()
    }

    /// The second (since the epoch) now falls in.
    pub fn now_second(&self) -> usize {
        self.epoch.elapsed().as_secs() as usize
    }

    /// Stops sending, waits until every request sent has its outcome (at most
    /// [`REQUEST_TIMEOUT`] more), and returns the counts.
    pub async fn finish(mut self) -> Tally {
        self.stop.store(true, Ordering::SeqCst);
        let _ = (&mut self.sender).await;
        let _all = self
            .in_flight
            .acquire_many(MAX_IN_FLIGHT)
            .await
            .expect("in-flight semaphore is never closed");
        self.tally()
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        self.sender.abort();
    }
}

/// Sends request k at `epoch + k / rate` until `stop`.
async fn send_loop(
    addr: SocketAddr,
    uri: String,
    rate: u64,
    epoch: Instant,
    tally: Arc<Mutex<Tally>>,
    stop: Arc<AtomicBool>,
    in_flight: Arc<tokio::sync::Semaphore>,
) {
    let at = |k: u64| epoch + Duration::from_nanos(k * 1_000_000_000 / rate);
    let elapsed = epoch.elapsed().as_nanos() as u64;
    let mut k = (elapsed * rate).div_ceil(1_000_000_000);
    let mut connection: Option<SendRequest<Bytes>> = None;
    let broken = Arc::new(AtomicBool::new(false));
    while !stop.load(Ordering::SeqCst) {
        tokio::time::sleep_until(at(k)).await;
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let second = (k / rate) as usize;
        {
            let mut tally = tally.lock().expect("tally lock");
            if tally.0.len() <= second {
                tally.0.resize(second + 1, Second::default());
            }
            tally.0[second].sent += 1;
        }
        if broken.swap(false, Ordering::SeqCst) || connection.is_none() {
            connection = connect(addr).await;
        }
        let permit = in_flight
            .clone()
            .acquire_owned()
            .await
            .expect("in-flight semaphore is never closed");
        let send = connection.clone();
        let tally = tally.clone();
        let uri = uri.clone();
        let broken = broken.clone();
        tokio::spawn(async move {
            let status = match send {
                Some(send) => tokio::time::timeout(REQUEST_TIMEOUT, get(send, &uri))
                    .await
                    .unwrap_or(None),
                None => None,
            };
            if status.is_none() {
                broken.store(true, Ordering::SeqCst);
            }
            let mut tally = tally.lock().expect("tally lock");
            let s = &mut tally.0[second];
            match status {
                Some(200) => s.admitted += 1,
                Some(429) => s.denied += 1,
                _ => s.failed += 1,
            }
            drop(permit);
        });
        k += 1;
    }
}

/// A new HTTP/2 connection (prior knowledge) to `addr`; None when it cannot be made.
async fn connect(addr: SocketAddr) -> Option<SendRequest<Bytes>> {
    let tcp = TcpStream::connect(addr).await.ok()?;
    let _ = tcp.set_nodelay(true);
    let (send, connection) = h2::client::handshake(tcp).await.ok()?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Some(send)
}

/// One GET on `send`'s connection: its status once the whole answer has arrived; None when the
/// exchange fails.
async fn get(send: SendRequest<Bytes>, uri: &str) -> Option<u16> {
    let mut send = send.ready().await.ok()?;
    let request = Request::get(uri).body(()).ok()?;
    let (response, _) = send.send_request(request, true).ok()?;
    let response = response.await.ok()?;
    let status = response.status().as_u16();
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Some(status)
}
