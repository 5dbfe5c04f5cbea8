//! Hot reload against the real binary: a changed file applies within seconds, a broken one is
//! rejected (logged with file:line, counted) while the running limits keep working and health
//! stays SERVING, counters of unchanged limits carry on, Kubernetes ConfigMap symlink swaps, and
//! SIGHUP.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::proto::rls::RateLimitRequest;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use tonic_health::pb::health_check_response::ServingStatus;

/// How long a change may take to apply (the check runs every second).
const APPLY_WITHIN: Duration = Duration::from_secs(10);

fn config(a: u32, b: u32) -> String {
    format!(
        "domain: reload\ndescriptors:\n  - key: a\n    rate_limit: {{unit: hour, requests_per_unit: {a}}}\n  - key: b\n    rate_limit: {{unit: hour, requests_per_unit: {b}}}\n"
    )
}

/// Line 5 holds an unknown field.
const BROKEN: &str = "domain: reload\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 3}\n    bogus_field: 1\n";

/// Replaces `path` atomically (write a sibling, rename over), as editors and tools do.
fn replace(path: &Path, content: &str) {
    let temporary = path.with_extension("tmp~");
    fs::write(&temporary, content).unwrap();
    fs::rename(&temporary, path).unwrap();
}

/// `(requests_per_unit, limit_remaining)` of `key=value` without consuming (hits 0).
async fn peek(c: &mut Client, key: &str, value: &str) -> (u32, u32) {
    let mut d = descriptor(&[(key, value)]);
    d.hits_addend = Some(0);
    let resp = should(
        c,
        RateLimitRequest {
            domain: "reload".into(),
            descriptors: vec![d],
            hits_addend: 0,
        },
    )
    .await;
    let status = &resp.statuses[0];
    let rpu = status
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit);
    (rpu, status.limit_remaining)
}

async fn wait_for_limit(c: &mut Client, key: &str, rpu: u32) -> Duration {
    let started = Instant::now();
    loop {
        if peek(c, key, "x").await.0 == rpu {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < APPLY_WITHIN,
            "limit of {key} not {rpu} within {APPLY_WITHIN:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn reloads(server: &Ratelimitd, result: &str) -> f64 {
    let text = metrics(server.http_addr()).await;
    value(
        &text,
        "ratelimitd_config_reloads_total",
        &format!("result=\"{result}\""),
    )
}

async fn assert_serving(server: &Ratelimitd) {
    let mut health = server.health_client().await;
    assert_eq!(
        overall_health(&mut health).await,
        ServingStatus::Serving as i32
    );
    let (code, body) = http_get(server.http_addr(), "/healthcheck").await;
    assert_eq!((code, body.as_str()), (200, "OK"));
}

#[tokio::test]
async fn changed_limits_apply_and_broken_files_are_rejected() {
    wait_for_window_room(3600, 60);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reload.yaml");
    replace(&file, &config(3, 2));
    let server = Ratelimitd::start(&["--config", dir.path().to_str().unwrap()]);
    let mut c = server.client().await;

    // Consume 2 of a's 3.
    for _ in 0..2 {
        should(&mut c, request("reload", &[&[("a", "x")]], 0)).await;
    }
    assert_eq!(peek(&mut c, "a", "x").await, (3, 1));
    assert_eq!(peek(&mut c, "b", "x").await, (2, 2));

    // Change b only: applies within seconds; a's counter carries on.
    replace(&file, &config(3, 5));
    let took = wait_for_limit(&mut c, "b", 5).await;
    eprintln!("reload applied after {took:?}");
    assert_eq!(
        peek(&mut c, "a", "x").await,
        (3, 1),
        "a's counter carries on"
    );
    assert_eq!(reloads(&server, "success").await, 1.0);
    assert_eq!(reloads(&server, "failure").await, 0.0);

    // A broken file: rejected, logged with file:line, counted; the running limits stay.
    replace(&file, BROKEN);
    eventually(APPLY_WITHIN, "the failure is counted", || async {
        (reloads(&server, "failure").await == 1.0).then_some(())
    })
    .await;
    let expected = format!("{}:5:", file.display());
    eventually(Duration::from_secs(2), "the error is logged", || async {
        server.output().contains(&expected).then_some(())
    })
    .await;
    assert!(
        server.output().contains("bogus_field"),
        "{}",
        server.output()
    );
    assert_eq!(peek(&mut c, "b", "x").await, (5, 5), "the old limits hold");
    assert_eq!(peek(&mut c, "a", "x").await, (3, 1));
    let resp = should(&mut c, request("reload", &[&[("a", "x")]], 0)).await;
    assert_eq!(overall(&resp), Code::Ok, "a still admits its last hit");
    let resp = should(&mut c, request("reload", &[&[("a", "x")]], 0)).await;
    assert_eq!(overall(&resp), Code::OverLimit, "and then denies");
    assert_serving(&server).await;
    let text = metrics(server.http_addr()).await;
    assert_eq!(
        value(&text, "ratelimitd_config_last_reload_successful", ""),
        0.0
    );
    // Reported once, not at every check.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(reloads(&server, "failure").await, 1.0);

    // Fixed: applies.
    replace(&file, &config(3, 7));
    wait_for_limit(&mut c, "b", 7).await;
    assert_eq!(reloads(&server, "success").await, 2.0);
    let text = metrics(server.http_addr()).await;
    assert_eq!(
        value(&text, "ratelimitd_config_last_reload_successful", ""),
        1.0
    );

    // A new file in the directory adds its domain.
    replace(
        &dir.path().join("other.yml"),
        "domain: other\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 4}\n",
    );
    eventually(APPLY_WITHIN, "the new domain is served", || {
        let mut c = c.clone();
        async move {
            let resp = should(&mut c, request("other", &[&[("k", "v")]], 0)).await;
            resp.statuses[0].current_limit.as_ref().map(|_| ())
        }
    })
    .await;
    assert_serving(&server).await;
}

/// Builds a ConfigMap volume: `..<version>/reload.yaml`, `..data -> ..<version>`,
/// `reload.yaml -> ..data/reload.yaml`.
fn configmap(dir: &Path, version: &str, content: &str) {
    let versioned = dir.join(format!("..{version}"));
    fs::create_dir(&versioned).unwrap();
    fs::write(versioned.join("reload.yaml"), content).unwrap();
    let data = dir.join("..data");
    if data.exists() {
        // The kubelet's atomic swap: a new symlink renamed over the old one.
        let temporary = dir.join("..data_tmp");
        std::os::unix::fs::symlink(format!("..{version}"), &temporary).unwrap();
        fs::rename(&temporary, &data).unwrap();
    } else {
        std::os::unix::fs::symlink(format!("..{version}"), &data).unwrap();
        std::os::unix::fs::symlink("..data/reload.yaml", dir.join("reload.yaml")).unwrap();
    }
}

#[tokio::test]
async fn configmap_symlink_swaps_are_picked_up() {
    let dir = tempfile::tempdir().unwrap();
    configmap(dir.path(), "2024_01_01_00_00_00.1", &config(3, 2));
    // One server watches the directory, one the file symlink.
    let by_dir = Ratelimitd::start(&["--config", dir.path().to_str().unwrap()]);
    let file = dir.path().join("reload.yaml");
    let by_file = Ratelimitd::start(&["--config", file.to_str().unwrap()]);
    let mut clients = [by_dir.client().await, by_file.client().await];
    for c in clients.iter_mut() {
        assert_eq!(peek(c, "b", "x").await.0, 2);
    }

    configmap(dir.path(), "2024_01_01_00_01_00.2", &config(3, 9));
    fs::remove_dir_all(dir.path().join("..2024_01_01_00_00_00.1")).unwrap();
    for c in clients.iter_mut() {
        wait_for_limit(c, "b", 9).await;
    }

    // A broken version is rejected by both; the running limits stay.
    configmap(dir.path(), "2024_01_01_00_02_00.3", BROKEN);
    for server in [&by_dir, &by_file] {
        eventually(APPLY_WITHIN, "the failure is counted", || async {
            (reloads(server, "failure").await == 1.0).then_some(())
        })
        .await;
        // The rejection is counted just before it is logged.
        eventually(Duration::from_secs(2), "the error is logged", || async {
            server.output().contains("reload.yaml:5:").then_some(())
        })
        .await;
        assert_serving(server).await;
    }
    for c in clients.iter_mut() {
        assert_eq!(peek(c, "b", "x").await.0, 9);
    }
}

#[tokio::test]
async fn sighup_reloads_even_without_polling() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("reload.yaml");
    replace(&file, &config(3, 2));
    let server = Ratelimitd::start(&[
        "--config",
        file.to_str().unwrap(),
        "--reload-interval",
        "0s",
    ]);
    let mut c = server.client().await;
    replace(&file, &config(3, 6));
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(peek(&mut c, "b", "x").await.0, 2, "no polling");

    server.signal("HUP");
    wait_for_limit(&mut c, "b", 6).await;
    assert_eq!(reloads(&server, "success").await, 1.0);

    // SIGHUP with nothing changed: a successful reload, and the server keeps running.
    server.signal("HUP");
    eventually(APPLY_WITHIN, "the second reload", || async {
        (reloads(&server, "success").await == 2.0).then_some(())
    })
    .await;
    assert_eq!(peek(&mut c, "b", "x").await.0, 6);

    // SIGHUP with a broken file: rejected, still serving.
    replace(&file, BROKEN);
    server.signal("HUP");
    eventually(APPLY_WITHIN, "the failure", || async {
        (reloads(&server, "failure").await == 1.0).then_some(())
    })
    .await;
    assert_eq!(peek(&mut c, "b", "x").await.0, 6);
    assert_serving(&server).await;
}
