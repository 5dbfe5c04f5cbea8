//! `GET /top`: per rule, the descriptor values hit and denied the most over the last 1, 5 or 15
//! minutes, in bounded memory (docs/operations/http-endpoints.md, "/top").
//!
//! Each tracked rule holds a [`MinuteRing`] of Space-Saving summaries ([`space_saving`]) of `k`
//! values; at most `max_rules` rules are tracked, the others (in the order of their first hit)
//! are counted as untracked. A value is shown as its descriptor text only where the operator
//! opted in (`--top-show-values`, or the rule's `detailed_metric`), otherwise as a keyed hash
//! ([`HashKey`]). Memory: at most `max_rules × 16 minutes × 2 summaries × k` values, each with
//! up to [`DETAILED_LABEL_MAX_BYTES`] of text.

mod keyed_hash;
mod minute_ring;
mod query;
mod space_saving;

pub use keyed_hash::HashKey;
pub use query::{TopQuery, Window};

use std::hash::{BuildHasher, Hash, Hasher};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::{json, Value};

use self::keyed_hash::hex;
use self::minute_ring::{Kind, MinuteRing, Ranking};
use self::space_saving::Shown;
use super::descriptor_label::{cut, detailed_label, DETAILED_LABEL_MAX_BYTES};
use crate::limiter::Descriptor;

/// What `/top` keeps and shows.
#[derive(Debug, Clone)]
pub struct TopSettings {
    /// `k`: values per summary (hits and denied, per minute and rule), and per ranking shown.
    pub values: usize,
    /// Most rules tracked; 0 tracks none.
    pub max_rules: usize,
    /// Show every rule's values, not only those of `detailed_metric` rules.
    pub show_values: bool,
    /// The key of the hashes shown instead of values; `None`: a random key per process.
    pub hash_key: Option<HashKey>,
}

impl TopSettings {
    pub const DEFAULT_VALUES: usize = 10;
    pub const MAX_VALUES: usize = 1000;
    /// Off unless asked for: tracking costs a lock, a hash and, for a value not tracked yet,
    /// its HMAC (about 16 000 instructions per decision with 100 000 distinct values,
    /// docs/performance.md), which an operator opts into with `--top-max-rules`.
    pub const DEFAULT_MAX_RULES: usize = 0;
}

impl Default for TopSettings {
    fn default() -> TopSettings {
        TopSettings {
            values: TopSettings::DEFAULT_VALUES,
            max_rules: TopSettings::DEFAULT_MAX_RULES,
            show_values: false,
            hash_key: None,
        }
    }
}

/// The summaries of every tracked rule share this: settings, keys, clock, and the count of
/// rules tracked.
pub struct TopValues {
    values: usize,
    max_rules: usize,
    show_values: bool,
    key: HashKey,
    identity: std::collections::hash_map::RandomState,
    tracked: Arc<AtomicUsize>,
    started: Instant,
}

impl std::fmt::Debug for TopValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TopValues")
            .field("values", &self.values)
            .field("max_rules", &self.max_rules)
            .finish_non_exhaustive()
    }
}

/// One tracked rule's summaries; its place among the `max_rules` is given back when it is
/// dropped (its rule left the configuration).
pub struct RuleTop {
    ring: Mutex<MinuteRing>,
    tracked: Arc<AtomicUsize>,
}

impl std::fmt::Debug for RuleTop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RuleTop(..)")
    }
}

impl Drop for RuleTop {
    fn drop(&mut self) {
        self.tracked.fetch_sub(1, Ordering::Relaxed);
    }
}

/// One rule as `/top` shows it.
pub struct RuleView<'a> {
    pub domain: &'a str,
    pub path: &'a str,
    /// `None`: the rule was hit but is beyond `max_rules`.
    pub top: Option<&'a RuleTop>,
    pub detailed_metric: bool,
}

impl TopValues {
    pub fn new(settings: &TopSettings) -> TopValues {
        TopValues {
            values: settings.values.clamp(1, TopSettings::MAX_VALUES),
            max_rules: settings.max_rules,
            show_values: settings.show_values,
            key: settings.hash_key.clone().unwrap_or_else(HashKey::random),
            identity: Default::default(),
            tracked: Arc::new(AtomicUsize::new(0)),
            started: Instant::now(),
        }
    }

    /// A rule's summaries, or `None` when `max_rules` rules are tracked already.
    pub fn admit(&self) -> Option<RuleTop> {
        self.tracked
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n < self.max_rules).then_some(n + 1)
            })
            .ok()?;
        Some(RuleTop {
            ring: Mutex::new(MinuteRing::new(self.values)),
            tracked: self.tracked.clone(),
        })
    }

    fn minute(&self) -> u64 {
        self.started.elapsed().as_secs() / 60
    }

    /// Records `hits` of `descriptor` in `rule` (denied ones in the denied ranking too); its
    /// text is kept only when `detailed_metric` or `--top-show-values` lets it be shown.
    /// Allocates only for a value the minute's summaries do not track yet.
    pub fn record(
        &self,
        rule: &RuleTop,
        descriptor: &Descriptor,
        hits: u64,
        denied: bool,
        detailed_metric: bool,
    ) {
        if hits == 0 {
            return;
        }
        let mut hasher = self.identity.build_hasher();
        for entry in &descriptor.entries {
            entry.key.hash(&mut hasher);
            entry.value.hash(&mut hasher);
        }
        let identity = hasher.finish();
        let keep_label = detailed_metric || self.show_values;
        let shown = || {
            Arc::new(Shown {
                hash: self.key.descriptor(descriptor),
                label: keep_label.then(|| {
                    let mut label = detailed_label(descriptor);
                    label.truncate(cut(&label, DETAILED_LABEL_MAX_BYTES).len());
                    label.into_boxed_str()
                }),
            })
        };
        let minute = self.minute();
        rule.ring
            .lock()
            .record(minute, identity, hits, denied, shown);
    }

    /// Most rules tracked (`--top-max-rules`); 0: `/top` is off.
    pub fn max_rules(&self) -> usize {
        self.max_rules
    }

    /// The `/top` JSON for `rules` (those the query selects, in any order).
    pub fn render(&self, query: &TopQuery, rules: &[RuleView<'_>]) -> String {
        self.render_value(query, rules, usize::MAX, self.values)
            .to_string()
    }

    /// The `/top` document for `rules`, with at most `max_rules` rules (the most denied first)
    /// and `max_values` values per ranking.
    pub fn render_value(
        &self,
        query: &TopQuery,
        rules: &[RuleView<'_>],
        max_rules: usize,
        max_values: usize,
    ) -> Value {
        let now = self.minute();
        let minutes = query.window.minutes();
        let values = max_values.min(self.values);
        let mut shown: Vec<(u64, u64, Value)> = Vec::new();
        let mut untracked = 0;
        for rule in rules {
            let Some(top) = rule.top else {
                untracked += 1;
                continue;
            };
            let (hits, denied) = {
                let ring = top.ring.lock();
                (
                    ring.ranking(now, minutes, Kind::Hits, values),
                    ring.ranking(now, minutes, Kind::Denied, values),
                )
            };
            let show = rule.detailed_metric || self.show_values;
            shown.push((
                denied.total,
                hits.total,
                json!({
                    "domain": rule.domain,
                    "rule": rule.path,
                    "values_shown": show,
                    "hits": ranking_json(&hits, show),
                    "denied": ranking_json(&denied, show),
                }),
            ));
        }
        shown.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)));
        shown.truncate(max_rules);
        json!({
            "window": query.window.name(),
            "values_per_rule": self.values,
            "max_rules": self.max_rules,
            "untracked_rules": untracked,
            "rules": shown.into_iter().map(|(_, _, rule)| rule).collect::<Vec<_>>(),
        })
    }
}

fn ranking_json(ranking: &Ranking, show: bool) -> Value {
    let values: Vec<Value> = ranking
        .values
        .iter()
        .map(|ranked| {
            let mut value = json!({
                "hash": hex(&ranked.shown.hash),
                "count": ranked.count,
                "error": ranked.error,
            });
            if let (true, Some(label)) = (show, &ranked.shown.label) {
                value["value"] = Value::from(label.as_ref());
            }
            value
        })
        .collect();
    json!({ "total": ranking.total, "top": values })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::Entry;

    fn user(name: &str) -> Descriptor {
        Descriptor {
            entries: vec![Entry {
                key: "user".into(),
                value: name.into(),
            }],
            limit_override: None,
            hits_addend: None,
        }
    }

    #[test]
    fn rules_beyond_the_cap_are_not_tracked_until_a_tracked_one_is_dropped() {
        let top = TopValues::new(&TopSettings {
            max_rules: 2,
            ..TopSettings::default()
        });
        let (first, second) = (top.admit(), top.admit());
        assert!(first.is_some() && second.is_some());
        assert!(top.admit().is_none());
        drop(first);
        assert!(top.admit().is_some());
        let none = TopValues::new(&TopSettings::default());
        assert!(none.admit().is_none(), "off by default");
    }

    #[test]
    fn values_show_only_where_allowed_and_hashes_always() {
        let top = TopValues::new(&TopSettings {
            max_rules: 2,
            ..TopSettings::default()
        });
        let (hidden, detailed) = (top.admit().unwrap(), top.admit().unwrap());
        for _ in 0..3 {
            top.record(&hidden, &user("alice"), 1, true, false);
            top.record(&detailed, &user("alice"), 1, true, true);
        }
        let query = TopQuery::parse(None).unwrap();
        let view = |path, top, detailed_metric| RuleView {
            domain: "edge",
            path,
            top: Some(top),
            detailed_metric,
        };
        let json: Value = serde_json::from_str(&top.render(
            &query,
            &[
                view("hidden", &hidden, false),
                view("detailed", &detailed, true),
            ],
        ))
        .unwrap();
        let rule = |path: &str| {
            json["rules"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["rule"] == path)
                .unwrap()
                .clone()
        };
        let hidden = &rule("hidden")["denied"]["top"][0];
        let detailed = &rule("detailed")["denied"]["top"][0];
        assert_eq!(hidden["count"], 3);
        assert!(hidden.get("value").is_none(), "{hidden}");
        assert_eq!(detailed["value"], "user_alice");
        assert_eq!(hidden["hash"], detailed["hash"]);
        assert_eq!(hidden["hash"].as_str().map(str::len), Some(32));
    }
}
