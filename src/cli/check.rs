//! `ratelimitd check`: validates a configuration without serving it.

use std::process::ExitCode;

use super::config_source::ConfigSourceArgs;
use crate::config;

/// The configuration to validate.
#[derive(clap::Args)]
pub struct CheckArgs {
    #[command(flatten)]
    config: ConfigSourceArgs,
}

/// Prints `configuration OK: …` and exits 0, or every error with its place and exits 1.
pub fn check(args: &CheckArgs) -> ExitCode {
    let source = &args.config;
    if source.config.is_empty() {
        eprintln!("error: check needs --config (or RATELIMITD_CONFIG)");
        return ExitCode::from(2);
    }
    match config::Loader::new(source.limits.limits())
        .with_options(source.load_options())
        .load(&source.config)
    {
        Ok(rules) => {
            let limits = rules.limits().len();
            println!(
                "configuration OK: {} domain(s), {limits} limit(s)",
                rules.domains.len()
            );
            ExitCode::SUCCESS
        }
        Err(errors) => {
            eprintln!("{errors}");
            ExitCode::FAILURE
        }
    }
}
