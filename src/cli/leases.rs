//! The command-line flags of leased consistency (hot keys decided from hits reserved ahead):
//! the default of rules that do not say (`--consistency`) and how long a lease is held
//! (`--lease-period`).

use std::time::Duration;

use crate::limiter::consistency::MAX_LEASE_PERIOD;
use crate::limiter::Consistency;

/// `--consistency`'s values (the configuration's `consistency` names).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DefaultConsistency {
    /// Every request of such a rule is decided in the store.
    Exact,
    /// Such a rule is decided from leases, with Redis (sliding_window_log rules stay exact).
    Leased,
}

impl From<DefaultConsistency> for Consistency {
    fn from(value: DefaultConsistency) -> Consistency {
        match value {
            DefaultConsistency::Exact => Consistency::Exact,
            DefaultConsistency::Leased => Consistency::Leased,
        }
    }
}

/// Leases for hot keys (docs/configuration.md, "Consistency"; docs/operations/store.md, "Leases").
#[derive(Debug, Clone, clap::Args)]
pub struct LeaseArgs {
    #[arg(long, value_enum)]
    consistency: DefaultConsistency,
    #[arg(long, value_name = "DURATION", value_parser = lease_period)]
    lease_period: Duration,
}

impl LeaseArgs {
    /// The consistency of rules that do not say.
    pub fn default_consistency(&self) -> Consistency {
        self.consistency.into()
    }

    /// How long a lease is held.
    pub fn lease_period(&self) -> Duration {
        self.lease_period
    }
}

/// A lease period: a duration of more than 0s and at most [`MAX_LEASE_PERIOD`].
fn lease_period(text: &str) -> Result<Duration, String> {
    let period = humantime::parse_duration(text)
        .map_err(|error| format!("`{text}` is not a duration ({error}); e.g. 100ms, 1s"))?;
    if period.is_zero() || period > MAX_LEASE_PERIOD {
        return Err(format!(
            "`{text}` is out of bounds: a lease period is more than 0s and at most {}",
            humantime::format_duration(MAX_LEASE_PERIOD)
        ));
    }
    Ok(period)
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::limiter::consistency::DEFAULT_LEASE_PERIOD;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: LeaseArgs,
    }

    fn parse(args: &[&str]) -> Result<(Consistency, Duration), String> {
        crate::cli::table::parse::<Command>(std::iter::once("test").chain(args.iter().copied()))
            .map(|command| {
                (
                    command.args.default_consistency(),
                    command.args.lease_period(),
                )
            })
            .map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(parse(&[]), Ok((Consistency::Exact, DEFAULT_LEASE_PERIOD)));
        assert_eq!(
            parse(&["--consistency", "leased", "--lease-period", "250ms"]),
            Ok((Consistency::Leased, Duration::from_millis(250)))
        );
        assert_eq!(
            parse(&["--lease-period", "10s"]),
            Ok((Consistency::Exact, MAX_LEASE_PERIOD))
        );
    }

    #[test]
    fn bad_values_are_refused_by_flag_with_the_bounds() {
        for value in ["0s", "0ms", "10001ms", "1m"] {
            let error = parse(&["--lease-period", value]).unwrap_err();
            assert!(error.contains("--lease-period"), "{value}: {error}");
            assert!(
                error.contains(&format!(
                    "`{value}` is out of bounds: a lease period is more than 0s and at most 10s"
                )),
                "{value}: {error}"
            );
        }
        let error = parse(&["--lease-period", "soon"]).unwrap_err();
        assert!(error.contains("`soon` is not a duration"), "{error}");
        let error = parse(&["--consistency", "eventual"]).unwrap_err();
        assert!(
            error.contains("exact") && error.contains("leased"),
            "{error}"
        );
    }
}
