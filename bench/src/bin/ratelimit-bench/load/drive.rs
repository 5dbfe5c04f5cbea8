//! Running the load: worker threads, each a current-thread runtime with some of the connections
//! and their slots; the phases of a run (connect, warmup, measurement) and the CPU snapshots
//! around the measurement; the closed loop. The open loop is [`super::open_loop`].

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot};

use super::client::{connect, deadline, exchange, Failure, Link, Target, RECONNECT_BACKOFF};
use super::open_loop::{open_loop, pace, Due};
use super::output::Report;
use super::rng::SplitMix;
use super::tally::{Snapshot, Tally};
use super::template::{Encoder, Template};
use super::LoadArgs;

/// Phases shared by every slot.
pub(super) struct Plan {
    /// Open loop: the schedule's time 0.
    pub(super) origin: Instant,
    /// Measurement starts (warmup ends).
    measure_start: Instant,
    /// No request starts at or after this instant.
    pub(super) end: Instant,
    /// Measured requests still to send (`--requests`).
    budget: Option<AtomicI64>,
    pub(super) stop: AtomicBool,
}

impl Plan {
    /// Whether a request due at `start` may go, and whether it is measured.
    pub(super) fn admit(&self, start: Instant) -> Option<bool> {
        if start >= self.end || self.stop.load(Ordering::Relaxed) {
            return None;
        }
        let measured = start >= self.measure_start;
        if measured {
            if let Some(budget) = &self.budget {
                if budget.fetch_sub(1, Ordering::Relaxed) <= 0 {
                    self.stop.store(true, Ordering::Relaxed);
                    return None;
                }
            }
        }
        Some(measured)
    }
}

/// Runs the load: worker threads connect, the clock starts once every connection is up, this
/// thread takes the CPU snapshots at the start and the end of the measurement.
pub(super) fn drive(args: Arc<LoadArgs>) -> Result<Report, String> {
    let template = Template::from_args(&args)?;
    let encoder = Arc::new(Encoder::new(
        &template,
        &args.domain,
        args.hits_addend,
        args.keys,
    ));
    let target = Arc::new(Target::parse(&args.addr)?);
    let interval = match args.rate {
        Some(rate) => Some(
            Duration::try_from_secs_f64(1.0 / rate).map_err(|e| format!("--rate {rate}: {e}"))?,
        ),
        None => None,
    };
    let connections = args.connections as usize;
    let threads = args
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
        .clamp(1, connections);

    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let mut workers = Vec::with_capacity(threads);
    let mut starts = Vec::with_capacity(threads);
    let mut dues = Vec::with_capacity(threads);
    for thread in 0..threads {
        let (start_tx, start) = oneshot::channel();
        let (due_tx, due_rx) = match interval {
            Some(_) => {
                let (tx, rx) = mpsc::unbounded_channel();
                (Some(tx), Some(rx))
            }
            None => (None, None),
        };
        let worker = Worker {
            thread,
            connections: (thread..connections).step_by(threads).collect(),
            target: target.clone(),
            encoder: encoder.clone(),
            args: args.clone(),
            ready: ready_tx.clone(),
            start,
            dues: due_rx,
        };
        let handle = std::thread::Builder::new()
            .name(format!("load-{thread}"))
            .spawn(move || worker.run())
            .map_err(|e| format!("cannot start a load thread: {e}"))?;
        workers.push(handle);
        starts.push(start_tx);
        dues.extend(due_tx);
    }
    drop(ready_tx);

    // Every connection up (or the first failure) before the clock starts.
    let mut failure = None;
    for _ in 0..threads {
        match ready_rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                failure.get_or_insert(error);
            }
            Err(_) => {
                failure.get_or_insert_with(|| "a load thread ended early".into());
            }
        }
    }
    if let Some(error) = failure {
        drop(starts); // the other threads stop without sending anything
        for worker in workers {
            let _ = worker.join();
        }
        return Err(error);
    }

    let origin = Instant::now();
    let measure_start = origin + args.warmup;
    let end = match args.requests {
        Some(_) => origin + Duration::from_secs(365 * 86_400),
        None => measure_start + args.duration,
    };
    let plan = Arc::new(Plan {
        origin,
        measure_start,
        end,
        budget: args.requests.map(|n| n as i64).map(AtomicI64::new),
        stop: AtomicBool::new(false),
    });
    for start in starts {
        let _ = start.send(plan.clone());
    }
    let pacer = match interval {
        Some(interval) => {
            let plan = plan.clone();
            Some(
                std::thread::Builder::new()
                    .name("pacer".into())
                    .spawn(move || pace(interval, &plan, &dues, connections))
                    .map_err(|e| format!("cannot start the pacer thread: {e}"))?,
            )
        }
        None => None,
    };

    std::thread::sleep(measure_start.saturating_duration_since(Instant::now()));
    let before = Snapshot::take(&args);
    let join = |workers: Vec<std::thread::JoinHandle<Result<Tally, String>>>| {
        let mut tally = Tally::new();
        let mut failure = None;
        for worker in workers {
            match worker.join() {
                Ok(Ok(part)) => tally.merge(part),
                Ok(Err(error)) => failure = Some(error),
                Err(_) => failure = Some("load thread panicked".into()),
            }
        }
        failure.map_or(Ok(tally), Err)
    };
    let (tally, after) = if args.requests.is_none() {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
        let after = Snapshot::take(&args);
        (join(workers), after)
    } else {
        let tally = join(workers);
        (tally, Snapshot::take(&args))
    };
    plan.stop.store(true, Ordering::Relaxed);
    if let Some(pacer) = pacer {
        let _ = pacer.join();
    }
    Ok(Report {
        tally: tally?,
        elapsed: after.at.saturating_duration_since(before.at),
        before,
        after,
        target: target.url.clone(),
    })
}

/// One worker thread: a current-thread runtime running some of the connections and their slots.
struct Worker {
    thread: usize,
    /// Indices of its connections among all N (`thread`, `thread + threads`, ...).
    connections: Vec<usize>,
    target: Arc<Target>,
    encoder: Arc<Encoder>,
    args: Arc<LoadArgs>,
    /// Tells the main thread that the connections are up, or why not.
    ready: std::sync::mpsc::Sender<Result<(), String>>,
    /// The plan, once every thread is ready; dropped unsent if another thread failed.
    start: oneshot::Receiver<Arc<Plan>>,
    /// Open loop: the pacer's due requests for this thread's connections.
    dues: Option<mpsc::UnboundedReceiver<Vec<Due>>>,
}

impl Worker {
    fn run(self) -> Result<Tally, String> {
        let runtime = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(runtime) => runtime,
            Err(e) => {
                let error = format!("cannot start the runtime: {e}");
                let _ = self.ready.send(Err(error.clone()));
                return Err(error);
            }
        };
        runtime.block_on(self.load())
    }

    async fn load(self) -> Result<Tally, String> {
        let concurrency = self.args.concurrency as usize;
        let mut links = Vec::with_capacity(self.connections.len());
        for _ in &self.connections {
            match connect(&self.target).await {
                Ok(send) => links.push(Arc::new(Link::new(self.target.clone(), send, concurrency))),
                Err(error) => {
                    let _ = self.ready.send(Err(error.clone()));
                    return Err(error);
                }
            }
        }
        // Sent and dropped now: the main thread counts on every sender being gone once each
        // thread has reported (or died).
        let _ = self.ready.send(Ok(()));
        drop(self.ready);
        let Ok(plan) = self.start.await else {
            return Ok(Tally::new());
        };
        let tally = Arc::new(Mutex::new(Tally::new()));
        match self.dues {
            None => {
                let mut slots = Vec::with_capacity(links.len() * concurrency);
                for (link, &connection) in links.iter().zip(&self.connections) {
                    for slot in 0..concurrency {
                        slots.push(tokio::spawn(closed_slot(
                            connection * concurrency + slot,
                            link.clone(),
                            plan.clone(),
                            self.encoder.clone(),
                            tally.clone(),
                            self.args.clone(),
                        )));
                    }
                }
                for slot in slots {
                    slot.await.map_err(|e| format!("load task failed: {e}"))?;
                }
            }
            Some(dues) => {
                open_loop(
                    self.thread,
                    &links,
                    dues,
                    &plan,
                    &self.encoder,
                    &tally,
                    &self.args,
                )
                .await?;
            }
        }
        let tally = std::mem::replace(&mut *tally.lock(), Tally::new());
        Ok(tally)
    }
}

/// Closed loop: each slot sends its next RPC as soon as the previous one is answered.
async fn closed_slot(
    index: usize,
    link: Arc<Link>,
    plan: Arc<Plan>,
    encoder: Arc<Encoder>,
    tally: Arc<Mutex<Tally>>,
    args: Arc<LoadArgs>,
) {
    let mut rng = SplitMix::stream(args.seed, index);
    let mut buf = BytesMut::new();
    let mut sender = link.sender();
    loop {
        let start = Instant::now();
        let Some(measured) = plan.admit(start) else {
            break;
        };
        let body = encoder.encode(&mut rng, &mut buf);
        let exchange = exchange(&link, &mut sender, body);
        let outcome = tokio::time::timeout_at(deadline(start, args.timeout), exchange)
            .await
            .unwrap_or(Err(Failure::Timeout));
        if measured {
            tally
                .lock()
                .record(start.elapsed(), &outcome, encoder.descriptor_count());
        } else {
            tally.lock().warmup += 1;
        }
        if let Err(Failure::Connect(_)) = outcome {
            tokio::time::sleep(RECONNECT_BACKOFF).await;
        }
    }
}
