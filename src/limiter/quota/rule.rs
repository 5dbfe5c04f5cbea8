//! Bucket to rule: which configured limit governs a quota bucket.
//!
//! A bucket is an unordered map, the descriptor tree is ordered by levels. The bucket matches a
//! path of the tree that uses each of its keys exactly once, at one level each, in any order,
//! and ends at a node with a `rate_limit`. Each step selects its node as RLS does for a
//! descriptor entry ([`crate::limiter::matcher`]): the exact value, else the wildcard spelled as
//! the value, else the first matching wildcard in configuration order, else the key-only node;
//! a selected node does not fall back to a sibling. Said otherwise: the bucket matches what an
//! RLS descriptor of its entries, in some order, would match. When several orders reach a limit,
//! the path that comes first in configuration order wins: the one whose node comes first at the
//! first level where the paths part.

use std::sync::Arc;

use super::bucket::BucketId;
use crate::limiter::matcher::select;
use crate::limiter::rules::{ConfiguredLimit, DomainRules, RuleNode, RuleSet};

/// The rule a bucket matched, and the bucket keys whose value counts as a shared wildcard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaMatch<'a> {
    pub limit: &'a Arc<ConfiguredLimit>,
    /// `(key, pattern)` for each key matched through a `share_threshold: true` wildcard: every
    /// bucket that differs from this one only in such values shares one limit. Sorted by key.
    pub shared: Vec<(&'a str, &'a str)>,
}

/// The rule governing `bucket` in `rules`, or `None` when no path matches (the caller applies
/// its blanket rule for unmatched buckets).
///
/// Each node of the tree is visited at most once (a node has one key, so the path to it fixes
/// which bucket keys it used), so the cost is bounded by the tree's size times the bucket's
/// length, whatever the bucket holds.
pub fn find_quota<'a>(rules: &'a DomainRules, bucket: &BucketId) -> Option<QuotaMatch<'a>> {
    let entries = bucket.entries();
    let mut used = vec![false; entries.len()];
    let mut shared = Vec::new();
    let limit = walk(&rules.root, entries, &mut used, entries.len(), &mut shared)?;
    shared.sort_unstable();
    Some(QuotaMatch { limit, shared })
}

/// A node an unused entry selects: the entry's index, the node, and `(key, pattern)` when the
/// node is a shared wildcard.
type Candidate<'a> = (usize, &'a RuleNode, Option<(&'a str, &'a str)>);

/// Tries the nodes the unused entries select at `level`, in configuration order; `left` entries
/// are still unused. On success `shared` holds the shared wildcards of the winning path.
fn walk<'a>(
    level: &'a RuleSet,
    entries: &[(String, String)],
    used: &mut [bool],
    left: usize,
    shared: &mut Vec<(&'a str, &'a str)>,
) -> Option<&'a Arc<ConfiguredLimit>> {
    let mut candidates: Vec<Candidate<'a>> = entries
        .iter()
        .enumerate()
        .filter(|(index, _)| !used[*index])
        .filter_map(|(index, (key, value))| {
            let (node, wildcard) = select(level, key, value)?;
            let sharing = wildcard
                .filter(|rule| rule.share_threshold)
                .map(|rule| (rule.key.as_str(), rule.pattern.as_str()));
            Some((index, node, sharing))
        })
        .collect();
    // Entries are sorted by key, so equal orders (hand-built rules) still break ties the same
    // way every time.
    candidates.sort_by_key(|(index, node, _)| (node.order, *index));
    for (index, node, sharing) in candidates {
        if let Some(sharing) = sharing {
            shared.push(sharing);
        }
        let found = if left == 1 {
            node.limit.as_ref()
        } else {
            used[index] = true;
            let found = walk(&node.children, entries, used, left - 1, shared);
            used[index] = false;
            found
        };
        if found.is_some() {
            return found;
        }
        if sharing.is_some() {
            shared.pop();
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;
    use crate::config::parse_domain;

    fn rules(descriptors: &str) -> DomainRules {
        let text = format!("domain: d\ndescriptors:\n{descriptors}");
        match parse_domain(Path::new("quota.yaml"), &text) {
            Ok(rules) => rules,
            Err(errors) => panic!("unexpected errors:\n{errors}"),
        }
    }

    fn bucket(entries: &[(&str, &str)]) -> BucketId {
        BucketId::new(entries.iter().copied()).expect("a bucket")
    }

    /// The matched rule's path, or `None`.
    fn path(rules: &DomainRules, entries: &[(&str, &str)]) -> Option<String> {
        find_quota(rules, &bucket(entries)).map(|found| found.limit.path.clone())
    }

    const ONE_LEVEL: &str = "  - key: user
    value: alice
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: user
    value: bot-*
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: region
    value: eu
";

    #[test]
    fn values_match_exact_then_wildcard_then_key_only() {
        let rules = rules(ONE_LEVEL);
        assert_eq!(
            path(&rules, &[("user", "alice")]).as_deref(),
            Some("d.user_alice")
        );
        assert_eq!(
            path(&rules, &[("user", "bot-7")]).as_deref(),
            Some("d.user_bot-*")
        );
        assert_eq!(path(&rules, &[("user", "bob")]).as_deref(), Some("d.user"));
    }

    #[test]
    fn an_unknown_key_or_a_node_without_a_limit_matches_nothing() {
        let rules = rules(ONE_LEVEL);
        assert_eq!(path(&rules, &[("tenant", "t")]), None);
        assert_eq!(path(&rules, &[("region", "eu")]), None, "no rate_limit");
        assert_eq!(path(&rules, &[("region", "us")]), None);
    }

    const TWO_LEVELS: &str = "  - key: tenant
    value: acme
    descriptors:
      - key: path
        value: /api/*
        rate_limit: {unit: minute, requests_per_unit: 60}
      - key: path
        rate_limit: {unit: minute, requests_per_unit: 30}
  - key: method
    descriptors:
      - key: tenant
        rate_limit: {unit: minute, requests_per_unit: 10}
";

    #[test]
    fn key_order_in_the_bucket_is_irrelevant() {
        let rules = rules(TWO_LEVELS);
        let expect = Some("d.tenant_acme.path_/api/*");
        assert_eq!(
            path(&rules, &[("tenant", "acme"), ("path", "/api/x")]).as_deref(),
            expect
        );
        assert_eq!(
            path(&rules, &[("path", "/api/x"), ("tenant", "acme")]).as_deref(),
            expect
        );
        assert_eq!(
            path(&rules, &[("tenant", "acme"), ("path", "/")]).as_deref(),
            Some("d.tenant_acme.path")
        );
        assert_eq!(
            path(&rules, &[("tenant", "other"), ("method", "GET")]).as_deref(),
            Some("d.method.tenant"),
            "the tree's key order is what counts, not the bucket's"
        );
    }

    #[test]
    fn a_bucket_with_an_extra_or_a_missing_key_matches_nothing() {
        let rules = rules(TWO_LEVELS);
        assert_eq!(path(&rules, &[("tenant", "acme")]), None, "path missing");
        assert_eq!(
            path(&rules, &[("tenant", "acme"), ("path", "/"), ("user", "u")]),
            None,
            "user is extra"
        );
        assert_eq!(
            path(&rules, &[("tenant", "acme"), ("user", "u")]),
            None,
            "path replaced by another key"
        );
        assert_eq!(path(&rules, &[("method", "GET")]), None, "tenant missing");
    }

    #[test]
    fn a_selected_value_does_not_fall_back_to_a_sibling() {
        let rules = rules(
            "  - key: a
    value: x
  - key: a
    rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        assert_eq!(path(&rules, &[("a", "x")]), None, "as RLS: exact a=x wins");
        assert_eq!(path(&rules, &[("a", "y")]).as_deref(), Some("d.a"));
    }

    #[test]
    fn the_first_path_in_configuration_order_wins() {
        let both_orders = "  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
";
        let rules_ba = rules(both_orders);
        assert_eq!(
            path(&rules_ba, &[("a", "1"), ("b", "2")]).as_deref(),
            Some("d.b.a")
        );
        let swapped = "  - key: a
    descriptors:
      - key: b
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
";
        let rules_ab = rules(swapped);
        assert_eq!(
            path(&rules_ab, &[("a", "1"), ("b", "2")]).as_deref(),
            Some("d.a.b")
        );
        // A first path that ends without a limit gives way to the next one.
        let first_ends_bare = "  - key: a
    descriptors:
      - key: b
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
";
        assert_eq!(
            path(&rules(first_ends_bare), &[("a", "1"), ("b", "2")]).as_deref(),
            Some("d.b.a")
        );
    }

    #[test]
    fn configuration_order_counts_across_exact_wildcard_and_key_only_nodes() {
        // At the root: exact `a=1` first, then key-only `b`.
        let rules = rules(
            "  - key: a
    value: '1'
    descriptors:
      - key: b
        value: 2*
        rate_limit: {unit: second, requests_per_unit: 2}
  - key: b
    descriptors:
      - key: a
        rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        assert_eq!(
            path(&rules, &[("a", "1"), ("b", "20")]).as_deref(),
            Some("d.a_1.b_2*")
        );
        assert_eq!(
            path(&rules, &[("a", "1"), ("b", "3")]).as_deref(),
            Some("d.b.a"),
            "b=3 fails under a=1, so the later path matches"
        );
        assert_eq!(
            path(&rules, &[("a", "2"), ("b", "20")]).as_deref(),
            Some("d.b.a")
        );
    }

    #[test]
    fn shared_wildcards_are_reported_by_key() {
        let rules = rules(
            "  - key: tenant
    value: t-*
    share_threshold: true
    descriptors:
      - key: path
        value: /a*
        rate_limit: {unit: second, requests_per_unit: 1}
",
        );
        let bucket = bucket(&[("path", "/abc"), ("tenant", "t-9")]);
        let found = find_quota(&rules, &bucket).expect("a match");
        assert_eq!(found.shared, vec![("tenant", "t-*")]);
    }

    #[test]
    fn a_bucket_longer_than_the_tree_is_unmatched_quickly() {
        let rules = rules(ONE_LEVEL);
        let keys: Vec<(String, String)> = (0..10_000)
            .map(|i| (format!("k{i}"), "v".to_string()))
            .collect();
        let bucket = BucketId::new(keys).expect("a bucket");
        assert_eq!(find_quota(&rules, &bucket), None);
    }
}
