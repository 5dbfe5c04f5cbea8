//! The command-line flags of what health follows of the store: its probe
//! (`--health-follows-store`) and the rule on failed store calls (`--health-failure-*`).

use std::time::Duration;

use super::parse;
use crate::store::FailureHealthSettings;

/// When failed store calls turn health NOT_SERVING (docs/operations/health.md).
#[derive(Debug, Clone, clap::Args)]
#[command(next_help_heading = "Health")]
pub struct FailureHealthArgs {
    /// Whether health follows the store at all: NOT_SERVING while Redis does not answer its
    /// probe (PING) or while most calls fail (`--health-failure-*`). With `false`, health says
    /// only whether the process serves, whatever Redis does (envoyproxy/ratelimit's default,
    /// REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=false), so a liveness probe never restarts pods
    /// during a Redis outage; calls still fail as `--on-store-error` says.
    #[arg(
        long,
        env = "RATELIMITD_HEALTH_FOLLOWS_STORE",
        value_name = "BOOL",
        default_value_t = true,
        action = clap::ArgAction::Set,
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true"
    )]
    pub health_follows_store: bool,
    /// How far back store calls are counted for health, in whole seconds (`0s` turns the rule
    /// off: health then follows only the store's probe, Redis PING).
    #[arg(long, env = "RATELIMITD_HEALTH_FAILURE_WINDOW", value_name = "DURATION", default_value = "10s", value_parser = parse_window)]
    pub health_failure_window: Duration,
    /// Fewest store calls in the window for their failures to turn health NOT_SERVING.
    #[arg(long, env = "RATELIMITD_HEALTH_FAILURE_MIN_CALLS", value_name = "N", default_value_t = FailureHealthSettings::DEFAULT_MIN_CALLS, value_parser = clap::value_parser!(u64).range(1..))]
    pub health_failure_min_calls: u64,
    /// Share of failed store calls in the window (errors, timeouts, lost connections; not
    /// denials) at or above which health is NOT_SERVING.
    #[arg(long, env = "RATELIMITD_HEALTH_FAILURE_RATIO", value_name = "RATIO", default_value_t = FailureHealthSettings::DEFAULT_MAX_FAILURE_RATIO, value_parser = parse::ratio)]
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
        Command::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
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
