//! Rate-limit response headers computed by the service itself and returned in
//! `response_headers_to_add`, for deployments that do not use Envoy's own
//! `enable_x_ratelimit_headers` / `enable_retry_after_header` (Envoy adds these headers to the
//! downstream response, whether it is the upstream's answer or Envoy's 429).
//!
//! Off by default. Three styles:
//!
//! - [`ResponseHeaders::Draft03`]: `X-RateLimit-Limit`, `X-RateLimit-Remaining`,
//!   `X-RateLimit-Reset` as Envoy writes them for `DRAFT_VERSION_03`
//!   (draft-polli-ratelimit-headers-03), e.g.
//!   `X-RateLimit-Limit: 5, 12;w=3600;name="per_address", 5;w=3600;name="per_key"`.
//! - [`ResponseHeaders::Ietf`]: the fields of draft-ietf-httpapi-ratelimit-headers (structured
//!   field lists), e.g. `RateLimit-Policy: "per_address";q=12;w=3600, "per_key";q=5;w=3600` and
//!   `RateLimit: "per_key";r=4;t=720`.
//!
//! - [`ResponseHeaders::Envoyproxy`]: envoyproxy/ratelimit's `LIMIT_RESPONSE_HEADERS_ENABLED`
//!   headers, `RateLimit-Limit` (the limit's `requests_per_unit`), `RateLimit-Remaining` and
//!   `RateLimit-Reset` (seconds), under the names its `LIMIT_*_HEADER` settings give
//!   ([`LimitHeaderNames`]). Their status is upstream's: the OVER_LIMIT one when any is (the last
//!   of them), else the first with the least remaining.
//!
//! Draft03 and IETF add `Retry-After` (delay-seconds) when the request is over the limit;
//! envoyproxy/ratelimit adds none, and neither does its style.
//!
//! Which status the numbers come from follows Envoy's rule: among the statuses that carry a
//! `current_limit`, the first one with the least `limit_remaining`. Every such status with a
//! known window (unit x `unit_multiplier`) is listed as a policy. `Retry-After` is the largest
//! `duration_until_reset` of the OVER_LIMIT statuses (all of them must admit the request again),
//! at least 1, as Envoy 1.40's `enable_retry_after_header` computes it. Seconds are rounded
//! **up** (the gRPC edge already answers whole seconds rounded up): a client that waits
//! `Retry-After` seconds is not refused again for a fraction of a second.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;

use prost_types::Duration;

use crate::limiter::Request;
use crate::proto::envoy::config::core::v3::HeaderValue;
use crate::proto::rls::rate_limit_response::rate_limit::Unit as ProtoUnit;
use crate::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use crate::proto::rls::RateLimitResponse;

/// Which rate-limit headers the service adds to its responses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ResponseHeaders {
    /// No headers (the default).
    #[default]
    None,
    /// `X-RateLimit-Limit`, `X-RateLimit-Remaining`, `X-RateLimit-Reset`, and `Retry-After`
    /// when over the limit.
    Draft03,
    /// `RateLimit-Policy` and `RateLimit` (draft-ietf-httpapi-ratelimit-headers), and
    /// `Retry-After` when over the limit.
    Ietf,
    /// envoyproxy/ratelimit's three headers, under these names.
    Envoyproxy(LimitHeaderNames),
}

/// The names of envoyproxy/ratelimit's three headers (its `LIMIT_LIMIT_HEADER`,
/// `LIMIT_REMAINING_HEADER` and `LIMIT_RESET_HEADER`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitHeaderNames {
    pub limit: Arc<str>,
    pub remaining: Arc<str>,
    pub reset: Arc<str>,
}

impl Default for LimitHeaderNames {
    /// envoyproxy/ratelimit's defaults.
    fn default() -> LimitHeaderNames {
        LimitHeaderNames {
            limit: Arc::from(Self::DEFAULT_LIMIT),
            remaining: Arc::from(Self::DEFAULT_REMAINING),
            reset: Arc::from(Self::DEFAULT_RESET),
        }
    }
}

impl LimitHeaderNames {
    pub const DEFAULT_LIMIT: &'static str = "RateLimit-Limit";
    pub const DEFAULT_REMAINING: &'static str = "RateLimit-Remaining";
    pub const DEFAULT_RESET: &'static str = "RateLimit-Reset";

    /// Checks that `name` is an HTTP header name (RFC 9110 token characters).
    pub fn check(name: &str) -> Result<(), String> {
        let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
        if !name.is_empty() && name.len() <= 256 && name.bytes().all(token) {
            Ok(())
        } else {
            Err(format!("`{name}` is not an HTTP header name"))
        }
    }
}

impl ResponseHeaders {
    /// The style names the command line takes.
    pub const NAMES: [&'static str; 4] = ["none", "draft03", "ietf", "envoyproxy"];

    /// The name the command line uses.
    pub fn name(&self) -> &'static str {
        match self {
            ResponseHeaders::None => "none",
            ResponseHeaders::Draft03 => "draft03",
            ResponseHeaders::Ietf => "ietf",
            ResponseHeaders::Envoyproxy(_) => "envoyproxy",
        }
    }

    /// Appends this style's headers to `response.response_headers_to_add`; `request` is the
    /// request the response answers (its descriptors name unnamed limits in the IETF style).
    pub fn apply(&self, request: &Request, response: &mut RateLimitResponse) {
        let headers = self.headers(request, response);
        response.response_headers_to_add.extend(headers);
    }

    /// The headers this style adds to `response`, in order.
    pub fn headers(&self, request: &Request, response: &RateLimitResponse) -> Vec<HeaderValue> {
        if *self == ResponseHeaders::None {
            return Vec::new();
        }
        let limited: Vec<LimitedStatus<'_>> = response
            .statuses
            .iter()
            .enumerate()
            .filter_map(|(index, status)| LimitedStatus::new(index, status))
            .collect();
        if let ResponseHeaders::Envoyproxy(names) = self {
            return envoyproxy_headers(names, &limited, response);
        }
        // Envoy's rule: the first status with the least remaining.
        let Some(tightest) =
            limited
                .iter()
                .reduce(|min, l| if l.remaining < min.remaining { l } else { min })
        else {
            return Vec::new();
        };
        let mut headers = Vec::new();
        match self {
            ResponseHeaders::None | ResponseHeaders::Envoyproxy(_) => {}
            ResponseHeaders::Draft03 => {
                let mut limit = tightest.requests_per_unit.to_string();
                for l in limited.iter().filter(|l| l.window > 0) {
                    limit.push_str(&format!(", {};w={}", l.requests_per_unit, l.window));
                    if !l.name.is_empty() {
                        limit.push_str(&format!(";name={}", sf_string(l.name)));
                    }
                }
                headers.push(header("X-RateLimit-Limit", limit));
                headers.push(header(
                    "X-RateLimit-Remaining",
                    tightest.remaining.to_string(),
                ));
                headers.push(header("X-RateLimit-Reset", tightest.reset.to_string()));
            }
            ResponseHeaders::Ietf => {
                let names = policy_names(request, &limited);
                let mut policies: Vec<String> = Vec::new();
                for (l, name) in limited.iter().zip(&names) {
                    let mut policy = format!("{};q={}", sf_string(name), l.requests_per_unit);
                    if l.window > 0 {
                        policy.push_str(&format!(";w={}", l.window));
                    }
                    if !policies.contains(&policy) {
                        policies.push(policy);
                    }
                }
                let tightest_name = limited
                    .iter()
                    .zip(&names)
                    .find(|(l, _)| l.index == tightest.index)
                    .map_or("", |(_, name)| name.as_str());
                headers.push(header("RateLimit-Policy", policies.join(", ")));
                headers.push(header(
                    "RateLimit",
                    format!(
                        "{};r={};t={}",
                        sf_string(tightest_name),
                        tightest.remaining,
                        tightest.reset
                    ),
                ));
            }
        }
        if response.overall_code == Code::OverLimit as i32 {
            let retry_after = response
                .statuses
                .iter()
                .filter(|status| status.code == Code::OverLimit as i32)
                .map(|status| ceil_seconds(status.duration_until_reset.as_ref()))
                .max();
            if let Some(seconds) = retry_after {
                headers.push(header("Retry-After", seconds.max(1).to_string()));
            }
        }
        headers
    }
}

impl fmt::Display for ResponseHeaders {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown header style name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown response header style `{0}` (expected none, draft03, ietf or envoyproxy)")]
pub struct UnknownStyle(pub String);

impl FromStr for ResponseHeaders {
    type Err = UnknownStyle;

    fn from_str(name: &str) -> Result<ResponseHeaders, UnknownStyle> {
        match name.to_ascii_lowercase().as_str() {
            "none" => Ok(ResponseHeaders::None),
            "draft03" => Ok(ResponseHeaders::Draft03),
            "ietf" => Ok(ResponseHeaders::Ietf),
            "envoyproxy" => Ok(ResponseHeaders::Envoyproxy(LimitHeaderNames::default())),
            _ => Err(UnknownStyle(name.to_string())),
        }
    }
}

/// A status that carries a limit, with the numbers the headers need.
struct LimitedStatus<'a> {
    /// Position of the status (= of the request descriptor).
    index: usize,
    requests_per_unit: u32,
    /// Window in seconds (unit x multiplier); 0 when the unit is unknown.
    window: u64,
    name: &'a str,
    remaining: u32,
    /// `duration_until_reset` in whole seconds, rounded up.
    reset: u64,
}

impl<'a> LimitedStatus<'a> {
    fn new(index: usize, status: &'a DescriptorStatus) -> Option<LimitedStatus<'a>> {
        let limit = status.current_limit.as_ref()?;
        let unit = match ProtoUnit::try_from(limit.unit) {
            Ok(ProtoUnit::Second) => 1,
            Ok(ProtoUnit::Minute) => 60,
            Ok(ProtoUnit::Hour) => 3_600,
            Ok(ProtoUnit::Day) => 86_400,
            Ok(ProtoUnit::Week) => 7 * 86_400,
            Ok(ProtoUnit::Month) => 30 * 86_400,
            Ok(ProtoUnit::Year) => 365 * 86_400,
            Ok(ProtoUnit::Unknown) | Err(_) => 0,
        };
        Some(LimitedStatus {
            index,
            requests_per_unit: limit.requests_per_unit,
            window: unit * u64::from(limit.unit_multiplier.unwrap_or(1).max(1)),
            name: &limit.name,
            remaining: status.limit_remaining,
            reset: ceil_seconds(status.duration_until_reset.as_ref()),
        })
    }
}

/// envoyproxy/ratelimit's headers: of the status it picks (the last OVER_LIMIT one, else the
/// first with the least remaining), its limit, its remaining and its reset in seconds.
fn envoyproxy_headers(
    names: &LimitHeaderNames,
    limited: &[LimitedStatus<'_>],
    response: &RateLimitResponse,
) -> Vec<HeaderValue> {
    let over_limit = |l: &&LimitedStatus<'_>| {
        response
            .statuses
            .get(l.index)
            .is_some_and(|status| status.code == Code::OverLimit as i32)
    };
    let chosen = limited.iter().rfind(over_limit).or_else(|| {
        limited
            .iter()
            .reduce(|min, l| if l.remaining < min.remaining { l } else { min })
    });
    let Some(chosen) = chosen else {
        return Vec::new();
    };
    vec![
        header(&names.limit, chosen.requests_per_unit.to_string()),
        header(&names.remaining, chosen.remaining.to_string()),
        header(&names.reset, chosen.reset.to_string()),
    ]
}

/// Policy names for the IETF fields: the limit's `name`, else its descriptor's keys joined with
/// `.` (never the values: they are client addresses and API keys). A name that two different
/// policies would share gets `#<descriptor index>` appended on the later one.
fn policy_names(request: &Request, limited: &[LimitedStatus<'_>]) -> Vec<String> {
    let mut names: Vec<String> = Vec::with_capacity(limited.len());
    let mut seen: Vec<(String, u32, u64)> = Vec::new();
    for l in limited {
        let mut name = if l.name.is_empty() {
            request
                .descriptors
                .get(l.index)
                .map(|d| {
                    d.entries
                        .iter()
                        .map(|e| e.key.as_str())
                        .collect::<Vec<_>>()
                        .join(".")
                })
                .unwrap_or_default()
        } else {
            l.name.to_string()
        };
        let clash = seen
            .iter()
            .any(|(n, q, w)| *n == name && (*q != l.requests_per_unit || *w != l.window));
        if clash {
            name = format!("{name}#{}", l.index);
        }
        seen.push((name.clone(), l.requests_per_unit, l.window));
        names.push(name);
    }
    names
}

/// A duration in whole seconds, rounded up; absent or negative = 0.
fn ceil_seconds(duration: Option<&Duration>) -> u64 {
    let Some(d) = duration else { return 0 };
    if d.seconds < 0 || (d.seconds == 0 && d.nanos <= 0) {
        return 0;
    }
    d.seconds as u64 + u64::from(d.nanos > 0)
}

/// `text` as a structured-field string (RFC 8941 sf-string): quoted, `"` and `\` escaped, and
/// any character outside printable ASCII replaced by `_` (header values must stay visible ASCII).
fn sf_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' | '\\' => {
                out.push('\\');
                out.push(c);
            }
            ' '..='~' => out.push(c),
            _ => out.push('_'),
        }
    }
    out.push('"');
    out
}

fn header(key: &str, value: String) -> HeaderValue {
    HeaderValue {
        key: key.to_string(),
        value,
        raw_value: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::limiter::{Descriptor, Entry};
    use crate::proto::rls::rate_limit_response::RateLimit;

    fn request(descriptors: &[&[(&str, &str)]]) -> Request {
        Request {
            domain: "edge".into(),
            descriptors: descriptors
                .iter()
                .map(|entries| Descriptor {
                    entries: entries
                        .iter()
                        .map(|(key, value)| Entry {
                            key: key.to_string(),
                            value: value.to_string(),
                        })
                        .collect(),
                    limit_override: None,
                    hits_addend: None,
                })
                .collect(),
            hits_addend: 0,
        }
    }

    fn duration(seconds: i64, nanos: i32) -> Option<Duration> {
        Some(Duration { seconds, nanos })
    }

    fn status(
        code: Code,
        limit: Option<(u32, ProtoUnit, &str, Option<u32>)>,
        remaining: u32,
        reset: Option<Duration>,
    ) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: limit.map(|(requests_per_unit, unit, name, multiplier)| RateLimit {
                name: name.to_string(),
                requests_per_unit,
                unit: unit as i32,
                unit_multiplier: multiplier,
            }),
            limit_remaining: remaining,
            duration_until_reset: reset,
            quota: None,
        }
    }

    fn response(overall: Code, statuses: Vec<DescriptorStatus>) -> RateLimitResponse {
        RateLimitResponse {
            overall_code: overall as i32,
            statuses,
            ..RateLimitResponse::default()
        }
    }

    fn pairs(headers: &[HeaderValue]) -> Vec<(&str, &str)> {
        headers
            .iter()
            .map(|h| (h.key.as_str(), h.value.as_str()))
            .collect()
    }

    /// Three tiers: per address 12/hour (7 left), per key 5/hour (2 left, the tightest), and a
    /// descriptor without limit.
    fn three_tiers(overall: Code, key_code: Code) -> (Request, RateLimitResponse) {
        let request = request(&[
            &[("remote_address", "10.0.0.1")],
            &[("api_key", "k1")],
            &[("api_key", "k1"), ("path", "search")],
        ]);
        let response = response(
            overall,
            vec![
                status(
                    Code::Ok,
                    Some((12, ProtoUnit::Hour, "per_address", None)),
                    7,
                    duration(1_500, 250_000_000),
                ),
                status(
                    key_code,
                    Some((5, ProtoUnit::Hour, "per_key", None)),
                    2,
                    duration(2_159, 1),
                ),
                status(Code::Ok, None, 0, None),
            ],
        );
        (request, response)
    }

    #[test]
    fn none_adds_nothing() {
        let (request, mut response) = three_tiers(Code::OverLimit, Code::OverLimit);
        ResponseHeaders::None.apply(&request, &mut response);
        assert!(response.response_headers_to_add.is_empty());
    }

    #[test]
    fn draft03_ok_uses_the_least_remaining_and_lists_every_policy() {
        let (request, response) = three_tiers(Code::Ok, Code::Ok);
        assert_eq!(
            pairs(&ResponseHeaders::Draft03.headers(&request, &response)),
            [
                (
                    "X-RateLimit-Limit",
                    r#"5, 12;w=3600;name="per_address", 5;w=3600;name="per_key""#
                ),
                ("X-RateLimit-Remaining", "2"),
                // 2159 s and 1 ns, rounded up.
                ("X-RateLimit-Reset", "2160"),
            ]
        );
    }

    #[test]
    fn draft03_over_limit_adds_retry_after_from_the_over_limit_statuses() {
        let request = request(&[&[("a", "1")], &[("b", "2")], &[("c", "3")]]);
        let response = response(
            Code::OverLimit,
            vec![
                status(
                    Code::OverLimit,
                    Some((10, ProtoUnit::Second, "", None)),
                    0,
                    duration(0, 400_000_000),
                ),
                // The longest wait among the denials decides Retry-After.
                status(
                    Code::OverLimit,
                    Some((2, ProtoUnit::Minute, "", Some(5))),
                    0,
                    duration(29, 500_000_000),
                ),
                // An OK status with a longer reset does not.
                status(
                    Code::Ok,
                    Some((100, ProtoUnit::Day, "daily", None)),
                    90,
                    duration(80_000, 0),
                ),
            ],
        );
        assert_eq!(
            pairs(&ResponseHeaders::Draft03.headers(&request, &response)),
            [
                (
                    "X-RateLimit-Limit",
                    r#"10, 10;w=1, 2;w=300, 100;w=86400;name="daily""#
                ),
                ("X-RateLimit-Remaining", "0"),
                // The first status with the least remaining: 0.4 s rounds up to 1.
                ("X-RateLimit-Reset", "1"),
                ("Retry-After", "30"),
            ]
        );
    }

    #[test]
    fn retry_after_is_at_least_one_second() {
        // requests_per_unit 0 (a ban) answers OVER_LIMIT with duration 0.
        let request = request(&[&[("banned", "x")]]);
        let response = response(
            Code::OverLimit,
            vec![status(
                Code::OverLimit,
                Some((0, ProtoUnit::Hour, "ban", None)),
                0,
                duration(0, 0),
            )],
        );
        assert_eq!(
            pairs(&ResponseHeaders::Draft03.headers(&request, &response)),
            [
                ("X-RateLimit-Limit", r#"0, 0;w=3600;name="ban""#),
                ("X-RateLimit-Remaining", "0"),
                ("X-RateLimit-Reset", "0"),
                ("Retry-After", "1"),
            ]
        );
    }

    #[test]
    fn ietf_ok() {
        let (request, response) = three_tiers(Code::Ok, Code::Ok);
        assert_eq!(
            pairs(&ResponseHeaders::Ietf.headers(&request, &response)),
            [
                (
                    "RateLimit-Policy",
                    r#""per_address";q=12;w=3600, "per_key";q=5;w=3600"#
                ),
                ("RateLimit", r#""per_key";r=2;t=2160"#),
            ]
        );
    }

    #[test]
    fn ietf_over_limit_names_unnamed_limits_by_their_keys_never_their_values() {
        let request = request(&[
            &[("remote_address", "10.0.0.1")],
            &[("api_key", "secret"), ("path", "login")],
        ]);
        let response = response(
            Code::OverLimit,
            vec![
                status(
                    Code::Ok,
                    Some((120, ProtoUnit::Minute, "", None)),
                    100,
                    duration(60, 0),
                ),
                status(
                    Code::OverLimit,
                    Some((5, ProtoUnit::Minute, "", None)),
                    0,
                    duration(11, 999_999_999),
                ),
            ],
        );
        assert_eq!(
            pairs(&ResponseHeaders::Ietf.headers(&request, &response)),
            [
                (
                    "RateLimit-Policy",
                    r#""remote_address";q=120;w=60, "api_key.path";q=5;w=60"#
                ),
                ("RateLimit", r#""api_key.path";r=0;t=12"#),
                ("Retry-After", "12"),
            ]
        );
    }

    #[test]
    fn ietf_disambiguates_different_policies_with_the_same_name() {
        let request = request(&[&[("user", "a")], &[("user", "b")], &[("user", "c")]]);
        let response = response(
            Code::Ok,
            vec![
                status(
                    Code::Ok,
                    Some((10, ProtoUnit::Minute, "", None)),
                    9,
                    duration(6, 0),
                ),
                // The same policy again: listed once.
                status(
                    Code::Ok,
                    Some((10, ProtoUnit::Minute, "", None)),
                    9,
                    duration(6, 0),
                ),
                // Another policy under the same keys.
                status(
                    Code::Ok,
                    Some((1000, ProtoUnit::Week, "", None)),
                    3,
                    duration(100, 0),
                ),
            ],
        );
        assert_eq!(
            pairs(&ResponseHeaders::Ietf.headers(&request, &response)),
            [
                (
                    "RateLimit-Policy",
                    r#""user";q=10;w=60, "user#2";q=1000;w=604800"#
                ),
                ("RateLimit", r#""user#2";r=3;t=100"#),
            ]
        );
    }

    #[test]
    fn names_are_escaped_as_structured_field_strings() {
        let request = request(&[&[("k", "v")]]);
        let response = response(
            Code::Ok,
            vec![status(
                Code::Ok,
                Some((3, ProtoUnit::Second, "a \"b\" \\ é", None)),
                1,
                duration(0, 1),
            )],
        );
        assert_eq!(
            pairs(&ResponseHeaders::Ietf.headers(&request, &response)),
            [
                ("RateLimit-Policy", r#""a \"b\" \\ _";q=3;w=1"#),
                ("RateLimit", r#""a \"b\" \\ _";r=1;t=1"#),
            ]
        );
    }

    #[test]
    fn no_limited_status_no_headers() {
        // Unknown domain, whitelisted values, unlimited: no current_limit anywhere.
        let request = request(&[&[("a", "1")], &[("b", "2")]]);
        let response = response(
            Code::Ok,
            vec![
                status(Code::Ok, None, 0, None),
                status(Code::Ok, None, u32::MAX, None),
            ],
        );
        for style in [ResponseHeaders::Draft03, ResponseHeaders::Ietf] {
            assert!(style.headers(&request, &response).is_empty(), "{style}");
        }
    }

    #[test]
    fn apply_appends_to_existing_headers() {
        let (request, mut response) = three_tiers(Code::Ok, Code::Ok);
        response
            .response_headers_to_add
            .push(header("x-other", "1".into()));
        ResponseHeaders::Ietf.apply(&request, &mut response);
        let keys: Vec<&str> = response
            .response_headers_to_add
            .iter()
            .map(|h| h.key.as_str())
            .collect();
        assert_eq!(keys, ["x-other", "RateLimit-Policy", "RateLimit"]);
    }

    #[test]
    fn ceil_seconds_rounds_up_and_clamps() {
        assert_eq!(ceil_seconds(None), 0);
        assert_eq!(ceil_seconds(duration(0, 0).as_ref()), 0);
        assert_eq!(ceil_seconds(duration(0, 1).as_ref()), 1);
        assert_eq!(ceil_seconds(duration(59, 0).as_ref()), 59);
        assert_eq!(ceil_seconds(duration(59, 999_999_999).as_ref()), 60);
        assert_eq!(ceil_seconds(duration(-3, 0).as_ref()), 0);
    }

    #[test]
    fn names_parse_and_print() {
        for name in ResponseHeaders::NAMES {
            let style = name.parse::<ResponseHeaders>().expect(name);
            assert_eq!(style.to_string(), name);
        }
        assert_eq!("DRAFT03".parse(), Ok(ResponseHeaders::Draft03));
        assert_eq!(
            "x".parse::<ResponseHeaders>(),
            Err(UnknownStyle("x".into()))
        );
        assert_eq!(ResponseHeaders::default(), ResponseHeaders::None);
    }

    fn status_with(
        code: Code,
        requests_per_unit: u32,
        remaining: u32,
        reset: i64,
    ) -> DescriptorStatus {
        DescriptorStatus {
            code: code as i32,
            current_limit: Some(RateLimit {
                name: String::new(),
                requests_per_unit,
                unit: ProtoUnit::Minute as i32,
                unit_multiplier: None,
            }),
            limit_remaining: remaining,
            duration_until_reset: duration(reset, 0),
            ..Default::default()
        }
    }

    #[test]
    fn envoyproxy_style_reports_the_last_over_limit_status_else_the_least_remaining() {
        let names = LimitHeaderNames {
            limit: "X-Limit".into(),
            remaining: "X-Left".into(),
            reset: "X-Reset".into(),
        };
        let style = ResponseHeaders::Envoyproxy(names);
        let pairs = |response: &RateLimitResponse| -> Vec<(String, String)> {
            style
                .headers(&request(&[]), response)
                .into_iter()
                .map(|h| (h.key, h.value))
                .collect()
        };
        let mut response = RateLimitResponse {
            overall_code: Code::Ok as i32,
            statuses: vec![
                status_with(Code::Ok, 10, 7, 30),
                status_with(Code::Ok, 20, 3, 40),
                status_with(Code::Ok, 30, 3, 50),
            ],
            ..Default::default()
        };
        let expected = |limit: &str, left: &str, reset: &str| {
            vec![
                ("X-Limit".to_string(), limit.to_string()),
                ("X-Left".to_string(), left.to_string()),
                ("X-Reset".to_string(), reset.to_string()),
            ]
        };
        assert_eq!(pairs(&response), expected("20", "3", "40"));
        response.overall_code = Code::OverLimit as i32;
        response.statuses[0] = status_with(Code::OverLimit, 10, 0, 30);
        response.statuses[2] = status_with(Code::OverLimit, 30, 0, 50);
        assert_eq!(pairs(&response), expected("30", "0", "50"));
    }

    #[test]
    fn header_names_must_be_tokens() {
        assert!(LimitHeaderNames::check("RateLimit-Limit").is_ok());
        assert!(LimitHeaderNames::check("").is_err());
        assert!(LimitHeaderNames::check("a b").is_err());
        assert!(LimitHeaderNames::check("x:y").is_err());
    }
}
