//! `ratelimitd`: the binary. Reads envoyproxy/ratelimit's environment, parses the command line
//! (defined in [`ratelimitd::cli`]) and runs the command.

use std::ffi::OsString;
use std::process::ExitCode;

use ratelimitd::cli::{self, upstream_env, Command};

fn main() -> ExitCode {
    let mut arguments: Vec<OsString> = std::env::args_os().collect();
    // Bare, it serves: as envoyproxy/ratelimit's binary, configured by its environment alone.
    if arguments.len() == 1 {
        arguments.push("serve".into());
    }
    let upstream = match upstream_env::read(&arguments) {
        Ok(translation) => translation,
        Err(errors) => {
            for error in errors {
                eprintln!("error: {error}");
            }
            return ExitCode::FAILURE;
        }
    };
    let (cli, matches) = match cli::parse(&arguments, &upstream) {
        Ok(parsed) => parsed,
        Err(exit) => return exit,
    };
    match cli.command {
        Command::Check(args) => cli::check(&args, &matches, &upstream),
        Command::Serve(args) => cli::serve(*args, &upstream),
        Command::Health(args) => cli::health(&args),
    }
}
