//! A control plane that renames its rules at every version, against the real binary: the series
//! of `/metrics` are those of the rules in force, whatever the number of versions, so the text,
//! the time to serve it and the server's memory stay bounded.

mod common;

use std::time::{Duration, Instant};

use common::control_plane::{domain_config, ControlPlane};
use common::hostile_config::memory_kib;
use common::ratelimitd::{http_get, request, should, Ratelimitd};

/// Generous: the machine is shared.
const WAIT: Duration = Duration::from_secs(20);

/// Rules each version renames.
const RENAMED: usize = 1000;

/// Versions pushed, each acknowledged before the next.
const VERSIONS: usize = 60;

/// Rule series `/metrics` shows, and its size.
async fn scrape(server: &Ratelimitd) -> (usize, usize, Duration) {
    let started = Instant::now();
    let (code, text) = tokio::time::timeout(WAIT, http_get(server.http_addr(), "/metrics"))
        .await
        .expect("/metrics answered in time");
    assert_eq!(code, 200);
    let series = text
        .lines()
        .filter(|line| line.starts_with("ratelimitd_total_hits_total{"))
        .count();
    (series, text.len(), started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renamed_rules_leave_no_series_behind() {
    let plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let server = Ratelimitd::start(&["--config-source", "xds", "--xds-server", &server_addr]);
    let mut client = server.client().await;

    let mut rss_after_first = 0;
    let started = Instant::now();
    for version in 1..=VERSIONS {
        let keys: Vec<String> = (0..RENAMED).map(|i| format!("v{version}_k{i}")).collect();
        let mut limits: Vec<(&str, u32)> = keys.iter().map(|key| (key.as_str(), 10)).collect();
        limits.push(("stable", 10));
        let name = version.to_string();
        plane.push(&name, vec![domain_config("churn", "churn", &limits)]);
        plane
            .wait_for("the ACK", WAIT, |received| received.is_ack_of(&name))
            .await;
        // A hit on a renamed rule and the stable one, so that both have counts.
        let response = should(
            &mut client,
            request("churn", &[&[(&keys[0], "x")], &[("stable", "x")]], 0),
        )
        .await;
        assert_eq!(response.statuses.len(), 2);
        if version == 1 {
            rss_after_first = memory_kib(server.pid()).0;
        }
    }
    let pushing = started.elapsed();
    let (series, bytes, took) = scrape(&server).await;
    let rss = memory_kib(server.pid()).0;
    eprintln!(
        "{VERSIONS} versions of {RENAMED} renamed rules in {pushing:?}: {series} rule series, /metrics {bytes} bytes in {took:?}; VmRSS {} MiB after the first version, {} MiB after the last",
        rss_after_first / 1024,
        rss / 1024
    );
    assert_eq!(
        series,
        RENAMED + 1,
        "the series of the rules in force, and only those"
    );
    assert!(bytes < 2 << 20, "/metrics has {bytes} bytes");
    assert!(
        rss < rss_after_first + 64 * 1024,
        "VmRSS grew from {rss_after_first} to {rss} KiB"
    );
}

/// A `version_info` of 1 MiB holding a newline and a rule line: `/rlconfig` and `/metrics` show it
/// cut to one bounded line, so it adds no rule line and no sample.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_version_info_is_shown_bounded_on_one_line() {
    let plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let server = Ratelimitd::start(&["--config-source", "xds", "--xds-server", &server_addr]);
    let version = format!(
        "7\nchurn.fake: unit=SECOND requests_per_unit=1, shadow_mode: false\n{}",
        "x".repeat(1 << 20)
    );
    plane.push(
        &version,
        vec![domain_config("churn", "churn", &[("stable", 10)])],
    );
    plane
        .wait_for("the ACK", WAIT, |received| received.is_ack_of(&version))
        .await;

    let (_, rlconfig) = http_get(server.http_addr(), "/rlconfig").await;
    let lines: Vec<&str> = rlconfig.lines().collect();
    assert_eq!(lines.len(), 2, "{rlconfig:.400}");
    assert!(
        lines[0].starts_with("# xDS version: 7\\u{a}churn.fake") && lines[0].len() < 256,
        "{:.400}",
        lines[0]
    );
    assert!(lines[1].starts_with("churn.stable: "), "{}", lines[1]);

    let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
    let samples: Vec<&str> = metrics
        .lines()
        .filter(|line| {
            line.contains("churn.fake") || line.starts_with("ratelimitd_config_xds_version_info{")
        })
        .collect();
    assert_eq!(samples.len(), 1, "{samples:?}");
    assert!(
        samples[0].starts_with("ratelimitd_config_xds_version_info{version=\"7\\\\u{a}churn.fake")
            && samples[0].len() < 256,
        "{:.400}",
        samples[0]
    );
}
