//! The memory store decides every rule exactly: leased rules are said to be so, once.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::limiter::{Consistency, LimitKind, Rules};

/// How many counted limits of `rules` are leased (said so, or by `--consistency`).
pub fn leased_limits(rules: &Rules) -> usize {
    rules
        .limits()
        .iter()
        .filter(|limit| {
            matches!(&limit.kind, LimitKind::Limited(rate) if rate.consistency == Consistency::Leased)
        })
        .count()
}

/// A hook to call at startup and after every change of the rules in force: the first time
/// those have leased limits, it logs at INFO that leases need a shared store and how many limits
/// are decided exactly instead; never again after (a configuration over xDS arrives after
/// startup, so the first one with leased limits is the one said).
pub fn note_exact_decisions(rules: Arc<ArcSwap<Rules>>) -> impl Fn() + Send + Sync {
    let said = AtomicBool::new(false);
    move || {
        if said.load(Ordering::Relaxed) {
            return;
        }
        let leased = leased_limits(&rules.load());
        if leased > 0 && !said.swap(true, Ordering::Relaxed) {
            tracing::info!(
                leased_rules = leased,
                "leased consistency needs a shared store (Redis): the memory store decides \
                 every rule exactly"
            );
        }
    }
}
