//! The command line: clap definitions of every flag, by group, each group turning into the
//! library's own options, and the three commands they drive.
//!
//! Every flag also reads a `RATELIMITD_*` variable; envoyproxy/ratelimit's variables are turned
//! into those before parsing ([`upstream_env`]), so flags win, then `RATELIMITD_*`, then
//! upstream's, and every value goes through the same parser.

mod arguments;
mod check;
mod config_source;
mod failure_health;
mod health;
mod leases;
mod limits;
mod listeners;
mod log_filter;
mod log_lines;
mod parse;
mod responses;
mod rlqs;
mod serve;
mod store;
mod telemetry;
mod traces;
pub mod upstream_env;
mod xds;

use clap::{Parser, Subcommand};

pub use arguments::parse;
pub use check::{check, CheckArgs};
pub use health::{health, HealthArgs};
pub use serve::{serve, ServeArgs};
pub use telemetry::LogFormat;

/// `ratelimitd [serve|check|health]`.
#[derive(Parser)]
#[command(
    name = "ratelimitd",
    version,
    about = "gRPC rate-limit decision service (Envoy RLS v3)"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Subcommand)]
pub enum Command {
    /// Serve RLS v3, gRPC health and reflection, and the HTTP endpoints.
    #[command(
        after_help = "Drop-in mode: without --config and --config-source (and their \
        RATELIMITD_* variables), serve is configured as envoyproxy/ratelimit is, by its variables \
        (RUNTIME_ROOT, REDIS_URL, LOG_LEVEL...) and their defaults, below flags and RATELIMITD_* \
        variables; the values shown above are only those set here (docs/migration.md)."
    )]
    Serve(Box<ServeArgs>),
    /// Validate configuration: print every error with file:line, exit 1 if there is any.
    Check(CheckArgs),
    /// Ask a running ratelimitd's gRPC health service; exit 0 when SERVING (for container probes).
    Health(HealthArgs),
}
