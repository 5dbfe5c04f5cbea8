//! The headers the measurements print above their figures: what ran where, so a pasted result
//! carries its own context.

use std::process::Command;

use testkit::redis_server::info_field;

/// `### <title>: <UTC date>, ratelimitd <commit>, <server> <version> (<allocator>), <machine>`, a
/// blank line, then ``Command: `ratelimit-bench <arguments>` ``. The server and its version are
/// `INFO server`'s (`valkey-server` and `valkey_version` for Valkey, which reports a
/// `redis_version` of its own too), the allocator `INFO memory`'s `mem_allocator`; the commit is
/// `git rev-parse --short HEAD` of the working directory, `?` outside a checkout or without git;
/// the machine is its CPU count and model as `/proc/cpuinfo` names it.
pub fn header(title: &str, redis: &mut redis::Connection) -> String {
    format!(
        "### {title}: {}, ratelimitd {}, {}, {}\n\nCommand: `{}`",
        today(),
        commit(),
        redis_server(redis),
        machine(),
        command_line()
    )
}

/// The bold line above a table of instruction counts: `**<UTC date> · ratelimitd <commit> ·
/// <machine> · valgrind <version> · `ratelimit-bench <arguments>`**`.
pub fn callgrind_header() -> String {
    let valgrind = command_output("valgrind", &["--version"])
        .map(|version| version.replace("valgrind-", "valgrind "))
        .unwrap_or_else(|| "valgrind ?".into());
    format!(
        "**{} · ratelimitd {} · {} · {valgrind} · `{}`**",
        today(),
        commit(),
        machine(),
        command_line()
    )
}

/// Today, UTC, `YYYY-MM-DD`.
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

/// `redis-server 7.0.15 (jemalloc-5.3.0)` or `valkey-server 8.1.8 (libc)`, from `INFO`; `?` for
/// what the server does not say.
pub fn redis_server(redis: &mut redis::Connection) -> String {
    let mut info = |section: &str| -> String {
        redis::cmd("INFO")
            .arg(section)
            .query::<String>(redis)
            .unwrap_or_default()
    };
    let server = info("server");
    let memory = info("memory");
    let (name, version) = match info_field(&server, "valkey_version") {
        Some(version) => ("valkey-server", Some(version)),
        None => ("redis-server", info_field(&server, "redis_version")),
    };
    format!(
        "{name} {} ({})",
        version.unwrap_or("?"),
        info_field(&memory, "mem_allocator").unwrap_or("?")
    )
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
pub fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let output = Command::new(program).args(args).output().ok()?;
    output
        .status
        .success()
        .then(|| String::from_utf8_lossy(&output.stdout).trim().to_string())
}
