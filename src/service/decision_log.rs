//! The debug line of each decided request: its domain, what each descriptor matched and what it
//! got, the request's answer, and how long the store took.
//!
//! One record per request, target [`TARGET`], at debug level:
//!
//! ```text
//! DEBUG ratelimitd::decisions: decision domain=edge overall=OVER_LIMIT store_us=183
//!   descriptors=#0 client=a -> edge.client (3 per minute) -> OVER_LIMIT, 0 remaining;
//!   #1 path=/x -> no rule -> OK
//! ```
//!
//! (one line in the log). A request refused before it is decided gets a `request refused` line
//! instead. Nothing here is measured or formatted unless [`enabled`] says the line is logged,
//! which the edge asks once per request: with debug off a request pays one check of the log
//! filter's cached interest.

use std::fmt::{self, Display, Formatter};
use std::time::Instant;

use super::store_error_policy::StoreErrorPolicy;
use crate::limiter::{
    Code, CurrentLimit, DescriptorOutcome, Enforcement, Outcome, Plan, Request, Resolution, Rules,
};

/// The target of the decision lines (`--log-level info,ratelimitd::decisions=debug` logs them
/// alone).
pub const TARGET: &str = "ratelimitd::decisions";

/// Whether decision lines are logged.
#[inline]
pub fn enabled() -> bool {
    tracing::enabled!(target: TARGET, tracing::Level::DEBUG)
}

/// What the store did for one request, as the decision line tells it.
#[derive(Debug, Clone, Copy, Default)]
pub struct StoreCall {
    /// How long the store took, in µs; `None` when it was not asked (no descriptor counted).
    micros: Option<u64>,
    /// The policy that answered in its place, when it failed.
    failed: Option<StoreErrorPolicy>,
}

impl StoreCall {
    /// The store was asked at `started` (when the line is logged) and has just answered.
    pub fn answered(started: Option<Instant>) -> StoreCall {
        StoreCall {
            micros: started
                .map(|started| u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX)),
            failed: None,
        }
    }

    /// The store failed and `policy` answered.
    pub fn failed(self, policy: StoreErrorPolicy) -> StoreCall {
        StoreCall {
            failed: Some(policy),
            ..self
        }
    }
}

/// Logs how `request` was decided under `rules`: `outcome` is `None` when no answer was made
/// (the store failed under `--on-store-error unavailable`).
pub fn decided(
    rules: &Rules,
    request: &Request,
    plan: &Plan,
    outcome: Option<&Outcome>,
    store: StoreCall,
) {
    let overall = match outcome.map(|outcome| outcome.overall) {
        Some(Code::Ok) => "OK",
        Some(Code::OverLimit) => "OVER_LIMIT",
        None => "UNAVAILABLE",
    };
    tracing::debug!(
        target: TARGET,
        domain = %request.domain,
        overall = %overall,
        store_us = store.micros,
        store_failed = store.failed.map(tracing::field::display),
        descriptors = %Descriptors {
            request,
            plan,
            outcome,
            domain_known: rules.domain(&request.domain).is_some(),
        },
        "decision"
    );
}

/// Logs a request refused before any descriptor was decided (`INVALID_ARGUMENT`).
pub fn refused(domain: &str, reason: &dyn Display) {
    tracing::debug!(target: TARGET, %domain, %reason, "request refused");
}

/// Every descriptor of a request, `; ` between them.
struct Descriptors<'a> {
    request: &'a Request,
    plan: &'a Plan,
    outcome: Option<&'a Outcome>,
    domain_known: bool,
}

impl Display for Descriptors<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let statuses = self.outcome.map(|outcome| &outcome.statuses[..]);
        for (index, descriptor) in self.request.descriptors.iter().enumerate() {
            if index > 0 {
                f.write_str("; ")?;
            }
            write!(f, "#{index} ")?;
            for (at, entry) in descriptor.entries.iter().enumerate() {
                let comma = if at > 0 { "," } else { "" };
                write!(f, "{comma}{}={}", entry.key, entry.value)?;
            }
            let hits = self.request.hits_for(descriptor);
            if hits != 1 {
                write!(f, " (hits {hits})")?;
            }
            f.write_str(" -> ")?;
            let rule = self
                .plan
                .matched
                .get(index)
                .and_then(Option::as_ref)
                .map(|limit| limit.path.as_str());
            match self.plan.resolutions.get(index) {
                Some(resolution) => self.rule(f, resolution, rule)?,
                None => f.write_str("not planned")?,
            }
            if let Some(status) = statuses.and_then(|statuses| statuses.get(index)) {
                f.write_str(" -> ")?;
                write_status(f, status)?;
            }
        }
        Ok(())
    }
}

impl Descriptors<'_> {
    /// The rule a descriptor matched and the limit that applies to it.
    fn rule(
        &self,
        f: &mut Formatter<'_>,
        resolution: &Resolution,
        rule: Option<&str>,
    ) -> fmt::Result {
        let (limit, enforcement, overridden) = match resolution {
            Resolution::NoLimit => {
                return match rule {
                    Some(rule) => write!(f, "{rule} (no limit)"),
                    None if self.domain_known => f.write_str("no rule"),
                    None => f.write_str("no rule (domain not configured)"),
                };
            }
            Resolution::Unlimited => {
                return write!(f, "{} (unlimited)", rule.unwrap_or("unlimited"));
            }
            Resolution::Blocked {
                limit,
                enforcement,
                overridden,
            }
            | Resolution::Counted {
                limit,
                enforcement,
                overridden,
                ..
            } => (limit, *enforcement, *overridden),
        };
        match (overridden, rule) {
            (true, Some(rule)) => write!(f, "override of {rule}")?,
            (true, None) => f.write_str("override")?,
            (false, Some(rule)) => f.write_str(rule)?,
            (false, None) => f.write_str("a rule")?,
        }
        write!(f, " ({}", Rate(limit))?;
        if let Some(name) = &limit.name {
            write!(f, ", name {name}")?;
        }
        match enforcement {
            Enforcement::Enforced => {}
            Enforcement::Shadow => f.write_str(", shadow mode")?,
            Enforcement::Quota => f.write_str(", quota mode")?,
        }
        if self.plan.modes.shadow_mode {
            f.write_str(", global shadow mode")?;
        }
        f.write_str(")")
    }
}

/// What a descriptor got: its code, what remains, and what a shadow or quota limit hid.
fn write_status(f: &mut Formatter<'_>, status: &DescriptorOutcome) -> fmt::Result {
    match status.code {
        Code::Ok => f.write_str("OK")?,
        Code::OverLimit => f.write_str("OVER_LIMIT")?,
    }
    if status.current_limit.is_some() {
        write!(f, ", {} remaining", status.limit_remaining)?;
    }
    if status.shadow_denied {
        f.write_str(", over the limit in shadow mode")?;
    }
    if status.quota_violated {
        f.write_str(", over the quota")?;
    }
    Ok(())
}

/// `3 per minute`, `10 per 5 seconds`.
struct Rate<'a>(&'a CurrentLimit);

impl Display for Rate<'_> {
    fn fmt(&self, f: &mut Formatter<'_>) -> fmt::Result {
        let CurrentLimit {
            requests_per_unit,
            unit,
            unit_multiplier,
            ..
        } = self.0;
        if *unit_multiplier > 1 {
            write!(f, "{requests_per_unit} per {unit_multiplier} {unit}s")
        } else {
            write!(f, "{requests_per_unit} per {unit}")
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::limiter::algorithm::Verdict;
    use crate::limiter::{outcome, plan_with, Descriptor, Entry, Modes};

    fn rules() -> Rules {
        let yaml = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3, name: per_client}\n  - key: team\n    value: ops\n    rate_limit: {unlimited: true}\n  - key: path\n    rate_limit: {unit: second, requests_per_unit: 10, unit_multiplier: 5}\n    shadow_mode: true\n";
        let domain = crate::config::parse_domain(std::path::Path::new("edge.yaml"), yaml).unwrap();
        let mut rules = Rules::default();
        rules.domains.insert(domain.domain.clone(), domain);
        rules
    }

    fn descriptor(entries: &[(&str, &str)]) -> Descriptor {
        Descriptor {
            entries: entries
                .iter()
                .map(|(key, value)| Entry {
                    key: key.to_string(),
                    value: value.to_string(),
                })
                .collect(),
            limit_override: None,
            hits_addend: None,
        }
    }

    fn line(request: &Request, verdicts: &[Verdict]) -> String {
        let rules = Arc::new(rules());
        let plan = plan_with(&rules, request, Modes::default()).unwrap();
        let outcome = outcome(&plan, verdicts);
        Descriptors {
            request,
            plan: &plan,
            outcome: Some(&outcome),
            domain_known: rules.domain(&request.domain).is_some(),
        }
        .to_string()
    }

    #[test]
    fn each_descriptor_names_its_rule_limit_and_decision() {
        let request = Request {
            domain: "edge".into(),
            descriptors: vec![
                descriptor(&[("client", "a")]),
                descriptor(&[("team", "ops")]),
                descriptor(&[("path", "/x")]),
                descriptor(&[("other", "1")]),
            ],
            hits_addend: 0,
        };
        let verdicts = [
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: 1,
                counted_when_vetoed: false,
            },
            Verdict {
                admitted: false,
                remaining: 0,
                reset_after_us: 1,
                counted_when_vetoed: false,
            },
        ];
        assert_eq!(
            line(&request, &verdicts),
            "#0 client=a -> edge.client (3 per minute, name per_client) -> OVER_LIMIT, 0 remaining; \
             #1 team=ops -> edge.team_ops (unlimited) -> OK; \
             #2 path=/x -> edge.path (10 per 5 seconds, shadow mode) -> OK, 0 remaining, over the limit in shadow mode; \
             #3 other=1 -> no rule -> OK"
        );
    }

    #[test]
    fn an_unknown_domain_says_so_and_hits_show_when_not_one() {
        let request = Request {
            domain: "nowhere".into(),
            descriptors: vec![descriptor(&[("client", "a"), ("path", "/")])],
            hits_addend: 4,
        };
        assert_eq!(
            line(&request, &[]),
            "#0 client=a,path=/ (hits 4) -> no rule (domain not configured) -> OK"
        );
    }
}
