//! The command line: `ratelimitd check` prints every configuration error as
//! `file:line:column: field: message` on stderr and exits 1 (0 and a summary when valid);
//! the valid files in envoyproxy/ratelimit's schema (`tests/fixtures/compat/`) pass and the
//! invalid ones fail; `serve` refuses a broken configuration; flags have environment variables;
//! `--log-format json`.

use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::*;

const TIMEOUT: Duration = Duration::from_secs(30);

fn check(config: &Path) -> (ExitStatus, String, String) {
    let mut cmd = command();
    cmd.arg("check").arg("--config").arg(config);
    run_to_end(cmd, TIMEOUT)
}

/// Error lines of `stderr` about `file_name`: (line, column, "field: message").
fn errors_for(stderr: &str, file_name: &str) -> Vec<(usize, usize, String)> {
    let marker = format!("{file_name}:");
    stderr
        .lines()
        .filter_map(|line| {
            let at = line.find(&marker)?;
            let rest = &line[at + marker.len()..];
            let mut parts = rest.splitn(3, ':');
            let l = parts.next()?.trim().parse().ok()?;
            let c = parts.next()?.trim().parse().ok()?;
            let tail = parts.next()?.trim().to_string();
            Some((l, c, tail))
        })
        .collect()
}

fn dir_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no files in {}", dir.display());
    files
}

/// (fixture, lines where the error may be reported, a word the `field` part must contain).
const INVALID: &[(&str, &[usize], &str)] = &[
    ("unknown_field.yaml", &[4], "rate_limt"),
    ("bad_unit.yaml", &[6], "unit"),
    ("unlimited_with_unit.yaml", &[4], "unit"),
    ("duplicate_key.yaml", &[5, 6], ""),
    ("empty_domain.yaml", &[1], "domain"),
    ("empty_key.yaml", &[5], "key"),
    ("zero_burst.yaml", &[8], "burst"),
    ("negative_burst.yaml", &[8], "burst"),
    ("bad_algorithm.yaml", &[7], "algorithm"),
    ("bad_number.yaml", &[6], "requests_per_unit"),
    ("yaml_syntax.yaml", &[4, 5], ""),
];

#[test]
fn check_reports_each_kind_of_error_with_file_and_line() {
    let mut failures = Vec::new();
    for (name, lines, field) in INVALID {
        let path = fixture(&format!("invalid/{name}"));
        let (status, stdout, stderr) = check(&path);
        if status.code() != Some(1) {
            failures.push(format!(
                "{name}: exit {status}, expected 1\nstdout: {stdout}\nstderr: {stderr}"
            ));
            continue;
        }
        let errors = errors_for(&stderr, name);
        let hit = errors.iter().find(|(l, c, tail)| {
            lines.contains(l) && *c >= 1 && tail.contains(": ") && {
                let field_part = tail.split(": ").next().unwrap_or("");
                field_part.contains(field)
            }
        });
        if hit.is_none() {
            failures.push(format!(
                "{name}: expected `{name}:LINE:COL: FIELD: message` with LINE in {lines:?} and FIELD containing {field:?}; stderr:\n{stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn check_prints_every_error_of_a_file() {
    let path = fixture("invalid/multiple_errors.yaml");
    let (status, _, stderr) = check(&path);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    let lines: Vec<usize> = errors_for(&stderr, "multiple_errors.yaml")
        .iter()
        .map(|e| e.0)
        .collect();
    for expected in [4, 6, 8] {
        assert!(
            lines.contains(&expected),
            "no error reported at line {expected}; stderr:\n{stderr}"
        );
    }
}

#[test]
fn check_of_a_directory_reports_errors_of_every_file() {
    let dir = fixture("invalid");
    let (status, _, stderr) = check(&dir);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    for (name, _, _) in INVALID {
        assert!(
            !errors_for(&stderr, name).is_empty(),
            "no error for {name} when checking the directory; stderr:\n{stderr}"
        );
    }
}

#[test]
fn check_accepts_the_project_fixtures_and_examples() {
    for path in [
        fixture("serve"),
        fixture("serve/matching.yaml"),
        fixture("serve/algorithms.yaml"),
        fixture("serve/concurrency.yaml"),
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/config.yaml"),
    ] {
        let (status, stdout, stderr) = check(&path);
        assert!(
            status.success(),
            "{}: exit {status}\nstdout: {stdout}\nstderr: {stderr}",
            path.display()
        );
        assert!(
            !stdout.trim().is_empty(),
            "{}: check prints a summary",
            path.display()
        );
    }
}

#[test]
fn check_accepts_every_compat_valid_file() {
    for path in dir_files(&compat("valid")) {
        let (status, stdout, stderr) = check(&path);
        assert!(
            status.success(),
            "{}: exit {status}\nstdout: {stdout}\nstderr: {stderr}",
            path.display()
        );
    }
}

#[test]
fn check_rejects_every_compat_invalid_file_with_its_line() {
    let mut failures = Vec::new();
    for path in dir_files(&compat("invalid")) {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        let (status, stdout, stderr) = check(&path);
        if status.code() != Some(1) {
            failures.push(format!(
                "{name}: exit {status}, expected 1\nstdout: {stdout}\nstderr: {stderr}"
            ));
        } else if errors_for(&stderr, &format!("invalid/{name}")).is_empty() {
            failures.push(format!(
                "{name}: no `invalid/{name}:LINE:COL: field: message` line; stderr:\n{stderr}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn check_of_a_missing_file_fails() {
    let path = fixture("does-not-exist.yaml");
    let (status, _, stderr) = check(&path);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("does-not-exist.yaml"), "stderr: {stderr}");
}

#[test]
fn serve_refuses_a_broken_configuration() {
    for (name, line) in [("bad_unit.yaml", 6), ("unknown_field.yaml", 4)] {
        let path = fixture(&format!("invalid/{name}"));
        let mut cmd = command();
        cmd.args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&path);
        let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
        assert!(!status.success(), "{name}: serve exited {status}");
        let all = format!("{stdout}\n{stderr}");
        assert!(
            all.contains(&format!("{name}:{line}:")),
            "{name}: the error with file:line is printed; output:\n{all}"
        );
    }
    // A missing file.
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
    ])
    .arg(fixture("does-not-exist.yaml"));
    let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
    assert!(!status.success());
    assert!(
        format!("{stdout}{stderr}").contains("does-not-exist.yaml"),
        "stdout: {stdout}\nstderr: {stderr}"
    );
}

#[test]
fn check_reads_the_config_from_the_environment() {
    let mut cmd = command();
    cmd.arg("check")
        .env("RATELIMITD_CONFIG", fixture("serve/matching.yaml"));
    let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
    assert!(status.success(), "stdout: {stdout}\nstderr: {stderr}");

    let mut cmd = command();
    cmd.arg("check")
        .env("RATELIMITD_CONFIG", fixture("invalid/bad_unit.yaml"));
    let (status, _, stderr) = run_to_end(cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "stderr: {stderr}");
    assert!(stderr.contains("bad_unit.yaml:6:"), "stderr: {stderr}");
}

#[tokio::test]
async fn serve_reads_every_flag_from_the_environment() {
    let config = fixture("serve/matching.yaml");
    let mut cmd = command();
    cmd.arg("serve")
        .env("RATELIMITD_CONFIG", &config)
        .env("RATELIMITD_GRPC_ADDR", "127.0.0.1:0")
        .env("RATELIMITD_HTTP_ADDR", "127.0.0.1:0")
        .env("RATELIMITD_LOG_FORMAT", "text");
    let server = Ratelimitd::spawn(cmd);
    let mut c = server.client().await;
    let resp = should(&mut c, request("matching", &[&[("user", "alice")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!((code, body.trim()), (200, "OK"));
}

#[tokio::test]
async fn json_log_format() {
    let config = fixture("serve/matching.yaml");
    for (flag, env) in [(true, None), (false, Some("json"))] {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--grpc-addr",
            "127.0.0.1:0",
            "--http-addr",
            "127.0.0.1:0",
            "--config",
        ])
        .arg(&config);
        if flag {
            cmd.args(["--log-format", "json"]);
        }
        if let Some(env) = env {
            cmd.env("RATELIMITD_LOG_FORMAT", env);
        }
        let server = Ratelimitd::spawn(cmd);
        let mut c = server.client().await;
        should(&mut c, request("matching", &[&[("user", "bob")]], 0)).await;
        let output = server.output();
        for line in output.lines().filter(|l| !l.trim().is_empty()) {
            assert!(
                line.trim_start().starts_with('{') && line.trim_end().ends_with('}'),
                "not a JSON log line: {line:?}"
            );
        }
    }
}

#[test]
fn help_names_both_commands() {
    let mut cmd = command();
    cmd.arg("--help");
    let (status, stdout, _) = run_to_end(cmd, TIMEOUT);
    assert!(status.success());
    assert!(
        stdout.contains("serve") && stdout.contains("check"),
        "{stdout}"
    );
}
