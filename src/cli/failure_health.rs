//! The command-line flags of what health follows of the store: its probe
//! (`--health-follows-store`) and the rule on failed store calls (`--health-failure-*`).

use std::time::Duration;

use super::parse;
use crate::store::FailureHealthSettings;

/// When failed store calls turn health NOT_SERVING (docs/operations/health.md).
#[derive(Debug, Clone, clap::Args)]
pub struct FailureHealthArgs {
    #[arg(long, value_name = "BOOL", action = clap::ArgAction::Set, num_args = 0..=1, require_equals = true, default_missing_value = "true")]
    pub health_follows_store: bool,
    #[arg(long, value_name = "DURATION", value_parser = parse_window)]
    pub health_failure_window: Duration,
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    pub health_failure_min_calls: u64,
    #[arg(long, value_name = "RATIO", value_parser = parse::ratio)]
    pub health_failure_ratio: f64,
}

impl FailureHealthArgs {
    /// The settings these flags make.
    pub fn settings(&self) -> FailureHealthSettings {
        if !self.health_follows_store {
            return FailureHealthSettings::off();
        }
        FailureHealthSettings {
            window: self.health_failure_window,
            min_calls: self.health_failure_min_calls,
            max_failure_ratio: self.health_failure_ratio,
        }
    }
}

fn parse_window(text: &str) -> Result<Duration, String> {
    let window = humantime::parse_duration(text).map_err(|error| error.to_string())?;
    if window > FailureHealthSettings::MAX_WINDOW {
        return Err(format!(
            "`{text}` is longer than {}",
            humantime::format_duration(FailureHealthSettings::MAX_WINDOW)
        ));
    }
    Ok(window)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: FailureHealthArgs,
    }

    fn parse(args: &[&str]) -> Result<FailureHealthSettings, String> {
        crate::cli::table::parse::<Command>(std::iter::once("test").chain(args.iter().copied()))
            .map(|command| command.args.settings())
            .map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse(&[]), Ok(FailureHealthSettings::default()));
        let settings = parse(&[
            "--health-failure-window",
            "30s",
            "--health-failure-min-calls",
            "5",
            "--health-failure-ratio",
            "0.9",
        ])
        .unwrap();
        assert_eq!(
            settings,
            FailureHealthSettings {
                window: Duration::from_secs(30),
                min_calls: 5,
                max_failure_ratio: 0.9,
            }
        );
        assert!(!parse(&["--health-failure-window", "0s"]).unwrap().is_on());
        assert!(!parse(&["--health-follows-store=false"]).unwrap().is_on());
    }

    #[test]
    fn bad_values_are_refused_by_flag() {
        for (args, flag) in [
            (["--health-failure-ratio", "0"], "--health-failure-ratio"),
            (["--health-failure-ratio", "1.5"], "--health-failure-ratio"),
            (
                ["--health-failure-min-calls", "0"],
                "--health-failure-min-calls",
            ),
            (["--health-failure-window", "2h"], "--health-failure-window"),
            (
                ["--health-failure-window", "soon"],
                "--health-failure-window",
            ),
        ] {
            let error = parse(&args).unwrap_err();
            assert!(error.contains(flag), "{args:?}: {error}");
        }
    }
}
