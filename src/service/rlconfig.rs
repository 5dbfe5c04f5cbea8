//! `/rlconfig`: the limits in force as envoyproxy/ratelimit's debug port lists them.

use crate::limiter::{LimitKind, Rules};

/// The `/rlconfig` text: one line per configured limit, sorted by path.
pub fn rlconfig(rules: &Rules) -> String {
    let mut out = String::new();
    for limit in rules.limits() {
        let (unit, requests_per_unit) = match &limit.kind {
            LimitKind::Unlimited => ("UNKNOWN".to_string(), 0),
            LimitKind::Limited(l) => (l.unit.as_str().to_ascii_uppercase(), l.requests_per_unit),
            LimitKind::Blocked { unit, .. } => (unit.as_str().to_ascii_uppercase(), 0),
        };
        out.push_str(&format!(
            "{}: unit={unit} requests_per_unit={requests_per_unit}, shadow_mode: {}",
            limit.path, limit.shadow_mode
        ));
        match &limit.kind {
            LimitKind::Unlimited => out.push_str(", unlimited: true"),
            LimitKind::Limited(l) => {
                if l.unit_multiplier != 1 {
                    out.push_str(&format!(", unit_multiplier: {}", l.unit_multiplier));
                }
                let algorithm = l.rate.algorithm();
                if algorithm != crate::limiter::Algorithm::default() {
                    out.push_str(&format!(", algorithm: {algorithm}"));
                }
                if algorithm.uses_burst() && l.rate.burst() != l.requests_per_unit {
                    out.push_str(&format!(", burst: {}", l.rate.burst()));
                }
                if l.consistency != crate::limiter::Consistency::default() {
                    out.push_str(&format!(", consistency: {}", l.consistency));
                }
            }
            LimitKind::Blocked {
                unit_multiplier, ..
            } => {
                if *unit_multiplier != 1 {
                    out.push_str(&format!(", unit_multiplier: {unit_multiplier}"));
                }
            }
        }
        out.push('\n');
    }
    out
}
