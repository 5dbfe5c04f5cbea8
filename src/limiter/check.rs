//! The unit of work a store decides: one counter, one rate, some hits.

use std::sync::Arc;

use super::consistency::Consistency;
use super::counter_key::CounterKey;
use super::rate::Rate;
use super::rules::ConfiguredLimit;

/// One counted descriptor of a request.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub key: CounterKey,
    pub rate: Rate,
    /// Hits to consume; 0 checks without consuming. Any value is accepted: hits beyond the
    /// rate's capacity are denied (see `algorithm::clamp_hits`).
    pub hits: u64,
    /// A shadow-mode limit: decided and counted, but it never vetoes the request.
    pub shadow: bool,
    /// Whether this replica may decide the check from a lease (see `store::lease`).
    pub consistency: Consistency,
    /// The configured rule the check counts for, given to leased checks only: the lease layer
    /// reports what it did per rule. `None` for exact checks, whose rule the stores never need.
    pub rule: Option<Arc<ConfiguredLimit>>,
}
