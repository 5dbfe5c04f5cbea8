//! What `--log-level` means: a level for ratelimitd's own lines, or a filter used as written.

use std::borrow::Cow;

/// The target prefix of every line ratelimitd itself logs (its modules' paths).
const OWN_TARGET: &str = "ratelimitd";

/// The tracing-subscriber directives `--log-level` asks for.
///
/// A plain level (`trace`, `debug`, `info`, `warn`, `error`, `off`, in any case) is ratelimitd's
/// own: its lines log at that level, while the libraries under it (h2, hyper, tonic, tower,
/// rustls, redis, opentelemetry...) stay at `info`, or at the level itself when that is quieter
/// (`warn` quiets everything). Without this, `debug` (envoyproxy/ratelimit's `LOG_LEVEL=debug`)
/// would bury the decisions it is turned on for under HTTP/2 frame dumps. Anything else, a
/// directive list (`debug,h2=trace`) or a target (`ratelimitd::decisions=debug`), is
/// tracing-subscriber's syntax and used as written.
pub fn directives(filter: &str) -> Cow<'_, str> {
    let level = filter.trim().to_ascii_lowercase();
    match level.as_str() {
        "trace" | "debug" => Cow::Owned(format!("info,{OWN_TARGET}={level}")),
        "info" | "warn" | "error" | "off" => Cow::Owned(level),
        _ => Cow::Borrowed(filter),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_verbose_level_is_ratelimitds_own_and_the_libraries_stay_at_info() {
        assert_eq!(directives("debug"), "info,ratelimitd=debug");
        assert_eq!(directives(" TRACE "), "info,ratelimitd=trace");
    }

    #[test]
    fn a_quieter_level_applies_to_everything() {
        assert_eq!(directives("info"), "info");
        assert_eq!(directives("WARN"), "warn");
        assert_eq!(directives("error"), "error");
        assert_eq!(directives("off"), "off");
    }

    #[test]
    fn a_filter_is_used_as_written() {
        assert_eq!(directives("debug,h2=trace"), "debug,h2=trace");
        assert_eq!(
            directives("ratelimitd::decisions=debug"),
            "ratelimitd::decisions=debug"
        );
        assert_eq!(directives("hyper"), "hyper");
    }
}
