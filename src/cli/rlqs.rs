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
#[command(next_help_heading = "RLQS (Envoy's rate_limit_quota filter)")]
pub struct RlqsArgs {
    /// What a bucket no rule matches (and every bucket of a domain no configuration defines)
    /// is assigned: allow (ALLOW_ALL) or deny (DENY_ALL).
    #[arg(
        long,
        env = "RATELIMITD_RLQS_UNMATCHED",
        value_enum,
        default_value = "allow"
    )]
    rlqs_unmatched: Unmatched,
    /// A stream's bucket whose reports counted no request for longer than this is abandoned
    /// (the Envoy is told to forget it) and its share goes to the other Envoys; a stream that
    /// sends no report for this long and 5 s more (Envoy's report period) is ended with
    /// DEADLINE_EXCEEDED.
    #[arg(long, env = "RATELIMITD_RLQS_IDLE_TIMEOUT", value_name = "DURATION", default_value = "60s", value_parser = parse::positive_duration)]
    rlqs_idle_timeout: Duration,
    /// Buckets one RLQS stream may report; a report naming one more ends the stream with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "RATELIMITD_RLQS_MAX_BUCKETS_PER_STREAM", value_name = "N", default_value_t = RlqsSettings::DEFAULT_MAX_BUCKETS_PER_STREAM, value_parser = parse::count)]
    rlqs_max_buckets_per_stream: usize,
    /// RLQS streams open at once; one more is refused with RESOURCE_EXHAUSTED.
    #[arg(long, env = "RATELIMITD_RLQS_MAX_STREAMS", value_name = "N", default_value_t = RlqsSettings::DEFAULT_MAX_STREAMS, value_parser = parse::count)]
    rlqs_max_streams: usize,
    /// RLQS streams open at once on one connection; one more is refused with
    /// RESOURCE_EXHAUSTED.
    #[arg(long, env = "RATELIMITD_RLQS_MAX_STREAMS_PER_CONNECTION", value_name = "N", default_value_t = RlqsSettings::DEFAULT_MAX_STREAMS_PER_CONNECTION, value_parser = parse::count)]
    rlqs_max_streams_per_connection: usize,
    /// Largest RLQS bucket: its id as the wire encodes it plus its report's domain. A report
    /// naming a larger one ends the stream with INVALID_ARGUMENT. With
    /// --rlqs-max-buckets-per-stream it sets the largest report accepted. Sizes take B, KiB,
    /// MiB.
    #[arg(long, env = "RATELIMITD_RLQS_MAX_BUCKET_ID_BYTES", value_name = "SIZE", default_value = "1KiB", value_parser = bucket_id_bytes)]
    rlqs_max_bucket_id_bytes: usize,
    /// Most memory the RLQS streams' state may hold in all: 2 KiB per stream, 400 B per
    /// bucket a stream reports, and each bucket's id and domain bytes plus 256 B. A stream past
    /// it is refused, and a report naming a bucket past it ends its stream, with
    /// RESOURCE_EXHAUSTED. Default: a quarter of the memory the process may use (its cgroup's
    /// limit, else the machine's RAM), at least 32 MiB. Sizes take B, KiB, MiB, GiB.
    #[arg(long, env = "RATELIMITD_RLQS_MEMORY_BUDGET", value_name = "SIZE", value_parser = state_budget)]
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
        Command::try_parse_from(std::iter::once("test").chain(args.iter().copied()))
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
