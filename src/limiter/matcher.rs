//! Descriptor matching, as envoyproxy/ratelimit walks its descriptor tree.

use std::sync::Arc;

use super::request::Entry;
use super::rules::{ConfiguredLimit, DomainRules, RuleNode, RuleSet, WildcardRule};

/// The node one `key` and `value` select at one level, and the wildcard rule they were selected
/// through.
///
/// Precedence, as envoyproxy/ratelimit looks nodes up: the exact `key`+`value` node; then a
/// wildcard node whose configured value *is* the request value (envoyproxy/ratelimit keeps
/// wildcard nodes in the same map as exact ones, under their literal value); then the first
/// wildcard in config order that matches the value; then the key-only node.
///
/// Quota buckets select nodes the same way (`limiter::quota`), one key at a time.
pub(crate) fn select<'a>(
    level: &'a RuleSet,
    key: &str,
    value: &str,
) -> Option<(&'a RuleNode, Option<&'a WildcardRule>)> {
    if let Some(node) = level.exact.get(key).and_then(|values| values.get(value)) {
        return Some((node, None));
    }
    let mut wildcards = level.wildcards.iter().filter(|w| w.key == key);
    let wildcard = wildcards
        .clone()
        .find(|w| w.pattern.as_str() == value)
        .or_else(|| wildcards.find(|w| w.pattern.matches(value)));
    if let Some(rule) = wildcard {
        return Some((&rule.node, Some(rule)));
    }
    level.key_only.get(key).map(|node| (node, None))
}

/// What a descriptor matched: its limit, and the entries whose value is counted as a shared
/// wildcard (by entry index, with the wildcard's configured value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found<'a> {
    pub limit: &'a Arc<ConfiguredLimit>,
    /// Entries matched through a `share_threshold: true` wildcard, at any level of the walk;
    /// empty (and unallocated) for most descriptors.
    pub shared: Vec<(usize, &'a str)>,
}

/// The limit configured for a descriptor: the entries walk the tree one level per entry, and the
/// limit applies only if the walk reaches a node at the last entry. A walk that stops early, a
/// descriptor longer than the tree, or a final node without `rate_limit` all give `None`.
pub fn find<'a>(rules: &'a DomainRules, entries: &[Entry]) -> Option<Found<'a>> {
    let mut level = &rules.root;
    let mut shared = Vec::new();
    let last = entries.len().checked_sub(1)?;
    for (index, entry) in entries.iter().enumerate() {
        let (node, wildcard) = select(level, &entry.key, &entry.value)?;
        if let Some(rule) = wildcard.filter(|rule| rule.share_threshold) {
            shared.push((index, rule.pattern.as_str()));
        }
        if index == last {
            return node.limit.as_ref().map(|limit| Found { limit, shared });
        }
        level = &node.children;
    }
    None
}

/// The limit configured for a descriptor (see [`find`]).
pub fn find_limit<'a>(
    rules: &'a DomainRules,
    entries: &[Entry],
) -> Option<&'a Arc<ConfiguredLimit>> {
    find(rules, entries).map(|found| found.limit)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::limiter::rules::LimitKind;
    use crate::limiter::wildcard::Wildcard;

    fn limit(path: &str) -> Option<Arc<ConfiguredLimit>> {
        Some(Arc::new(ConfiguredLimit {
            path: path.into(),
            name: None,
            kind: LimitKind::Unlimited,
            replaces: vec![],
            shadow_mode: false,
            quota_mode: false,
            detailed_metric: false,
            metadata: None,
        }))
    }

    fn wildcard(key: &str, pattern: &str, share_threshold: bool, node: RuleNode) -> WildcardRule {
        WildcardRule {
            key: key.into(),
            pattern: Wildcard::parse(pattern).expect("a wildcard"),
            share_threshold,
            node,
        }
    }

    fn leaf(path: &str) -> RuleNode {
        RuleNode {
            limit: limit(path),
            children: RuleSet::default(),
            order: 0,
        }
    }

    fn entry(key: &str, value: &str) -> Entry {
        Entry {
            key: key.into(),
            value: value.into(),
        }
    }

    fn found(rules: &DomainRules, entries: &[Entry]) -> Option<String> {
        find_limit(rules, entries).map(|l| l.path.clone())
    }

    /// `k=exact` exact, `k=ex*` and `k=e*` wildcards (in that order), `k` key-only with a child.
    fn rules() -> DomainRules {
        let mut root = RuleSet::default();
        root.exact
            .entry("k".into())
            .or_insert_with(HashMap::new)
            .insert("exact".into(), leaf("exact"));
        root.wildcards
            .push(wildcard("k", "ex*", false, leaf("ex*")));
        root.wildcards.push(wildcard("k", "e*", false, leaf("e*")));
        let mut children = RuleSet::default();
        children.key_only.insert("sub".into(), leaf("k.sub"));
        root.key_only.insert(
            "k".into(),
            RuleNode {
                limit: limit("k"),
                children,
                order: 0,
            },
        );
        DomainRules {
            domain: "d".into(),
            root,
        }
    }

    #[test]
    fn exact_beats_wildcard_beats_key_only() {
        let rules = rules();
        assert_eq!(
            found(&rules, &[entry("k", "exact")]).as_deref(),
            Some("exact")
        );
        assert_eq!(
            found(&rules, &[entry("k", "exactly")]).as_deref(),
            Some("ex*")
        );
        assert_eq!(found(&rules, &[entry("k", "eel")]).as_deref(), Some("e*"));
        assert_eq!(found(&rules, &[entry("k", "other")]).as_deref(), Some("k"));
        assert_eq!(found(&rules, &[entry("k", "")]).as_deref(), Some("k"));
    }

    #[test]
    fn wildcards_apply_in_config_order() {
        let rules = rules();
        assert_eq!(found(&rules, &[entry("k", "ex")]).as_deref(), Some("ex*"));
    }

    #[test]
    fn limit_applies_only_at_the_last_entry() {
        let rules = rules();
        assert_eq!(
            found(&rules, &[entry("k", "x"), entry("sub", "y")]).as_deref(),
            Some("k.sub")
        );
        assert_eq!(
            found(
                &rules,
                &[entry("k", "x"), entry("sub", "y"), entry("z", "1")]
            ),
            None
        );
        assert_eq!(found(&rules, &[entry("k", "x"), entry("nope", "y")]), None);
        assert_eq!(found(&rules, &[entry("unknown", "x")]), None);
        assert_eq!(found(&rules, &[]), None);
    }

    #[test]
    fn a_matched_branch_does_not_fall_back_to_a_sibling() {
        let rules = rules();
        assert_eq!(
            found(&rules, &[entry("k", "exact"), entry("sub", "y")]),
            None
        );
    }

    /// Wildcards of every shape at one level, in this order: `m=a*z`, `m=*z`, `m=a*`,
    /// `m=a*b*c`, and `m=*` last; the key `other` has only `x*y`.
    fn shapes() -> DomainRules {
        let mut root = RuleSet::default();
        for pattern in ["a*z", "*z", "a*", "a*b*c", "*"] {
            root.wildcards
                .push(wildcard("m", pattern, false, leaf(pattern)));
        }
        root.wildcards
            .push(wildcard("other", "x*y", false, leaf("other x*y")));
        DomainRules {
            domain: "d".into(),
            root,
        }
    }

    #[test]
    fn wildcards_match_stars_anywhere_first_in_config_order() {
        let rules = shapes();
        let at = |value: &str| found(&rules, &[entry("m", value)]);
        assert_eq!(at("az").as_deref(), Some("a*z"));
        assert_eq!(at("a-middle-z").as_deref(), Some("a*z"));
        assert_eq!(at("z").as_deref(), Some("*z"));
        assert_eq!(at("bz").as_deref(), Some("*z"));
        assert_eq!(at("abc").as_deref(), Some("a*"), "a* comes before a*b*c");
        assert_eq!(at("q").as_deref(), Some("*"));
        assert_eq!(at("").as_deref(), Some("*"), "`*` matches the empty value");
        let other = |value: &str| found(&rules, &[entry("other", value)]);
        assert_eq!(other("x-y").as_deref(), Some("other x*y"));
        assert_eq!(other("xy").as_deref(), Some("other x*y"));
        assert_eq!(other("x-y-"), None, "the suffix must end the value");
        assert_eq!(other("-x-y"), None, "the prefix must start the value");
        assert_eq!(found(&rules, &[entry("unknown", "x-y")]), None);
    }

    #[test]
    fn a_value_spelling_a_wildcard_selects_that_wildcard_first() {
        let rules = shapes();
        assert_eq!(
            found(&rules, &[entry("m", "a*b*c")]).as_deref(),
            Some("a*b*c"),
            "as envoyproxy/ratelimit's literal lookup, not `a*` which comes first"
        );
    }

    #[test]
    fn shared_wildcards_are_reported_by_entry_at_every_level() {
        let mut inner = RuleSet::default();
        inner
            .wildcards
            .push(wildcard("file", "*.log", true, leaf("logs")));
        inner
            .wildcards
            .push(wildcard("file", "*.txt", false, leaf("texts")));
        let mut root = RuleSet::default();
        root.wildcards.push(wildcard(
            "tenant",
            "t-*",
            true,
            RuleNode {
                limit: None,
                children: inner.clone(),
                order: 0,
            },
        ));
        root.exact
            .entry("tenant".into())
            .or_insert_with(HashMap::new)
            .insert(
                "t-vip".into(),
                RuleNode {
                    limit: None,
                    children: inner,
                    order: 0,
                },
            );
        let rules = DomainRules {
            domain: "d".into(),
            root,
        };
        let shared = |tenant: &str, file: &str| {
            find(&rules, &[entry("tenant", tenant), entry("file", file)])
                .map(|found| (found.limit.path.clone(), found.shared))
        };
        assert_eq!(
            shared("t-1", "a.log"),
            Some(("logs".into(), vec![(0, "t-*"), (1, "*.log")]))
        );
        assert_eq!(
            shared("t-1", "a.txt"),
            Some(("texts".into(), vec![(0, "t-*")]))
        );
        assert_eq!(
            shared("t-vip", "a.log"),
            Some(("logs".into(), vec![(1, "*.log")])),
            "an exact match is never shared"
        );
        assert_eq!(shared("t-1", "a.csv"), None);
    }
}
