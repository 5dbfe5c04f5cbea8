//! The documentation (README.md and the Markdown files under docs/) says only what the code does:
//!
//! - every ratelimitd configuration in a ```` ```yaml ```` block (one with a top-level `domain:`)
//!   passes `ratelimitd check`; one marked ```` ```yaml invalid ```` fails with `file:line:column`
//!   errors, exactly those of the plain block after it when that block shows them;
//! - every `ratelimitd ...` and `cargo run -- ...` command line names a real subcommand and real
//!   flags (`ratelimitd <subcommand> --help`), and those of shell and console blocks run: `check`
//!   succeeds with the output shown, `serve` on the memory store starts serving and stops on
//!   SIGTERM, `serve` with Redis flags gets past the command line to the connection (pointed at a
//!   closed local port instead of the host in the docs);
//! - every flag named alone (`--redis-timeout`) and every `RATELIMITD_*` variable exists;
//! - every script, test, example and bench named in a command exists (with the variables it is
//!   given);
//! - every relative link resolves to a file, and its `#anchor` to a heading of that file.
//! - docs/architecture.md names only what `src/` has: every module path (`store::redis::batch`,
//!   `server::lanes::Lanes::accept`: the modules, then an item the last one defines or
//!   re-exports, then a method), every child it describes as `` `name` (what it holds) `` under
//!   a module's heading or table row, and every `src/`, `tests/`, `lua/`, `scripts/` path.

use std::collections::{BTreeSet, HashMap};
use std::fs;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Component, Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use testkit::markdown::{documentation, flags, simple_commands, slug, Doc, SimpleCommand};
use testkit::ratelimitd::{command, run_to_end, Ratelimitd};
use testkit::repo_root;

const SUBCOMMANDS: [&str; 3] = ["serve", "check", "health"];
const TIMEOUT: Duration = Duration::from_secs(30);

fn docs() -> &'static [Doc] {
    static DOCS: OnceLock<Vec<Doc>> = OnceLock::new();
    DOCS.get_or_init(|| documentation(&repo_root()))
}

/// `ratelimitd <subcommand> --help`, and for `serve` `--help-all` (every setting).
fn help(subcommand: &str) -> &'static str {
    static HELP: OnceLock<HashMap<&'static str, String>> = OnceLock::new();
    let all = HELP.get_or_init(|| {
        SUBCOMMANDS
            .iter()
            .map(|sub| {
                let mut cmd = command();
                let flag = if *sub == "serve" {
                    "--help-all"
                } else {
                    "--help"
                };
                cmd.args([sub, flag]);
                let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
                assert!(status.success(), "ratelimitd {sub} {flag}: {stderr}");
                (*sub, stdout)
            })
            .collect()
    });
    all.get(subcommand)
        .map(String::as_str)
        .unwrap_or_else(|| panic!("no subcommand {subcommand}"))
}

fn known_flags(subcommand: &str) -> BTreeSet<String> {
    flags(help(subcommand)).into_iter().collect()
}

/// Why `args` (what follows `ratelimitd`) would not parse, if it would not: an unknown
/// subcommand or a flag its `--help` does not list.
fn refusal(args: &str) -> Option<String> {
    let Some(subcommand) = args.split_whitespace().next() else {
        return Some("no subcommand".into());
    };
    if !SUBCOMMANDS.contains(&subcommand) {
        return Some(format!("unknown subcommand `{subcommand}`"));
    }
    let known = known_flags(subcommand);
    let unknown: Vec<String> = flags(args)
        .into_iter()
        .filter(|flag| !known.contains(flag))
        .collect();
    (!unknown.is_empty())
        .then(|| format!("`ratelimitd {subcommand}` has no {}", unknown.join(", ")))
}

/// The arguments a command line passes to ratelimitd: `ratelimitd ARGS`, or `cargo run [...] --
/// ARGS` of the service's binary (not an example, not another package).
fn ratelimitd_args(words: &[String]) -> Option<Vec<String>> {
    let program = words.first()?;
    if program == "ratelimitd" || program.ends_with("/ratelimitd") {
        return (words.len() > 1).then(|| words[1..].to_vec());
    }
    if program != "cargo" || words.get(1).map(String::as_str) != Some("run") {
        return None;
    }
    let separator = words.iter().position(|w| w == "--").unwrap_or(words.len());
    let options = &words[2..separator];
    let other_target = options.windows(2).any(|pair| {
        matches!(pair[0].as_str(), "-p" | "--package" | "--bin" | "--example")
            && pair[1] != "ratelimitd"
    });
    let args = words.get(separator + 1..).unwrap_or_default();
    (!other_target && !args.is_empty()).then(|| args.to_vec())
}

/// A port on 127.0.0.1 that nothing listens on (bound, then released).
fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("local addr").port()
}

/// `url` with its host and port replaced by 127.0.0.1:`port`, scheme, credentials, database and
/// fragment kept.
fn pointed_at(url: &str, port: u16) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("redis", url));
    let authority_end = rest.find(['/', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(authority_end);
    let credentials = authority
        .rfind('@')
        .map(|at| &authority[..=at])
        .unwrap_or("");
    format!("{scheme}://{credentials}127.0.0.1:{port}{tail}")
}

/// The `serve` arguments of a doc command made safe to run here: free local ports for gRPC and
/// HTTP, and any Redis pointed at a closed local port. Also says whether it names a Redis.
fn runnable_serve(args: &[String]) -> (Vec<String>, bool) {
    let port = closed_port();
    let rewritten = |flag: &str, value: &str| -> Option<String> {
        match flag {
            "--grpc-addr" | "--http-addr" => Some("127.0.0.1:0".into()),
            "--redis-url" => Some(pointed_at(value, port)),
            "--redis-cluster" => Some(format!("127.0.0.1:{port}")),
            "--redis-sentinel" => {
                let master = value.split_once('@').map_or("mymaster", |(m, _)| m);
                Some(format!("{master}@127.0.0.1:{port}"))
            }
            _ => None,
        }
    };
    let mut out = Vec::new();
    let mut redis = false;
    let mut addresses = 0;
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let (flag, inline) = match word.split_once('=') {
            Some((flag, value)) if flag.starts_with("--") => (flag, Some(value)),
            _ => (word.as_str(), None),
        };
        redis |= matches!(flag, "--redis-url" | "--redis-cluster" | "--redis-sentinel");
        addresses += usize::from(matches!(flag, "--grpc-addr" | "--http-addr"));
        match (inline, rewritten(flag, "")) {
            (_, None) => out.push(word.clone()),
            (Some(value), Some(_)) => out.push(format!(
                "{flag}={}",
                rewritten(flag, value).unwrap_or_default()
            )),
            (None, Some(_)) => {
                let value = words.next().map(String::as_str).unwrap_or("");
                out.push(flag.to_string());
                out.push(rewritten(flag, value).unwrap_or_default());
            }
        }
    }
    if addresses < 2 {
        out.extend(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"].map(String::from));
    }
    (out, redis)
}

/// The raw answer to `GET /healthcheck` at `addr`.
fn healthcheck(addr: SocketAddr) -> String {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT).expect("connect to the HTTP port");
    stream
        .set_read_timeout(Some(TIMEOUT))
        .expect("read timeout");
    stream
        .write_all(b"GET /healthcheck HTTP/1.1\r\nhost: localhost\r\nconnection: close\r\n\r\n")
        .expect("send the request");
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    answer
}

/// Runs one doc command line's ratelimitd arguments the way the docs show them.
fn run_as_documented(at: &str, args: &[String], output: Option<&str>) {
    let root = repo_root();
    let Some(subcommand) = args.first() else {
        return;
    };
    match subcommand.as_str() {
        "check" => {
            let mut cmd = command();
            cmd.current_dir(&root).args(args);
            let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
            assert!(
                status.success(),
                "{at}: `ratelimitd {}` failed: {stderr}",
                args.join(" ")
            );
            if let Some(shown) = output.filter(|shown| !shown.is_empty()) {
                assert_eq!(
                    format!("{stdout}{stderr}").trim(),
                    shown,
                    "{at}: the output shown"
                );
            }
        }
        "serve" => {
            let (runnable, redis) = runnable_serve(&args[1..]);
            let mut cmd = command();
            cmd.current_dir(&root).arg("serve").args(&runnable);
            if redis {
                let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
                let said = format!("{stdout}{stderr}");
                assert!(
                    !said.contains("For more information, try '--help'"),
                    "{at}: the command line was refused: {said}"
                );
                assert!(
                    !status.success() && said.to_lowercase().contains("redis"),
                    "{at}: `ratelimitd serve {}` should fail on the closed Redis port, not {status}: {said}",
                    runnable.join(" ")
                );
            } else {
                let mut server = Ratelimitd::spawn(cmd);
                let health = healthcheck(server.http_addr());
                assert!(
                    health.starts_with("HTTP/1.1 200"),
                    "{at}: /healthcheck of `ratelimitd serve {}` answered {health:?}",
                    runnable.join(" ")
                );
                server.terminate();
                let status = server.wait_exit(TIMEOUT);
                assert!(
                    status.is_some_and(|s| s.success()),
                    "{at}: `ratelimitd serve {}` did not stop cleanly ({status:?}): {}",
                    runnable.join(" "),
                    server.output()
                );
            }
        }
        _ => {}
    }
}

/// A YAML block as a configuration file to check: a whole file (a top-level `domain:`), or a
/// `rate_limit:` fragment put under a descriptor of a domain of its own. With the name it is
/// checked under: `<domain>.yaml`.
fn snippet(lines: &[String]) -> Option<(String, String)> {
    if lines
        .first()
        .is_some_and(|line| line.starts_with("rate_limit:"))
    {
        let mut text = String::from("domain: snippet\ndescriptors:\n  - key: k\n");
        for line in lines {
            text.push_str("    ");
            text.push_str(line);
            text.push('\n');
        }
        return Some(("snippet.yaml".into(), text));
    }
    let name = snippet_file_name(lines)?;
    Some((name, lines.join("\n") + "\n"))
}

fn snippet_file_name(lines: &[String]) -> Option<String> {
    let domain = lines.iter().find_map(|line| line.strip_prefix("domain:"))?;
    let domain = domain
        .split('#')
        .next()
        .unwrap_or("")
        .trim()
        .trim_matches('"');
    let safe: String = domain
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    Some(format!(
        "{}.yaml",
        if safe.is_empty() { "empty" } else { &safe }
    ))
}

#[test]
fn every_configuration_snippet_passes_check_or_fails_as_shown() {
    let (mut valid, mut invalid) = (0, 0);
    for doc in docs() {
        for (index, block) in doc.blocks.iter().enumerate() {
            if block.info.first().map(String::as_str) != Some("yaml") {
                continue;
            }
            let Some((name, text)) = snippet(&block.lines) else {
                continue;
            };
            let dir = tempfile::tempdir().expect("tempdir");
            fs::write(dir.path().join(&name), text).expect("write");
            let mut cmd = command();
            cmd.current_dir(dir.path())
                .args(["check", "--config", &name]);
            let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
            let at = doc.at(block.line);
            if !block.info.iter().any(|word| word == "invalid") {
                assert!(
                    status.success() && stdout.starts_with("configuration OK"),
                    "{at}: this configuration fails `ratelimitd check`:\n{stderr}"
                );
                valid += 1;
                continue;
            }
            invalid += 1;
            assert_eq!(
                status.code(),
                Some(1),
                "{at}: an invalid example that `check` accepts"
            );
            let prefix = format!("{name}:");
            for line in stderr.lines() {
                let mut parts = line.strip_prefix(&prefix).unwrap_or("").splitn(3, ':');
                let positioned = parts.next().is_some_and(|l| l.parse::<usize>().is_ok())
                    && parts.next().is_some_and(|c| c.parse::<usize>().is_ok());
                assert!(
                    positioned,
                    "{at}: an error without file:line:column: {line}"
                );
            }
            if let Some(shown) = doc.blocks.get(index + 1).filter(|next| {
                next.info.is_empty() && next.lines.iter().all(|l| l.starts_with(&prefix))
            }) {
                assert_eq!(
                    stderr.trim(),
                    shown.lines.join("\n").trim(),
                    "{}: the errors shown for the example at {at}",
                    doc.at(shown.line)
                );
            }
        }
    }
    assert!(
        valid >= 8,
        "only {valid} configuration snippets found: is the extraction broken?"
    );
    assert!(invalid >= 1, "no invalid example found");
}

#[test]
fn every_ratelimitd_command_line_parses_and_runs_as_shown() {
    let mut ran = HashMap::<String, usize>::new();
    let mut parsed = 0;
    for doc in docs() {
        for command in doc.shell_commands() {
            let Some(args) = ratelimitd_args(&command.words) else {
                continue;
            };
            let at = doc.at(command.line);
            if let Some(why) = refusal(&args.join(" ")) {
                panic!("{at}: {why}");
            }
            parsed += 1;
            run_as_documented(&at, &args, command.output.as_deref());
            *ran.entry(args[0].clone()).or_default() += 1;
        }
        // Synopses in plain blocks: `ratelimitd SUB ...` and its indented continuation lines.
        for block in doc.blocks.iter().filter(|b| b.info.is_empty()) {
            let mut synopsis: Option<(usize, String)> = None;
            for (offset, line) in block.lines.iter().enumerate() {
                let text = line.split(" #").next().unwrap_or("");
                if let Some(args) = text.strip_prefix("ratelimitd ") {
                    parsed += usize::from(check_synopsis(doc, synopsis.take()));
                    synopsis = Some((block.line + offset, args.to_string()));
                } else if line.starts_with(' ') && synopsis.is_some() {
                    if let Some((_, args)) = synopsis.as_mut() {
                        args.push(' ');
                        args.push_str(text);
                    }
                } else {
                    parsed += usize::from(check_synopsis(doc, synopsis.take()));
                }
            }
            parsed += usize::from(check_synopsis(doc, synopsis.take()));
        }
        for (line, span) in doc.code_spans() {
            for command in simple_commands(&span) {
                if let Some(args) = ratelimitd_args(&command.words) {
                    if let Some(why) = refusal(&args.join(" ")) {
                        panic!("{}: `{span}`: {why}", doc.at(line));
                    }
                    parsed += 1;
                }
            }
        }
    }
    assert!(parsed >= 15, "only {parsed} command lines found");
    assert!(
        ran.get("serve").copied().unwrap_or(0) >= 4 && ran.get("check").copied().unwrap_or(0) >= 2,
        "too few commands ran: {ran:?}"
    );
}

/// Checks a synopsis's subcommand and flags; says whether there was one.
fn check_synopsis(doc: &Doc, synopsis: Option<(usize, String)>) -> bool {
    let Some((line, args)) = synopsis else {
        return false;
    };
    if let Some(why) = refusal(&args) {
        panic!("{}: {why}", doc.at(line));
    }
    true
}

#[test]
fn every_flag_and_environment_variable_named_exists() {
    let all_flags: BTreeSet<String> = SUBCOMMANDS.iter().flat_map(|s| known_flags(s)).collect();
    let variables = |text: &str| -> BTreeSet<String> {
        text.split(|c: char| !(c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
            .filter(|word| word.starts_with("RATELIMITD_") && word.len() > "RATELIMITD_".len())
            .map(str::to_string)
            .collect()
    };
    let known_variables: BTreeSet<String> = SUBCOMMANDS
        .iter()
        .flat_map(|s| variables(help(s)))
        .collect();
    let mut flags_named = 0;
    for doc in docs() {
        for (line, span) in doc.code_spans() {
            if span.starts_with("--") {
                for flag in flags(&span).into_iter().take(1) {
                    assert!(
                        all_flags.contains(&flag),
                        "{}: `{span}`: ratelimitd has no {flag}",
                        doc.at(line)
                    );
                    flags_named += 1;
                }
            }
        }
        let texts = doc
            .paragraphs
            .iter()
            .map(|p| (p.line, p.text.clone()))
            .chain(doc.blocks.iter().map(|b| (b.line, b.lines.join("\n"))));
        for (line, text) in texts {
            for variable in variables(&text) {
                assert!(
                    known_variables.contains(&variable),
                    "{}: ratelimitd reads no {variable}",
                    doc.at(line)
                );
            }
        }
    }
    assert!(flags_named >= 50, "only {flags_named} flags named");
}

#[test]
fn every_script_test_example_and_bench_named_exists() {
    let root = repo_root();
    let mut named = 0;
    for doc in docs() {
        let mut commands: Vec<(usize, SimpleCommand)> = doc
            .shell_commands()
            .into_iter()
            .map(|c| {
                let command = SimpleCommand {
                    assignments: c.assignments,
                    words: c.words,
                };
                (c.line, command)
            })
            .collect();
        for (line, span) in doc.code_spans() {
            commands.extend(simple_commands(&span).into_iter().map(|c| (line, c)));
        }
        for (line, SimpleCommand { assignments, words }) in commands {
            let at = doc.at(line);
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            match words.as_slice() {
                ["bash", script, ..] | [script, ..]
                    if script.starts_with("scripts/")
                        && (script.ends_with(".sh") || script.ends_with(".py")) =>
                {
                    let path = root.join(script);
                    let text =
                        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{at}: {script}: {e}"));
                    if words[0] == *script {
                        let mode = fs::metadata(&path).expect("stat").permissions().mode();
                        assert!(mode & 0o111 != 0, "{at}: {script} is not executable");
                    }
                    for (name, _) in &assignments {
                        assert!(
                            reads_variable(&text, name),
                            "{at}: {script} reads no {name}"
                        );
                    }
                    named += 1;
                }
                ["cargo", "test", rest @ ..] | ["cargo", "bench", rest @ ..] => {
                    let (option, dir) = if words[1] == "test" {
                        ("--test", "tests")
                    } else {
                        ("--bench", "benches")
                    };
                    let Some(at_option) = rest.iter().position(|w| *w == option) else {
                        continue;
                    };
                    let name = rest.get(at_option + 1).expect("a target name");
                    let file = root.join(dir).join(format!("{name}.rs"));
                    let target = if file.is_file() {
                        file
                    } else {
                        root.join(dir).join(name).join("main.rs")
                    };
                    let read = |path: &Path| {
                        fs::read_to_string(path)
                            .unwrap_or_else(|e| panic!("{at}: {}: {e}", path.display()))
                    };
                    read(&target);
                    let filters = rest
                        .iter()
                        .skip_while(|w| **w != "--")
                        .skip(1)
                        .filter(|w| !w.starts_with('-'));
                    for filter in filters {
                        // `module::test` names a module of a crate of several files
                        // (tests/it/module.rs) and a test in it.
                        let (path, test) = match filter.split_once("::") {
                            Some((module, test)) => {
                                (target.with_file_name(format!("{module}.rs")), test)
                            }
                            None => (target.clone(), *filter),
                        };
                        assert!(
                            read(&path).contains(test),
                            "{at}: {} has nothing named {test}",
                            path.display()
                        );
                    }
                    named += 1;
                }
                ["cargo", "run", rest @ ..] => {
                    if let Some(i) = rest.iter().position(|w| *w == "--example") {
                        let name = rest.get(i + 1).expect("an example name");
                        let path = root.join("examples").join(format!("{name}.rs"));
                        assert!(path.is_file(), "{at}: no {}", path.display());
                        named += 1;
                    }
                }
                _ => {}
            }
        }
    }
    assert!(named >= 8, "only {named} scripts, tests and benches named");
}

/// Whether a script expands `$name` or `${name...}`.
fn reads_variable(script: &str, name: &str) -> bool {
    let braced = format!("${{{name}");
    let plain = format!("${name}");
    script.match_indices(&plain).any(|(at, _)| {
        !script[at + plain.len()..].starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
    }) || script
        .match_indices(&braced)
        .any(|(at, _)| script[at + braced.len()..].starts_with(['}', ':', '-', '=']))
}

/// `path` with `.` and `..` resolved, without touching the file system.
fn normalized(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other),
        }
    }
    out
}

#[test]
fn every_relative_link_resolves_to_a_file_and_heading() {
    let root = repo_root();
    let mut checked = 0;
    for doc in docs() {
        let base = doc.path.parent().unwrap_or(Path::new(""));
        for (line, target) in doc.links() {
            if target.contains("://") || target.starts_with("mailto:") {
                continue;
            }
            let at = doc.at(line);
            let (file, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let relative = if file.is_empty() {
                doc.path.clone()
            } else {
                normalized(&base.join(file))
            };
            let path = root.join(&relative);
            assert!(
                path.exists(),
                "{at}: link to {} which does not exist",
                relative.display()
            );
            if !anchor.is_empty() {
                assert!(
                    relative.extension().is_some_and(|e| e == "md"),
                    "{at}: an anchor into a file that is not Markdown: {target}"
                );
                let text = fs::read_to_string(&path).expect("read the linked page");
                let linked = Doc::parse(relative.clone(), &text);
                assert!(
                    linked.anchors().contains(anchor),
                    "{at}: {} has no heading for #{anchor}; it has: {:?}",
                    relative.display(),
                    linked.headings.iter().map(|h| slug(h)).collect::<Vec<_>>()
                );
            }
            checked += 1;
        }
    }
    assert!(checked >= 40, "only {checked} links checked");
}

#[test]
fn the_markdown_reader_splits_commands_finds_flags_and_slugs_headings() {
    let commands = simple_commands(
        r#"RUST_LOG=warn target/release/ratelimit-bench matrix > bench.md 2>&1 && echo "a b" 'c d' | grep x # note"#,
    );
    let words: Vec<Vec<String>> = commands.iter().map(|c| c.words.clone()).collect();
    assert_eq!(
        words,
        vec![
            vec![
                "target/release/ratelimit-bench".to_string(),
                "matrix".to_string()
            ],
            vec!["echo".into(), "a b".into(), "c d".into()],
            vec!["grep".into(), "x".into()],
        ]
    );
    assert_eq!(
        commands[0].assignments,
        vec![("RUST_LOG".into(), "warn".into())]
    );
    assert_eq!(
        flags("serve --deny-cache=false [--grpc-addr X] a--b --x-y"),
        vec!["--deny-cache", "--grpc-addr", "--x-y"]
    );
    assert_eq!(slug("One request's path"), "one-requests-path");
    assert_eq!(slug("`/json`"), "json");
    assert_eq!(slug("sliding_window_log"), "sliding_window_log");
    let doc = Doc::parse(
        PathBuf::from("x.md"),
        "# A\n\ntext `ratelimitd check\n--config x` and [b](y.md#c)\n\n```sh\nratelimitd serve \\\n  --config a\n```\n",
    );
    assert_eq!(
        doc.code_spans(),
        vec![(3, "ratelimitd check --config x".to_string())]
    );
    assert_eq!(doc.links(), vec![(4, "y.md#c".to_string())]);
    let shell = doc.shell_commands();
    assert_eq!(shell.len(), 1);
    assert_eq!(shell[0].words, ["ratelimitd", "serve", "--config", "a"]);
    assert_eq!(
        pointed_at("rediss://u:p@redis.internal:6380/2#insecure", 7),
        "rediss://u:p@127.0.0.1:7/2#insecure"
    );
    assert_eq!(
        pointed_at("redis://127.0.0.1:6379", 7),
        "redis://127.0.0.1:7"
    );
}

/// The modules of `src/` a path names from the crate's root: `store::redis::batch` is
/// `src/store/redis/batch.rs` (or `.../batch/mod.rs`); with the folder of each module that has
/// one. `None` when the first segment is no module of the crate's root.
fn module_files(src: &Path, path: &[&str]) -> Option<Vec<(PathBuf, Option<PathBuf>)>> {
    let mut dir = src.to_path_buf();
    let mut found = Vec::new();
    for segment in path {
        let file = dir.join(format!("{segment}.rs"));
        let folder = dir.join(segment);
        let own = if file.is_file() {
            file
        } else if folder.join("mod.rs").is_file() {
            folder.join("mod.rs")
        } else {
            break;
        };
        found.push((own, folder.is_dir().then(|| folder.clone())));
        dir = folder;
    }
    (!found.is_empty()).then_some(found)
}

/// The sources of a module: its own file and every file under its folder.
fn module_sources(own: &Path, folder: Option<&Path>) -> String {
    let mut text = fs::read_to_string(own).unwrap_or_default();
    let mut dirs: Vec<PathBuf> = folder.into_iter().map(Path::to_path_buf).collect();
    while let Some(dir) = dirs.pop() {
        for entry in fs::read_dir(&dir).expect("a readable module folder") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                text.push_str(&fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    text
}

/// Whether `source` (a module's own file) defines `name` (a function, type, trait, constant or
/// module) or re-exports it (`pub use`).
fn defines(source: &str, name: &str) -> bool {
    let word = |text: &str| {
        text.match_indices(name).any(|(at, _)| {
            let before = text[..at].chars().next_back();
            let after = text[at + name.len()..].chars().next();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                && !after.is_some_and(|c| c.is_alphanumeric() || c == '_')
        })
    };
    source.lines().any(|line| {
        let line = line.trim_start();
        let definition = [
            "fn ", "struct ", "enum ", "trait ", "type ", "const ", "static ", "mod ",
        ]
        .iter()
        .any(|keyword| {
            line.split(keyword)
                .skip(1)
                .any(|rest| rest.starts_with(name) && word(rest))
        });
        definition || (line.starts_with("pub") && line.contains(" use ") && word(line))
    })
}

/// Why `span`, a path from a module of the crate's root (`server::lanes::Lanes::accept`), names
/// nothing in `src/`, if it does not.
fn unresolved_module_path(src: &Path, span: &str) -> Option<String> {
    let segments: Vec<&str> = span.split("::").collect();
    let modules = module_files(src, &segments)?;
    let (own, folder) = modules.last().expect("at least one module");
    let items = &segments[modules.len()..];
    let source = module_sources(own, folder.as_deref());
    match items {
        [] => None,
        [item, rest @ ..] => {
            if !defines(&fs::read_to_string(own).unwrap_or_default(), item) {
                return Some(format!(
                    "`{span}`: {} has no `{item}`",
                    segments[..modules.len()].join("::")
                ));
            }
            let missing = rest
                .iter()
                .find(|method| !source.contains(&format!("fn {method}")))?;
            Some(format!("`{span}`: no `fn {missing}` for `{item}`"))
        }
    }
}

/// The code spans of `text` with what follows each.
fn spans_with_rest(text: &str) -> Vec<(&str, &str)> {
    let mut found = Vec::new();
    let mut parts = text.split('`');
    parts.next();
    while let (Some(span), Some(rest)) = (parts.next(), parts.next()) {
        found.push((span, rest));
    }
    found
}

/// The module a paragraph or a table row describes the children of: a paragraph opening with
/// ``**`store`**`` or ``**`store/redis`**``, a row whose first cell opens with a module path: a
/// module of `src/`.
fn described_module(src: &Path, text: &str) -> Option<String> {
    let name = if let Some(rest) = text.strip_prefix("**`") {
        rest.split('`').next()?
    } else {
        text.strip_prefix("| `")?.split('`').next()?
    };
    let path = name.trim_end_matches('/').replace('/', "::");
    let segments: Vec<&str> = path.split("::").collect();
    let resolved = module_files(src, &segments).map_or(0, |found| found.len());
    (resolved == segments.len()).then_some(path)
}

/// Whether a module named `name` is somewhere under the folder `dir`.
fn has_descendant_module(dir: &Path, name: &str) -> bool {
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        if dir.join(format!("{name}.rs")).is_file() || dir.join(name).join("mod.rs").is_file() {
            return true;
        }
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        dirs.extend(entries.flatten().map(|e| e.path()).filter(|p| p.is_dir()));
    }
    false
}

/// Why a paragraph or table row that describes the children of a module (`**`config`**: `yaml`
/// (a positioned YAML tree ...), ...`) names one, `` `name` (what it holds) ``, that is no module
/// under it, if it does.
fn unknown_child_module(src: &Path, text: &str) -> Option<String> {
    let module = described_module(src, text)?;
    let dir = module
        .split("::")
        .fold(src.to_path_buf(), |dir, s| dir.join(s));
    spans_with_rest(text)
        .into_iter()
        .skip(1)
        .filter(|(_, rest)| rest.trim_start().starts_with('('))
        .map(|(span, _)| span.trim_end_matches('/').trim_end_matches(".rs"))
        .filter(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        })
        .find(|name| *name != "mod" && !has_descendant_module(&dir, name))
        .map(|name| format!("`{name}` is no module under `{module}`"))
}

/// The repository paths a text names (`src/store/redis/local.rs`, `tests/docs.rs`,
/// `lua/request.lua`): words under `src/`, `tests/`, `lua/`, `scripts/`, `examples/` or
/// `benches/`, without placeholders.
fn repository_paths(text: &str) -> Vec<String> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '`' | '(' | ')' | '[' | ']' | ','))
        .map(|word| word.trim_end_matches(['.', ':', ';']))
        .filter(|word| {
            [
                "src/",
                "tests/",
                "lua/",
                "scripts/",
                "examples/",
                "benches/",
            ]
            .iter()
            .any(|prefix| word.starts_with(prefix))
                && !word.contains(['<', '>', '*', '…', '$', '{'])
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn every_module_and_file_the_architecture_page_names_exists() {
    let root = repo_root();
    let src = root.join("src");
    let doc = docs()
        .iter()
        .find(|doc| doc.path == Path::new("docs/architecture.md"))
        .expect("docs/architecture.md");
    let (mut modules, mut files) = (0, 0);
    for (line, span) in doc.code_spans() {
        let is_path = span.contains("::")
            && span
                .split("::")
                .all(|s| !s.is_empty() && s.chars().all(|c| c.is_alphanumeric() || c == '_'));
        if !is_path {
            continue;
        }
        if let Some(why) = unresolved_module_path(&src, &span) {
            panic!("{}: {why}", doc.at(line));
        }
        modules += usize::from(module_files(&src, &span.split("::").collect::<Vec<_>>()).is_some());
    }
    let mut described = 0;
    for paragraph in &doc.paragraphs {
        let rows = paragraph.text.split('\n').enumerate();
        let pieces: Vec<(usize, &str)> = if paragraph.text.starts_with('|') {
            rows.map(|(offset, row)| (paragraph.line + offset, row))
                .collect()
        } else {
            vec![(paragraph.line, paragraph.text.as_str())]
        };
        for (line, text) in pieces {
            if let Some(why) = unknown_child_module(&src, text) {
                panic!("{}: {why}", doc.at(line));
            }
            described += usize::from(described_module(&src, text).is_some());
        }
    }
    let texts = doc
        .paragraphs
        .iter()
        .map(|p| (p.line, p.text.clone()))
        .chain(doc.blocks.iter().map(|b| (b.line, b.lines.join("\n"))));
    for (line, text) in texts {
        for path in repository_paths(&text) {
            assert!(
                root.join(&path).exists(),
                "{}: {path} does not exist",
                doc.at(line)
            );
            files += 1;
        }
    }
    assert!(modules >= 40, "only {modules} module paths found");
    assert!(
        described >= 12,
        "only {described} descriptions of a module's children found"
    );
    assert!(files >= 20, "only {files} repository paths found");
}

#[test]
fn the_architecture_check_finds_a_missing_module_or_item() {
    let src = repo_root().join("src");
    assert_eq!(unresolved_module_path(&src, "store::redis::batch"), None);
    assert_eq!(
        unresolved_module_path(&src, "server::lanes::Lanes::accept"),
        None
    );
    assert_eq!(unresolved_module_path(&src, "tokio::spawn"), None);
    assert!(unresolved_module_path(&src, "config::file").is_some());
    assert_eq!(
        unknown_child_module(&src, "**`config`**: `yaml` (a tree), `reload` (swap)"),
        None
    );
    assert!(unknown_child_module(&src, "**`config`**: `file` (reads one file)").is_some());
    assert!(unknown_child_module(&src, "| `store::redis::topology` | `nothing` (x) |").is_some());
    assert!(unresolved_module_path(&src, "store::redis::batch::NoSuchThing").is_some());
    assert!(unresolved_module_path(&src, "server::lanes::Lanes::no_such_method").is_some());
    assert_eq!(
        repository_paths("`src/store/redis/local.rs`, tests/docs.rs. fuzz/x src/{a,b}.rs"),
        ["src/store/redis/local.rs", "tests/docs.rs"]
    );
}
