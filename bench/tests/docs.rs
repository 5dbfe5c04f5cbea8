//! The documentation (README.md and docs/*.md) names only flags the benchmark tools have: every
//! `ratelimit-bench ...` and `rls-ceiling ...` command line, in code blocks and inline code, or
//! as `cargo run -p ratelimitd-bench --bin ... -- ...`, uses flags that the tool's own usage text
//! lists (`ratelimit-bench [SUBCOMMAND] --help`; `rls-ceiling`'s usage line). What follows a
//! `--` of a `ratelimit-bench` command line is the arguments of the `ratelimitd serve` it starts
//! (`ratelimit-bench redis-cpu -- --threads 1`), not its own.

use std::collections::BTreeSet;
use std::process::Command;

use testkit::markdown::{documentation, flags, simple_commands};
use testkit::repo_root;

const BENCH: &str = env!("CARGO_BIN_EXE_ratelimit-bench");
const CEILING: &str = env!("CARGO_BIN_EXE_rls-ceiling");
const BENCH_SUBCOMMANDS: [&str; 15] = [
    "load",
    "footprint",
    "report",
    "hold",
    "rlqs",
    "swl-redis-cost",
    "redis-memory-per-key",
    "lease",
    "soak",
    "redis-cpu",
    "callgrind",
    "scrape-callgrind",
    "matrix",
    "tracing-cost",
    "transport-profile",
];

/// The flags in what `program args...` prints (stdout and stderr).
fn usage_flags(program: &str, args: &[&str]) -> BTreeSet<String> {
    let output = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("run {program}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    flags(&text).into_iter().collect()
}

/// Which tool a command line runs and the arguments it passes.
fn tool_args(words: &[String]) -> Option<(&'static str, Vec<String>)> {
    let program = words.first()?;
    let named = |name: &str| program == name || program.ends_with(&format!("/{name}"));
    if named("ratelimit-bench") {
        return Some(("ratelimit-bench", words[1..].to_vec()));
    }
    if named("rls-ceiling") {
        return Some(("rls-ceiling", words[1..].to_vec()));
    }
    if program != "cargo" || words.get(1).map(String::as_str) != Some("run") {
        return None;
    }
    let separator = words.iter().position(|w| w == "--").unwrap_or(words.len());
    let options = &words[2..separator];
    let bin = options
        .windows(2)
        .find(|pair| pair[0] == "--bin")
        .map(|pair| pair[1].as_str())?;
    let tool = match bin {
        "ratelimit-bench" => "ratelimit-bench",
        "rls-ceiling" => "rls-ceiling",
        _ => return None,
    };
    Some((
        tool,
        words.get(separator + 1..).unwrap_or_default().to_vec(),
    ))
}

#[test]
fn every_benchmark_tool_command_line_uses_flags_the_tool_has() {
    let ceiling_flags = usage_flags(CEILING, &["--no-such-flag"]);
    assert!(ceiling_flags.contains("--grpc-addr"), "{ceiling_flags:?}");
    let bench_flags = |subcommand: Option<&str>| match subcommand {
        Some(sub) => usage_flags(BENCH, &[sub, "--help"]),
        None => usage_flags(BENCH, &["--help"]),
    };
    let mut checked = 0;
    for doc in documentation(&repo_root()) {
        let mut commands: Vec<(usize, Vec<String>)> = doc
            .shell_commands()
            .into_iter()
            .map(|command| (command.line, command.words))
            .collect();
        for (line, span) in doc.code_spans() {
            commands.extend(simple_commands(&span).into_iter().map(|c| (line, c.words)));
        }
        for (line, words) in commands {
            let Some((tool, args)) = tool_args(&words) else {
                continue;
            };
            let known = if tool == "rls-ceiling" {
                ceiling_flags.clone()
            } else {
                let subcommand = args
                    .first()
                    .map(String::as_str)
                    .filter(|first| BENCH_SUBCOMMANDS.contains(first));
                bench_flags(subcommand)
            };
            let own: Vec<&str> = args
                .iter()
                .map(String::as_str)
                .take_while(|word| *word != "--")
                .collect();
            for flag in flags(&own.join(" ")) {
                assert!(
                    known.contains(&flag),
                    "{}: `{}`: {tool} has no {flag}",
                    doc.at(line),
                    words.join(" ")
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} benchmark command lines found");
}
