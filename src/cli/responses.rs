//! What a decision answers beyond its code: rate-limit headers, dynamic metadata, and the global
//! shadow and quota modes.

use crate::limiter::Modes;
use crate::service::headers::LimitHeaderNames;
use crate::service::ResponseHeaders;

/// How responses are filled, and the modes that apply to every limit.
#[derive(clap::Args)]
pub struct ResponseArgs {
    #[arg(long)]
    response_headers: ResponseHeaders,
    #[arg(long, value_parser = header_name)]
    response_header_limit: String,
    #[arg(long, value_parser = header_name)]
    response_header_remaining: String,
    #[arg(long, value_parser = header_name)]
    response_header_reset: String,
    #[arg(long)]
    shadow_mode: bool,
    #[arg(long)]
    quota_mode: bool,
    #[arg(long)]
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
