//! Requests naming a domain no configuration defines: every limit is off for them, and the
//! cause is almost always a typo in Envoy's `domain:`, so it is said in the log, not only
//! counted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use super::descriptor_label::cut;
use super::metrics::UNKNOWN_DOMAIN_CAP;
use super::throttle::WarnThrottle;
use crate::limiter::Rules;

/// How often one unknown domain is warned about while requests keep naming it.
const WARN_EVERY: Duration = Duration::from_secs(60);
/// Longest domain name shown in a warning, in bytes (clients choose it).
const SHOWN_DOMAIN_MAX_BYTES: usize = 128;
/// Most domains in force listed in a warning.
const SHOWN_DOMAINS_IN_FORCE: usize = 20;

/// Warns about requests in unknown domains: once a minute per domain, for at most
/// [`UNKNOWN_DOMAIN_CAP`] domains by name, the further ones sharing one throttle, so a client
/// that invents a domain per request cannot grow memory or flood the log.
#[derive(Debug)]
pub struct UnknownDomains {
    named: RwLock<HashMap<String, Arc<WarnThrottle>>>,
    others: WarnThrottle,
}

impl Default for UnknownDomains {
    fn default() -> UnknownDomains {
        UnknownDomains {
            named: RwLock::new(HashMap::new()),
            others: WarnThrottle::every(WARN_EVERY),
        }
    }
}

impl UnknownDomains {
    /// A request named `domain`, which `rules` do not define.
    pub fn record(&self, domain: &str, rules: &Rules) {
        let shown = cut(domain, SHOWN_DOMAIN_MAX_BYTES);
        let known = self
            .named
            .read()
            .get(shown)
            .map(|throttle| throttle.admit());
        let admitted = match known {
            Some(admitted) => admitted,
            None => self.first_request(shown),
        };
        if let Some(held_back) = admitted {
            let mut in_force: Vec<&str> = rules.domains.keys().map(String::as_str).collect();
            in_force.sort_unstable();
            let more = in_force.len().saturating_sub(SHOWN_DOMAINS_IN_FORCE);
            in_force.truncate(SHOWN_DOMAINS_IN_FORCE);
            let mut domains_in_force = in_force.join(", ");
            if more > 0 {
                domains_in_force.push_str(&format!(" and {more} more"));
            }
            if domains_in_force.is_empty() {
                domains_in_force.push_str("none");
            }
            tracing::warn!(
                domain = shown,
                domains_in_force,
                requests_since_last_warning = held_back,
                "request for a domain no configuration defines: no limit applies to it (check \
                 the rate-limit filter's `domain` in Envoy)"
            );
        }
    }

    /// The warning verdict of a domain's first request, kept by name while there is room.
    fn first_request(&self, domain: &str) -> Option<u64> {
        let mut named = self.named.write();
        if let Some(throttle) = named.get(domain) {
            return throttle.admit();
        }
        if named.len() >= UNKNOWN_DOMAIN_CAP {
            return self.others.admit();
        }
        let throttle = Arc::new(WarnThrottle::every(WARN_EVERY));
        let admitted = throttle.admit();
        named.insert(domain.to_owned(), throttle);
        admitted
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_domain_is_warned_about_once_a_minute_and_the_names_kept_are_bounded() {
        let domains = UnknownDomains::default();
        assert_eq!(domains.first_request("edeg"), Some(0));
        assert_eq!(domains.named.read()["edeg"].admit(), None);
        for n in 0..UNKNOWN_DOMAIN_CAP * 2 {
            domains.record(&format!("d{n}"), &Rules::default());
        }
        assert_eq!(domains.named.read().len(), UNKNOWN_DOMAIN_CAP);
        assert_eq!(
            domains.first_request("another"),
            None,
            "the shared throttle spoke"
        );
    }
}
