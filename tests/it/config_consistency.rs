//! `consistency: exact|leased` and its flags against the real binary: `check` refuses a leased
//! sliding_window_log with the reason, `--lease-period` is refused out of its bounds,
//! `--consistency leased` reaches rules from files and from xDS, and the memory store, told of
//! leased rules, says once that it decides them exactly, decides them exactly, and `/rlconfig`
//! shows which rules are leased.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ratelimitd::proto::rls_config::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};
use testkit::control_plane::ControlPlane;
use testkit::ratelimitd::*;

const TIMEOUT: Duration = Duration::from_secs(30);

/// What the memory store says when the rules in force have leased ones.
const MEMORY_NOTE: &str =
    "leased consistency needs a shared store (Redis): the memory store decides every rule exactly";

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write a configuration file");
    path
}

const LEASED_LOG: &str = "domain: hot
descriptors:
  - key: user
    rate_limit:
      unit: hour
      requests_per_unit: 2
      algorithm: sliding_window_log
      consistency: leased
";

const RULES: &str = "domain: hot
descriptors:
  - key: leased
    rate_limit: {unit: hour, requests_per_unit: 2, consistency: leased}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 2, algorithm: sliding_window_log}
  - key: free
    rate_limit: {unlimited: true, consistency: leased}
";

#[test]
fn check_refuses_a_leased_sliding_window_log_and_says_why() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(dir.path(), "hot.yaml", LEASED_LOG);
    let mut cmd = command();
    cmd.arg("check").arg("--config").arg(&file);
    let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
    assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
    let expected = format!(
        "{}:8:20: descriptors[0].rate_limit.consistency: `consistency: leased` cannot apply to \
         sliding_window_log: a log keeps one entry per admitted request, so a lease cannot \
         reserve a number of hits in it; use `algorithm: sliding_window_counter` to lease this \
         limit (or `consistency: exact`)",
        file.display()
    );
    assert_eq!(stderr.trim_end(), expected);
    assert!(stdout.contains("1 error(s)"), "{stdout}");

    let good = write(dir.path(), "good.yaml", RULES);
    let mut cmd = command();
    cmd.arg("check").arg("--config").arg(&good);
    let (status, stdout, stderr) = run_to_end(cmd, TIMEOUT);
    assert!(status.success(), "{stdout}{stderr}");
    assert!(
        stdout.contains("configuration OK: 1 domain(s), 4 limit(s)"),
        "{stdout}"
    );

    let text = refused_start(&["--config", file.to_str().unwrap()], &[]);
    assert!(
        text.contains("cannot apply to sliding_window_log"),
        "serve refuses it too: {text}"
    );
}

#[test]
fn a_lease_period_out_of_bounds_is_refused_by_name() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(dir.path(), "hot.yaml", RULES);
    let config = file.to_str().unwrap();
    let text = refused_start(&["--config", config, "--lease-period", "0s"], &[]);
    assert!(
        text.contains(
            "--lease-period <DURATION>': `0s` is out of bounds: a lease period is more than 0s \
             and at most 10s"
        ),
        "{text}"
    );
    let text = refused_start(&["--config", config], &[("RATELIMITD_LEASE_PERIOD", "20s")]);
    assert!(
        text.contains("RATELIMITD_LEASE_PERIOD=`20s` is refused: `20s` is out of bounds"),
        "{text}"
    );
    let text = refused_start(&["--config", config, "--consistency", "eventual"], &[]);
    assert!(
        text.contains("--consistency") && text.contains("exact") && text.contains("leased"),
        "{text}"
    );
}

/// Serves `RULES` on the memory store with `args` and `env`; every counted rule admits two
/// requests, then denies.
async fn serve_and_decide_exactly(
    args: &[&str],
    env: &[(&str, &str)],
) -> (Ratelimitd, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(dir.path(), "hot.yaml", RULES);
    let mut all = vec!["--config", file.to_str().unwrap()];
    all.extend_from_slice(args);
    let server = Ratelimitd::start_with_env(&all, env);
    for key in ["leased", "plain", "log"] {
        assert_two_then_over(&server, "hot", key, "a").await;
    }
    let (status, rlconfig) = testkit::ratelimitd::http_get(server.http_addr(), "/rlconfig").await;
    assert_eq!(status, 200);
    (server, rlconfig, dir)
}

#[tokio::test]
async fn the_memory_store_decides_leased_rules_exactly_and_says_so_once() {
    let (server, rlconfig, _dir) =
        serve_and_decide_exactly(&["--lease-period", "250ms"], &[]).await;
    assert_eq!(
        rlconfig,
        "hot.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true\n\
         hot.leased: unit=HOUR requests_per_unit=2, shadow_mode: false, consistency: leased\n\
         hot.log: unit=HOUR requests_per_unit=2, shadow_mode: false, algorithm: sliding_window_log\n\
         hot.plain: unit=HOUR requests_per_unit=2, shadow_mode: false\n"
    );
    let output = server.output();
    let notes: Vec<&str> = output
        .lines()
        .filter(|line| line.contains(MEMORY_NOTE))
        .collect();
    assert_eq!(notes.len(), 1, "{output}");
    assert!(notes[0].contains("INFO"), "{}", notes[0]);
    assert!(notes[0].contains("leased_rules=1"), "{}", notes[0]);
}

#[tokio::test]
async fn a_leased_default_leases_the_rules_that_do_not_say_but_a_log() {
    let (server, rlconfig, _dir) =
        serve_and_decide_exactly(&[], &[("RATELIMITD_CONSISTENCY", "leased")]).await;
    assert_eq!(
        rlconfig,
        "hot.free: unit=UNKNOWN requests_per_unit=0, shadow_mode: false, unlimited: true\n\
         hot.leased: unit=HOUR requests_per_unit=2, shadow_mode: false, consistency: leased\n\
         hot.log: unit=HOUR requests_per_unit=2, shadow_mode: false, algorithm: sliding_window_log\n\
         hot.plain: unit=HOUR requests_per_unit=2, shadow_mode: false, consistency: leased\n"
    );
    let output = server.output();
    let notes: Vec<&str> = output
        .lines()
        .filter(|line| line.contains(MEMORY_NOTE))
        .collect();
    assert_eq!(notes.len(), 1, "{output}");
    assert!(notes[0].contains("leased_rules=2"), "{}", notes[0]);
}

#[tokio::test]
async fn exact_rules_say_nothing_of_leases() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = write(
        dir.path(),
        "hot.yaml",
        "domain: hot\ndescriptors:\n  - key: plain\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    );
    let server = Ratelimitd::start(&["--config", file.to_str().unwrap()]);
    assert_two_then_over(&server, "hot", "plain", "a").await;
    let output = server.output();
    assert!(!output.contains(MEMORY_NOTE), "{output}");
}

/// `keys` of `domain`, two requests per hour each, as an xDS resource (upstream's schema: no
/// `consistency`).
fn hourly_resource(domain: &str, keys: &[&str]) -> RateLimitConfig {
    RateLimitConfig {
        name: format!("{domain}-config"),
        domain: domain.to_string(),
        descriptors: keys
            .iter()
            .map(|key| RateLimitDescriptor {
                key: key.to_string(),
                rate_limit: Some(RateLimitPolicy {
                    unit: RateLimitUnit::Hour as i32,
                    requests_per_unit: 2,
                    ..RateLimitPolicy::default()
                }),
                ..RateLimitDescriptor::default()
            })
            .collect(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_xds_a_leased_default_leases_the_resources_rules() {
    let plane = ControlPlane::start(None).await;
    let xds_server = plane.addr().to_string();
    let server = Ratelimitd::start(&[
        "--config-source",
        "xds",
        "--xds-server",
        &xds_server,
        "--consistency",
        "leased",
    ]);
    plane.push("1", vec![hourly_resource("hot", &["user"])]);
    plane
        .wait_for("the ACK of 1", TIMEOUT, |received| received.is_ack_of("1"))
        .await;
    let (_, rlconfig) = testkit::ratelimitd::http_get(server.http_addr(), "/rlconfig").await;
    assert_eq!(
        rlconfig,
        "# xDS version: 1\n\
         hot.user: unit=HOUR requests_per_unit=2, shadow_mode: false, consistency: leased\n"
    );
    assert_two_then_over(&server, "hot", "user", "a").await;

    plane.push("2", vec![hourly_resource("hot", &["user", "tenant"])]);
    plane
        .wait_for("the ACK of 2", TIMEOUT, |received| received.is_ack_of("2"))
        .await;
    assert_two_then_over(&server, "hot", "tenant", "a").await;
    let output = server.output();
    let notes: Vec<&str> = output
        .lines()
        .filter(|line| line.contains(MEMORY_NOTE))
        .collect();
    assert_eq!(
        notes.len(),
        1,
        "said for the first configuration with leased rules only: {output}"
    );
    assert!(notes[0].contains("leased_rules=1"), "{}", notes[0]);
}
