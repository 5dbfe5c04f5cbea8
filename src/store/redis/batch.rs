//! Batching: the requests that arrive while script calls are in flight share the next call.
//!
//! Redis runs one script at a time, and most of a script call's cost is per call, not per request
//! (the round trip, the syscalls on both sides, the script's set-up, `TIME`). So one dispatcher
//! task keeps at most `max_in_flight` calls going; a request that arrives while they are all in
//! flight waits in the queue, and the next call carries every request queued by then (up to
//! [`MAX_BATCH_REQUESTS`] requests or [`MAX_BATCH_CHECKS`] checks). At low load a request goes out
//! at once, alone; under load the calls grow instead of queueing up in Redis.
//!
//! The script decides the requests of a call one after the other, each all or nothing on the state
//! the earlier ones left, and answers each request on its own: a request that fails (bad
//! arguments, a Redis error while deciding it) does not fail the others.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, oneshot, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

use super::scripts::refund::Refund;
use super::scripts::request::Invocation;
use super::topology::pending::{Answer, Pending};
use super::topology::route::Route;
use crate::limiter::RequestBounds;
use crate::otel::StoreCallSpan;
use crate::store::StoreError;

/// Most requests decided by one script call.
pub const MAX_BATCH_REQUESTS: usize = 128;

/// Most checks (keys) in one script call. A batch is cut between requests, never inside one, so
/// only a request with more checks than this could make a longer call: the edge (gRPC and
/// `/json`) refuses requests of more than [`RequestBounds::MAX_DESCRIPTORS_CEILING`] descriptors
/// (one check each at most), which the assertion below keeps within this bound. Only callers of
/// the store's own API can pass more (a call then carries that request alone).
pub const MAX_BATCH_CHECKS: usize = 1024;

const _: () = assert!(RequestBounds::MAX_DESCRIPTORS_CEILING <= MAX_BATCH_CHECKS);

/// The script calls a store may have in flight at once, shared by the dispatchers of all its
/// lanes: a call holds one permit from the moment its batch is gathered until it is answered.
pub(super) type CallBudget = Arc<Semaphore>;

/// A budget of `calls` calls in flight (at least 1).
pub(super) fn call_budget(calls: usize) -> CallBudget {
    Arc::new(Semaphore::new(calls.max(1)))
}

/// The queue in front of the dispatcher task. Dropping it ends the task once its calls finish.
///
/// Deadlines are kept by the dispatcher, not by a timer per request (each timer registration
/// costs the runtime an eventfd wake-up): a queued request is answered with a timeout when it is
/// taken past its deadline, and a call's deadline is the earliest of its requests'. Requests are
/// taken in order and all have the same timeout, so each is answered by its own deadline.
pub(super) struct Batcher {
    queue: mpsc::UnboundedSender<Pending>,
    route: Arc<Route>,
}

impl Batcher {
    /// Spawns the dispatcher on the current tokio runtime; its calls in flight take their permits
    /// from `budget`.
    pub(super) fn start(route: Route, timeout: Duration, budget: CallBudget) -> Batcher {
        let (queue, receiver) = mpsc::unbounded_channel();
        let route = Arc::new(route);
        tokio::spawn(dispatch(receiver, route.clone(), timeout, budget));
        Batcher { queue, route }
    }

    /// Whether the servers this dispatcher calls answer (see `RedisStore::is_healthy`).
    pub(super) async fn is_healthy(&self, deadline: Instant) -> bool {
        self.route.is_healthy(deadline).await
    }

    /// Gives back `refunds` of leases through this dispatcher's servers (see [`Route::give_back`]).
    pub(super) async fn give_back(
        &self,
        refunds: Vec<Refund>,
        pinned: Option<u64>,
        deadline: Instant,
    ) -> Result<(), StoreError> {
        self.route.give_back(refunds, pinned, deadline).await
    }

    /// Whether the dispatcher still runs (it ends with the runtime that spawned it).
    pub(super) fn is_running(&self) -> bool {
        !self.queue.is_closed()
    }

    /// Decides `invocation` in one of the next script calls, answering by `deadline`.
    pub(super) async fn decide(&self, invocation: Invocation, deadline: Instant) -> Answer {
        let shut_down = || StoreError::Unavailable("the redis store has shut down".into());
        let (answer, answered) = oneshot::channel();
        self.queue
            .send(Pending {
                invocation,
                deadline,
                answer,
                span: StoreCallSpan::current(),
            })
            .map_err(|_| shut_down())?;
        answered.await.unwrap_or_else(|_| Err(shut_down()))
    }
}

impl Batcher {
    /// Decides each of `invocations`, all queued before any is awaited so that they share the
    /// next script call (one per server) unless the batch bounds cut it; answers in order.
    pub(super) async fn decide_many(
        &self,
        invocations: Vec<Invocation>,
        deadline: Instant,
    ) -> Vec<Answer> {
        let shut_down = || StoreError::Unavailable("the redis store has shut down".into());
        let span = StoreCallSpan::current();
        let answered: Vec<_> = invocations
            .into_iter()
            .map(|invocation| {
                let (answer, answered) = oneshot::channel();
                let sent = self.queue.send(Pending {
                    invocation,
                    deadline,
                    answer,
                    span: span.clone(),
                });
                sent.ok().map(|()| answered)
            })
            .collect();
        let mut answers = Vec::with_capacity(answered.len());
        for answered in answered {
            answers.push(match answered {
                Some(answered) => answered.await.unwrap_or_else(|_| Err(shut_down())),
                None => Err(shut_down()),
            });
        }
        answers
    }
}

/// Emptied batches a dispatcher keeps for its next calls.
const SPARE_BATCHES: usize = 8;

async fn dispatch(
    mut queue: mpsc::UnboundedReceiver<Pending>,
    route: Arc<Route>,
    timeout: Duration,
    budget: CallBudget,
) {
    let mut in_flight = FuturesUnordered::new();
    let mut carried: Option<Pending> = None;
    // Batches of finished calls, emptied, for the next calls to fill: no allocation per call.
    let mut spare: Vec<Vec<Pending>> = Vec::new();
    let recycle = |emptied: Option<Vec<Pending>>, spare: &mut Vec<Vec<Pending>>| {
        if let Some(emptied) = emptied {
            if spare.len() < SPARE_BATCHES {
                spare.push(emptied);
            }
        }
    };
    loop {
        // A request first, then a permit: the requests that arrive while the permit is awaited
        // join this call.
        let first = tokio::select! {
            biased;
            Some(emptied) = in_flight.next(), if !in_flight.is_empty() => {
                recycle(emptied, &mut spare);
                continue;
            }
            first = next_live(&mut queue, &mut carried, timeout) => first,
        };
        let Some(first) = first else { break };
        let permit = loop {
            tokio::select! {
                biased;
                Some(emptied) = in_flight.next(), if !in_flight.is_empty() => {
                    recycle(emptied, &mut spare);
                }
                permit = Arc::clone(&budget).acquire_owned() => break permit,
            }
        };
        let Ok(permit) = permit else { break };
        let Some(first) = first.live(timeout, Instant::now()) else {
            continue;
        };
        let batch = gather(
            first,
            spare.pop().unwrap_or_default(),
            &mut queue,
            &mut carried,
            timeout,
        );
        record_batch(&batch);
        in_flight.push(call(Arc::clone(&route), batch, permit));
    }
    while in_flight.next().await.is_some() {}
}

/// The next request still awaited by its caller; `None` once the store is dropped.
async fn next_live(
    queue: &mut mpsc::UnboundedReceiver<Pending>,
    carried: &mut Option<Pending>,
    timeout: Duration,
) -> Option<Pending> {
    if let Some(pending) = carried
        .take()
        .and_then(|pending| pending.live(timeout, Instant::now()))
    {
        return Some(pending);
    }
    loop {
        if let Some(pending) = queue.recv().await?.live(timeout, Instant::now()) {
            return Some(pending);
        }
    }
}

/// `first` and the live requests queued behind it, within the batch bounds, in `batch` (emptied
/// first); a request that does not fit is carried over to the next call.
fn gather(
    first: Pending,
    mut batch: Vec<Pending>,
    queue: &mut mpsc::UnboundedReceiver<Pending>,
    carried: &mut Option<Pending>,
    timeout: Duration,
) -> Vec<Pending> {
    let mut checks = first.invocation.checks();
    batch.clear();
    batch.push(first);
    // One clock reading for the batch: requests taken within it are taken at the same instant.
    let now = Instant::now();
    while batch.len() < MAX_BATCH_REQUESTS {
        let Ok(pending) = queue.try_recv() else {
            break;
        };
        let Some(pending) = pending.live(timeout, now) else {
            continue;
        };
        if checks + pending.invocation.checks() > MAX_BATCH_CHECKS {
            *carried = Some(pending);
            break;
        }
        checks += pending.invocation.checks();
        batch.push(pending);
    }
    batch
}

/// Tells each request's span the size of the call that carries it.
fn record_batch(batch: &[Pending]) {
    if !crate::otel::is_exporting() {
        return;
    }
    let checks = batch
        .iter()
        .map(|pending| pending.invocation.checks())
        .sum();
    for pending in batch {
        pending.span.record_batch(batch.len(), checks);
    }
}

/// The script call(s) deciding `batch`, answering every request of it, holding `permit` until
/// then; the batch back, emptied, when the call kept it.
async fn call(
    route: Arc<Route>,
    batch: Vec<Pending>,
    permit: OwnedSemaphorePermit,
) -> Option<Vec<Pending>> {
    let _permit = permit;
    route.call(batch).await
}

#[cfg(test)]
mod tests {
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};

    use super::*;
    use crate::limiter::counter_key::CounterKey;
    use crate::limiter::{Algorithm, Entry, Rate, Unit};
    use crate::store::Check;

    fn invocation(request: usize, checks: usize) -> Invocation {
        let checks: Vec<Check> = (0..checks)
            .map(|i| Check {
                key: CounterKey::new(
                    "batch",
                    &[Entry {
                        key: "request".into(),
                        value: format!("{request}-{i}"),
                    }],
                ),
                rate: Rate::new(Algorithm::FixedWindow, 10, Unit::Hour, 1, None)
                    .expect("a valid rate"),
                hits: 1,
                shadow: false,
                consistency: crate::limiter::Consistency::Exact,
                rule: None,
            })
            .collect();
        Invocation::new(&checks, None)
    }

    #[test]
    fn batches_of_capped_requests_stay_within_the_bound_and_keep_requests_whole() {
        let timeout = Duration::from_secs(60);
        let deadline = Instant::now() + timeout;
        let (queue, mut receiver) = mpsc::unbounded_channel();
        let mut answers = Vec::new();
        let mut sent = Vec::new();
        let mut rng = StdRng::seed_from_u64(11);
        // Mostly small requests, some at the largest size the edge lets through.
        for request in 0..400 {
            let checks = match rng.random_range(0..4) {
                0 => RequestBounds::MAX_DESCRIPTORS_CEILING,
                1 => rng.random_range(1..=RequestBounds::MAX_DESCRIPTORS_CEILING),
                _ => rng.random_range(1..=8),
            };
            let (answer, answered) = oneshot::channel();
            answers.push(answered);
            let invocation = invocation(request, checks);
            sent.push(invocation.keys().to_vec());
            queue
                .send(Pending {
                    invocation,
                    deadline,
                    answer,
                    span: StoreCallSpan::default(),
                })
                .expect("the receiver is alive");
        }
        drop(queue);

        let mut carried = None;
        let mut taken = Vec::new();
        loop {
            let first = match carried.take() {
                Some(first) => first,
                None => match receiver.try_recv() {
                    Ok(first) => first,
                    Err(_) => break,
                },
            };
            let batch = gather(first, Vec::new(), &mut receiver, &mut carried, timeout);
            let checks: usize = batch.iter().map(|p| p.invocation.checks()).sum();
            assert!(checks <= MAX_BATCH_CHECKS, "a call of {checks} checks");
            assert!(batch.len() <= MAX_BATCH_REQUESTS);
            taken.extend(batch.iter().map(|p| p.invocation.keys().to_vec()));
        }
        assert!(taken == sent, "every request once, whole, in order");
    }
}
