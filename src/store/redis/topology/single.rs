//! One server's batch (a single server, or the master the sentinels name): one script call.

use tokio::time::Instant;

use super::pending::{Decided, Pending};
use crate::store::redis::server::pool::Shared;

/// One script call deciding `batch`, answering every request of it; the batch back, emptied.
pub(super) async fn call_server(shared: &Shared, mut batch: Vec<Pending>) -> Vec<Pending> {
    let deadline = batch
        .iter()
        .map(|pending| pending.deadline)
        .min()
        .unwrap_or_else(Instant::now);
    let reply = shared
        .decide(batch.iter().map(|pending| &pending.invocation), deadline)
        .await;
    match reply {
        Ok(reply) => {
            for (pending, answer) in batch.drain(..).zip(reply.answers) {
                let clock_us = pending.invocation.pinned_now_us().unwrap_or(reply.clock_us);
                let answer = answer.map(|verdicts| Decided { verdicts, clock_us });
                let _ = pending.answer.send(answer);
            }
        }
        Err(error) => {
            for pending in batch.drain(..) {
                let _ = pending.answer.send(Err(error.clone()));
            }
        }
    }
    batch
}
