//! The command line's shape: the program and its three subcommands, each with its flags.

use clap::{Parser, Subcommand};

use super::check::CheckArgs;
use super::health::HealthArgs;
use super::serve::ServeArgs;

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
