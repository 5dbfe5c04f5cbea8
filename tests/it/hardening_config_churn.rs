//! A control plane that renames its rules at every version, against the real binary: the series
//! of `/metrics` are those of the rules in force, whatever the number of versions, so the text,
//! the time to serve it and the server's memory stay bounded. And a configuration of more rules
//! than `/metrics` shows series for.

use std::time::{Duration, Instant};

use testkit::control_plane::{domain_config, ControlPlane};
use testkit::hostile_config::memory_kib;
use testkit::ratelimitd::{http_get, request, should, Ratelimitd};

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

/// More rules than `--metrics-max-rule-series`: `/metrics` shows the cap's worth of series, those
/// with hits first, the hits of the others in one `_other` series, and says how many it left out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rule_series_beyond_the_cap_add_up_under_other() {
    const RULES: usize = 1000;
    const CAP: usize = 100;
    const HIT: usize = 150;
    let plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let server = Ratelimitd::start(&[
        "--config-source",
        "xds",
        "--xds-server",
        &server_addr,
        "--metrics-max-rule-series",
        &CAP.to_string(),
    ]);
    let keys: Vec<String> = (0..RULES).map(|i| format!("k{i:04}")).collect();
    let limits: Vec<(&str, u32)> = keys.iter().map(|key| (key.as_str(), 10)).collect();
    plane.push("1", vec![domain_config("many", "many", &limits)]);
    plane
        .wait_for("the ACK", WAIT, |received| received.is_ack_of("1"))
        .await;
    let mut client = server.client().await;
    for key in keys.iter().rev().take(HIT) {
        should(&mut client, request("many", &[&[(key, "x")]], 1)).await;
    }

    let (_, text) = http_get(server.http_addr(), "/metrics").await;
    let series: Vec<(&str, u64)> = text
        .lines()
        .filter_map(|line| line.strip_prefix("ratelimitd_total_hits_total{"))
        .map(|line| {
            let (labels, value) = line.rsplit_once("} ").expect("a sample");
            (labels, value.parse().expect("a count"))
        })
        .collect();
    assert_eq!(series.len(), CAP + 1, "{series:?}");
    let other: Vec<u64> = series
        .iter()
        .filter(|(labels, _)| *labels == "domain=\"_other\",rule=\"_other\"")
        .map(|(_, hits)| *hits)
        .collect();
    assert_eq!(
        other,
        [(HIT - CAP) as u64],
        "the hits of the rules left out"
    );
    assert!(
        series
            .iter()
            .filter(|(labels, _)| labels.starts_with("domain=\"many\""))
            .all(|(_, hits)| *hits == 1),
        "rules with hits come first: {series:?}"
    );
    let total: u64 = series.iter().map(|(_, hits)| hits).sum();
    assert_eq!(total, HIT as u64, "no hit is lost");
    assert!(
        text.contains(&format!(
            "\nratelimitd_rule_series_hidden {}\n",
            RULES - CAP
        )),
        "{}",
        text.lines()
            .find(|line| line.starts_with("ratelimitd_rule_series_hidden"))
            .unwrap_or("no ratelimitd_rule_series_hidden")
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

/// Descriptors of the large resource the measurement below pushes.
const LARGE: usize = 100_000;

/// Measurement, not a check (run by hand, figures in docs/performance.md, "Refusing hostile
/// input"): the server's VmRSS before, while and after an xDS resource of 100,000 descriptors is
/// in force, the size of `/metrics` meanwhile, and the latency of RLS calls made back to back
/// while `/metrics` is scraped over and over.
///
/// `cargo test --test hardening_config_churn -- --ignored --nocapture a_100k_descriptor_resource`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement: run by hand with --nocapture"]
async fn a_100k_descriptor_resource() {
    let plane = ControlPlane::start(None).await;
    let server_addr = plane.addr().to_string();
    let server = Ratelimitd::start(&[
        "--config-source",
        "xds",
        "--xds-server",
        &server_addr,
        "--xds-max-message-bytes",
        "67108864",
    ]);
    let small = || domain_config("small", "small", &[("stable", 1_000_000)]);
    plane.push("1", vec![small()]);
    plane
        .wait_for("the ACK of 1", WAIT, |received| received.is_ack_of("1"))
        .await;
    let rls_alone = rls_latencies(&server, Duration::from_secs(3)).await;
    let rss_before = memory_kib(server.pid()).0;

    let keys: Vec<String> = (0..LARGE).map(|i| format!("k{i}")).collect();
    let limits: Vec<(&str, u32)> = keys.iter().map(|key| (key.as_str(), 1_000_000)).collect();
    let large = domain_config("large", "large", &limits);
    let wire_bytes = prost::Message::encoded_len(&large);
    let pushed = Instant::now();
    plane.push("2", vec![small(), large]);
    plane
        .wait_for("the ACK of 2", Duration::from_secs(120), |received| {
            received.is_ack_of("2")
        })
        .await;
    let applied = pushed.elapsed();
    let mut client = server.client().await;
    for key in keys.iter().step_by(LARGE / 100) {
        should(&mut client, request("large", &[&[(key, "x")]], 1)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_in_force = memory_kib(server.pid()).0;
    let (_, bytes, took) = scrape(&server).await;

    let scraping = {
        let addr = server.http_addr();
        tokio::spawn(async move {
            let mut scrapes = 0;
            let until = Instant::now() + Duration::from_secs(5);
            while Instant::now() < until {
                let (code, _) = http_get(addr, "/metrics").await;
                assert_eq!(code, 200);
                scrapes += 1;
            }
            scrapes
        })
    };
    let rls_scraped = rls_latencies(&server, Duration::from_secs(5)).await;
    let scrapes = scraping.await.expect("the scrapes");
    let rss_scraped = memory_kib(server.pid()).0;

    plane.push("3", vec![small()]);
    plane
        .wait_for("the ACK of 3", Duration::from_secs(120), |received| {
            received.is_ack_of("3")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rss_after = memory_kib(server.pid()).0;
    plane.push("4", vec![small()]);
    plane
        .wait_for("the ACK of 4", Duration::from_secs(120), |received| {
            received.is_ack_of("4")
        })
        .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!(
        "DIAG after another give back: {} MiB",
        memory_kib(server.pid()).0 / 1024
    );
    let (_, bytes_after, _) = scrape(&server).await;
    eprintln!(
        "{LARGE} descriptors ({wire_bytes} bytes encoded) applied in {applied:?}; VmRSS {} MiB before, {} MiB in force (3 s after), {} MiB after {scrapes} scrapes, {} MiB 3 s after removal; /metrics {bytes} bytes in {took:?} ({bytes_after} after removal); RLS p99 / max: {:?} / {:?} alone, {:?} / {:?} while scraping",
        rss_before / 1024,
        rss_in_force / 1024,
        rss_scraped / 1024,
        rss_after / 1024,
        percentile(&rls_alone, 0.99),
        rls_alone.last().copied().unwrap_or_default(),
        percentile(&rls_scraped, 0.99),
        rls_scraped.last().copied().unwrap_or_default(),
    );
}

/// RLS calls made one after the other for `span`, on one connection: their latencies, sorted.
async fn rls_latencies(server: &Ratelimitd, span: Duration) -> Vec<Duration> {
    let mut client = server.client().await;
    let mut latencies = Vec::new();
    let until = Instant::now() + span;
    while Instant::now() < until {
        let started = Instant::now();
        should(&mut client, request("small", &[&[("stable", "x")]], 1)).await;
        latencies.push(started.elapsed());
    }
    latencies.sort();
    latencies
}

fn percentile(sorted: &[Duration], share: f64) -> Duration {
    let index = ((sorted.len() as f64 * share).ceil() as usize).saturating_sub(1);
    sorted.get(index).copied().unwrap_or_default()
}
