//! envoyproxy/ratelimit's environment, read before the command line is parsed (drop-in mode).

use std::collections::BTreeMap;
use std::ffi::OsString;

use crate::envoyproxy_env;

/// Sets the `RATELIMITD_*` variables that envoyproxy/ratelimit's variables ask for (see
/// [`envoyproxy_env`]), before the command line is parsed, so flags and `RATELIMITD_*`
/// variables win and every value goes through the same parser. Drop-in mode: `serve` or
/// `check` without `--config`, `--config-source` or their `RATELIMITD_*` variables.
///
/// Arguments that ask for help set nothing: clap shows each variable's value in the help, and
/// one set here would read as if the user had set it.
pub fn read(arguments: &[OsString]) -> Result<envoyproxy_env::Translation, Vec<String>> {
    if asks_for_help(arguments) {
        return Ok(envoyproxy_env::Translation::default());
    }
    let environment: BTreeMap<String, String> = std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect();
    let subcommand = arguments.get(1).and_then(|a| a.to_str());
    let config_given = environment.contains_key("RATELIMITD_CONFIG")
        || environment.contains_key("RATELIMITD_CONFIG_SOURCE")
        || arguments.iter().any(|argument| {
            argument.to_str().is_some_and(|a| {
                ["--config", "--config-source"]
                    .iter()
                    .any(|flag| a == *flag || a.starts_with(&format!("{flag}=")))
            })
        });
    let drop_in = matches!(subcommand, Some("serve" | "check")) && !config_given;
    let translation = envoyproxy_env::translate(&environment, drop_in)?;
    for assignment in &translation.assignments {
        // Still one thread: nothing reads the environment concurrently.
        std::env::set_var(assignment.variable, &assignment.value);
    }
    Ok(translation)
}

/// `-h`, `--help` or the `help` subcommand, before any `--`.
fn asks_for_help(arguments: &[OsString]) -> bool {
    arguments.get(1).is_some_and(|a| a == "help")
        || arguments
            .iter()
            .skip(1)
            .take_while(|a| *a != "--")
            .any(|a| a == "-h" || a == "--help")
}

/// Logs what envoyproxy/ratelimit's variables did, once logging is set up: each setting at INFO
/// (an unset variable's default said as such); in drop-in mode also one WARN line naming the
/// variables read, so the proof shows at upstream's default level. What still differs is said
/// at WARN: here in native mode, with the listeners in drop-in mode (see `server::DropIn`).
pub fn log(translation: &envoyproxy_env::Translation) {
    if translation.drop_in {
        let read = translation.variables_read();
        let read = if read.is_empty() {
            "none set, upstream's defaults apply".to_owned()
        } else {
            read.join(", ")
        };
        tracing::warn!(
            "drop-in mode: configured by envoyproxy/ratelimit's environment ({read}); \
             LOG_LEVEL=info shows each setting"
        );
    }
    for assignment in &translation.assignments {
        let value = assignment.shown_value();
        if assignment.defaulted {
            let why = if envoyproxy_env::VARIABLES.contains(&assignment.from.as_str()) {
                format!("{} unset: envoyproxy/ratelimit's default", assignment.from)
            } else {
                format!("{}: as envoyproxy/ratelimit", assignment.from)
            };
            tracing::info!(
                from = %assignment.from,
                "envoyproxy/ratelimit setting: {}={value} ({why})",
                assignment.variable,
            );
        } else {
            tracing::info!(
                from = %assignment.from,
                "envoyproxy/ratelimit setting: {}={value}",
                assignment.variable
            );
        }
    }
    for notice in &translation.notices {
        match notice.level {
            envoyproxy_env::Level::Info => tracing::info!("{}", notice.text),
            envoyproxy_env::Level::Warn if translation.drop_in => {}
            envoyproxy_env::Level::Warn => tracing::warn!("{}", notice.text),
        }
    }
}
