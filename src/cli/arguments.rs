//! The command line parsed, and a refused value explained by where the user set it.
//!
//! clap words every refusal by flag (`invalid value 'ten' for '--redis-pool-size'`), also when
//! the value came from a variable, and exits 2. A user who set `REDIS_POOL_SIZE` (or
//! `RATELIMITD_REDIS_POOL_SIZE`) never typed that flag: the message here names the variable
//! they set, its value and clap's reason, and every configuration error exits 1.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{ArgMatches, FromArgMatches};

use super::command::Cli;
use super::help_levels;
use crate::envoyproxy_env::Translation;

/// Parses `arguments`, keeping clap's matches beside (they tell a flag from its variable); help
/// and version are printed (exit 0), every error is printed in the user's terms (exit 1).
pub fn parse(
    arguments: &[OsString],
    upstream: &Translation,
) -> Result<(Cli, ArgMatches), ExitCode> {
    let (expanded, all) = help_levels::expand(arguments);
    let parsed = help_levels::command(all)
        .try_get_matches_from(expanded)
        .and_then(|matches| Ok((Cli::from_arg_matches(&matches)?, matches)));
    match parsed {
        Ok(parsed) => Ok(parsed),
        Err(error) => match error.kind() {
            ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
                let _ = error.print();
                Err(ExitCode::SUCCESS)
            }
            _ => {
                match explain(&error, arguments, upstream).or_else(|| suggest(&error)) {
                    Some(message) => eprintln!("error: {message}"),
                    None => {
                        let _ = error.print();
                    }
                }
                Err(ExitCode::FAILURE)
            }
        },
    }
}

/// For a refused value that came from a variable (not the command line): the message naming
/// that variable, and the upstream variable it was read from, if any.
fn explain(error: &clap::Error, arguments: &[OsString], upstream: &Translation) -> Option<String> {
    if !matches!(
        error.kind(),
        ErrorKind::ValueValidation | ErrorKind::InvalidValue
    ) {
        return None;
    }
    let Some(ContextValue::String(argument)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let long = argument.split_whitespace().next()?.trim_start_matches("--");
    let on_command_line = arguments.iter().any(|given| {
        given.to_str().is_some_and(|given| {
            given == format!("--{long}") || given.starts_with(&format!("--{long}="))
        })
    });
    if on_command_line {
        return None;
    }
    let variable = environment_variable(arguments, long)?;
    let value = std::env::var(&variable).unwrap_or_default();
    let reason = reason(error);
    let origin = upstream.source_of(&variable);
    Some(match origin {
        Some(assignment) => {
            let set = assignment
                .from
                .split(['/', '='])
                .find(|name| std::env::var_os(name).is_some())
                .unwrap_or(&assignment.from);
            let shown = if assignment.secret {
                assignment.shown_value()
            } else {
                std::env::var(set).unwrap_or(value)
            };
            format!(
                "{set}=`{shown}` is refused: {reason} (envoyproxy/ratelimit's {set}, read as \
                 --{long})"
            )
        }
        None => format!("{variable}=`{value}` is refused: {reason} (the variable of --{long})"),
    })
}

/// The flags a newcomer reaches for by their first word, each with what it is for. clap's own
/// suggestion goes by spelling alone (`--redis` gets `--redis-tls`); these say where to start.
const FIRST_FLAGS: [(&str, &str); 8] = [
    ("--redis-url", "one Redis server, redis://HOST:PORT"),
    ("--redis-cluster", "Redis Cluster seed nodes"),
    (
        "--redis-sentinel",
        "Redis behind Sentinel, MASTER@HOST:PORT,...",
    ),
    ("--config", "configuration files or directories"),
    ("--config-source", "files or xds"),
    ("--grpc-addr", "the gRPC port's address"),
    ("--http-addr", "the HTTP port's address"),
    ("--log-level", "a log level or filter"),
];

/// For an unknown flag that is the first word of flags a newcomer starts with (`--redis`,
/// `--grpc`): those flags, with what each is for.
fn suggest(error: &clap::Error) -> Option<String> {
    if error.kind() != ErrorKind::UnknownArgument {
        return None;
    }
    let Some(ContextValue::String(given)) = error.get(ContextKind::InvalidArg) else {
        return None;
    };
    let flag = given.split('=').next()?.trim();
    if !flag.starts_with("--") {
        return None;
    }
    let stem = format!("{flag}-");
    let matches: Vec<String> = FIRST_FLAGS
        .iter()
        .filter(|(first, _)| first.starts_with(&stem))
        .map(|(first, what)| format!("{first} ({what})"))
        .collect();
    if matches.is_empty() {
        return None;
    }
    Some(format!(
        "unexpected argument '{flag}'; did you mean {}? (`ratelimitd serve --help` lists every flag)",
        matches.join(", or ")
    ))
}

/// The `RATELIMITD_*` variable of the flag `--long` of the subcommand in `arguments`.
fn environment_variable(arguments: &[OsString], long: &str) -> Option<String> {
    let command = help_levels::command(true);
    let subcommand = arguments.get(1).and_then(|a| a.to_str())?;
    let subcommand = command.find_subcommand(subcommand)?;
    let argument = subcommand
        .get_arguments()
        .find(|argument| argument.get_long() == Some(long))?;
    Some(argument.get_env()?.to_str()?.to_owned())
}

/// clap's reason for refusing the value: the value parser's own words, else what it accepts.
fn reason(error: &clap::Error) -> String {
    if let Some(source) = std::error::Error::source(error) {
        return source.to_string();
    }
    match error.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(valid)) => format!("accepted: {}", valid.join(", ")),
        _ => "not a valid value".into(),
    }
}
