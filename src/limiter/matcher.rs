//! Descriptor matching, as envoyproxy/ratelimit walks its descriptor tree.

use std::sync::Arc;

use super::request::Entry;
use super::rules::{ConfiguredLimit, DomainRules, RuleNode, RuleSet};

/// The node one entry selects at one level: the exact `key`+`value` node first, then the first
/// wildcard (in config order) whose prefix the value starts with, then the key-only node.
fn select<'a>(level: &'a RuleSet, entry: &Entry) -> Option<&'a RuleNode> {
    level
        .exact
        .get(&entry.key)
        .and_then(|values| values.get(&entry.value))
        .or_else(|| {
            level
                .wildcards
                .iter()
                .find(|w| w.key == entry.key && entry.value.starts_with(&w.prefix))
                .map(|w| &w.node)
        })
        .or_else(|| level.key_only.get(&entry.key))
}

/// The limit configured for a descriptor: the entries walk the tree one level per entry, and the
/// limit applies only if the walk reaches a node at the last entry. A walk that stops early, a
/// descriptor longer than the tree, or a final node without `rate_limit` all give `None`.
pub fn find_limit<'a>(
    rules: &'a DomainRules,
    entries: &[Entry],
) -> Option<&'a Arc<ConfiguredLimit>> {
    let (last, path) = entries.split_last()?;
    let mut level = &rules.root;
    for entry in path {
        level = &select(level, entry)?.children;
    }
    select(level, last)?.limit.as_ref()
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::limiter::rules::{LimitKind, WildcardRule};

    fn limit(path: &str) -> Option<Arc<ConfiguredLimit>> {
        Some(Arc::new(ConfiguredLimit {
            path: path.into(),
            name: None,
            kind: LimitKind::Unlimited,
            replaces: vec![],
            shadow_mode: false,
            detailed_metric: false,
        }))
    }

    fn leaf(path: &str) -> RuleNode {
        RuleNode {
            limit: limit(path),
            children: RuleSet::default(),
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
        root.wildcards.push(WildcardRule {
            key: "k".into(),
            prefix: "ex".into(),
            node: leaf("ex*"),
        });
        root.wildcards.push(WildcardRule {
            key: "k".into(),
            prefix: "e".into(),
            node: leaf("e*"),
        });
        let mut children = RuleSet::default();
        children.key_only.insert("sub".into(), leaf("k.sub"));
        root.key_only.insert(
            "k".into(),
            RuleNode {
                limit: limit("k"),
                children,
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
}
