//! The command-line flags of the rate limit quota service (RLQS, docs/rlqs.md).

use std::time::Duration;

use super::parse;
use crate::limiter::quota::BlanketRule;
use crate::server::memory_budget;
use crate::service::rlqs::budget::STREAM_COST;
use crate::service::rlqs::RlqsSettings;

/// What a bucket no rule matches gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Unmatched {
    /// ALLOW_ALL, as an unmatched RLS descriptor is allowed.
    Allow,
    /// DENY_ALL: only buckets a rule names are admitted.
    Deny,
}

/// RLQS: the blanket rule of unmatched buckets, idle time, and the caps on streams and buckets.
#[derive(Debug, Clone, clap::Args)]
pub struct RlqsArgs {
    #[arg(long, value_enum)]
    rlqs_unmatched: Unmatched,
    #[arg(long, value_name = "DURATION", value_parser = parse::positive_duration)]
    rlqs_idle_timeout: Duration,
    #[arg(long, value_name = "N", value_parser = parse::count)]
    rlqs_max_buckets_per_stream: usize,
    #[arg(long, value_name = "N", value_parser = parse::count)]
    rlqs_max_streams: usize,
    #[arg(long, value_name = "N", value_parser = parse::count)]
    rlqs_max_streams_per_connection: usize,
    #[arg(long, value_name = "SIZE", value_parser = bucket_id_bytes)]
    rlqs_max_bucket_id_bytes: usize,
    #[arg(long, value_name = "SIZE", value_parser = state_budget)]
    rlqs_memory_budget: Option<usize>,
}

/// A budget of at least one stream.
fn state_budget(text: &str) -> Result<usize, String> {
    let size = parse::size(text)?;
    if size >= STREAM_COST {
        Ok(size)
    } else {
        Err(format!(
            "`{text}` is below one stream's {STREAM_COST} bytes (sizes take B, KiB, MiB, GiB)"
        ))
    }
}

/// The largest bucket id size accepted by the flag: what a report of one bucket may be.
const MAX_BUCKET_ID_BYTES: usize = 1 << 20;

/// A bucket id size of at most [`MAX_BUCKET_ID_BYTES`].
fn bucket_id_bytes(text: &str) -> Result<usize, String> {
    let size = parse::size(text)?;
    if size <= MAX_BUCKET_ID_BYTES {
        Ok(size)
    } else {
        Err(format!("`{text}` is above 1MiB"))
    }
}

impl RlqsArgs {
    /// The settings these flags make.
    pub fn settings(&self) -> RlqsSettings {
        RlqsSettings {
            unmatched: match self.rlqs_unmatched {
                Unmatched::Allow => BlanketRule::AllowAll,
                Unmatched::Deny => BlanketRule::DenyAll,
            },
            idle_timeout: self.rlqs_idle_timeout,
            max_buckets_per_stream: self.rlqs_max_buckets_per_stream,
            max_streams: self.rlqs_max_streams,
            max_streams_per_connection: self.rlqs_max_streams_per_connection,
            max_bucket_id_bytes: self.rlqs_max_bucket_id_bytes,
            memory_budget: self
                .rlqs_memory_budget
                .unwrap_or_else(memory_budget::default_bytes),
            ..RlqsSettings::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        args: RlqsArgs,
    }

    fn parse(args: &[&str]) -> Result<RlqsSettings, String> {
        crate::cli::table::parse::<Command>(std::iter::once("test").chain(args.iter().copied()))
            .map(|command| command.args.settings())
            .map_err(|error| error.to_string())
    }

    #[test]
    fn defaults_and_values() {
        assert_eq!(
            parse(&[]),
            Ok(RlqsSettings {
                memory_budget: memory_budget::default_bytes(),
                ..RlqsSettings::default()
            })
        );
        let settings = parse(&[
            "--rlqs-unmatched",
            "deny",
            "--rlqs-idle-timeout",
            "2s",
            "--rlqs-max-buckets-per-stream",
            "3",
            "--rlqs-max-streams",
            "4",
            "--rlqs-max-bucket-id-bytes",
            "2KiB",
            "--rlqs-memory-budget",
            "64MiB",
            "--rlqs-max-streams-per-connection",
            "2",
        ])
        .expect("valid flags");
        assert_eq!(settings.unmatched, BlanketRule::DenyAll);
        assert_eq!(settings.idle_timeout, Duration::from_secs(2));
        assert_eq!(
            (settings.max_buckets_per_stream, settings.max_streams),
            (3, 4)
        );
        assert_eq!(settings.max_bucket_id_bytes, 2048);
        assert_eq!(settings.memory_budget, 64 << 20);
        assert_eq!(settings.max_streams_per_connection, 2);
    }

    #[test]
    fn bad_values_are_refused_by_flag() {
        for (args, flag) in [
            (["--rlqs-unmatched", "maybe"], "--rlqs-unmatched"),
            (["--rlqs-idle-timeout", "0s"], "--rlqs-idle-timeout"),
            (["--rlqs-max-streams", "0"], "--rlqs-max-streams"),
            (
                ["--rlqs-max-bucket-id-bytes", "2MiB"],
                "--rlqs-max-bucket-id-bytes",
            ),
            (
                ["--rlqs-max-bucket-id-bytes", "0"],
                "--rlqs-max-bucket-id-bytes",
            ),
            (["--rlqs-memory-budget", "1KiB"], "--rlqs-memory-budget"),
        ] {
            let error = parse(&args).expect_err("refused");
            assert!(error.contains(flag), "{error}");
        }
    }
}
