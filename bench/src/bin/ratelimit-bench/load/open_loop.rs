//! The open loop (`--rate`): a pacer thread releases the requests on a fixed schedule, and each
//! worker thread runs those of its connections on their slots.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use super::client::{deadline, exchange, Failure, Link};
use super::drive::Plan;
use super::rng::SplitMix;
use super::tally::Tally;
use super::template::Encoder;
use super::LoadArgs;

/// The pacer sleeps at least this long between releases.
const PACER_TICK: Duration = Duration::from_micros(200);
/// And at most this long, so that it notices the end of a `--requests` run.
const PACER_MAX_SLEEP: Duration = Duration::from_millis(50);

/// One request due at `at` on the thread's `link`-th connection.
pub(super) struct Due {
    at: Instant,
    link: usize,
}

/// The pacer releases the requests as they fall due (std sleeps, about 0.1 ms
/// precise, unlike the runtime's 1 ms timer wheel; at high rates it wakes every
/// [`PACER_TICK`] and releases what fell due meanwhile, so the load generator does not spend a
/// thread wakeup per request). Request k goes to connection k mod N, so each connection gets its
/// share of the schedule, as evenly spaced.
pub(super) fn pace(
    interval: Duration,
    plan: &Plan,
    threads: &[mpsc::UnboundedSender<Vec<Due>>],
    connections: usize,
) {
    let due = |k: u32| {
        interval
            .checked_mul(k)
            .and_then(|offset| plan.origin.checked_add(offset))
            .filter(|&at| at < plan.end)
    };
    let mut k: u32 = 0;
    loop {
        let now = Instant::now();
        let mut batches: Vec<Vec<Due>> = threads.iter().map(|_| Vec::new()).collect();
        let mut next = due(k);
        while let Some(at) = next.filter(|&at| at <= now) {
            let connection = k as usize % connections;
            batches[connection % threads.len()].push(Due {
                at,
                link: connection / threads.len(),
            });
            k = k.saturating_add(1);
            next = due(k);
        }
        for (thread, batch) in threads.iter().zip(batches) {
            if !batch.is_empty() && thread.send(batch).is_err() {
                return;
            }
        }
        let Some(next) = next else {
            return;
        };
        if plan.stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep(
            next.saturating_duration_since(now)
                .clamp(PACER_TICK, PACER_MAX_SLEEP),
        );
    }
}

/// Open loop on one thread: each due request runs on one of its connection's M slots. A request
/// that finds a free slot is timed from its send; one that has to wait for a slot (every slot
/// busy: the server is behind) is timed from its scheduled instant, so queueing behind a slow
/// server counts as latency (no coordinated omission).
pub(super) async fn open_loop(
    thread: usize,
    links: &[Arc<Link>],
    mut dues: mpsc::UnboundedReceiver<Vec<Due>>,
    plan: &Plan,
    encoder: &Arc<Encoder>,
    tally: &Arc<Mutex<Tally>>,
    args: &LoadArgs,
) -> Result<(), String> {
    let mut rng = SplitMix::stream(args.seed, thread);
    // Requests in flight keep their part of it: a large buffer takes one allocation per
    // ~1000 requests, not one each.
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let timeout = args.timeout;
    'load: while let Some(batch) = dues.recv().await {
        for due in batch {
            let Some(measured) = plan.admit(due.at) else {
                break 'load;
            };
            let Some(link) = links.get(due.link) else {
                continue;
            };
            let (slot, from) = match link.slots.clone().try_acquire_owned() {
                Ok(slot) => (slot, Instant::now()),
                Err(_) => {
                    if measured {
                        tally.lock().late += 1;
                    }
                    let slot = link
                        .slots
                        .clone()
                        .acquire_owned()
                        .await
                        .map_err(|e| e.to_string())?;
                    (slot, due.at)
                }
            };
            if !measured {
                tally.lock().warmup += 1;
            }
            let body = encoder.encode(&mut rng, &mut buf);
            let link = link.clone();
            let tally = tally.clone();
            let expected = encoder.descriptor_count();
            tokio::spawn(async move {
                let mut sender = link.sender();
                let exchange = exchange(&link, &mut sender, body);
                let outcome = tokio::time::timeout_at(deadline(Instant::now(), timeout), exchange)
                    .await
                    .unwrap_or(Err(Failure::Timeout));
                if measured {
                    tally.lock().record(from.elapsed(), &outcome, expected);
                }
                drop(slot);
            });
        }
    }
    drop(dues);
    // Every request in flight is back once all slots are.
    for link in links {
        let _all = link
            .slots
            .acquire_many(args.concurrency)
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}
