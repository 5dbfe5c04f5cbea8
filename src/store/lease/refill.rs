//! The refill task: every counter that needs a lease, asked for in rounds, one store call per
//! round (the Redis store sends the round's leases together, one script call per node).

use std::sync::Arc;

use tokio::sync::mpsc;

use super::slot::LeaseSlot;
use super::stats::LeaseStats;
use crate::limiter::clock::Clock;
use crate::store::{LeaseAsk, Store};

/// Most counters asked for in one round; the rest wait for the next.
const MAX_ROUND: usize = 1024;

pub(super) struct Refills<S> {
    pub store: Arc<S>,
    pub clock: Arc<dyn Clock>,
    pub stats: Arc<LeaseStats>,
}

impl<S: Store> Refills<S> {
    /// Serves `queue` until every sender is gone: a round takes every counter queued by then.
    pub async fn run(self, mut queue: mpsc::UnboundedReceiver<Arc<LeaseSlot>>) {
        let mut round: Vec<Arc<LeaseSlot>> = Vec::new();
        while let Some(first) = queue.recv().await {
            round.clear();
            round.push(first);
            while round.len() < MAX_ROUND {
                match queue.try_recv() {
                    Ok(slot) => round.push(slot),
                    Err(_) => break,
                }
            }
            self.serve(&round).await;
        }
    }

    async fn serve(&self, round: &[Arc<LeaseSlot>]) {
        let sent_at_us = self.clock.now_us();
        let asks: Vec<LeaseAsk> = round
            .iter()
            .map(|slot| LeaseAsk {
                key: slot.key.clone(),
                rate: slot.rate,
                terms: slot.ledger.lock().ask(sent_at_us, &slot.policy, 1),
            })
            .collect();
        let answers = self.store.lease(&asks).await;
        self.stats.record_round();
        for slot in round {
            slot.stats.record_ask();
        }
        match answers {
            Ok(answers) => {
                for (slot, answer) in round.iter().zip(answers) {
                    let mut ledger = slot.ledger.lock();
                    match answer {
                        Ok(Some(grant)) => {
                            slot.stats.record_granted(grant.hits);
                            ledger.granted(sent_at_us, grant);
                        }
                        Ok(None) => {
                            ledger.unleasable = true;
                            ledger.refilling = false;
                        }
                        Err(error) => ledger.failed(error),
                    }
                    drop(ledger);
                    slot.refilled.notify_waiters();
                }
            }
            Err(error) => {
                for slot in round {
                    slot.ledger.lock().failed(error.clone());
                    slot.refilled.notify_waiters();
                }
            }
        }
    }
}
