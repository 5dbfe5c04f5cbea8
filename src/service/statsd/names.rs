//! envoyproxy/ratelimit's stat names, byte for byte as it sends them: its scopes
//! (`src/stats/manager_impl.go`, `src/service_cmd/runner/runner.go`), its sanitizing of the
//! per-descriptor part (`utils.SanitizeStatName`), and the tags gostats appends.

use super::tags::ExtraTags;

/// The per-rule stats, in the order of [`crate::service::metrics::UpstreamCounts::rules`].
pub const RULE_STATS: [&str; 5] = [
    "total_hits",
    "within_limit",
    "near_limit",
    "over_limit",
    "shadow_mode",
];

/// Builds every stat name, with the extra tags appended.
#[derive(Debug, Clone)]
pub struct StatNames {
    tags: String,
}

impl StatNames {
    pub fn new(tags: &ExtraTags) -> StatNames {
        StatNames {
            tags: tags.suffix(),
        }
    }

    /// `ratelimit.service.rate_limit.<key>.<stat>`, where `key` is a rule's stat key
    /// (`domain.key_value.key2`), sanitized.
    pub fn rule(&self, key: &str, stat: &str) -> String {
        format!(
            "ratelimit.service.rate_limit.{}.{stat}{}",
            sanitize_key(key),
            self.tags
        )
    }

    /// `ratelimit.service.rate_limit.<domain>.domain_not_found`, the domain sanitized.
    pub fn domain_not_found(&self, domain: &str) -> String {
        self.rule(domain, "domain_not_found")
    }

    /// `ratelimit.service.<stat>` (`config_load_success`, `call.should_rate_limit.redis_error`).
    pub fn service(&self, stat: &str) -> String {
        format!("ratelimit.service.{stat}{}", self.tags)
    }

    /// `ratelimit_server.ShouldRateLimit.<stat>`: the gRPC method's `total_requests` and
    /// `response_time`.
    pub fn should_rate_limit(&self, stat: &str) -> String {
        format!("ratelimit_server.ShouldRateLimit.{stat}{}", self.tags)
    }
}

/// A stat key as envoyproxy/ratelimit's `SanitizeStatName` makes it: `:` and `|` become `_`,
/// and so do the dots of anything shaped like an IPv4 address (`\d{1,3}(\.\d{1,3}){3}`, matched
/// leftmost-first as Go's regexp does), so `remote_address_10.0.0.1` stays one name segment.
/// Control characters become `_` too (upstream would send them, and a newline would split the
/// line in two).
pub fn sanitize_key(key: &str) -> String {
    let mut bytes: Vec<u8> = key
        .bytes()
        .map(|b| match b {
            b':' | b'|' => b'_',
            b if b.is_ascii_control() => b'_',
            b => b,
        })
        .collect();
    let mut at = 0;
    while at < bytes.len() {
        match ipv4_end(&bytes, at) {
            Some(end) => {
                for byte in &mut bytes[at..end] {
                    if *byte == b'.' {
                        *byte = b'_';
                    }
                }
                at = end;
            }
            None => at += 1,
        }
    }
    // Only ASCII bytes were replaced by ASCII bytes: still UTF-8.
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Where an IPv4-shaped match starting at `start` ends: four runs of one to three digits joined by
/// dots, the last run as long as it goes up to three digits.
fn ipv4_end(bytes: &[u8], start: usize) -> Option<usize> {
    let mut at = start;
    for group in 0..4 {
        let digits = at;
        while at < bytes.len() && at - digits < 3 && bytes[at].is_ascii_digit() {
            at += 1;
        }
        if at == digits {
            return None;
        }
        if group < 3 {
            if bytes.get(at) != Some(&b'.') {
                return None;
            }
            at += 1;
        }
    }
    Some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sanitize_as_upstream() {
        // envoyproxy/ratelimit src/utils/utilities_test.go, TestSanitizeStatName.
        for (input, expected) in [
            ("domain.foo|bar", "domain.foo_bar"),
            ("domain.foo:bar", "domain.foo_bar"),
            (
                "domain.masked_remote_address_0.0.0.0/0",
                "domain.masked_remote_address_0_0_0_0/0",
            ),
            (
                "domain.remote_address_172.18.0.1",
                "domain.remote_address_172_18_0_1",
            ),
            (
                "domain.masked_remote_address_0.0.0.0/0_remote_address_172.18.0.1",
                "domain.masked_remote_address_0_0_0_0/0_remote_address_172_18_0_1",
            ),
        ] {
            assert_eq!(sanitize_key(input), expected, "{input}");
        }
        // Leftmost-first: no match can start at the `1` of `1234`, one starts at `2`; the last
        // group takes at most three digits.
        assert_eq!(sanitize_key("k_1234.5.6.7"), "k_1234_5_6_7");
        assert_eq!(sanitize_key("k_1.2.3.4567.8"), "k_1_2_3_4567.8");
        assert_eq!(sanitize_key("k_1.2.3"), "k_1.2.3");
        assert_eq!(sanitize_key("a\nb\u{7f}é"), "a_b_é");
    }

    #[test]
    fn names_carry_the_tags_last() {
        let names = StatNames::new(&ExtraTags::parse("env:prod").unwrap());
        assert_eq!(
            names.rule("edge.key_a:b", "total_hits"),
            "ratelimit.service.rate_limit.edge.key_a_b.total_hits.__env=prod"
        );
        assert_eq!(
            names.service("call.should_rate_limit.redis_error"),
            "ratelimit.service.call.should_rate_limit.redis_error.__env=prod"
        );
        assert_eq!(
            names.should_rate_limit("response_time"),
            "ratelimit_server.ShouldRateLimit.response_time.__env=prod"
        );
    }
}
