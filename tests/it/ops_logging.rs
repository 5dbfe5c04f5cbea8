//! The log, as an operator reads it: with `debug` (envoyproxy/ratelimit's `LOG_LEVEL=debug` or
//! `--log-level debug`) one line per request says its domain, what each descriptor matched and
//! what was decided, and the libraries (h2, hyper, tonic, redis) stay at info; every record is
//! one line in text and one JSON object in JSON, a rejected reload with several errors
//! included. `serve --help` in a drop-in environment shows no value as set that the user did not
//! set; `check` says which paths it read, in which layout, and where they came from.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::{
    client, command, fixture, overall, request, run_to_end, should, Ratelimitd,
};
use testkit::redis_server::RedisServer;

const TIMEOUT: Duration = Duration::from_secs(30);

const EDGE: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: hour, requests_per_unit: 3}\n";

/// Two errors, on lines 4 and 6.
const BROKEN: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: fortnight, requests_per_unit: 3}\n  - key: other\n    bogus_field: 1\n";

/// Polls `server`'s output until `done` holds for it; panics with the output after 10 s.
fn wait_for_output(server: &Ratelimitd, what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let output = server.output();
        if done(&output) {
            return output;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{output}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The level and target of a text log line (`2025-01-01T00:00:00.000000Z DEBUG target: ...`).
fn level_and_target(line: &str) -> Option<(&str, &str)> {
    let mut words = line.split_whitespace();
    let _timestamp = words.next()?;
    let level = words.next()?;
    let target = words.next()?.strip_suffix(':')?;
    Some((level, target))
}

/// Asserts that every line of `output` is a text record of its own: a timestamp, a level.
fn assert_one_record_per_line(output: &str) {
    for line in output.lines().filter(|line| !line.trim().is_empty()) {
        let level = level_and_target(line).map(|(level, _)| level);
        assert!(
            line.starts_with("20")
                && matches!(level, Some("TRACE" | "DEBUG" | "INFO" | "WARN" | "ERROR")),
            "a line that is not a record of its own: {line:?}\n{output}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_debug_logs_each_decision_on_one_line_and_the_libraries_stay_quiet() {
    let redis = RedisServer::start();
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("config");
    fs::create_dir(&config).unwrap();
    fs::write(config.join("edge.yaml"), EDGE).unwrap();
    let mut cmd = command();
    for (name, value) in testkit::ratelimitd::UPSTREAM_LOOPBACK {
        cmd.env(name, value);
    }
    for (name, value) in [
        ("RUNTIME_ROOT", root.path().to_str().unwrap()),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", &format!("127.0.0.1:{}", redis.port())),
        ("LOG_LEVEL", "debug"),
    ] {
        cmd.env(name, value);
    }
    let server = Ratelimitd::spawn(cmd);
    let mut c = client(server.grpc_addr()).await;
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = should(&mut c, request("edge", &[&[("client", "a")]], 0)).await;
        codes.push(overall(&response));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
    should(&mut c, request("edge", &[&[("path", "/x")]], 0)).await;
    should(&mut c, request("nowhere", &[&[("client", "a")]], 0)).await;

    let decisions = |output: &str| {
        output
            .lines()
            .filter(|line| level_and_target(line) == Some(("DEBUG", "ratelimitd::decisions")))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let output = wait_for_output(&server, "six decision lines", |output| {
        decisions(output).len() >= 6
    });
    let lines = decisions(&output);
    assert_eq!(lines.len(), 6, "one line per request:\n{output}");
    for (line, code) in lines[..4].iter().zip(["OK", "OK", "OK", "OVER_LIMIT"]) {
        assert!(
            line.contains("decision domain=edge")
                && line.contains(&format!("overall={code}"))
                && line.contains("store_us=")
                && line.contains(&format!(
                    "#0 client=a -> edge.client (3 per hour) -> {code}"
                )),
            "{line}"
        );
    }
    assert!(lines[2].contains("-> OK, 0 remaining"), "{}", lines[2]);
    assert!(
        lines[4].contains("#0 path=/x -> no rule -> OK") && !lines[4].contains("store_us="),
        "no rule, no store call: {}",
        lines[4]
    );
    assert!(
        lines[5].contains("domain=nowhere")
            && lines[5].contains("no rule (domain not configured) -> OK"),
        "{}",
        lines[5]
    );
    let library_debug: Vec<&str> = output
        .lines()
        .filter(|line| {
            level_and_target(line).is_some_and(|(level, target)| {
                matches!(level, "DEBUG" | "TRACE") && !target.starts_with("ratelimitd")
            })
        })
        .collect();
    assert!(
        library_debug.is_empty(),
        "the libraries log at info: {library_debug:#?}"
    );

    // A reload with two errors is one record, on one line, with both errors.
    fs::write(config.join("edge.yaml"), BROKEN).unwrap();
    let file = config.join("edge.yaml").display().to_string();
    let output = wait_for_output(&server, "the rejected reload", |output| {
        output.lines().any(|line| {
            line.contains("configuration rejected")
                && line.contains(&format!("{file}:4:"))
                && line.contains(&format!("{file}:6:"))
        })
    });
    let rejected = output
        .lines()
        .find(|line| line.contains("configuration rejected"))
        .unwrap();
    assert!(
        rejected.contains("; ") && rejected.contains("bogus_field"),
        "{rejected}"
    );
    assert_one_record_per_line(&output);
}

#[tokio::test]
async fn json_debug_logs_are_one_object_per_line_rejected_reloads_included() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("edge.yaml");
    fs::write(&file, EDGE).unwrap();
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            dir.path().to_str().unwrap(),
            "--log-format",
            "json",
        ],
        &[("RATELIMITD_LOG_LEVEL", "debug")],
    );
    let mut c = server.client().await;
    for _ in 0..2 {
        should(&mut c, request("edge", &[&[("client", "b")]], 0)).await;
    }
    let refused = c
        .should_rate_limit(request("edge", &[], 0))
        .await
        .expect_err("a request without descriptors is refused");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    fs::write(&file, BROKEN).unwrap();
    let output = wait_for_output(&server, "two decisions and the rejected reload", |output| {
        output.matches("\"message\":\"decision\"").count() >= 2
            && output.contains("\"message\":\"request refused\"")
            && output.contains("configuration rejected")
    });
    let mut decisions = Vec::new();
    for line in output.lines().filter(|line| !line.trim().is_empty()) {
        let record: serde_json::Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not a JSON object ({error}): {line:?}\n{output}"));
        let target = record["target"].as_str().unwrap_or_default();
        let level = record["level"].as_str().unwrap_or_default();
        assert!(
            target.starts_with("ratelimitd") || !matches!(level, "DEBUG" | "TRACE"),
            "the libraries log at info: {line}"
        );
        if record["fields"]["message"] == "decision" {
            decisions.push(record);
        }
    }
    assert_eq!(
        decisions.len(),
        2,
        "one record per decided request: {output}"
    );
    assert_eq!(
        output.matches("\"message\":\"request refused\"").count(),
        1,
        "{output}"
    );
    let fields = &decisions[1]["fields"];
    assert_eq!(fields["domain"], "edge", "{fields}");
    assert_eq!(fields["overall"], "OK", "{fields}");
    assert!(fields["store_us"].is_u64(), "{fields}");
    assert_eq!(
        fields["descriptors"],
        "#0 client=b -> edge.client (3 per hour) -> OK, 1 remaining"
    );
}

#[test]
fn a_level_given_as_a_filter_is_used_as_written() {
    let server = Ratelimitd::start_with_env(
        &["--config", fixture("serve/matching.yaml").to_str().unwrap()],
        &[("RATELIMITD_LOG_LEVEL", "info,h2=debug")],
    );
    // h2 logs its frames at debug as soon as the health probe's connection opens.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut c = server.client().await;
        should(&mut c, request("matching", &[&[("user", "bob")]], 0)).await;
    });
    let output = wait_for_output(&server, "an h2 debug line", |output| {
        output.lines().any(|line| {
            level_and_target(line)
                .is_some_and(|(level, target)| level == "DEBUG" && target.starts_with("h2"))
        })
    });
    assert!(
        !output.contains("ratelimitd::decisions"),
        "ratelimitd's own lines stay at info: {output}"
    );
}

#[test]
fn serve_help_in_a_drop_in_environment_shows_only_what_the_user_set() {
    for help in [
        &["serve", "--help"][..],
        &["help", "serve"],
        &["serve", "-h"],
    ] {
        let mut cmd = command();
        cmd.args(help)
            .env("RUNTIME_ROOT", "/srv/elsewhere")
            .env("LOG_LEVEL", "debug")
            .env("REDIS_URL", "redis.internal:6379")
            .env("RATELIMITD_GRPC_ADDR", "127.0.0.1:9081");
        let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
        assert!(status.success(), "{help:?}: {stderr}");
        for injected in [
            "/srv/elsewhere",
            "RATELIMITD_LOG_LEVEL=debug",
            "redis.internal",
        ] {
            assert!(
                !stdout.contains(injected),
                "{help:?} shows {injected} as if it were set:\n{stdout}"
            );
        }
        assert!(
            stdout.contains("RATELIMITD_GRPC_ADDR=127.0.0.1:9081"),
            "{help:?} shows what the user set:\n{stdout}"
        );
        assert!(
            !stdout.to_lowercase().contains("required"),
            "{help:?}:\n{stdout}"
        );
    }
    let mut cmd = command();
    cmd.args(["serve", "--help"]);
    let (_, stdout, _) = run_to_end(cmd, TIMEOUT);
    assert!(
        stdout.contains("Drop-in mode:") && stdout.contains("--config-source xds"),
        "{stdout}"
    );
}

fn check(env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let mut cmd = command();
    cmd.arg("check").args(args);
    for (name, value) in env {
        cmd.env(name, value);
    }
    let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
    (status.code().unwrap_or(-1), stdout, stderr)
}

#[test]
fn check_without_arguments_names_the_drop_in_default_path() {
    let default = Path::new("/srv/runtime_data/current/config");
    let (code, stdout, stderr) = check(&[], &[]);
    let said = format!("{stdout}{stderr}");
    assert!(
        said.contains(
            "checked /srv/runtime_data/current/config (runtime layout: every file, dotfiles read; \
             drop-in default path: RUNTIME_ROOT unset (/srv/runtime_data/current)"
        ),
        "{said}"
    );
    if !default.exists() {
        assert_eq!(code, 1, "{said}");
        assert!(
            stderr.contains(
                "/srv/runtime_data/current/config is the drop-in default path (envoyproxy/ratelimit's \
                 RUNTIME_ROOT is unset"
            ) && stderr.contains("--config PATH")
                && stderr.contains("set RUNTIME_ROOT"),
            "{stderr}"
        );
    }
}

#[test]
fn check_says_which_paths_layout_and_variables_it_read() {
    let root = fixture("runtime");
    let (code, stdout, stderr) = check(&[("RUNTIME_ROOT", root.to_str().unwrap())], &[]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert_eq!(
        stdout,
        format!(
            "configuration OK: 2 domain(s), 2 limit(s)\nchecked {}/config (runtime layout: every \
             file, dotfiles read; drop-in path: RUNTIME_ROOT={}, RUNTIME_SUBDIRECTORY unset, \
             RUNTIME_APPDIRECTORY unset (config))\n",
            root.display(),
            root.display()
        )
    );

    let file = fixture("serve/matching.yaml");
    let (code, stdout, _) = check(&[], &["--config", file.to_str().unwrap()]);
    assert_eq!(code, 0);
    assert!(
        stdout.ends_with(&format!(
            "checked {} (files layout: *.yaml / *.yml; from --config)\n",
            file.display()
        )),
        "{stdout}"
    );
    // RATELIMITD_CONFIG given, upstream's variables are not used for the path.
    let (code, stdout, _) = check(
        &[
            ("RATELIMITD_CONFIG", file.to_str().unwrap()),
            ("RUNTIME_ROOT", root.to_str().unwrap()),
        ],
        &[],
    );
    assert_eq!(code, 0);
    assert!(
        stdout.ends_with(&format!(
            "checked {} (files layout: *.yaml / *.yml; from RATELIMITD_CONFIG)\n",
            file.display()
        )),
        "{stdout}"
    );

    let broken = fixture("invalid/bad_unit.yaml");
    let (code, stdout, stderr) = check(&[], &["--config", broken.to_str().unwrap()]);
    assert_eq!(code, 1);
    assert!(
        stderr.lines().all(|line| line.contains("bad_unit.yaml:")),
        "the errors alone on stderr: {stderr}"
    );
    assert_eq!(
        stdout,
        format!(
            "checked {} (files layout: *.yaml / *.yml; from --config): 1 error(s)\n",
            broken.display()
        )
    );
}
