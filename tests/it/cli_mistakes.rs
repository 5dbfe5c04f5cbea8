//! The mistakes every new user makes, as they type them, end with an error that says how to fix
//! them (on stderr, exit 1, whatever the log level) or just work: a mistyped log level, a Redis
//! URL without its scheme, a Redis that is not up yet, a busy port, a host name for an address,
//! a flag's first word, a misspelt flag whatever help shows it, and a misspelt `domain` in
//! Envoy's filter; `serve --help` fits one screen.

use std::net::TcpListener;
use std::time::Duration;

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::{command, fixture, http_get, request, run_to_end, should, Ratelimitd};
use testkit::redis_server::free_port;

const TIMEOUT: Duration = Duration::from_secs(30);

fn config() -> String {
    fixture("serve/matching.yaml").to_str().unwrap().to_owned()
}

/// Runs `serve --config <fixture>` with `args` and `env`, on free loopback ports where `args`
/// name none, until it exits; returns its exit code and stderr.
fn serve_to_end(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = command();
    cmd.args(["serve", "--config", &config()]).args(args);
    for flag in ["--grpc-addr", "--http-addr"] {
        if !args.contains(&flag) {
            cmd.args([flag, "127.0.0.1:0"]);
        }
    }
    for (name, value) in env {
        cmd.env(name, value);
    }
    let (status, _stdout, stderr) = run_to_end(cmd, TIMEOUT);
    (status.code(), stderr)
}

#[test]
fn a_word_that_is_no_log_level_is_refused_on_stderr() {
    for (args, env, named) in [
        (
            &["--log-level", "verbose"][..],
            &[][..],
            "`verbose` is not a log level",
        ),
        (
            &[],
            &[("RATELIMITD_LOG_LEVEL", "debug;")][..],
            "RATELIMITD_LOG_LEVEL=`debug;`",
        ),
        (&["--log-level", "h2=loud"], &[], "`loud` in `h2=loud`"),
    ] {
        let (code, stderr) = serve_to_end(args, env);
        assert_eq!(code, Some(1), "{args:?} {env:?}: {stderr}");
        assert!(stderr.contains(named), "{args:?} {env:?}: {stderr}");
        assert!(
            stderr.contains("trace, debug, info, warn, error, off"),
            "the levels are listed: {stderr}"
        );
    }
}

#[test]
fn logrus_level_names_are_levels_and_fatal_errors_reach_stderr_whatever_the_level() {
    let busy = TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = busy.local_addr().unwrap().to_string();
    for level in ["warning", "fatal", "off"] {
        let (code, stderr) = serve_to_end(&["--log-level", level, "--http-addr", &busy], &[]);
        assert_eq!(code, Some(1), "{level}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "cannot listen on {busy} (--http-addr, RATELIMITD_HTTP_ADDR"
            )) && stderr.contains("another process listens there")
                && stderr.contains("choose another address with --http-addr"),
            "{level}: {stderr}"
        );
    }
    let (code, stderr) = serve_to_end(&["--grpc-addr", &busy], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "(--grpc-addr, RATELIMITD_GRPC_ADDR; envoyproxy/ratelimit's GRPC_HOST/GRPC_PORT)"
        ),
        "{stderr}"
    );
}

#[test]
fn a_redis_url_without_its_scheme_shows_the_url_it_means() {
    let (code, stderr) = serve_to_end(&["--redis-url", "127.0.0.1:16399"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("a Redis URL starts with its scheme: `redis://127.0.0.1:16399`"),
        "{stderr}"
    );
    let (code, stderr) = serve_to_end(&["--redis-url", "user:secret@redis:6379"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("`redis://user:***@redis:6379`"),
        "the suggestion hides the password: {stderr}"
    );
}

#[test]
fn a_redis_down_at_startup_names_the_flag_that_waits_for_it() {
    let url = format!("redis://127.0.0.1:{}", free_port());
    let (code, stderr) = serve_to_end(&["--redis-url", &url], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(&url)
            && stderr.contains("startup does not wait for Redis unless --redis-startup-wait"),
        "{stderr}"
    );
    let (code, stderr) = serve_to_end(
        &[
            "--redis-url",
            &url,
            "--redis-startup-wait",
            "1s",
            "--redis-startup-initial-interval",
            "300ms",
        ],
        &[],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("gave up after") && stderr.contains("--redis-startup-wait"),
        "{stderr}"
    );
}

#[test]
fn a_host_name_serves_where_it_resolves() {
    let port = free_port();
    let server = Ratelimitd::start_on(&format!("localhost:{port}"), &["--config", &config()]);
    assert_eq!(server.grpc_addr().to_string(), format!("127.0.0.1:{port}"));
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut client = server.client().await;
        let response = should(&mut client, request("matching", &[&[("user", "bob")]], 0)).await;
        assert_eq!(response.overall_code, Code::Ok as i32);
    });

    let (code, stderr) = serve_to_end(&["--grpc-addr", "localhost"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("`localhost` is not HOST:PORT"), "{stderr}");
}

#[test]
fn the_first_word_of_a_flag_suggests_the_flags_that_start_there() {
    let mut cmd = command();
    cmd.args(["serve", "--redis", "redis://127.0.0.1:6379"]);
    let (status, _, stderr) = run_to_end(cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(
        stderr
            .contains("unexpected argument '--redis'; did you mean --redis-url (one Redis server"),
        "{stderr}"
    );
    assert!(!stderr.contains("--redis-tls"), "{stderr}");
}

#[test]
fn a_misspelt_domain_is_warned_about_and_counted_by_name() {
    let server = Ratelimitd::start(&["--config", &config()]);
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut client = server.client().await;
        for _ in 0..3 {
            let response = should(&mut client, request("matchnig", &[&[("user", "bob")]], 0)).await;
            assert_eq!(response.overall_code, Code::Ok as i32);
        }
        let (status, metrics) = http_get(server.http_addr(), "/metrics").await;
        assert_eq!(status, 200);
        assert!(
            metrics.contains("ratelimitd_domain_not_found_total{domain=\"matchnig\"} 3\n"),
            "{metrics}"
        );
    });
    let output = server.output();
    let warnings: Vec<&str> = output
        .lines()
        .filter(|line| line.contains("WARN") && line.contains("no configuration defines"))
        .collect();
    assert_eq!(warnings.len(), 1, "once a minute per domain:\n{output}");
    assert!(
        warnings[0].contains("domain=\"matchnig\"")
            && warnings[0].contains("domains_in_force=\"matching\""),
        "{}",
        warnings[0]
    );
}

#[test]
fn serve_help_fits_one_screen_and_help_all_lists_every_setting() {
    let help = |flag: &str| {
        let mut cmd = command();
        cmd.args(["serve", flag]);
        let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
        assert!(status.success(), "serve {flag}: {stderr}");
        stdout
    };
    for flag in ["--help", "-h"] {
        let brief = help(flag);
        assert!(brief.lines().count() <= 50, "serve {flag}:\n{brief}");
        for shown in [
            "--config ",
            "--config-source",
            "--grpc-addr",
            "--redis-url",
            "--log-level",
        ] {
            assert!(
                brief.contains(shown),
                "serve {flag} lacks {shown}:\n{brief}"
            );
        }
        assert!(
            !brief.contains("--grpc-max-buffered-bytes"),
            "serve {flag} shows every setting:\n{brief}"
        );
        assert!(
            brief.contains("ratelimitd serve --help-all"),
            "serve {flag} does not say where the rest is:\n{brief}"
        );
    }
    let all = help("--help-all");
    for setting in [
        "--grpc-max-buffered-bytes",
        "--rlqs-memory-budget",
        "--config ",
    ] {
        assert!(all.contains(setting), "serve --help-all lacks {setting}");
    }
}

#[test]
fn a_misspelt_setting_left_out_of_the_short_help_is_still_suggested() {
    let mut cmd = command();
    cmd.args(["serve", "--grpc-max-buffered-byte", "1MiB"]);
    let (status, _, stderr) = run_to_end(cmd, TIMEOUT);
    assert!(!status.success());
    assert!(
        stderr.contains("--grpc-max-buffered-bytes"),
        "no suggestion: {stderr}"
    );
}
