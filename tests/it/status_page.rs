//! The status page (docs/operations/http-endpoints.md, "The status page"): `GET /` is one
//! self-contained document whose Content-Security-Policy allows exactly its inline script and
//! style by hash;
//! `GET /status.json` shows the configuration, the sampled traffic per rule, the store (Redis
//! too) and RLQS within `--status-page-max-rules` and the rule-series cap, and stays small and
//! quick with 20 000 rules; its flags refuse values out of range; and in a real headless
//! Chromium the page loads from a server under load without an error logged, draws its charts,
//! shows a rule added by a reload, and shows hostile descriptor values as text. The screenshot is
//! kept at target/artefacts/status-page.png.

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use ratelimitd::server::Settings;
use ratelimitd::service::status_page::StatusPageSettings;
use serde_json::Value;
use sha2::{Digest, Sha256};
use testkit::chromium::Chromium;
use testkit::in_process::InProcess;
use testkit::ops_support::{eventually, get, http};
use testkit::ratelimitd::*;

/// `'sha256-…'` of `text`, as a CSP source names an inline element.
fn csp_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The text between `open` and `close` in `html`, which must hold exactly one such element.
fn only_element<'a>(html: &'a str, open: &str, close: &str) -> &'a str {
    assert_eq!(html.matches(open).count(), 1, "one {open} in:\n{html}");
    let start = html.find(open).unwrap() + open.len();
    let end = start + html[start..].find(close).expect("a closing tag");
    &html[start..end]
}

fn write_config(dir: &Path, text: &str) {
    let temporary = dir.join(".config.yaml.tmp");
    std::fs::write(&temporary, text).unwrap();
    std::fs::rename(&temporary, dir.join("config.yaml")).unwrap();
}

/// `rules` key-only rules `k0`, `k1`, … of domain `bounds`, 2 per hour each.
fn many_rules(rules: usize) -> String {
    let mut text = String::from("domain: bounds\ndescriptors:\n");
    for i in 0..rules {
        text.push_str(&format!(
            "  - key: k{i}\n    rate_limit: {{unit: hour, requests_per_unit: 2}}\n"
        ));
    }
    text
}

async fn status_json(addr: std::net::SocketAddr) -> Value {
    let response = get(addr, "/status.json").await;
    assert_eq!(response.status, 200, "{response:?}");
    assert_eq!(response.header("content-type"), Some("application/json"));
    assert_eq!(response.header("x-content-type-options"), Some("nosniff"));
    serde_json::from_str(&response.body)
        .unwrap_or_else(|e| panic!("/status.json is not JSON ({e}): {}", response.body))
}

fn sum(values: &Value) -> u64 {
    values
        .as_array()
        .expect("an array")
        .iter()
        .map(|v| v.as_u64().expect("a count"))
        .sum()
}

#[tokio::test]
async fn the_page_is_one_document_whose_policy_allows_its_inline_script_and_style_by_hash() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &many_rules(1));
    let server = InProcess::start(Settings::new(vec![dir.path().to_path_buf()]));
    let page = get(server.http_addr(), "/").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    assert_eq!(page.header("x-content-type-options"), Some("nosniff"));
    let policy = page
        .header("content-security-policy")
        .expect("a Content-Security-Policy");
    let directives: Vec<&str> = policy.split(';').map(str::trim).collect();
    let script = only_element(&page.body, "<script>", "</script>");
    let style = only_element(&page.body, "<style>", "</style>");
    for expected in [
        "default-src 'none'".to_owned(),
        format!("script-src {}", csp_hash(script)),
        format!("style-src {}", csp_hash(style)),
        "connect-src 'self'".to_owned(),
        "img-src 'self' data:".to_owned(),
        "frame-ancestors 'none'".to_owned(),
    ] {
        assert!(
            directives.contains(&expected.as_str()),
            "{expected} in {policy}"
        );
    }
    assert!(!policy.contains("unsafe"), "{policy}");
    assert!(
        !page.body.contains("src=\"http") && !page.body.contains("href=\"http"),
        "no external asset"
    );
    assert!(
        !script.contains("innerHTML"),
        "the DOM is built with textContent"
    );

    for (method, path) in [("POST", "/"), ("PUT", "/status.json"), ("DELETE", "/")] {
        let refused = http(server.http_addr(), method, path, b"{}").await;
        assert_eq!(refused.status, 405, "{method} {path}: {refused:?}");
    }
}

#[tokio::test]
async fn status_json_shows_configuration_traffic_and_store_within_its_bounds() {
    const RULES: usize = 30;
    const HIT: usize = 12;
    const SERIES_CAP: usize = 8;
    const SHOWN: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &many_rules(RULES));
    let mut settings = Settings::new(vec![dir.path().to_path_buf()]);
    settings.metrics_max_rule_series = SERIES_CAP;
    settings.status_page = StatusPageSettings {
        sample_interval: Duration::from_secs(1),
        max_rules: SHOWN,
    };
    let server = InProcess::start(settings);
    let mut client = server.client().await;
    // Rule k{i} gets 3 + i requests: 2 admitted, the rest over the limit. The busiest go first,
    // so that whenever a sample falls, the rules with hits that fill the ring are the busiest.
    let mut sent = 0;
    for i in (0..HIT).rev() {
        let key = format!("k{i}");
        for _ in 0..3 + i {
            should(&mut client, request("bounds", &[&[(key.as_str(), "v")]], 0)).await;
            sent += 1;
        }
    }
    let addr = server.http_addr();
    let status = eventually(Duration::from_secs(10), "every request sampled", || async {
        let status = status_json(addr).await;
        (sum(&status["samples"]["requests"]) == sent).then_some(status)
    })
    .await;

    let samples = &status["samples"];
    assert_eq!(samples["interval_seconds"], 1);
    assert_eq!(samples["kept"], 90);
    let times = samples["times"].as_array().unwrap().len();
    assert!((1..=90).contains(&times), "{samples}");
    for series in ["requests", "over_limit", "mean_latency_us"] {
        assert_eq!(samples[series].as_array().unwrap().len(), times, "{series}");
    }
    assert_eq!(sum(&samples["over_limit"]), sent - 2 * HIT as u64);

    let rules = &status["rules"];
    assert_eq!(rules["max_tracked"], SERIES_CAP, "{rules}");
    assert_eq!(rules["tracked"], SERIES_CAP, "{rules}");
    assert_eq!(rules["untracked"], HIT - SERIES_CAP, "{rules}");
    let charts = rules["charts"].as_array().unwrap();
    assert_eq!(charts.len(), SHOWN, "{rules}");
    // The busiest rules first: k11 (14 requests), k10, ...
    for (rank, chart) in charts.iter().enumerate() {
        let i = HIT - 1 - rank;
        assert_eq!(chart["rule"], format!("bounds.k{i}"), "{chart}");
        assert_eq!(sum(&chart["hits"]), 3 + i as u64, "{chart}");
        assert_eq!(sum(&chart["over_limit"]), 1 + i as u64, "{chart}");
    }

    let config = &status["config"];
    assert_eq!(config["source"], "files");
    assert_eq!(config["paths"][0], dir.path().display().to_string());
    assert_eq!(config["domains"], 1);
    assert_eq!(config["rules_total"], RULES);
    let listed = config["rules"].as_array().unwrap();
    assert_eq!(listed.len(), SHOWN, "{config}");
    let first = &listed[0];
    assert_eq!(first["domain"], "bounds");
    assert_eq!(first["rule"], "bounds.k0");
    assert_eq!(first["kind"], "limited");
    assert_eq!(first["unit"], "hour");
    assert_eq!(first["requests_per_unit"], 2);
    assert!(first["algorithm"].is_string() && first["consistency"].is_string());
    assert_eq!(config["fingerprint"].as_str().map(str::len), Some(16));

    assert_eq!(status["store"]["kind"], "memory");
    assert_eq!(status["store"]["state"], "healthy");
    assert_eq!(status["top"]["enabled"], false, "/top is off by default");
    assert_eq!(status["rlqs"]["streams"], 0);
    assert_eq!(status["serving"], true);
    assert!(status["uptime_seconds"].as_u64().is_some());
    assert_eq!(status["build"]["version"], env!("CARGO_PKG_VERSION"));
}

/// Requests of the load the browser test runs: a user per request among a few, some hostile.
const USERS: [&str; 4] = [
    "alice",
    "<img src=x onerror=console.error('injected')>",
    "bob\"'</script><script>console.error('injected')</script>",
    "carol",
];

const LOADED: &str = "domain: status
descriptors:
  - key: user
    detailed_metric: true
    rate_limit: {unit: second, requests_per_unit: 5}
";

/// [`LOADED`] with one more rule.
const RELOADED: &str = "  - key: added_by_reload
    rate_limit: {unit: minute, requests_per_unit: 7}
";

/// Sends requests on `client` until `stop`, counting them.
async fn load(mut client: Client, stop: Arc<AtomicBool>, sent: Arc<AtomicU64>) {
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let user = USERS[n % USERS.len()];
        should(&mut client, request("status", &[&[("user", user)]], 0)).await;
        sent.fetch_add(1, Ordering::Relaxed);
        n += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_real_chromium_the_page_draws_live_charts_and_follows_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LOADED);
    let server = Ratelimitd::start(&[
        "--config",
        dir.path().to_str().unwrap(),
        "--status-page-sample-interval",
        "1s",
        "--top-max-rules",
        "10",
    ]);
    let stop = Arc::new(AtomicBool::new(false));
    let sent = Arc::new(AtomicU64::new(0));
    let load = tokio::spawn(load(server.client().await, stop.clone(), sent.clone()));
    let url = format!("http://{}/", server.http_addr());

    let (errors, texts, images) = tokio::task::block_in_place(|| {
        let mut browser = Chromium::launch(1280, 1600);
        browser.navigate(&url);
        browser.wait_until(
            r#"(() => {
                const line = document.querySelector('[data-rule="status.user"] path.line');
                return line !== null && Number(line.dataset.points) >= 2
                    && Number(line.dataset.max) > 0;
            })()"#,
            Duration::from_secs(20),
            "the chart of status.user drawn with points from the load",
        );
        browser.wait_until(
            "document.querySelector('#process-charts path.line').dataset.points >= 2",
            Duration::from_secs(10),
            "the process's decisions chart drawn",
        );
        browser.wait_until(
            "document.getElementById('top-body').textContent.includes('<img src=x')",
            Duration::from_secs(20),
            "the hostile value listed among the top values, as text",
        );

        write_config(dir.path(), &format!("{LOADED}{RELOADED}"));
        browser.wait_until(
            "document.getElementById('config-rules').textContent
                .includes('status.added_by_reload')",
            Duration::from_secs(20),
            "the rule added by the reload shown",
        );
        let texts = browser.evaluate(
            "[document.getElementById('config-rules').textContent, \
              document.getElementById('store-body').textContent, \
              document.getElementById('build').textContent]",
        );
        let images = browser.evaluate("document.querySelectorAll('img, script[src]').length");
        let artefact = testkit::repo_root().join("target/artefacts/status-page.png");
        browser.screenshot(&artefact);
        eprintln!("screenshot: {}", artefact.display());
        (browser.errors(), texts, images)
    });
    stop.store(true, Ordering::Relaxed);
    load.await.expect("the load task");

    assert!(errors.is_empty(), "the page logged errors: {errors:#?}");
    assert_eq!(images, 0, "a hostile value became an element");
    assert!(sent.load(Ordering::Relaxed) > 0);
    let [config, store, build] = [0, 1, 2].map(|i| texts[i].as_str().unwrap_or("").to_owned());
    assert!(config.contains("7 per minute"), "{config}");
    assert!(
        store.contains("memory") && store.contains("healthy"),
        "{store}"
    );
    assert!(build.contains("SERVING"), "{build}");
}

#[tokio::test]
async fn with_redis_the_store_shows_its_health_check_until_redis_stops_answering() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LOADED);
    let mut redis = testkit::redis_server::RedisServer::start_with(&["--requirepass", "hunter2"]);
    let url = format!("redis://:hunter2@127.0.0.1:{}", redis.port());
    let server = Ratelimitd::start(&[
        "--config",
        dir.path().to_str().unwrap(),
        "--redis-url",
        &url,
        "--status-page-sample-interval",
        "1s",
    ]);
    let addr = server.http_addr();
    let store = eventually(Duration::from_secs(10), "a healthy sample", || async {
        let status = status_json(addr).await;
        (status["store"]["state"] == "healthy").then(|| status["store"].clone())
    })
    .await;
    assert_eq!(store["kind"], "redis");
    let address = store["address"].as_str().unwrap();
    assert!(address.contains(&redis.port().to_string()), "{store}");
    assert!(
        !address.contains("hunter2"),
        "the password is not shown: {store}"
    );
    assert!(
        store["latency_us"].as_u64().is_some_and(|us| us > 0),
        "{store}"
    );
    assert!(store["latency_series"]
        .as_array()
        .unwrap()
        .iter()
        .any(|us| us.as_u64().is_some_and(|us| us > 0)));

    redis.kill();
    let status = eventually(Duration::from_secs(15), "an unhealthy sample", || async {
        let status = status_json(addr).await;
        (status["store"]["state"] == "unhealthy").then_some(status)
    })
    .await;
    assert!(status["store"]["latency_us"].is_null(), "{status}");
    assert!(
        status["store"]["latency_series"]
            .as_array()
            .unwrap()
            .last()
            .is_some_and(Value::is_null),
        "{status}"
    );
}

#[tokio::test]
async fn status_json_stays_small_and_quick_whatever_the_number_of_rules_and_values() {
    const RULES: usize = 20_000;
    const SHOWN: usize = 10;
    const RULES_HIT: usize = 40;
    const VALUES: usize = 30;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), &many_rules(RULES));
    let mut settings = Settings::new(vec![dir.path().to_path_buf()]);
    settings.status_page = StatusPageSettings {
        sample_interval: Duration::from_secs(1),
        max_rules: SHOWN,
    };
    settings.top = ratelimitd::service::top_values::TopSettings {
        values: 1000,
        max_rules: 1000,
        show_values: true,
        hash_key: None,
    };
    let server = InProcess::start(settings);
    let mut client = server.client().await;
    let long = "v".repeat(200);
    for rule in 0..RULES_HIT {
        let key = format!("k{rule}");
        for value in 0..VALUES {
            let value = format!("{long}{value}");
            should(
                &mut client,
                request("bounds", &[&[(key.as_str(), value.as_str())]], 0),
            )
            .await;
        }
    }
    let addr = server.http_addr();
    let sent = (RULES_HIT * VALUES) as u64;
    eventually(Duration::from_secs(10), "every request sampled", || async {
        let status = status_json(addr).await;
        (sum(&status["samples"]["requests"]) == sent).then_some(())
    })
    .await;
    let started = std::time::Instant::now();
    let response = get(addr, "/status.json").await;
    let took = started.elapsed();
    assert_eq!(response.status, 200);
    let status: Value = serde_json::from_str(&response.body).unwrap();
    eprintln!(
        "/status.json with {RULES} rules: {} bytes in {took:?}",
        response.body.len()
    );
    assert!(took < Duration::from_secs(2), "{took:?}");
    assert!(
        response.body.len() < 64 << 10,
        "{} bytes",
        response.body.len()
    );
    assert_eq!(status["config"]["rules_total"], RULES);
    assert_eq!(status["config"]["rules"].as_array().unwrap().len(), SHOWN);
    assert_eq!(status["rules"]["charts"].as_array().unwrap().len(), SHOWN);
    assert_eq!(status["rules"]["tracked"], RULES_HIT);
    let top = &status["top"];
    assert_eq!(top["enabled"], true, "{top}");
    let top_rules = top["rules"].as_array().unwrap();
    assert_eq!(top_rules.len(), SHOWN, "{top}");
    for rule in top_rules {
        for ranking in ["hits", "denied"] {
            let values = rule[ranking]["top"].as_array().unwrap().len();
            assert!(values <= 5, "{ranking}: {rule}");
        }
        assert_eq!(rule["hits"]["top"].as_array().unwrap().len(), 5, "{rule}");
    }
}

#[test]
fn a_sample_interval_or_a_cap_out_of_range_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LOADED);
    for (flag, value) in [
        ("--status-page-sample-interval", "500ms"),
        ("--status-page-sample-interval", "11m"),
        ("--status-page-max-rules", "0"),
        ("--status-page-max-rules", "1001"),
    ] {
        let mut cmd = command();
        cmd.args([
            "serve",
            "--config",
            dir.path().to_str().unwrap(),
            flag,
            value,
        ])
        .args(["--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"]);
        let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(30));
        assert_eq!(status.code(), Some(1), "{flag} {value}: {stderr}");
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

#[tokio::test]
async fn rlqs_streams_and_buckets_show_within_the_cap() {
    use testkit::rlqs_client::{bucket, usage, Envoy};
    const STREAMS: usize = 3;
    const BUCKETS: usize = 20;
    const SHOWN: usize = 5;
    let dir = tempfile::tempdir().unwrap();
    write_config(dir.path(), LOADED);
    let server = Ratelimitd::start(&[
        "--config",
        dir.path().to_str().unwrap(),
        "--status-page-max-rules",
        &SHOWN.to_string(),
    ]);
    let ids: Vec<_> = (0..BUCKETS)
        .map(|i| bucket(&[("user", &format!("u{i:02}"))]))
        .collect();
    let mut envoys = Vec::new();
    for _ in 0..STREAMS {
        let envoy = Envoy::connect(&server).await;
        envoy
            .report(
                "status",
                ids.iter().map(|id| usage(id.clone(), 1, 0, 0)).collect(),
            )
            .await;
        envoys.push(envoy);
    }
    let addr = server.http_addr();
    let rlqs = eventually(
        Duration::from_secs(10),
        "every stream and bucket",
        || async {
            let status = status_json(addr).await;
            let rlqs = status["rlqs"].clone();
            // Every stream joined the first two buckets (the second listed only past the cap).
            let every_stream = (0..2).all(|i| rlqs["buckets_shown"][i]["streams"] == STREAMS)
                || rlqs["buckets_shown"][0]["streams"] == STREAMS
                    && rlqs["buckets_shown"].as_array().map(Vec::len) == Some(1);
            (rlqs["streams"] == STREAMS && rlqs["buckets"] == BUCKETS && every_stream)
                .then_some(rlqs)
        },
    )
    .await;
    let shown = rlqs["buckets_shown"].as_array().unwrap();
    assert!(!shown.is_empty(), "{rlqs}");
    assert_eq!(
        shown.len(),
        1,
        "a second bucket's streams would pass the cap: {rlqs}"
    );
    assert_eq!(shown[0]["domain"], "status");
    assert_eq!(shown[0]["bucket"]["user"], "u00");
    assert_eq!(shown[0]["rule"], "status.user");
}
