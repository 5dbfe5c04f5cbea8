//! The validated configuration as the matcher sees it: per domain, a tree of descriptor nodes.
//!
//! Built by `config` from YAML; nothing here knows about files or YAML.

use std::collections::HashMap;
use std::sync::Arc;

use super::consistency::Consistency;
use super::metadata::Metadata;
use super::rate::{Algorithm, Rate, Unit};
use super::wildcard::Wildcard;

/// What a configured `rate_limit` says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitKind {
    /// `unlimited: true`: always OK, `limit_remaining` = u32::MAX.
    Unlimited,
    /// A counted limit.
    Limited(LimitedRate),
    /// `requests_per_unit: 0`: every request is over the limit (envoyproxy/ratelimit's way of
    /// banning a value). No counter is kept.
    Blocked { unit: Unit, unit_multiplier: u32 },
}

/// A counted limit as configured: the fields echoed in `current_limit` plus the arithmetic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitedRate {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
    pub rate: Rate,
    /// `consistency` (or `--consistency` for a rule that does not say).
    pub consistency: Consistency,
}

impl LimitedRate {
    pub fn algorithm(&self) -> Algorithm {
        self.rate.algorithm()
    }
}

/// One configured limit: a node's `rate_limit` with the node-level flags that change its effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredLimit {
    /// Dotted path of the rule, e.g. `edge.api_key_free.path`, as envoyproxy/ratelimit names its
    /// stats: domain, then `key` or `key_value` per level.
    pub path: String,
    /// `rate_limit.name`, used by `replaces` and echoed in `current_limit.name`.
    pub name: Option<String>,
    pub kind: LimitKind,
    /// `replaces: [{name}]`: limits with these names are ignored when this one also matches.
    pub replaces: Vec<String>,
    /// `shadow_mode: true` on the node: decide and count, but never deny.
    pub shadow_mode: bool,
    /// `quota_mode: true` on the node: decide and count; over the limit, the status stays OK and
    /// the descriptor is reported in the response's dynamic metadata (`quotaModeViolations`)
    /// instead of denying the request.
    pub quota_mode: bool,
    /// `detailed_metric: true` on the node: metrics may carry descriptor values.
    pub detailed_metric: bool,
    /// The node's `metadata`: returned, merged with that of the request's other admitted
    /// descriptors, in the response's dynamic metadata when that is turned on.
    pub metadata: Option<Arc<Metadata>>,
}

/// A node of the descriptor tree: one `key` (and maybe `value`) at one level.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleNode {
    /// The node's own limit, if it has a `rate_limit`. A node without one (and whether or not it
    /// has children) gives "no limit" when a walk ends on it.
    pub limit: Option<Arc<ConfiguredLimit>>,
    pub children: RuleSet,
    /// The node's place among its siblings in configuration order (lower is earlier; numbers
    /// may skip). The exact and key-only maps lose that order; RLS matching never needs it, the
    /// quota service's "first path in configuration order" does. A domain merged from several
    /// files numbers the later file's top-level nodes after the earlier's.
    pub order: u32,
}

/// The nodes of one level, indexed for matching precedence: exact `key`+`value`, then wildcard
/// values (any value with a `*`) in config order, then key-only.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuleSet {
    /// `key` -> `value` -> node, for nodes with a literal value.
    pub exact: HashMap<String, HashMap<String, RuleNode>>,
    /// Nodes whose value contains `*`, in config order.
    pub wildcards: Vec<WildcardRule>,
    /// `key` -> node, for nodes without a value.
    pub key_only: HashMap<String, RuleNode>,
}

/// A node whose value contains `*`: it matches every value of `key` that `pattern` matches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WildcardRule {
    pub key: String,
    pub pattern: Wildcard,
    /// `share_threshold: true`: every value this node matches is counted as the pattern itself,
    /// so they share one counter (at this entry) instead of having one each.
    pub share_threshold: bool,
    pub node: RuleNode,
}

/// All rules of one domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DomainRules {
    pub domain: String,
    pub root: RuleSet,
}

/// The whole validated configuration: domain name -> rules. Immutable; a reload builds a new one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Rules {
    pub domains: HashMap<String, DomainRules>,
}

impl RuleSet {
    /// Every node of this level (not their children), in no particular order.
    pub fn nodes(&self) -> impl Iterator<Item = &RuleNode> {
        self.exact
            .values()
            .flat_map(|values| values.values())
            .chain(self.wildcards.iter().map(|w| &w.node))
            .chain(self.key_only.values())
    }

    /// Every node of this level, mutably (see [`RuleSet::nodes`]).
    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut RuleNode> {
        self.exact
            .values_mut()
            .flat_map(|values| values.values_mut())
            .chain(self.wildcards.iter_mut().map(|w| &mut w.node))
            .chain(self.key_only.values_mut())
    }
}

impl Rules {
    pub fn domain(&self, name: &str) -> Option<&DomainRules> {
        self.domains.get(name)
    }

    /// Every configured limit with its path, sorted by path (for `/rlconfig` and logs).
    pub fn limits(&self) -> Vec<Arc<ConfiguredLimit>> {
        fn collect(set: &RuleSet, out: &mut Vec<Arc<ConfiguredLimit>>) {
            for node in set.nodes() {
                if let Some(limit) = &node.limit {
                    out.push(limit.clone());
                }
                collect(&node.children, out);
            }
        }
        let mut out = Vec::new();
        for domain in self.domains.values() {
            collect(&domain.root, &mut out);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        out
    }
}
