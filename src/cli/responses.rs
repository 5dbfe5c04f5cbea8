//! What a decision answers beyond its code: rate-limit headers, dynamic metadata, and the global
//! shadow and quota modes.

use crate::limiter::Modes;
use crate::service::headers::LimitHeaderNames;
use crate::service::ResponseHeaders;

/// How responses are filled, and the modes that apply to every limit.
#[derive(clap::Args)]
#[command(next_help_heading = "Responses")]
pub struct ResponseArgs {
    /// Rate-limit headers to return in `response_headers_to_add` (Envoy adds them to the
    /// client's response): none, draft03 (X-RateLimit-*), ietf (RateLimit, RateLimit-Policy) or
    /// envoyproxy (envoyproxy/ratelimit's RateLimit-Limit, -Remaining, -Reset).
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADERS", default_value = "none")]
    response_headers: ResponseHeaders,
    /// With --response-headers envoyproxy: the name of the limit header.
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_LIMIT", default_value = LimitHeaderNames::DEFAULT_LIMIT, value_parser = header_name)]
    response_header_limit: String,
    /// With --response-headers envoyproxy: the name of the remaining header.
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_REMAINING", default_value = LimitHeaderNames::DEFAULT_REMAINING, value_parser = header_name)]
    response_header_remaining: String,
    /// With --response-headers envoyproxy: the name of the reset header (seconds).
    #[arg(long, env = "RATELIMITD_RESPONSE_HEADER_RESET", default_value = LimitHeaderNames::DEFAULT_RESET, value_parser = header_name)]
    response_header_reset: String,
    /// Global shadow mode: every limit is decided and counted but none denies; `overall_code` is
    /// always OK while each status keeps what its limit decided.
    #[arg(long, env = "RATELIMITD_SHADOW_MODE")]
    shadow_mode: bool,
    /// Global quota mode: every limit is in quota mode (over the limit its status stays OK and
    /// the descriptor is listed in the dynamic metadata's `quotaModeViolations`).
    #[arg(long, env = "RATELIMITD_QUOTA_MODE")]
    quota_mode: bool,
    /// Fill every response's `dynamic_metadata` (domain, descriptors, quota-mode violations and
    /// the matched rules' `metadata`), as envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA.
    #[arg(long, env = "RATELIMITD_RESPONSE_DYNAMIC_METADATA")]
    response_dynamic_metadata: bool,
}

impl ResponseArgs {
    /// The rate-limit headers, with envoyproxy's names as the flags set them.
    pub fn headers(&self) -> ResponseHeaders {
        match &self.response_headers {
            ResponseHeaders::Envoyproxy(_) => ResponseHeaders::Envoyproxy(LimitHeaderNames {
                limit: self.response_header_limit.as_str().into(),
                remaining: self.response_header_remaining.as_str().into(),
                reset: self.response_header_reset.as_str().into(),
            }),
            other => other.clone(),
        }
    }

    /// The global modes.
    pub fn modes(&self) -> Modes {
        Modes {
            shadow_mode: self.shadow_mode,
            quota_mode: self.quota_mode,
        }
    }

    /// Whether every response carries dynamic metadata.
    pub fn dynamic_metadata(&self) -> bool {
        self.response_dynamic_metadata
    }
}

fn header_name(text: &str) -> Result<String, String> {
    LimitHeaderNames::check(text).map(|()| text.to_owned())
}
