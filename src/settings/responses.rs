//! The settings of `serve --help-all`'s "Responses" group.

use super::setting::{Convert, Group, Setting, Upstream, Value};
use crate::service::headers::LimitHeaderNames;

/// Every setting of the group, in the order of the help.
pub static ALL: &[&Setting] = &[
    &RESPONSE_HEADERS,
    &RESPONSE_HEADER_LIMIT,
    &RESPONSE_HEADER_REMAINING,
    &RESPONSE_HEADER_RESET,
    &SHADOW_MODE,
    &QUOTA_MODE,
    &RESPONSE_DYNAMIC_METADATA,
];

pub const RESPONSE_HEADERS: Setting = Setting {
    flag: "response-headers",
    variable: "RATELIMITD_RESPONSE_HEADERS",
    group: Group::Responses,
    essential: false,
    default: Value::Text("none"),
    drop_in_default: None,
    upstream: Upstream::Derived(&["LIMIT_RESPONSE_HEADERS_ENABLED"]),
    help: "Rate-limit headers to return in `response_headers_to_add` (Envoy adds them to the \
        client's response): none, draft03 (X-RateLimit-*), ietf (RateLimit, RateLimit-Policy) or \
        envoyproxy (envoyproxy/ratelimit's RateLimit-Limit, -Remaining, -Reset).",
};

pub const RESPONSE_HEADER_LIMIT: Setting = Setting {
    flag: "response-header-limit",
    variable: "RATELIMITD_RESPONSE_HEADER_LIMIT",
    group: Group::Responses,
    essential: false,
    default: Value::Text(LimitHeaderNames::DEFAULT_LIMIT),
    drop_in_default: None,
    upstream: Upstream::Variable("LIMIT_LIMIT_HEADER", Convert::Same),
    help: "With --response-headers envoyproxy: the name of the limit header.",
};

pub const RESPONSE_HEADER_REMAINING: Setting = Setting {
    flag: "response-header-remaining",
    variable: "RATELIMITD_RESPONSE_HEADER_REMAINING",
    group: Group::Responses,
    essential: false,
    default: Value::Text(LimitHeaderNames::DEFAULT_REMAINING),
    drop_in_default: None,
    upstream: Upstream::Variable("LIMIT_REMAINING_HEADER", Convert::Same),
    help: "With --response-headers envoyproxy: the name of the remaining header.",
};

pub const RESPONSE_HEADER_RESET: Setting = Setting {
    flag: "response-header-reset",
    variable: "RATELIMITD_RESPONSE_HEADER_RESET",
    group: Group::Responses,
    essential: false,
    default: Value::Text(LimitHeaderNames::DEFAULT_RESET),
    drop_in_default: None,
    upstream: Upstream::Variable("LIMIT_RESET_HEADER", Convert::Same),
    help: "With --response-headers envoyproxy: the name of the reset header (seconds).",
};

pub const SHADOW_MODE: Setting = Setting {
    flag: "shadow-mode",
    variable: "RATELIMITD_SHADOW_MODE",
    group: Group::Responses,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("SHADOW_MODE", Convert::Bool),
    help: "Global shadow mode: every limit is decided and counted but none denies; \
        `overall_code` is always OK while each status keeps what its limit decided.",
};

pub const QUOTA_MODE: Setting = Setting {
    flag: "quota-mode",
    variable: "RATELIMITD_QUOTA_MODE",
    group: Group::Responses,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("QUOTA_MODE", Convert::Bool),
    help: "Global quota mode: every limit is in quota mode (over the limit its status stays OK \
        and the descriptor is listed in the dynamic metadata's `quotaModeViolations`).",
};

pub const RESPONSE_DYNAMIC_METADATA: Setting = Setting {
    flag: "response-dynamic-metadata",
    variable: "RATELIMITD_RESPONSE_DYNAMIC_METADATA",
    group: Group::Responses,
    essential: false,
    default: Value::Unset,
    drop_in_default: None,
    upstream: Upstream::Variable("RESPONSE_DYNAMIC_METADATA", Convert::Bool),
    help: "Fill every response's `dynamic_metadata` (domain, descriptors, quota-mode violations \
        and the matched rules' `metadata`), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA.",
};
