//! What `--log-level` means: a level for ratelimitd's own lines, or a filter of known targets.

use tracing_subscriber::EnvFilter;

/// The target prefix of every line ratelimitd itself logs (its modules' paths).
const OWN_TARGET: &str = "ratelimitd";

/// The crates whose log lines a filter may name, beside ratelimitd's own: a bare word that is
/// neither a level nor one of these is a typo (`verbose`, `debug;`), not a filter.
const KNOWN_TARGETS: [&str; 17] = [
    OWN_TARGET,
    "h2",
    "hyper",
    "hyper_util",
    "tonic",
    "tonic_health",
    "tonic_reflection",
    "tower",
    "rustls",
    "tokio_rustls",
    "redis",
    "bb8",
    "opentelemetry",
    "opentelemetry_sdk",
    "opentelemetry_otlp",
    "reqwest",
    "tokio",
];

/// The tracing level a level name stands for, in any case: tracing's names, `off`, and the
/// logrus names users bring from envoyproxy/ratelimit (`warning`; `fatal` and `panic`, which
/// log errors only).
fn level(name: &str) -> Option<&'static str> {
    Some(match name.to_ascii_lowercase().as_str() {
        "trace" => "trace",
        "debug" => "debug",
        "info" => "info",
        "warn" | "warning" => "warn",
        "error" | "fatal" | "panic" => "error",
        "off" => "off",
        _ => return None,
    })
}

/// The tracing-subscriber directives `--log-level` asks for, or why the value is refused.
///
/// A plain level is ratelimitd's own: its lines log at that level, while the libraries under it
/// (h2, hyper, tonic, tower, rustls, redis, opentelemetry...) stay at `info`, or at the level
/// itself when that is quieter (`warn` quiets everything). Without this, `debug`
/// (envoyproxy/ratelimit's `LOG_LEVEL=debug`) would bury the decisions it is turned on for under
/// HTTP/2 frame dumps.
///
/// Anything else is a tracing-subscriber filter (`debug,h2=trace`,
/// `ratelimitd::decisions=debug`), taken as written but checked first: tracing-subscriber reads
/// any bare word as a target to log at every level, so a mistyped level (`verbose`, `debug;`)
/// would silence every line, fatal errors included. Here a bare word must be a level or a crate
/// that logs under ratelimitd, and a `target=level` directive must name a level.
pub fn directives(filter: &str) -> Result<String, String> {
    let trimmed = filter.trim();
    if let Some(level) = level(trimmed) {
        return Ok(match level {
            "trace" | "debug" => format!("info,{OWN_TARGET}={level}"),
            quieter => quieter.to_owned(),
        });
    }
    let directives = trimmed
        .split(',')
        .map(str::trim)
        .filter(|directive| !directive.is_empty())
        .map(directive)
        .collect::<Result<Vec<_>, _>>()?;
    if directives.is_empty() {
        return Err("empty: give a level (trace, debug, info, warn, error, off)".into());
    }
    let directives = directives.join(",");
    EnvFilter::try_new(&directives).map_err(|error| format!("`{filter}`: {error}"))?;
    Ok(directives)
}

/// One directive of a filter, its level name normalised, or why it is no directive.
fn directive(directive: &str) -> Result<String, String> {
    let levels = "trace, debug, info, warn, error, off";
    match directive.rsplit_once('=') {
        Some((target, name)) => match level(name.trim()) {
            Some(level) => Ok(format!("{}={level}", target.trim())),
            None => Err(format!(
                "`{name}` in `{directive}` is not a log level ({levels})"
            )),
        },
        None => {
            if let Some(level) = level(directive) {
                return Ok(level.to_owned());
            }
            let crate_name = directive
                .split(['[', ':'])
                .next()
                .unwrap_or(directive)
                .trim();
            if directive.starts_with('[') || KNOWN_TARGETS.contains(&crate_name) {
                Ok(directive.to_owned())
            } else {
                Err(format!(
                    "`{directive}` is not a log level ({levels}) nor a target that logs here ({})",
                    KNOWN_TARGETS.join(", ")
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(filter: &str) -> String {
        directives(filter).unwrap_or_else(|error| panic!("{filter}: {error}"))
    }

    #[test]
    fn a_verbose_level_is_ratelimitds_own_and_the_libraries_stay_at_info() {
        assert_eq!(ok("debug"), "info,ratelimitd=debug");
        assert_eq!(ok(" TRACE "), "info,ratelimitd=trace");
    }

    #[test]
    fn a_quieter_level_applies_to_everything() {
        assert_eq!(ok("info"), "info");
        assert_eq!(ok("WARN"), "warn");
        assert_eq!(ok("error"), "error");
        assert_eq!(ok("off"), "off");
    }

    #[test]
    fn logrus_level_names_are_levels() {
        assert_eq!(ok("warning"), "warn");
        assert_eq!(ok("Fatal"), "error");
        assert_eq!(ok("panic"), "error");
        assert_eq!(ok("info,h2=warning"), "info,h2=warn");
    }

    #[test]
    fn a_filter_of_known_targets_is_used_as_written() {
        assert_eq!(ok("debug,h2=trace"), "debug,h2=trace");
        assert_eq!(
            ok("ratelimitd::decisions=debug"),
            "ratelimitd::decisions=debug"
        );
        assert_eq!(ok("hyper"), "hyper");
        assert_eq!(ok("info,"), "info");
    }

    #[test]
    fn a_word_that_is_no_level_and_no_target_is_refused() {
        for typo in ["verbose", "debug;", "infos", "debug,verbose"] {
            let error = directives(typo).expect_err(typo);
            assert!(error.contains("is not a log level"), "{typo}: {error}");
        }
        let error = directives("h2=loud").expect_err("h2=loud");
        assert!(error.contains("`loud` in `h2=loud`"), "{error}");
        assert!(directives(" , ").is_err());
    }
}
