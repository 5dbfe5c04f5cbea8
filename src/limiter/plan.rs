//! From a request and the rules to the checks a store must decide, and back to an outcome.

use std::collections::HashSet;
use std::sync::Arc;

use super::algorithm::Verdict;
use super::check::Check;
use super::consistency::Consistency;
use super::counter_key::CounterKey;
use super::matcher::find;
use super::metadata::{self, Metadata};
use super::rate::{Algorithm, Rate, RateError, Unit};
use super::request::{LimitOverride, Request};
use super::rules::{ConfiguredLimit, LimitKind, Rules};

/// A request the rules cannot decide.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    #[error("descriptor {index}: limit override is not a valid rate: {source}")]
    InvalidOverride { index: usize, source: RateError },
}

/// Switches that apply to every limit, as envoyproxy/ratelimit's `SHADOW_MODE` and `QUOTA_MODE`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Modes {
    /// Every limit is decided and counted but none denies: `overall_code` is always OK, while
    /// each status still says what its limit decided (OVER_LIMIT included), as
    /// envoyproxy/ratelimit's global shadow mode overrides only the overall result.
    pub shadow_mode: bool,
    /// Every limit is in quota mode (see [`Enforcement::Quota`]), overrides included.
    pub quota_mode: bool,
}

/// What a limit's "over the limit" does to the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Enforcement {
    /// Denies the request: the status is OVER_LIMIT and so is the request.
    Enforced,
    /// `shadow_mode`: the status stays OK (with `limit_remaining` 0) and the request goes on.
    Shadow,
    /// `quota_mode`: the status stays OK and the request goes on; the descriptor is reported as
    /// a quota violation in the response's dynamic metadata.
    Quota,
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
    Blocked {
        limit: CurrentLimit,
        enforcement: Enforcement,
        /// Set by the descriptor's `limit` override rather than by a configured limit.
        overridden: bool,
    },
    /// Counted by `checks[check]`.
    Counted {
        limit: CurrentLimit,
        check: usize,
        enforcement: Enforcement,
        /// Set by the descriptor's `limit` override rather than by a configured limit.
        overridden: bool,
    },
}

/// The resolutions of a request's descriptors (in request order) and the checks to decide.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub resolutions: Vec<Resolution>,
    /// What the store decides: one check per [`Resolution::Counted`], and, when an enforced
    /// [`Resolution::Blocked`] denies the request before any store sees it, a last check that
    /// every store denies (see [`veto`]).
    pub checks: Vec<Check>,
    /// The configured limit behind each resolution, when there is one (for metrics and logs).
    pub matched: Vec<Option<Arc<ConfiguredLimit>>>,
    /// The switches the plan was made with.
    pub modes: Modes,
}

/// Resolves every descriptor of `request` against `rules`, without process-wide switches.
pub fn plan(rules: &Rules, request: &Request) -> Result<Plan, PlanError> {
    plan_with(rules, request, Modes::default())
}

/// Resolves every descriptor of `request` against `rules`.
///
/// Matching follows envoyproxy/ratelimit: a limit named in another matched limit's `replaces` is
/// dropped; an override sets rate and unit whether or not the descriptor matched (the domain must
/// exist), keeping the matched limit's algorithm (fixed window otherwise) but not its name,
/// shadow mode or quota mode. A descriptor matched through `share_threshold` wildcards is counted
/// under the wildcards' values, so all the values they match share its counter.
///
/// A check never vetoes the request unless its limit is enforced and `modes.shadow_mode` is off;
/// a limit in both shadow and quota mode behaves as a shadow one (its status is OK before quota
/// mode could see it over the limit, as in envoyproxy/ratelimit).
pub fn plan_with(rules: &Rules, request: &Request, modes: Modes) -> Result<Plan, PlanError> {
    let count = request.descriptors.len();
    let Some(domain) = rules.domain(&request.domain) else {
        return Ok(Plan {
            resolutions: vec![Resolution::NoLimit; count],
            checks: Vec::new(),
            matched: vec![None; count],
            modes,
        });
    };
    let found: Vec<_> = request
        .descriptors
        .iter()
        .map(|d| find(domain, &d.entries))
        .collect();
    let replaced: HashSet<&str> = found
        .iter()
        .flatten()
        .flat_map(|found| found.limit.replaces.iter().map(String::as_str))
        .collect();
    let found: Vec<_> = found
        .into_iter()
        .map(|found| {
            found.filter(|found| {
                found
                    .limit
                    .name
                    .as_deref()
                    .is_none_or(|name| !replaced.contains(name))
            })
        })
        .collect();

    let mut resolutions = Vec::with_capacity(count);
    let mut checks = Vec::with_capacity(count);
    for (index, (descriptor, found)) in request.descriptors.iter().zip(&found).enumerate() {
        let hits = request.hits_for(descriptor);
        let shared = found.as_ref().map_or(&[][..], |found| &found.shared[..]);
        let counted = |rate: Rate,
                       consistency: Consistency,
                       current: CurrentLimit,
                       enforcement: Enforcement,
                       overridden: bool,
                       checks: &mut Vec<Check>| {
            checks.push(Check {
                key: CounterKey::with_shared(&request.domain, &descriptor.entries, shared),
                rate,
                hits,
                shadow: modes.shadow_mode || enforcement != Enforcement::Enforced,
                consistency,
                rule: (consistency == Consistency::Leased)
                    .then(|| found.as_ref().map(|found| Arc::clone(found.limit)))
                    .flatten(),
            });
            Resolution::Counted {
                limit: current,
                check: checks.len() - 1,
                enforcement,
                overridden,
            }
        };
        let configured = found.as_ref().map(|found| found.limit.as_ref());
        let resolution = match (descriptor.limit_override, configured) {
            (Some(over), limit) => {
                let algorithm = match limit.map(|l| &l.kind) {
                    Some(LimitKind::Limited(configured)) => configured.algorithm(),
                    _ => Algorithm::FixedWindow,
                };
                let enforcement = if modes.quota_mode {
                    Enforcement::Quota
                } else {
                    Enforcement::Enforced
                };
                let current = override_limit(&over);
                if over.requests_per_unit == 0 {
                    Resolution::Blocked {
                        limit: current,
                        enforcement,
                        overridden: true,
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
                    counted(
                        rate,
                        Consistency::Exact,
                        current,
                        enforcement,
                        true,
                        &mut checks,
                    )
                }
            }
            (None, None) => Resolution::NoLimit,
            (None, Some(configured)) => {
                let enforcement = if configured.shadow_mode {
                    Enforcement::Shadow
                } else if configured.quota_mode || modes.quota_mode {
                    Enforcement::Quota
                } else {
                    Enforcement::Enforced
                };
                match &configured.kind {
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
                        enforcement,
                        overridden: false,
                    },
                    LimitKind::Limited(limited) => {
                        let current = CurrentLimit {
                            requests_per_unit: limited.requests_per_unit,
                            unit: limited.unit,
                            unit_multiplier: limited.unit_multiplier,
                            name: configured.name.clone(),
                        };
                        counted(
                            limited.rate,
                            limited.consistency,
                            current,
                            enforcement,
                            false,
                            &mut checks,
                        )
                    }
                }
            }
        };
        resolutions.push(resolution);
    }
    let blocked = resolutions.iter().any(|resolution| {
        matches!(
            resolution,
            Resolution::Blocked {
                enforcement: Enforcement::Enforced,
                ..
            }
        )
    });
    if blocked && !modes.shadow_mode {
        if let Some(veto) = checks.first().map(veto) {
            checks.push(veto);
        }
    }
    Ok(Plan {
        resolutions,
        checks,
        matched: found
            .into_iter()
            .map(|found| found.map(|found| found.limit.clone()))
            .collect(),
        modes,
    })
}

/// A check that every store denies, for a request that an enforced `requests_per_unit: 0`
/// already denies. A store sees only the checks, and commits them when all of their enforced ones
/// admit: without this one it would consume the hits of the request's other descriptors although
/// the request is denied (all or nothing). It asks for more hits than `like`'s rate holds, which
/// every algorithm denies without writing, and its counter has an empty domain, which no request
/// reaches (an empty domain is refused before planning). Its verdict belongs to no descriptor.
fn veto(like: &Check) -> Check {
    Check {
        key: CounterKey::new("", &[]),
        rate: like.rate,
        hits: u64::from(like.rate.burst()) + 1,
        shadow: false,
        consistency: Consistency::Exact,
        rule: None,
    }
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
    /// A quota-mode limit that is over the limit (the status still says OK).
    pub quota_violated: bool,
}

/// The answer for a whole request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    pub overall: Code,
    pub statuses: Vec<DescriptorOutcome>,
}

/// Turns the store's verdicts (one per check, in order) into per-descriptor statuses.
///
/// The request is over the limit iff an enforced descriptor is, and global shadow mode is off. A
/// descriptor whose own check admitted, in a request denied by another descriptor, reports the
/// remaining it still has: its hits were not consumed, unless the store counted them anyway
/// ([`Verdict::counted_when_vetoed`], envoyproxy/ratelimit's counting), when it reports what
/// remains after them, as envoyproxy/ratelimit does. A shadow or quota descriptor always reports
/// OK, as envoyproxy/ratelimit does.
pub fn outcome(plan: &Plan, verdicts: &[Verdict]) -> Outcome {
    let verdict = |check: usize| verdicts.get(check).copied();
    let vetoes = |enforcement: &Enforcement| {
        *enforcement == Enforcement::Enforced && !plan.modes.shadow_mode
    };
    let denied = plan.resolutions.iter().any(|resolution| match resolution {
        Resolution::Blocked { enforcement, .. } => vetoes(enforcement),
        Resolution::Counted {
            check, enforcement, ..
        } => vetoes(enforcement) && verdict(*check).is_none_or(|v| !v.admitted),
        Resolution::NoLimit | Resolution::Unlimited => false,
    });
    let over = |enforcement: Enforcement| DescriptorOutcome {
        code: if enforcement == Enforcement::Enforced {
            Code::OverLimit
        } else {
            Code::Ok
        },
        current_limit: None,
        limit_remaining: 0,
        duration_until_reset_us: None,
        shadow_denied: enforcement == Enforcement::Shadow,
        quota_violated: enforcement == Enforcement::Quota,
    };
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
                quota_violated: false,
            },
            Resolution::Unlimited => DescriptorOutcome {
                code: Code::Ok,
                current_limit: None,
                limit_remaining: u32::MAX,
                duration_until_reset_us: None,
                shadow_denied: false,
                quota_violated: false,
            },
            Resolution::Blocked {
                limit, enforcement, ..
            } => DescriptorOutcome {
                current_limit: Some(limit.clone()),
                duration_until_reset_us: Some(0),
                ..over(*enforcement)
            },
            Resolution::Counted {
                limit,
                check,
                enforcement,
                ..
            } => {
                let v = verdict(*check).unwrap_or(Verdict {
                    admitted: false,
                    remaining: 0,
                    reset_after_us: 0,
                    counted_when_vetoed: false,
                });
                if !v.admitted {
                    // An OK status over the limit says 0 remaining, as envoyproxy/ratelimit's
                    // shadow and quota statuses do, whatever the hits it asked for.
                    let remaining = match enforcement {
                        Enforcement::Enforced => v.remaining,
                        Enforcement::Shadow | Enforcement::Quota => 0,
                    };
                    return DescriptorOutcome {
                        current_limit: Some(limit.clone()),
                        limit_remaining: remaining,
                        duration_until_reset_us: Some(v.reset_after_us),
                        ..over(*enforcement)
                    };
                }
                let hits = plan.checks.get(*check).map_or(0, |c| c.hits);
                let remaining = if denied && !v.counted_when_vetoed {
                    let capacity = plan.checks.get(*check).map_or(0, |c| c.rate.burst());
                    (u64::from(v.remaining) + hits).min(u64::from(capacity)) as u32
                } else {
                    v.remaining
                };
                DescriptorOutcome {
                    code: Code::Ok,
                    current_limit: Some(limit.clone()),
                    limit_remaining: remaining,
                    duration_until_reset_us: Some(v.reset_after_us),
                    shadow_denied: false,
                    quota_violated: false,
                }
            }
        })
        .collect();
    Outcome {
        overall: if denied { Code::OverLimit } else { Code::Ok },
        statuses,
    }
}

/// What envoyproxy/ratelimit's response dynamic metadata says besides echoing the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResponseMetadata {
    /// Whether quota mode is on for the request: globally, or on a configured limit that applies
    /// to one of its descriptors (`quotaModeEnabled`).
    pub quota_mode_enabled: bool,
    /// Descriptors (by request index) whose quota-mode limit is over the limit
    /// (`quotaModeViolations`).
    pub quota_violations: Vec<usize>,
    /// The `metadata` of the configured limits of the descriptors that are OK and not quota
    /// violations, merged in request order ([`metadata::merge`]: the first value of a key wins).
    pub metadata: Metadata,
}

/// The dynamic-metadata facts of a decided request. Overrides, unlimited and unmatched
/// descriptors contribute no metadata, as their envoyproxy/ratelimit limit carries none.
pub fn response_metadata(plan: &Plan, outcome: &Outcome) -> ResponseMetadata {
    let mut facts = ResponseMetadata {
        quota_mode_enabled: plan.modes.quota_mode,
        ..ResponseMetadata::default()
    };
    for (index, (resolution, status)) in plan.resolutions.iter().zip(&outcome.statuses).enumerate()
    {
        let configured = match resolution {
            Resolution::Blocked { overridden, .. } | Resolution::Counted { overridden, .. } => plan
                .matched
                .get(index)
                .and_then(Option::as_ref)
                .filter(|_| !overridden),
            Resolution::NoLimit | Resolution::Unlimited => None,
        };
        if status.quota_violated {
            facts.quota_violations.push(index);
        }
        let Some(configured) = configured else {
            continue;
        };
        facts.quota_mode_enabled |= configured.quota_mode;
        if status.code == Code::Ok && !status.quota_violated {
            if let Some(extra) = &configured.metadata {
                metadata::merge(&mut facts.metadata, extra);
            }
        }
    }
    facts
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;
    use crate::limiter::metadata::MetadataValue;
    use crate::limiter::request::{Descriptor, Entry};
    use crate::limiter::rules::{DomainRules, LimitedRate, RuleNode, RuleSet, WildcardRule};
    use crate::limiter::wildcard::Wildcard;

    fn limited(path: &str, name: Option<&str>, replaces: &[&str], shadow: bool) -> RuleNode {
        flagged(path, name, replaces, shadow, false, None)
    }

    fn flagged(
        path: &str,
        name: Option<&str>,
        replaces: &[&str],
        shadow: bool,
        quota: bool,
        metadata: Option<Metadata>,
    ) -> RuleNode {
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
                    consistency: crate::limiter::consistency::Consistency::Exact,
                }),
                replaces: replaces.iter().map(|s| s.to_string()).collect(),
                shadow_mode: shadow,
                quota_mode: quota,
                detailed_metric: false,
                metadata: metadata.map(Arc::new),
            })),
            children: RuleSet::default(),
            order: 0,
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
        let tag = |value: &str| {
            Some(Metadata::from([(
                "owner".to_string(),
                MetadataValue::String(value.into()),
            )]))
        };
        root.key_only
            .insert("q".into(), flagged("d.q", None, &[], false, true, tag("q")));
        root.key_only.insert(
            "m".into(),
            flagged("d.m", None, &[], false, false, tag("m")),
        );
        root.key_only
            .insert("sq".into(), flagged("d.sq", None, &[], true, true, None));
        root.wildcards.push(WildcardRule {
            key: "f".into(),
            pattern: Wildcard::parse("logs-*").expect("wildcard"),
            share_threshold: true,
            node: limited("d.f_logs-*", None, &[], false),
        });
        root.wildcards.push(WildcardRule {
            key: "f".into(),
            pattern: Wildcard::parse("tmp-*").expect("wildcard"),
            share_threshold: false,
            node: limited("d.f_tmp-*", None, &[], false),
        });
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
            counted_when_vetoed: false,
        }
    }

    fn denied() -> Verdict {
        Verdict {
            admitted: false,
            remaining: 0,
            reset_after_us: 5,
            counted_when_vetoed: false,
        }
    }

    /// Denied with room left: the hits asked for were more than what remains.
    fn denied_with(remaining: u32) -> Verdict {
        Verdict {
            admitted: false,
            remaining,
            reset_after_us: 5,
            counted_when_vetoed: false,
        }
    }

    fn banned(key: &str) -> Descriptor {
        Descriptor {
            limit_override: Some(LimitOverride {
                requests_per_unit: 0,
                unit: Unit::Minute,
                unit_multiplier: 1,
            }),
            ..descriptor(key, "banned")
        }
    }

    #[test]
    fn a_ban_sends_a_veto_with_the_other_checks_so_that_nothing_is_committed() {
        let request = request(
            "d",
            vec![descriptor("a", "1"), banned("x"), descriptor("s", "1")],
        );
        let plan = plan(&rules(), &request).unwrap();
        assert_eq!(plan.checks.len(), 3, "two counted checks and the veto");
        let veto = &plan.checks[2];
        assert!(!veto.shadow);
        assert!(
            veto.hits > u64::from(veto.rate.burst()),
            "more than any capacity"
        );
        assert_ne!(veto.key, plan.checks[0].key);
        let outcome = outcome(&plan, &[admitted(9), admitted(9), denied()]);
        assert_eq!(outcome.overall, Code::OverLimit);
        assert_eq!(outcome.statuses.len(), 3);
        assert_eq!(outcome.statuses[0].code, Code::Ok);
        assert_eq!(outcome.statuses[1].code, Code::OverLimit);

        // No other check: nothing to protect, no store call. A ban in shadow mode denies nothing.
        let alone = plan_with(&rules(), &request_of(vec![banned("x")]), Modes::default()).unwrap();
        assert!(alone.checks.is_empty());
        let shadow = Modes {
            shadow_mode: true,
            quota_mode: false,
        };
        let global = plan_with(
            &rules(),
            &request_of(vec![descriptor("a", "1"), banned("x")]),
            shadow,
        );
        assert_eq!(global.unwrap().checks.len(), 1);
    }

    fn request_of(descriptors: Vec<Descriptor>) -> Request {
        request("d", descriptors)
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
    fn hits_the_store_counted_in_a_denied_request_are_reported_spent() {
        let plan = plan(
            &rules(),
            &request("d", vec![descriptor("b", "1"), descriptor("b", "2")]),
        )
        .expect("plan");
        let counted = Verdict {
            counted_when_vetoed: true,
            ..admitted(8)
        };
        let out = outcome(&plan, &[counted, denied()]);
        assert_eq!(out.overall, Code::OverLimit);
        assert_eq!(out.statuses[0].code, Code::Ok);
        assert_eq!(
            out.statuses[0].limit_remaining, 8,
            "its hit was counted, as envoyproxy/ratelimit counts it"
        );
        let admitted_request = outcome(&plan, &[counted, admitted(3)]);
        assert_eq!(admitted_request.statuses[0].limit_remaining, 8);
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

    #[test]
    fn shared_wildcards_count_every_value_on_one_key() {
        let plan = plan(
            &rules(),
            &request(
                "d",
                vec![
                    descriptor("f", "logs-a"),
                    descriptor("f", "logs-b"),
                    descriptor("f", "tmp-a"),
                    descriptor("f", "tmp-b"),
                ],
            ),
        )
        .expect("plan");
        let keys: Vec<&str> = plan.checks.iter().map(|c| c.key.as_str()).collect();
        assert_eq!(keys[0], keys[1], "share_threshold: one counter");
        assert_eq!(keys[0], "d:f*=logs-%2A");
        assert_ne!(
            keys[2], keys[3],
            "without share_threshold: one counter per value"
        );
    }

    #[test]
    fn quota_mode_reports_instead_of_denying() {
        let plan = plan(
            &rules(),
            &request("d", vec![descriptor("q", "1"), descriptor("b", "1")]),
        )
        .expect("plan");
        assert!(plan.checks[0].shadow, "a quota check never vetoes");
        assert!(!plan.checks[1].shadow);
        let out = outcome(&plan, &[denied(), admitted(3)]);
        assert_eq!(out.overall, Code::Ok);
        assert_eq!(out.statuses[0].code, Code::Ok);
        assert!(out.statuses[0].quota_violated && !out.statuses[0].shadow_denied);
        assert_eq!(out.statuses[0].limit_remaining, 0);
        let out = outcome(&plan, &[denied_with(4), denied_with(2)]);
        assert_eq!(
            out.statuses[0].limit_remaining, 0,
            "OK over the limit: 0 remaining"
        );
        assert_eq!(
            out.statuses[1].limit_remaining, 2,
            "OVER_LIMIT: what is left"
        );
        let facts = response_metadata(&plan, &out);
        assert!(facts.quota_mode_enabled);
        assert_eq!(facts.quota_violations, vec![0]);
        assert!(
            facts.metadata.is_empty(),
            "a violation contributes no metadata"
        );

        let out = outcome(&plan, &[admitted(2), admitted(3)]);
        let facts = response_metadata(&plan, &out);
        assert!(facts.quota_violations.is_empty());
        assert_eq!(facts.metadata["owner"], MetadataValue::String("q".into()));
    }

    #[test]
    fn shadow_wins_over_quota_on_one_limit() {
        let plan = plan(&rules(), &request("d", vec![descriptor("sq", "1")])).expect("plan");
        let out = outcome(&plan, &[denied()]);
        assert!(out.statuses[0].shadow_denied && !out.statuses[0].quota_violated);
        let facts = response_metadata(&plan, &out);
        assert!(facts.quota_mode_enabled && facts.quota_violations.is_empty());
    }

    #[test]
    fn global_shadow_mode_answers_ok_but_keeps_each_status() {
        let modes = Modes {
            shadow_mode: true,
            quota_mode: false,
        };
        let plan = plan_with(
            &rules(),
            &request("d", vec![descriptor("b", "1"), descriptor("b", "2")]),
            modes,
        )
        .expect("plan");
        assert!(plan.checks.iter().all(|c| c.shadow), "nothing vetoes");
        let out = outcome(&plan, &[admitted(8), denied()]);
        assert_eq!(out.overall, Code::Ok);
        assert_eq!(out.statuses[1].code, Code::OverLimit);
        assert_eq!(out.statuses[0].limit_remaining, 8, "its hit was consumed");
        assert!(!out.statuses[1].shadow_denied);
    }

    #[test]
    fn global_quota_mode_covers_overrides_too() {
        let modes = Modes {
            shadow_mode: false,
            quota_mode: true,
        };
        let mut over = descriptor("unmatched", "x");
        over.limit_override = Some(LimitOverride {
            requests_per_unit: 1,
            unit: Unit::Hour,
            unit_multiplier: 1,
        });
        let plan = plan_with(
            &rules(),
            &request("d", vec![over, descriptor("b", "1")]),
            modes,
        )
        .expect("plan");
        let out = outcome(&plan, &[denied(), denied()]);
        assert_eq!(out.overall, Code::Ok);
        let facts = response_metadata(&plan, &out);
        assert!(facts.quota_mode_enabled);
        assert_eq!(facts.quota_violations, vec![0, 1]);
    }

    #[test]
    fn metadata_merges_over_ok_descriptors_in_request_order() {
        let mut over = descriptor("m", "x");
        over.limit_override = Some(LimitOverride {
            requests_per_unit: 5,
            unit: Unit::Hour,
            unit_multiplier: 1,
        });
        let plan = plan(
            &rules(),
            &request(
                "d",
                vec![
                    over,
                    descriptor("b", "1"),
                    descriptor("m", "1"),
                    descriptor("q", "1"),
                ],
            ),
        )
        .expect("plan");
        let out = outcome(&plan, &[admitted(1), admitted(1), admitted(1), admitted(1)]);
        let facts = response_metadata(&plan, &out);
        assert_eq!(
            facts.metadata["owner"],
            MetadataValue::String("m".into()),
            "the override carries none, `m` comes before `q`"
        );
        let out = outcome(&plan, &[admitted(1), denied(), admitted(1), admitted(1)]);
        assert_eq!(out.overall, Code::OverLimit);
        let facts = response_metadata(&plan, &out);
        assert_eq!(facts.metadata["owner"], MetadataValue::String("m".into()));
    }
}
