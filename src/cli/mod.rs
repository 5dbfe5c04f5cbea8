//! The command line: clap definitions of every flag, by group, each group turning into the
//! library's own options, and the three commands they drive.
//!
//! A flag's variable, default, help group and help text are its row of the settings table
//! ([`crate::settings`]), applied by [`table`]; the structs here say how each value is parsed.
//!
//! Every flag also reads a `RATELIMITD_*` variable; envoyproxy/ratelimit's variables are turned
//! into those before parsing ([`upstream_env`]), so flags win, then `RATELIMITD_*`, then
//! upstream's, and every value goes through the same parser.

mod admin;
mod arguments;
mod bounds;
mod check;
mod command;
mod config_source;
mod failure_health;
mod health;
mod help_levels;
mod leases;
mod listeners;
mod log_filter;
mod log_lines;
mod parse;
mod responses;
mod rlqs;
mod serve;
mod status_page;
mod store;
mod table;
mod telemetry;
mod top_values;
mod traces;
pub mod upstream_env;
mod xds;

pub use arguments::parse;
pub use check::{check, CheckArgs};
pub use command::{Cli, Command};
pub use health::{health, HealthArgs};
pub use serve::{serve, ServeArgs};
pub use telemetry::LogFormat;
