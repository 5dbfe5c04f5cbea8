//! `ratelimitd check`: validates a configuration without serving it, and says what it read.

use std::fmt;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::parser::ValueSource;
use clap::ArgMatches;

use super::config_source::ConfigSourceArgs;
use crate::config::{self, ConfigErrors, DirectoryLayout};
use crate::envoyproxy_env::Translation;

/// envoyproxy/ratelimit's `RUNTIME_ROOT` when unset.
const DEFAULT_RUNTIME_ROOT: &str = "/srv/runtime_data/current";

/// The configuration to validate.
#[derive(clap::Args)]
#[command(
    after_help = "Without --config (and RATELIMITD_CONFIG), check reads envoyproxy/ratelimit's \
    runtime directory, $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/$RUNTIME_APPDIRECTORY \
    (default /srv/runtime_data/current/config), as serve does in drop-in mode (docs/migration.md)."
)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigSourceArgs,
}

/// Prints `configuration OK: …` and the paths it read with their layout and where they came
/// from, and exits 0; or every error with its place on stderr (nothing else there, so a script
/// reads them alone), that same `checked …` line on stdout, and exits with 1. `matches` (the command line's) tells `--config` from `RATELIMITD_CONFIG`, `upstream`
/// (what [`super::upstream_env::read`] did) tells those from envoyproxy/ratelimit's `RUNTIME_*`
/// variables; a drop-in default path that cannot be read says it is one and how to give another.
pub fn check(args: &CheckArgs, matches: &ArgMatches, upstream: &Translation) -> ExitCode {
    let source = &args.config;
    let origin = PathsOrigin::of(matches, upstream);
    if source.config.is_empty() {
        if upstream
            .assignments
            .iter()
            .any(|a| a.variable == "RATELIMITD_CONFIG_SOURCE")
        {
            eprintln!(
                "error: check reads configuration files, and CONFIG_TYPE=GRPC_XDS_SOTW takes \
                 the configuration from an xDS server: give the files with --config PATH"
            );
        } else {
            eprintln!("error: check needs --config (or RATELIMITD_CONFIG)");
        }
        return ExitCode::from(2);
    }
    let options = source.load_options();
    let checked = Checked {
        paths: &source.config,
        layout: options.layout,
        origin: &origin,
    };
    match config::Loader::new(source.bounds.bounds())
        .with_options(options)
        .load(&source.config)
    {
        Ok(rules) => {
            let limits = rules.limits().len();
            println!(
                "configuration OK: {} domain(s), {limits} limit(s)",
                rules.domains.len()
            );
            println!("{checked}");
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            println!("{checked}: {} error(s)", errors.len());
            if let Some(path) = unreadable(&source.config, &errors) {
                if origin == PathsOrigin::DropInDefault {
                    eprintln!(
                        "{} is the drop-in default path (envoyproxy/ratelimit's RUNTIME_ROOT is \
                         unset, so {DEFAULT_RUNTIME_ROOT}): give the configuration with \
                         --config PATH, or set RUNTIME_ROOT (and RUNTIME_SUBDIRECTORY, \
                         RUNTIME_APPDIRECTORY) to where it is",
                        path.display()
                    );
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// The first of `paths` that could not be read at all (an error on the path itself, with no
/// place in it).
fn unreadable<'a>(paths: &'a [PathBuf], errors: &ConfigErrors) -> Option<&'a PathBuf> {
    paths.iter().find(|path| {
        errors
            .iter()
            .any(|error| error.line == 0 && error.file() == Some(path.as_path()))
    })
}

/// Where `--config`'s paths came from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PathsOrigin {
    Flag,
    Variable,
    /// envoyproxy/ratelimit's `RUNTIME_*` variables, `RUNTIME_ROOT` among them.
    Runtime,
    /// envoyproxy/ratelimit's `RUNTIME_*` variables with `RUNTIME_ROOT` unset: its default.
    DropInDefault,
    None,
}

impl PathsOrigin {
    fn of(matches: &ArgMatches, upstream: &Translation) -> PathsOrigin {
        let source = matches
            .subcommand_matches("check")
            .and_then(|check| check.value_source("config"));
        match source {
            Some(ValueSource::CommandLine) => PathsOrigin::Flag,
            Some(ValueSource::EnvVariable)
                if upstream
                    .assignments
                    .iter()
                    .any(|a| a.variable == "RATELIMITD_CONFIG") =>
            {
                if runtime_variable("RUNTIME_ROOT").is_some() {
                    PathsOrigin::Runtime
                } else {
                    PathsOrigin::DropInDefault
                }
            }
            Some(ValueSource::EnvVariable) => PathsOrigin::Variable,
            _ => PathsOrigin::None,
        }
    }
}

/// An envoyproxy/ratelimit variable as it reads them: empty is unset.
fn runtime_variable(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.is_empty())
}

/// `checked PATHS (LAYOUT; ORIGIN)`.
struct Checked<'a> {
    paths: &'a [PathBuf],
    layout: DirectoryLayout,
    origin: &'a PathsOrigin,
}

impl fmt::Display for Checked<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("checked ")?;
        for (index, path) in self.paths.iter().enumerate() {
            let comma = if index > 0 { ", " } else { "" };
            write!(f, "{comma}{}", path.display())?;
        }
        match self.layout {
            DirectoryLayout::YamlFiles => f.write_str(" (files layout: *.yaml / *.yml")?,
            DirectoryLayout::RuntimeTree {
                ignore_dotfiles: true,
            } => f.write_str(" (runtime layout: every file, dotfiles skipped")?,
            DirectoryLayout::RuntimeTree {
                ignore_dotfiles: false,
            } => f.write_str(" (runtime layout: every file, dotfiles read")?,
        }
        match self.origin {
            PathsOrigin::Flag => f.write_str("; from --config)"),
            PathsOrigin::Variable => f.write_str("; from RATELIMITD_CONFIG)"),
            PathsOrigin::None => f.write_str(")"),
            PathsOrigin::Runtime | PathsOrigin::DropInDefault => {
                if *self.origin == PathsOrigin::DropInDefault {
                    f.write_str("; drop-in default path:")?;
                } else {
                    f.write_str("; drop-in path:")?;
                }
                for (index, (name, default)) in [
                    ("RUNTIME_ROOT", DEFAULT_RUNTIME_ROOT),
                    ("RUNTIME_SUBDIRECTORY", ""),
                    ("RUNTIME_APPDIRECTORY", "config"),
                ]
                .into_iter()
                .enumerate()
                {
                    let comma = if index > 0 { "," } else { "" };
                    match runtime_variable(name) {
                        Some(value) => write!(f, "{comma} {name}={value}")?,
                        None if default.is_empty() => write!(f, "{comma} {name} unset")?,
                        None => write!(f, "{comma} {name} unset ({default})")?,
                    }
                }
                f.write_str(")")
            }
        }
    }
}
