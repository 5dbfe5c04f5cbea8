//! One batch on a cluster: group its checks by node, call each node once, retry what provably did
//! not run, then answer each request all or nothing, refunding what a denied request reserved on
//! the nodes that admitted it.

use std::collections::HashMap;
use std::time::Duration;

use futures::future::join_all;
use redis::RedisError;
use tokio::time::Instant;

use super::lane::ClusterLane;
use super::slots::{slot_of, SlotMap};
use crate::limiter::algorithm::{self, Verdict};
use crate::store::redis::scripts::refund::{refund_command, Refund, REFUND};
use crate::store::redis::scripts::request::{Invocation, KeyPlacement};
use crate::store::redis::server::errors::command_error;
use crate::store::redis::settings::topology::HostPort;
use crate::store::redis::topology::pending::{self, Pending};
use crate::store::StoreError;

/// Rounds of calls for one batch: the first, and retries after redirections.
const MAX_ATTEMPTS: usize = 5;

/// Pause before retrying after `TRYAGAIN` or `CLUSTERDOWN` (bounded by the deadline).
const RETRY_PAUSE: Duration = Duration::from_millis(20);

/// Where a part's call goes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    /// The node's one call of the batch, its keys in ARGV.
    Node(HostPort),
    /// A call of its own with its keys declared (all of one slot), so that the node can redirect
    /// it; after `ASKING` when the slot is being imported there.
    Slot { node: HostPort, asking: bool },
}

/// Checks of one request that go to one node in one call.
#[derive(Debug, Clone)]
struct Part {
    request: usize,
    /// Indices into the request's checks, in request order.
    checks: Vec<usize>,
    target: Target,
}

/// Why a part is sent again.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Redirect {
    /// The node does not own a key: the slot map is stale, or the slot is being migrated.
    NotLocal,
    /// `MOVED`: the slot's owner.
    Moved(HostPort),
    /// `ASK`: the node importing the slot.
    Ask(HostPort),
    /// `TRYAGAIN`, `CLUSTERDOWN`, `READONLY`, `LOADING`, `MASTERDOWN`: wait, read the map, retry.
    Later,
}

/// A part some node decided.
struct Decided {
    node: HostPort,
    checks: Vec<usize>,
    verdicts: Vec<Verdict>,
    /// The clock of the call that decided it: the instant of its writes.
    committed_at_us: u64,
}

/// What one call did for one of its parts.
enum Outcome {
    Decided(usize, Decided),
    Again(Part, Redirect),
    Failed(usize, StoreError),
}

/// Decides `batch` on the cluster and answers every request of it.
pub(in crate::store::redis) async fn decide(lane: &ClusterLane, batch: Vec<Pending>) {
    let deadline = batch
        .iter()
        .map(|pending| pending.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    let mut decided: Vec<Vec<Decided>> = batch.iter().map(|_| Vec::new()).collect();
    let mut failed: Vec<Option<StoreError>> = batch.iter().map(|_| None).collect();

    let map = lane.cluster.slot_map();
    let mut todo = Vec::new();
    for (request, pending) in batch.iter().enumerate() {
        let checks: Vec<usize> = (0..pending.invocation.checks()).collect();
        match parts_by_map(request, &checks, &pending.invocation, &map) {
            Ok(parts) => todo.extend(parts),
            Err(error) => failed[request] = Some(error),
        }
    }

    for attempt in 1..=MAX_ATTEMPTS {
        if todo.is_empty() {
            break;
        }
        let seen = lane.cluster.slot_map_refreshes();
        let outcomes = run(lane, &batch, std::mem::take(&mut todo), deadline).await;
        let mut again = Vec::new();
        let mut refresh = false;
        let mut pause = false;
        for outcome in outcomes {
            match outcome {
                Outcome::Decided(request, part) => {
                    if let Some(parts) = decided.get_mut(request) {
                        parts.push(part);
                    }
                }
                Outcome::Failed(request, error) => {
                    refresh |= matches!(error, StoreError::Unavailable(_) | StoreError::Timeout(_));
                    failed[request].get_or_insert(error);
                }
                Outcome::Again(part, redirect) => {
                    refresh |= !matches!(redirect, Redirect::Ask(_));
                    pause |= redirect == Redirect::Later;
                    again.push((part, redirect));
                }
            }
        }
        if refresh {
            lane.cluster.refresh(seen, deadline).await;
        }
        if again.is_empty() {
            break;
        }
        let now = Instant::now();
        if attempt == MAX_ATTEMPTS || now >= deadline {
            for (part, _) in again {
                failed[part.request].get_or_insert_with(|| {
                    if now >= deadline {
                        StoreError::Timeout(lane.settings.timeout)
                    } else {
                        StoreError::Unavailable(format!(
                            "the redis cluster still redirects after {MAX_ATTEMPTS} attempts"
                        ))
                    }
                });
            }
            break;
        }
        if pause {
            tokio::time::sleep_until((now + RETRY_PAUSE).min(deadline)).await;
        }
        let map = lane.cluster.slot_map();
        for (part, redirect) in again {
            if failed[part.request].is_some() {
                continue;
            }
            let invocation = &batch[part.request].invocation;
            match rerouted(part, redirect, invocation, &map) {
                Ok(parts) => todo.extend(parts),
                Err((request, error)) => failed[request] = Some(error),
            }
        }
    }

    let mut refunds: HashMap<HostPort, Vec<Refund>> = HashMap::new();
    let mut answers = Vec::with_capacity(batch.len());
    for (request, pending) in batch.iter().enumerate() {
        let parts = std::mem::take(&mut decided[request]);
        let answer = match failed[request].take() {
            Some(error) => Err(error),
            None => merged(&pending.invocation, &parts),
        };
        let vetoed = match &answer {
            Ok(decided) => is_vetoed(&pending.invocation, &decided.verdicts),
            Err(_) => true,
        };
        if vetoed {
            for part in &parts {
                if let Some(refund) = committed(&pending.invocation, part) {
                    refunds.entry(part.node.clone()).or_default().extend(refund);
                }
            }
        }
        answers.push(answer);
    }
    if !refunds.is_empty() {
        refund(
            lane,
            refunds,
            batch.first().and_then(|p| p.invocation.pinned_now_us()),
        )
        .await;
    }
    for (pending, answer) in batch.into_iter().zip(answers) {
        let _ = pending.answer.send(answer);
    }
}

/// The parts of `checks` of one request, one per master owning their slots.
fn parts_by_map(
    request: usize,
    checks: &[usize],
    invocation: &Invocation,
    map: &SlotMap,
) -> Result<Vec<Part>, StoreError> {
    let mut parts: Vec<Part> = Vec::new();
    for &check in checks {
        let key = invocation
            .keys()
            .get(check)
            .map(String::as_bytes)
            .unwrap_or_default();
        let slot = slot_of(key);
        let Some(master) = map.master_of(slot) else {
            return Err(StoreError::Unavailable(format!(
                "no redis cluster master serves slot {slot} (CLUSTERDOWN)"
            )));
        };
        let target = Target::Node(master.clone());
        match parts.iter_mut().find(|part| part.target == target) {
            Some(part) => part.checks.push(check),
            None => parts.push(Part {
                request,
                checks: vec![check],
                target,
            }),
        }
    }
    Ok(parts)
}

/// Where `part` goes after `redirect`, with the slot map as read since.
fn rerouted(
    part: Part,
    redirect: Redirect,
    invocation: &Invocation,
    map: &SlotMap,
) -> Result<Vec<Part>, (usize, StoreError)> {
    let request = part.request;
    let by_slot = |node: HostPort, asking: bool| {
        let mut slots: Vec<(u16, Part)> = Vec::new();
        for &check in &part.checks {
            let key = invocation
                .keys()
                .get(check)
                .map(String::as_bytes)
                .unwrap_or_default();
            let slot = slot_of(key);
            match slots.iter_mut().find(|(s, _)| *s == slot) {
                Some((_, part)) => part.checks.push(check),
                None => slots.push((
                    slot,
                    Part {
                        request,
                        checks: vec![check],
                        target: Target::Slot {
                            node: node.clone(),
                            asking,
                        },
                    },
                )),
            }
        }
        slots.into_iter().map(|(_, part)| part).collect::<Vec<_>>()
    };
    let by_map = || parts_by_map(request, &part.checks, invocation, map).map_err(|e| (request, e));
    match (redirect, &part.target) {
        (Redirect::Ask(node), _) => Ok(by_slot(node, true)),
        (Redirect::Moved(node), _) => {
            let parts = by_map()?;
            // A slot map that still names the node that redirected is stale: follow `MOVED`.
            let stale = parts.iter().any(|p| p.target == part.target);
            Ok(if stale { by_slot(node, false) } else { parts })
        }
        (Redirect::NotLocal, Target::Node(node)) => {
            let parts = by_map()?;
            // The map still names the node that disowned a key: its slot is being migrated, and
            // only a call with declared keys gets the `ASK` that says where the key went.
            if parts.iter().any(|p| p.target == part.target) {
                Ok(by_slot(node.clone(), false))
            } else {
                Ok(parts)
            }
        }
        (Redirect::NotLocal, Target::Slot { .. }) | (Redirect::Later, _) => by_map(),
    }
}

/// Runs one round of calls: one per node for the `Node` parts, one per `Slot` part, all at once.
async fn run(
    lane: &ClusterLane,
    batch: &[Pending],
    parts: Vec<Part>,
    deadline: Instant,
) -> Vec<Outcome> {
    let mut calls: Vec<(Target, Vec<Part>)> = Vec::new();
    for part in parts {
        let shared_call = matches!(part.target, Target::Node(_));
        match calls
            .iter_mut()
            .find(|(target, _)| shared_call && *target == part.target)
        {
            Some((_, parts)) => parts.push(part),
            None => calls.push((part.target.clone(), vec![part])),
        }
    }
    let runs = calls
        .into_iter()
        .map(|(target, parts)| run_call(lane, batch, target, parts, deadline));
    join_all(runs).await.into_iter().flatten().collect()
}

/// One call deciding `parts` on `target`'s node.
async fn run_call(
    lane: &ClusterLane,
    batch: &[Pending],
    target: Target,
    parts: Vec<Part>,
    deadline: Instant,
) -> Vec<Outcome> {
    let (node, placement, asking) = match &target {
        Target::Node(node) => (node.clone(), KeyPlacement::InArguments, false),
        Target::Slot { node, asking } => (node.clone(), KeyPlacement::Declared, *asking),
    };
    let fail_all = |parts: Vec<Part>, error: StoreError| {
        parts
            .into_iter()
            .map(|part| Outcome::Failed(part.request, error.clone()))
            .collect::<Vec<_>>()
    };
    let link = match lane.link(&node) {
        Ok(link) => link,
        Err(error) => return fail_all(parts, error),
    };
    let invocations: Vec<Invocation> = parts
        .iter()
        .map(|part| batch[part.request].invocation.part(&part.checks))
        .collect();
    let reply = match link
        .decide_raw(invocations.iter(), placement, asking, deadline)
        .await
    {
        Ok(Ok(reply)) => reply,
        Ok(Err(error)) => {
            return match call_redirect(&error) {
                Some(redirect) => parts
                    .into_iter()
                    .map(|part| Outcome::Again(part, redirect.clone()))
                    .collect(),
                None => fail_all(parts, command_error(error)),
            }
        }
        Err(error) => return fail_all(parts, error),
    };
    parts
        .into_iter()
        .zip(invocations)
        .zip(reply.answers)
        .map(|((part, invocation), answer)| match answer {
            Ok(verdicts) => Outcome::Decided(
                part.request,
                Decided {
                    node: node.clone(),
                    checks: part.checks,
                    verdicts,
                    committed_at_us: invocation.pinned_now_us().unwrap_or(reply.clock_us),
                },
            ),
            Err(error) => match request_redirect(&error) {
                Some(redirect) => Outcome::Again(part, redirect),
                None => Outcome::Failed(part.request, error),
            },
        })
        .collect()
}

/// The redirection a whole call was answered with, if it is one: answers given before the script
/// ran, so the call can be sent again.
fn call_redirect(error: &RedisError) -> Option<Redirect> {
    let node = || {
        error
            .redirect_node()
            .and_then(|(address, _)| HostPort::parse(address).ok())
    };
    match error.code()? {
        "MOVED" => Some(node().map_or(Redirect::Later, Redirect::Moved)),
        "ASK" => Some(node().map_or(Redirect::Later, Redirect::Ask)),
        "TRYAGAIN" | "CLUSTERDOWN" | "READONLY" | "LOADING" | "MASTERDOWN" => Some(Redirect::Later),
        _ => None,
    }
}

/// The redirection a request's own error means, if it is one. The script loads every key of a
/// request before it writes any, and Redis fails the access to a key the node does not own (or
/// any access while the cluster is down, or a write on a replica) at that access: a request
/// answered so wrote nothing.
fn request_redirect(error: &StoreError) -> Option<Redirect> {
    let (StoreError::Unavailable(message) | StoreError::Protocol(message)) = error else {
        return None;
    };
    if message.contains("non local key") {
        Some(Redirect::NotLocal)
    } else if message.contains("cluster is down")
        || message.starts_with("READONLY")
        || message.starts_with("CLUSTERDOWN")
        || message.starts_with("TRYAGAIN")
    {
        Some(Redirect::Later)
    } else {
        None
    }
}

/// A request's verdicts in its check order, from the parts its nodes decided.
fn merged(invocation: &Invocation, parts: &[Decided]) -> Result<pending::Decided, StoreError> {
    let mut verdicts: Vec<Option<Verdict>> = vec![None; invocation.checks()];
    for part in parts {
        for (&check, verdict) in part.checks.iter().zip(&part.verdicts) {
            if let Some(slot) = verdicts.get_mut(check) {
                *slot = Some(*verdict);
            }
        }
    }
    let verdicts = verdicts
        .into_iter()
        .collect::<Option<Vec<_>>>()
        .ok_or_else(|| StoreError::Protocol("a check of the request was not decided".into()))?;
    let clock_us = parts
        .iter()
        .map(|part| part.committed_at_us)
        .min()
        .unwrap_or_default();
    Ok(pending::Decided { verdicts, clock_us })
}

/// Whether a non-shadow check denied the request.
fn is_vetoed(invocation: &Invocation, verdicts: &[Verdict]) -> bool {
    vetoes(invocation, 0.., verdicts)
}

/// Whether a non-shadow check among `checks` (indices into the request's checks, paired with
/// `verdicts`) was denied.
fn vetoes(
    invocation: &Invocation,
    checks: impl IntoIterator<Item = usize>,
    verdicts: &[Verdict],
) -> bool {
    checks.into_iter().zip(verdicts).any(|(check, verdict)| {
        !verdict.admitted
            && invocation
                .check(check)
                .is_some_and(|(_, _, shadow)| !shadow)
    })
}

/// What `part`'s node committed for the request, as refunds, or `None` when it committed nothing
/// to take back (a non-shadow check denied there, so the script wrote nothing but what
/// envoyproxy/ratelimit's counters count of a denied request). Mirrors the script's commit: each
/// distinct key once, with the total hits of its admitted checks, at the rate of the last; an
/// envoyproxy/ratelimit counter that counts the hits of denied requests (its default) keeps them.
fn committed(invocation: &Invocation, part: &Decided) -> Option<Vec<Refund>> {
    if vetoes(invocation, part.checks.iter().copied(), &part.verdicts) {
        return None;
    }
    let mut refunds: Vec<(Refund, u64)> = Vec::new();
    for (&check, verdict) in part.checks.iter().zip(&part.verdicts) {
        let (Some(key), Some((rate, hits, _)), Some(counter)) = (
            invocation.keys().get(check),
            invocation.check(check),
            invocation.counter(check),
        ) else {
            continue;
        };
        if !verdict.admitted || hits == 0 || counter.counts_admitted_of_denied_requests() {
            continue;
        }
        match refunds.iter_mut().find(|(refund, _)| refund.key == *key) {
            Some((refund, reset_after_us)) => {
                refund.hits += hits;
                refund.rate = rate;
                *reset_after_us = verdict.reset_after_us;
            }
            None => refunds.push((
                Refund {
                    key: key.clone(),
                    rate,
                    counter,
                    hits,
                    committed_at_us: part.committed_at_us,
                    debt_before_us: 0,
                },
                verdict.reset_after_us,
            )),
        }
    }
    let refunds: Vec<Refund> = refunds
        .into_iter()
        .map(|(mut refund, reset_after_us)| {
            // The last admitted check of the key saw the request's whole total on it.
            refund.debt_before_us =
                algorithm::debt_before_us(&refund.rate, reset_after_us, refund.hits);
            refund
        })
        .collect();
    Some(refunds).filter(|refunds| !refunds.is_empty())
}

/// Gives back `refunds` of leases (see `Store::give_back`): one call of the refund script per
/// master owning their keys, all at once; the first failure, if any, once every call ended.
pub(in crate::store::redis) async fn give_back(
    lane: &ClusterLane,
    refunds: Vec<Refund>,
    pinned: Option<u64>,
    deadline: Instant,
) -> Result<(), StoreError> {
    let map = lane.cluster.slot_map();
    let mut by_node: HashMap<HostPort, Vec<Refund>> = HashMap::new();
    for refund in refunds {
        let slot = slot_of(refund.key.as_bytes());
        let Some(master) = map.master_of(slot) else {
            return Err(StoreError::Unavailable(format!(
                "no redis cluster master serves slot {slot} (CLUSTERDOWN)"
            )));
        };
        by_node.entry(master.clone()).or_default().push(refund);
    }
    let calls = by_node.into_iter().map(|(node, refunds)| async move {
        let command = |by| refund_command(&refunds, pinned, KeyPlacement::InArguments, by);
        let link = lane.link(&node)?;
        link.evaluate(&REFUND, command, deadline).await.map(|_| ())
    });
    join_all(calls).await.into_iter().collect()
}

/// Sends each node its refunds, one call per node, all at once. A refund that fails is logged and
/// counted, never retried: the reservation then stays, which is stricter, never more permissive.
async fn refund(lane: &ClusterLane, refunds: HashMap<HostPort, Vec<Refund>>, pinned: Option<u64>) {
    let deadline = Instant::now() + lane.settings.timeout;
    let calls = refunds.into_iter().map(|(node, refunds)| async move {
        lane.cluster
            .refunds_sent
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let command = |by| refund_command(&refunds, pinned, KeyPlacement::InArguments, by);
        let result = match lane.link(&node) {
            Ok(link) => link.evaluate(&REFUND, command, deadline).await.map(|_| ()),
            Err(error) => Err(error),
        };
        if let Err(error) = result {
            lane.cluster
                .refunds_failed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            tracing::warn!(%node, %error, keys = refunds.len(), "refund of a denied request failed");
        }
    });
    join_all(calls).await;
}
