//! One replica's leases on one counter: the hits it holds and until when, whether it must ask
//! again or deny until the store could grant, and how fast it spends (to size the next lease).

use std::collections::VecDeque;

use super::sizing::LeasePolicy;
use crate::limiter::algorithm::lease::{Grant, LeaseTerms};
use crate::store::StoreError;

/// Hits of one grant, spendable until `expires_at_us` (this replica's monotonic clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tranche {
    hits: u64,
    expires_at_us: u64,
    /// The store's clock when it granted them, which a give-back names.
    granted_at_us: u64,
}

/// Unspent hits of one grant, to give back to the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unspent {
    pub hits: u64,
    pub granted_at_us: u64,
}

/// What [`Ledger::sweep`] took out of the ledger.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Swept {
    /// Hits to give back to the store.
    pub unspent: Vec<Unspent>,
    /// Hits whose lease ended unspent, which no give-back would restore (a fixed window that
    /// ended counts nothing any more).
    pub expired: u64,
}

/// Hits one request took, by the instant their tranche expires (to give them back there).
pub type Taken = Vec<(u64, u64)>;

/// What [`Ledger::take`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Take {
    /// The hits were taken: what is left and µs until the earliest tranche ends.
    Taken {
        taken: Taken,
        remaining: u64,
        reset_after_us: u64,
    },
    /// Not enough here, and the store said it could not grant `min` before this many µs.
    Denied { retry_after_us: u64 },
    /// Not enough here: a refill must come first.
    Wait,
}

/// A replica's leases on one counter. Times are µs of one monotonic clock; a grant's end is
/// counted from when its call was *sent*, so it never outlives the end the store gave it.
#[derive(Debug, Default)]
pub struct Ledger {
    tranches: VecDeque<Tranche>,
    /// Until then the store has said it cannot grant: deny without asking.
    denied_until_us: u64,
    /// A refill of this counter is queued or in flight.
    pub refilling: bool,
    /// The store cannot lease this counter (decide it exactly).
    pub unleasable: bool,
    /// Hits requested (admitted or not) since the last estimate.
    demand: u64,
    estimated_at_us: u64,
    /// Hits requested per lease period, estimated.
    per_period: f64,
    /// The last lease asked for: a refill is due below half of it.
    last_want: u64,
    /// Last time a request touched this counter.
    pub last_used_us: u64,
    /// Hits the request waiting for the next refill needs (a lease is at least this big).
    pub needed: u64,
    /// Why the last refill failed, for the request that waited for it.
    pub failure: Option<StoreError>,
}

impl Ledger {
    /// Hits held and still valid at `now_us`.
    pub fn balance(&self, now_us: u64) -> u64 {
        self.tranches
            .iter()
            .filter(|t| t.expires_at_us > now_us)
            .map(|t| t.hits)
            .sum()
    }

    /// Takes out the hits not worth keeping at `now_us`: those of the tranches that ended
    /// (given back when `ended_are_given_back`, the algorithm's refund restoring some of them;
    /// expired otherwise), and, when no request used the counter for `idle_after_us` (`None`:
    /// hits are never given back before their lease ends), every hit held (given back, so that
    /// the other replicas may have them).
    pub fn sweep(
        &mut self,
        now_us: u64,
        idle_after_us: Option<u64>,
        ended_are_given_back: bool,
    ) -> Swept {
        let idle =
            idle_after_us.is_some_and(|after| self.last_used_us.saturating_add(after) <= now_us);
        let mut swept = Swept::default();
        self.tranches.retain(|tranche| {
            let ended = tranche.expires_at_us <= now_us;
            if !ended && !idle {
                return true;
            }
            if tranche.hits > 0 {
                if ended && !ended_are_given_back {
                    swept.expired += tranche.hits;
                } else {
                    swept.unspent.push(Unspent {
                        hits: tranche.hits,
                        granted_at_us: tranche.granted_at_us,
                    });
                }
            }
            false
        });
        swept
    }

    /// Takes `hits` from the tranches that end first, if they hold enough (nothing otherwise).
    /// Counts them as demand either way.
    pub fn take(&mut self, now_us: u64, hits: u64) -> Take {
        self.last_used_us = now_us;
        self.demand = self.demand.saturating_add(hits);
        let balance = self.balance(now_us);
        if balance >= hits {
            let mut taken = Vec::new();
            let mut left = hits;
            for tranche in self.tranches.iter_mut() {
                if left == 0 {
                    break;
                }
                if tranche.expires_at_us <= now_us || tranche.hits == 0 {
                    continue;
                }
                let part = left.min(tranche.hits);
                tranche.hits -= part;
                left -= part;
                taken.push((tranche.expires_at_us, part));
            }
            let reset_after_us = self
                .tranches
                .iter()
                .find(|t| t.expires_at_us > now_us)
                .map_or(0, |t| t.expires_at_us - now_us);
            return Take::Taken {
                taken,
                remaining: balance - hits,
                reset_after_us,
            };
        }
        if self.denied_until_us > now_us {
            return Take::Denied {
                retry_after_us: self.denied_until_us - now_us,
            };
        }
        Take::Wait
    }

    /// Puts back hits a request took and then did not spend (another check denied it), into
    /// the tranches they came from if those still exist; hits of a tranche gone are dropped.
    pub fn give_back(&mut self, taken: &Taken) {
        for &(expires_at_us, hits) in taken {
            if let Some(tranche) = self
                .tranches
                .iter_mut()
                .find(|t| t.expires_at_us == expires_at_us)
            {
                tranche.hits += hits;
            }
        }
    }

    /// Whether a refill should be asked for now: none under way, the store not known to be
    /// empty, and less than half of the last lease left.
    pub fn wants_refill(&self, now_us: u64) -> bool {
        !self.refilling
            && !self.unleasable
            && self.denied_until_us <= now_us
            && self.balance(now_us).saturating_mul(2) < self.last_want.max(1)
    }

    /// The terms of the next lease under `policy`, for a request needing `needed` hits now, from
    /// the demand since the last ask: the per-period estimate moves towards what was observed
    /// in proportion to the time observed (a full period replaces it).
    pub fn ask(&mut self, now_us: u64, policy: &LeasePolicy, needed: u64) -> LeaseTerms {
        let elapsed = now_us.saturating_sub(self.estimated_at_us);
        if self.estimated_at_us == 0 {
            self.per_period = 0.0;
        } else if elapsed > 0 {
            let period = policy.period_us as f64;
            let observed = self.demand as f64 * period / elapsed as f64;
            let weight = (elapsed as f64 / period).min(1.0);
            self.per_period += weight * (observed - self.per_period);
        }
        self.demand = 0;
        self.estimated_at_us = now_us.max(1);
        let terms = policy.terms(self.per_period, needed.max(self.needed));
        self.needed = 0;
        self.last_want = terms.want;
        terms
    }

    /// Records that the lease asked for could not be had.
    pub fn failed(&mut self, error: StoreError) {
        self.refilling = false;
        self.failure = Some(error);
    }

    /// Records the answer to a lease asked at `sent_at_us`.
    pub fn granted(&mut self, sent_at_us: u64, grant: Grant) {
        self.refilling = false;
        self.failure = None;
        let until = sent_at_us.saturating_add(grant.after_us);
        if grant.hits > 0 {
            self.tranches.push_back(Tranche {
                hits: grant.hits,
                expires_at_us: until,
                granted_at_us: grant.granted_at_us,
            });
            self.denied_until_us = 0;
        } else {
            self.denied_until_us = until;
        }
    }

    /// Whether nothing here is worth keeping (no hits held, no refill under way).
    pub fn is_idle(&self, now_us: u64) -> bool {
        !self.refilling && self.balance(now_us) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grant(hits: u64, after_us: u64) -> Grant {
        Grant {
            hits,
            after_us,
            granted_at_us: 7,
        }
    }

    #[test]
    fn hits_are_taken_from_the_tranche_that_ends_first_and_given_back_there() {
        let mut ledger = Ledger::default();
        ledger.granted(1_000, grant(3, 10_000));
        ledger.granted(2_000, grant(5, 20_000));
        let Take::Taken {
            taken, remaining, ..
        } = ledger.take(5_000, 4)
        else {
            panic!("enough hits are held")
        };
        assert_eq!(taken, vec![(11_000, 3), (22_000, 1)]);
        assert_eq!(remaining, 4);
        ledger.give_back(&taken);
        assert_eq!(ledger.balance(5_000), 8);
        assert_eq!(ledger.balance(11_000), 5, "the first tranche ended");
    }

    #[test]
    fn a_store_that_granted_nothing_is_not_asked_again_before_it_said() {
        let mut ledger = Ledger {
            refilling: true,
            ..Ledger::default()
        };
        ledger.granted(1_000, grant(0, 50_000));
        assert_eq!(
            ledger.take(2_000, 1),
            Take::Denied {
                retry_after_us: 49_000
            }
        );
        assert!(!ledger.wants_refill(2_000));
        assert_eq!(ledger.take(51_000, 1), Take::Wait);
        assert!(ledger.wants_refill(51_000));
    }

    #[test]
    fn hits_of_a_tranche_that_ended_cannot_be_spent() {
        let mut ledger = Ledger::default();
        ledger.granted(0, grant(10, 1_000));
        assert_eq!(ledger.take(1_000, 1), Take::Wait);
        let swept = ledger.sweep(1_000, None, false);
        assert_eq!((swept.unspent, swept.expired), (vec![], 10));
    }

    #[test]
    fn a_sweep_gives_back_what_ended_and_everything_of_an_idle_counter() {
        let mut ledger = Ledger::default();
        ledger.granted(0, grant(10, 1_000));
        ledger.granted(0, grant(5, 5_000));
        assert!(matches!(ledger.take(100, 3), Take::Taken { .. }));
        let swept = ledger.sweep(1_000, Some(2_000), true);
        let unspent = |hits| Unspent {
            hits,
            granted_at_us: 7,
        };
        assert_eq!(
            swept.unspent,
            vec![unspent(7)],
            "the ended tranche, less 3 spent"
        );
        assert_eq!(ledger.balance(1_000), 5, "the other one is kept");
        let swept = ledger.sweep(2_100, Some(2_000), true);
        assert_eq!(
            swept.unspent,
            vec![unspent(5)],
            "idle since 100: all given back"
        );
        assert_eq!(ledger.balance(2_100), 0);
    }
}
