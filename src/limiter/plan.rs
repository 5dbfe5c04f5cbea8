//! From a request and the rules to the checks a store must decide, and back to an outcome.

use std::collections::HashSet;
use std::sync::Arc;

use super::algorithm::Verdict;
use super::check::Check;
use super::counter_key::CounterKey;
use super::matcher::find_limit;
use super::rate::{Algorithm, Rate, RateError, Unit};
use super::request::{LimitOverride, Request};
use super::rules::{ConfiguredLimit, LimitKind, Rules};

/// A request the rules cannot decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("descriptor {index}: limit override is not a valid rate: {source}")]
    InvalidOverride { index: usize, source: RateError },
}

/// The limit echoed in a status's `current_limit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentLimit {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
    pub name: Option<String>,
}

/// What applies to one request descriptor.
#[derive(Debug, Clone, PartialEq)]
pub enum Resolution {
    /// No limit (no match, unknown domain, whitelisted value, or replaced): OK.
    NoLimit,
    /// `unlimited: true`: OK with everything remaining.
    Unlimited,
    /// 0 requests per unit (configured or overridden): every request is over the limit.
    Blocked { limit: CurrentLimit, shadow: bool },
    /// Counted by `checks[check]`.
    Counted {
        limit: CurrentLimit,
        check: usize,
        shadow: bool,
    },
}

/// The resolutions of a request's descriptors (in request order) and the checks to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub resolutions: Vec<Resolution>,
    pub checks: Vec<Check>,
    /// The configured limit behind each resolution, when there is one (for metrics and logs).
    pub matched: Vec<Option<Arc<ConfiguredLimit>>>,
}

/// Resolves every descriptor of `request` against `rules`.
///
/// Matching follows envoyproxy/ratelimit: a limit named in another matched limit's `replaces` is
/// dropped; an override sets rate and unit whether or not the descriptor matched (the domain must
/// exist), keeping the matched limit's algorithm (fixed window otherwise) but not its name or
/// shadow mode.
pub fn plan(rules: &Rules, request: &Request) -> Result<Plan, PlanError> {
    let count = request.descriptors.len();
    let Some(domain) = rules.domain(&request.domain) else {
        return Ok(Plan {
            resolutions: vec![Resolution::NoLimit; count],
            checks: Vec::new(),
            matched: vec![None; count],
        });
    };
    let matched: Vec<Option<Arc<ConfiguredLimit>>> = request
        .descriptors
        .iter()
        .map(|d| find_limit(domain, &d.entries).cloned())
        .collect();
    let replaced: HashSet<&str> = matched
        .iter()
        .flatten()
        .flat_map(|limit| limit.replaces.iter().map(String::as_str))
        .collect();
    let matched: Vec<Option<Arc<ConfiguredLimit>>> = matched
        .iter()
        .map(|limit| {
            limit
                .as_ref()
                .filter(|l| {
                    l.name
                        .as_deref()
                        .is_none_or(|name| !replaced.contains(name))
                })
                .cloned()
        })
        .collect();

    let mut resolutions = Vec::with_capacity(count);
    let mut checks = Vec::with_capacity(count);
    for (index, (descriptor, limit)) in request.descriptors.iter().zip(&matched).enumerate() {
        let hits = request.hits_for(descriptor);
        let counted = |rate: Rate, current: CurrentLimit, shadow: bool, checks: &mut Vec<Check>| {
            checks.push(Check {
                key: CounterKey::new(&request.domain, &descriptor.entries),
                rate,
                hits,
                shadow,
            });
            Resolution::Counted {
                limit: current,
                check: checks.len() - 1,
                shadow,
            }
        };
        let resolution = match (descriptor.limit_override, limit.as_deref()) {
            (Some(over), limit) => {
                let algorithm = match limit.map(|l| &l.kind) {
                    Some(LimitKind::Limited(configured)) => configured.algorithm(),
                    _ => Algorithm::FixedWindow,
                };
                let current = override_limit(&over);
                if over.requests_per_unit == 0 {
                    Resolution::Blocked {
                        limit: current,
                        shadow: false,
                    }
                } else {
                    let rate = Rate::new(
                        algorithm,
                        over.requests_per_unit,
                        over.unit,
                        over.unit_multiplier,
                        None,
                    )
                    .map_err(|source| PlanError::InvalidOverride { index, source })?;
                    counted(rate, current, false, &mut checks)
                }
            }
            (None, None) => Resolution::NoLimit,
            (None, Some(configured)) => match &configured.kind {
                LimitKind::Unlimited => Resolution::Unlimited,
                LimitKind::Blocked {
                    unit,
                    unit_multiplier,
                } => Resolution::Blocked {
                    limit: CurrentLimit {
                        requests_per_unit: 0,
                        unit: *unit,
                        unit_multiplier: *unit_multiplier,
                        name: configured.name.clone(),
                    },
                    shadow: configured.shadow_mode,
                },
                LimitKind::Limited(limited) => {
                    let current = CurrentLimit {
                        requests_per_unit: limited.requests_per_unit,
                        unit: limited.unit,
                        unit_multiplier: limited.unit_multiplier,
                        name: configured.name.clone(),
                    };
                    counted(limited.rate, current, configured.shadow_mode, &mut checks)
                }
            },
        };
        resolutions.push(resolution);
    }
    Ok(Plan {
        resolutions,
        checks,
        matched,
    })
}

fn override_limit(over: &LimitOverride) -> CurrentLimit {
    CurrentLimit {
        requests_per_unit: over.requests_per_unit,
        unit: over.unit,
        unit_multiplier: over.unit_multiplier,
        name: None,
    }
}

/// Whether a descriptor was admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    Ok,
    OverLimit,
}

/// The answer for one request descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorOutcome {
    pub code: Code,
    pub current_limit: Option<CurrentLimit>,
    pub limit_remaining: u32,
    pub duration_until_reset_us: Option<u64>,
    /// A shadow-mode limit that would have denied (the status still says OK).
    pub shadow_denied: bool,
}

/// The answer for a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub overall: Code,
    pub statuses: Vec<DescriptorOutcome>,
}

/// Turns the store's verdicts (one per check, in order) into per-descriptor statuses.
///
/// The request is over the limit iff a non-shadow descriptor is. A descriptor whose own check
/// admitted, in a request denied by another descriptor, reports the remaining it still has: its
/// hits were not consumed. A shadow descriptor always reports OK, as envoyproxy/ratelimit does.
pub fn outcome(plan: &Plan, verdicts: &[Verdict]) -> Outcome {
    let verdict = |check: usize| verdicts.get(check).copied();
    let denied = plan.resolutions.iter().any(|resolution| match resolution {
        Resolution::Blocked { shadow, .. } => !shadow,
        Resolution::Counted { check, shadow, .. } => {
            !shadow && verdict(*check).is_none_or(|v| !v.admitted)
        }
        Resolution::NoLimit | Resolution::Unlimited => false,
    });
    let statuses = plan
        .resolutions
        .iter()
        .map(|resolution| match resolution {
            Resolution::NoLimit => DescriptorOutcome {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: 0,
                duration_until_reset_us: None,
                shadow_denied: false,
            },
            Resolution::Unlimited => DescriptorOutcome {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: u32::MAX,
                duration_until_reset_us: None,
                shadow_denied: false,
            },
            Resolution::Blocked { limit, shadow } => DescriptorOutcome {
                code: if *shadow { Code::Ok } else { Code::OverLimit },
                current_limit: Some(limit.clone()),
                limit_remaining: 0,
                duration_until_reset_us: Some(0),
                shadow_denied: *shadow,
            },
            Resolution::Counted {
                limit,
                check,
                shadow,
            } => {
                let v = verdict(*check).unwrap_or(Verdict {
                    admitted: false,
                    remaining: 0,
                    reset_after_us: 0,
                });
                let hits = plan.checks.get(*check).map_or(0, |c| c.hits);
                let remaining = if v.admitted && denied {
                    let capacity = plan.checks.get(*check).map_or(0, |c| c.rate.burst());
                    (u64::from(v.remaining) + hits).min(u64::from(capacity)) as u32
                } else {
                    v.remaining
                };
                DescriptorOutcome {
                    code: if v.admitted || *shadow {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    },
                    current_limit: Some(limit.clone()),
                    limit_remaining: remaining,
                    duration_until_reset_us: Some(v.reset_after_us),
                    shadow_denied: *shadow && !v.admitted,
                }
            }
        })
        .collect();
    Outcome {
        overall: if denied { Code::OverLimit } else { Code::Ok },
        statuses,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::limiter::request::{Descriptor, Entry};
    use crate::limiter::rules::{DomainRules, LimitedRate, RuleNode, RuleSet};

    fn limited(path: &str, name: Option<&str>, replaces: &[&str], shadow: bool) -> RuleNode {
        let rate = Rate::new(Algorithm::Gcra, 10, Unit::Minute, 1, Some(20)).expect("valid rate");
        RuleNode {
            limit: Some(Arc::new(ConfiguredLimit {
                path: path.into(),
                name: name.map(String::from),
                kind: LimitKind::Limited(LimitedRate {
                    requests_per_unit: 10,
                    unit: Unit::Minute,
                    unit_multiplier: 1,
                    rate,
                }),
                replaces: replaces.iter().map(|s| s.to_string()).collect(),
                shadow_mode: shadow,
                detailed_metric: false,
            })),
            children: RuleSet::default(),
        }
    }

    fn rules() -> Rules {
        let mut root = RuleSet::default();
        root.key_only
            .insert("a".into(), limited("d.a", Some("a"), &[], false));
        root.key_only
            .insert("b".into(), limited("d.b", Some("b"), &["a"], false));
        root.key_only
            .insert("s".into(), limited("d.s", None, &[], true));
        root.exact
            .entry("w".into())
            .or_insert_with(HashMap::new)
            .insert("listed".into(), RuleNode::default());
        let domain = DomainRules {
            domain: "d".into(),
            root,
        };
        Rules {
            domains: HashMap::from([("d".to_string(), domain)]),
        }
    }

    fn descriptor(key: &str, value: &str) -> Descriptor {
        Descriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            limit_override: None,
            hits_addend: None,
        }
    }

    fn request(domain: &str, descriptors: Vec<Descriptor>) -> Request {
        Request {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        }
    }

    fn admitted(remaining: u32) -> Verdict {
        Verdict {
            admitted: true,
            remaining,
            reset_after_us: 1,
        }
    }

    fn denied() -> Verdict {
        Verdict {
            admitted: false,
            remaining: 0,
            reset_after_us: 5,
        }
    }

    #[test]
    fn replaced_limit_is_ignored_when_the_replacing_one_matches() {
        let plan = plan(
            &rules(),
            &request("d", vec![descriptor("a", "1"), descriptor("b", "1")]),
        )
        .expect("plan");
        assert_eq!(plan.resolutions[0], Resolution::NoLimit);
        assert!(matches!(
            plan.resolutions[1],
            Resolution::Counted { check: 0, .. }
        ));
        let alone = super::plan(&rules(), &request("d", vec![descriptor("a", "1")])).expect("plan");
        assert!(matches!(alone.resolutions[0], Resolution::Counted { .. }));
    }

    #[test]
    fn unknown_domain_and_whitelisted_values_have_no_limit() {
        let unknown = plan(&rules(), &request("nope", vec![descriptor("a", "1")])).expect("plan");
        assert_eq!(unknown.resolutions, vec![Resolution::NoLimit]);
        let listed = plan(&rules(), &request("d", vec![descriptor("w", "listed")])).expect("plan");
        assert_eq!(listed.resolutions, vec![Resolution::NoLimit]);
        assert!(listed.checks.is_empty());
    }

    #[test]
    fn override_applies_to_unmatched_descriptors_with_fixed_window() {
        let mut d = descriptor("unmatched", "x");
        d.limit_override = Some(LimitOverride {
            requests_per_unit: 3,
            unit: Unit::Hour,
            unit_multiplier: 2,
        });
        let plan = plan(&rules(), &request("d", vec![d])).expect("plan");
        assert_eq!(plan.checks[0].rate.algorithm(), Algorithm::FixedWindow);
        assert_eq!(plan.checks[0].rate.limit(), 3);
        assert_eq!(plan.checks[0].rate.window_us(), 2 * 3_600 * 1_000_000);
    }

    #[test]
    fn override_keeps_the_matched_algorithm_but_not_its_burst() {
        let mut d = descriptor("a", "x");
        d.limit_override = Some(LimitOverride {
            requests_per_unit: 7,
            unit: Unit::Second,
            unit_multiplier: 1,
        });
        let plan = plan(&rules(), &request("d", vec![d])).expect("plan");
        assert_eq!(plan.checks[0].rate.algorithm(), Algorithm::Gcra);
        assert_eq!(plan.checks[0].rate.burst(), 7);
    }

    #[test]
    fn hits_follow_descriptor_then_request_then_one() {
        let mut own = descriptor("a", "x");
        own.hits_addend = Some(0);
        let mut req = request("d", vec![own, descriptor("b", "y")]);
        req.hits_addend = 4;
        let plan = plan(&rules(), &req).expect("plan");
        assert_eq!(
            plan.checks[0].hits, 4,
            "a is replaced by b, so only b is counted"
        );
        let single =
            super::plan(&rules(), &request("d", vec![descriptor("a", "x")])).expect("plan");
        assert_eq!(single.checks[0].hits, 1);
    }

    #[test]
    fn one_denied_descriptor_denies_the_request_and_others_report_unconsumed_remaining() {
        let plan = plan(
            &rules(),
            &request("d", vec![descriptor("b", "1"), descriptor("b", "2")]),
        )
        .expect("plan");
        let out = outcome(&plan, &[admitted(8), denied()]);
        assert_eq!(out.overall, Code::OverLimit);
        assert_eq!(out.statuses[0].code, Code::Ok);
        assert_eq!(
            out.statuses[0].limit_remaining, 9,
            "its hit was not consumed"
        );
        assert_eq!(out.statuses[1].code, Code::OverLimit);
        assert_eq!(out.statuses[1].duration_until_reset_us, Some(5));
    }

    #[test]
    fn shadow_mode_never_denies() {
        let plan = plan(&rules(), &request("d", vec![descriptor("s", "1")])).expect("plan");
        assert!(plan.checks[0].shadow);
        let out = outcome(&plan, &[denied()]);
        assert_eq!(out.overall, Code::Ok);
        assert_eq!(out.statuses[0].code, Code::Ok);
        assert!(out.statuses[0].shadow_denied);
    }
}
