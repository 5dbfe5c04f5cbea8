//! The header every Redis measurement prints above its figures: what ran where, so a pasted result
//! carries its own context.

use std::process::Command;

use testkit::redis_server::info_field;

/// `### <title>: <UTC date>, ratelimitd <commit>, redis-server <version of `redis`>, <machine>`, a blank line,
/// then ``Command: `ratelimit-bench <arguments>` ``. The commit is `git rev-parse --short HEAD`
/// of the working directory, `?` outside a checkout or without git; the machine is its CPU count
/// and model as `/proc/cpuinfo` names it.
pub fn header(title: &str, redis: &mut redis::Connection) -> String {
    format!(
        "### {title}: {}, ratelimitd {}, redis-server {}, {}\n\nCommand: `{}`",
        today(),
        commit(),
        redis_server_version(redis),
        machine(),
        command_line()
    )
}

/// Today's UTC date, `YYYY-MM-DD`.
pub fn today() -> String {
    let date = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
    date.get(..10).unwrap_or(&date).to_string()
}

/// `ratelimit-bench <the arguments of this run>`.
pub fn command_line() -> String {
    let arguments: Vec<String> = std::env::args().skip(1).collect();
    format!("ratelimit-bench {}", arguments.join(" "))
        .trim_end()
        .to_string()
}

/// The short hash of HEAD, or `?`.
pub fn commit() -> String {
    command_output("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|| "?".into())
}

/// The server's `redis_version` (`INFO server`), or `?`.
pub fn redis_server_version(redis: &mut redis::Connection) -> String {
    redis::cmd("INFO")
        .arg("server")
        .query::<String>(redis)
        .ok()
        .and_then(|info| info_field(&info, "redis_version").map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// `<n> CPUs (<model name>)`.
pub fn machine() -> String {
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|info| {
            info.lines()
                .find_map(|line| line.strip_prefix("model name"))
                .and_then(|rest| rest.split_once(':'))
                .map(|(_, model)| model.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    format!("{cpus} CPUs ({model})")
}

/// The trimmed stdout of a successful run of `program`, else `None`.
fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}
