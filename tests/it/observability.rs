//! deploy/observability/ as a user imports it:
//!
//! - the alerting rules pass `promtool check rules`, as a plain rules file and as the
//!   PrometheusRule's `spec`; `promtool test rules` passes, with a case where each alert fires and
//!   one where it does not;
//! - the PrometheusRule carries the rules file's groups unchanged, as
//!   scripts/observability-prometheusrule.sh writes it;
//! - the Grafana dashboard takes its Prometheus data source from a variable, every panel queries
//!   it, and the panels cover decisions and denials per domain and rule, latency, the store,
//!   configuration and xDS, RLQS, resources and transport refusals;
//! - every metric the dashboard and the rules name is in docs/operations/metrics.md's metrics table;
//! - a real Prometheus scraping a real ratelimitd (configuration from an xDS control plane,
//!   counters in a real redis-server, RLQS reports, a load with denials) parses every panel's,
//!   variable's and alert's expression, returns data for every panel's query, and evaluates every
//!   rule without error.
//!
//! promtool and prometheus come from Debian's `prometheus` package (scripts/test.sh installs it
//! and exports PROMTOOL_BIN and PROMETHEUS_BIN); without them these tests fail, never skip.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use regex::Regex;
use saphyr::{LoadableYamlNode, YamlOwned};
use serde_json::Value;

use ratelimitd::proto::rls::RateLimitRequest;
use testkit::control_plane::{domain_config, ControlPlane};
use testkit::ratelimitd::{descriptor, http_get, Ratelimitd};
use testkit::redis_server::{free_port, RedisServer};
use testkit::rlqs_client::{bucket, usage, Envoy};

const RULES: &str = "ratelimitd-alerts.yaml";
const RULE_TESTS: &str = "ratelimitd-alerts.test.yaml";
const PROMETHEUS_RULE: &str = "ratelimitd-prometheusrule.yaml";
const DASHBOARD: &str = "ratelimitd-dashboard.json";

/// The scrape job of the test's Prometheus, and so the `$job` the panels are asked with.
const JOB: &str = "ratelimitd";

/// What `$__rate_interval` stands for in the test: four scrapes of 1 s and more.
const RATE_INTERVAL: &str = "10s";

/// How long Prometheus may take to have samples enough and to answer every panel with data.
const DATA_TIMEOUT: Duration = Duration::from_secs(40);

/// Grafana's own variables the panels may use.
const GRAFANA_VARIABLES: [&str; 1] = ["__rate_interval"];

/// What the dashboard must show: for each subject, a family one of its panels queries.
const COVERED: [(&str, &str); 11] = [
    ("decisions", "ratelimitd_requests_total"),
    ("hits per domain and rule", "ratelimitd_total_hits_total"),
    ("denials per domain and rule", "ratelimitd_over_limit_total"),
    ("latency", "ratelimitd_request_duration_seconds_bucket"),
    ("store errors", "ratelimitd_store_errors_total"),
    ("store calls", "ratelimitd_redis_script_calls_total"),
    ("reloads", "ratelimitd_config_reloads_total"),
    ("xDS", "ratelimitd_xds_stream_up"),
    ("RLQS", "ratelimitd_rlqs_reported_allowed_total"),
    ("resources", "ratelimitd_grpc_memory_held_bytes"),
    ("transport refusals", "ratelimitd_transport_limited_total"),
];

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn observability(name: &str) -> PathBuf {
    repo_root().join("deploy/observability").join(name)
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// A binary of Debian's `prometheus` package: `variable`, else `name` on PATH.
fn tool(variable: &str, name: &str) -> PathBuf {
    let found = match std::env::var_os(variable) {
        Some(bin) => Some(PathBuf::from(bin)),
        None => std::env::var_os("PATH").and_then(|path| {
            std::env::split_paths(&path)
                .map(|dir| dir.join(name))
                .find(|bin| bin.is_file())
        }),
    };
    match found {
        Some(bin) if bin.is_file() => bin,
        _ => panic!(
            "{name} is needed for tests/observability.rs and was not found ({variable} or PATH); \
             install Debian's prometheus package (scripts/test.sh does) or set {variable}"
        ),
    }
}

fn promtool() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| tool("PROMTOOL_BIN", "promtool"))
}

fn prometheus() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| tool("PROMETHEUS_BIN", "prometheus"))
}

/// Runs promtool with `args` in deploy/observability/; its output, or a panic with it.
fn run_promtool(args: &[&str]) -> String {
    let output = Command::new(promtool())
        .args(args)
        .current_dir(observability(""))
        .output()
        .expect("run promtool");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "promtool {} failed:\n{text}",
        args.join(" ")
    );
    text
}

fn yaml(path: &Path) -> YamlOwned {
    let mut documents = YamlOwned::load_from_str(&read(path))
        .unwrap_or_else(|e| panic!("{} is not YAML: {e}", path.display()));
    assert_eq!(documents.len(), 1, "{}: one document", path.display());
    documents.remove(0)
}

fn at<'a>(node: &'a YamlOwned, path: &str) -> &'a YamlOwned {
    path.split('.').fold(node, |node, key| {
        node.as_mapping_get(key)
            .unwrap_or_else(|| panic!("no `{key}` on the way to `{path}`"))
    })
}

fn text<'a>(node: &'a YamlOwned, path: &str) -> &'a str {
    at(node, path)
        .as_str()
        .unwrap_or_else(|| panic!("`{path}` is not a string"))
}

fn sequence<'a>(node: &'a YamlOwned, path: &str) -> &'a [YamlOwned] {
    at(node, path)
        .as_sequence()
        .unwrap_or_else(|| panic!("`{path}` is not a sequence"))
}

/// Every rule of the rules file: (alert name, expression).
fn alerts() -> Vec<(String, String)> {
    let rules = yaml(&observability(RULES));
    let mut alerts = Vec::new();
    for group in sequence(&rules, "groups") {
        for rule in sequence(group, "rules") {
            alerts.push((
                text(rule, "alert").to_string(),
                text(rule, "expr").to_string(),
            ));
        }
    }
    assert!(!alerts.is_empty(), "{RULES} has no alert");
    alerts
}

/// The PrometheusRule's `spec`, as the rules file that Prometheus would load: the lines under
/// `spec:`, two spaces less indented.
fn prometheus_rule_spec() -> String {
    let path = observability(PROMETHEUS_RULE);
    let text = read(&path);
    let mut lines = text.lines().skip_while(|line| *line != "spec:");
    assert!(
        lines.next().is_some(),
        "{PROMETHEUS_RULE} has no `spec:` line"
    );
    lines
        .map(|line| {
            assert!(
                line.is_empty() || line.starts_with("  "),
                "{PROMETHEUS_RULE}: a line under `spec:` that is not indented: {line:?}"
            );
            format!("{}\n", line.get(2..).unwrap_or_default())
        })
        .collect()
}

#[test]
fn the_rules_pass_promtool_check_as_a_file_and_as_the_prometheus_rules_spec() {
    let said = run_promtool(&["check", "rules", RULES]);
    let count = alerts().len();
    assert!(
        said.contains(&format!("SUCCESS: {count} rules found")),
        "{said}"
    );

    let dir = tempfile::tempdir().expect("temporary directory");
    let spec = dir.path().join("spec.yaml");
    fs::write(&spec, prometheus_rule_spec()).expect("write the spec");
    let said = run_promtool(&["check", "rules", spec.to_str().expect("a UTF-8 path")]);
    assert!(
        said.contains(&format!("SUCCESS: {count} rules found")),
        "{said}"
    );
}

#[test]
fn every_alert_fires_and_stays_quiet_in_the_promtool_unit_tests() {
    let said = run_promtool(&["test", "rules", RULE_TESTS]);
    assert!(said.contains("SUCCESS"), "{said}");

    let tests = yaml(&observability(RULE_TESTS));
    assert_eq!(
        sequence(&tests, "rule_files")
            .iter()
            .map(|file| file.as_str().expect("a path"))
            .collect::<Vec<_>>(),
        [RULES]
    );
    let mut firing = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in sequence(&tests, "tests") {
        for case in sequence(test, "alert_rule_test") {
            let name = text(case, "alertname").to_string();
            if sequence(case, "exp_alerts").is_empty() {
                quiet.insert(name);
            } else {
                firing.insert(name);
            }
        }
    }
    for (alert, _) in alerts() {
        assert!(
            firing.contains(&alert),
            "{RULE_TESTS} has no case where {alert} fires"
        );
        assert!(
            quiet.contains(&alert),
            "{RULE_TESTS} has no case where {alert} stays quiet"
        );
    }
}

#[test]
fn the_prometheus_rule_carries_the_rules_files_groups_as_the_script_writes_it() {
    let rule = yaml(&observability(PROMETHEUS_RULE));
    assert_eq!(text(&rule, "apiVersion"), "monitoring.coreos.com/v1");
    assert_eq!(text(&rule, "kind"), "PrometheusRule");
    assert_eq!(text(&rule, "metadata.name"), "ratelimitd");
    let spec_keys: Vec<&str> = at(&rule, "spec")
        .as_mapping()
        .expect("a spec mapping")
        .keys()
        .map(|key| key.as_str().expect("a key"))
        .collect();
    assert_eq!(spec_keys, ["groups"], "the PrometheusRule's spec");
    assert!(
        at(&rule, "spec.groups") == at(&yaml(&observability(RULES)), "groups"),
        "{PROMETHEUS_RULE}'s spec.groups differ from {RULES}'s groups: run \
         scripts/observability-prometheusrule.sh"
    );

    let dir = tempfile::tempdir().expect("temporary directory");
    let written = dir.path().join(PROMETHEUS_RULE);
    let status = Command::new("bash")
        .arg(repo_root().join("scripts/observability-prometheusrule.sh"))
        .arg(&written)
        .status()
        .expect("run scripts/observability-prometheusrule.sh");
    assert!(status.success(), "scripts/observability-prometheusrule.sh");
    assert!(
        read(&written) == read(&observability(PROMETHEUS_RULE)),
        "{PROMETHEUS_RULE} is not what scripts/observability-prometheusrule.sh writes: run it"
    );
}

/// The dashboard's JSON.
fn dashboard() -> Value {
    serde_json::from_str(&read(&observability(DASHBOARD)))
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"))
}

/// The panels that query (every panel but rows): (title, expressions).
fn panel_queries(dashboard: &Value) -> Vec<(String, Vec<String>)> {
    dashboard["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .filter(|panel| panel["type"] != "row")
        .map(|panel| {
            let title = panel["title"].as_str().expect("a title").to_string();
            let exprs = panel["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("panel {title:?} has no targets"))
                .iter()
                .map(|target| target["expr"].as_str().unwrap_or_default().to_string())
                .collect();
            (title, exprs)
        })
        .collect()
}

/// The query variables: name to `label_values(...)` query.
fn variable_queries(dashboard: &Value) -> BTreeMap<String, String> {
    dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list")
        .iter()
        .filter(|variable| variable["type"] == "query")
        .map(|variable| {
            (
                variable["name"].as_str().expect("a name").to_string(),
                variable["definition"]
                    .as_str()
                    .expect("a definition")
                    .to_string(),
            )
        })
        .collect()
}

fn is_data_source_variable(value: &Value) -> bool {
    value["type"] == "prometheus" && value["uid"] == "${datasource}"
}

#[test]
fn the_dashboard_takes_its_data_source_from_a_variable_and_covers_the_service() {
    let dashboard = dashboard();
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating.list");
    assert!(
        variables
            .iter()
            .any(|variable| variable["name"] == "datasource"
                && variable["type"] == "datasource"
                && variable["query"] == "prometheus"),
        "no `datasource` variable of type datasource, query prometheus"
    );
    let mut defined: BTreeSet<String> = GRAFANA_VARIABLES.iter().map(|v| v.to_string()).collect();
    for variable in variables {
        let name = variable["name"].as_str().expect("a variable name");
        defined.insert(name.to_string());
        if variable["type"] == "query" {
            assert!(
                is_data_source_variable(&variable["datasource"]),
                "variable {name} does not query the data source variable"
            );
        }
    }

    let reference = Regex::new(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)").expect("a regex");
    let mut ids = BTreeSet::new();
    let mut cells = BTreeSet::new();
    for panel in dashboard["panels"].as_array().expect("panels") {
        let title = panel["title"].as_str().expect("a title");
        assert!(
            ids.insert(panel["id"].as_u64().expect("an id")),
            "panel {title:?}: an id already taken"
        );
        let grid = &panel["gridPos"];
        let (x, y, w, h) = (
            grid["x"].as_u64().expect("x"),
            grid["y"].as_u64().expect("y"),
            grid["w"].as_u64().expect("w"),
            grid["h"].as_u64().expect("h"),
        );
        assert!(x + w <= 24, "panel {title:?} runs past the 24 columns");
        for column in x..x + w {
            for row in y..y + h {
                assert!(
                    cells.insert((column, row)),
                    "panel {title:?} overlaps another"
                );
            }
        }
        if panel["type"] == "row" {
            continue;
        }
        assert!(
            is_data_source_variable(&panel["datasource"]),
            "panel {title:?} does not use the data source variable"
        );
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "panel {title:?} has no target");
        for target in targets {
            assert!(
                is_data_source_variable(&target["datasource"]),
                "a target of panel {title:?} does not use the data source variable"
            );
            let expr = target["expr"].as_str().unwrap_or_default();
            assert!(
                !expr.trim().is_empty(),
                "panel {title:?}: a target without an expression"
            );
            for used in reference.captures_iter(expr) {
                assert!(
                    defined.contains(&used[1]),
                    "panel {title:?} uses ${}, which the dashboard does not define",
                    &used[1]
                );
            }
        }
    }

    let queried: String = panel_queries(&dashboard)
        .into_iter()
        .flat_map(|(_, exprs)| exprs)
        .collect::<Vec<_>>()
        .join("\n");
    for (subject, family) in COVERED {
        assert!(
            metric_names(&queried).contains(family),
            "no panel shows {subject} ({family})"
        );
    }
}

/// The `ratelimitd_*` names in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    Regex::new(r"\bratelimitd_[a-z_]+")
        .expect("a regex")
        .find_iter(text)
        .map(|name| name.as_str().to_string())
        .collect()
}

/// The families of docs/operations/metrics.md's metrics table, with a histogram's series names.
fn documented_metrics() -> BTreeSet<String> {
    let path = repo_root().join("docs/operations/metrics.md");
    let mut names = BTreeSet::new();
    for line in read(&path).lines() {
        let Some(row) = line.strip_prefix("| `") else {
            continue;
        };
        let mut cells = row.split('|');
        let name = cells
            .next()
            .and_then(|cell| cell.split(['`', '{']).next())
            .unwrap_or_default();
        let kind = cells.next().unwrap_or_default().trim();
        if !name.starts_with("ratelimitd_") {
            continue;
        }
        if kind == "histogram" {
            for suffix in ["_bucket", "_sum", "_count"] {
                names.insert(format!("{name}{suffix}"));
            }
        }
        names.insert(name.to_string());
    }
    assert!(
        names.len() > 50,
        "{}: no metrics table found",
        path.display()
    );
    names
}

#[test]
fn every_metric_the_dashboard_and_the_rules_name_is_documented() {
    let documented = documented_metrics();
    for file in [DASHBOARD, RULES, PROMETHEUS_RULE] {
        let named = metric_names(&read(&observability(file)));
        assert!(!named.is_empty(), "{file} names no metric");
        let unknown: Vec<&String> = named.difference(&documented).collect();
        assert!(
            unknown.is_empty(),
            "{file} names metrics docs/operations/metrics.md does not list: {unknown:?}"
        );
    }
}

/// A Prometheus server of its own: a configuration and a storage directory in a temporary
/// directory, a free port; killed when dropped.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: tempfile::TempDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `target` every second as job [`JOB`], with the rules file
    /// loaded and evaluated every second.
    fn start(target: SocketAddr) -> Prometheus {
        let dir = tempfile::tempdir().expect("temporary directory");
        let config = dir.path().join("prometheus.yml");
        fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - {rules}\n\
                 scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: ['{target}']\n",
                rules = observability(RULES).display()
            ),
        )
        .expect("write prometheus.yml");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port())
            .parse()
            .expect("an address");
        let log = fs::File::create(dir.path().join("prometheus.log")).expect("the log file");
        let child = Command::new(prometheus())
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("the log file"))
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, addr, dir }
    }

    fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// `GET path` on the HTTP API: (status code, JSON body).
    async fn get(&self, path: &str) -> (u16, Value) {
        let (code, body) = http_get(self.addr, path).await;
        let json = serde_json::from_str(&body)
            .unwrap_or_else(|e| panic!("GET {path}: {code}, not JSON ({e}): {body}"));
        (code, json)
    }

    /// `/api/v1/query` of `expr` at the current time: Ok with the result (a vector's samples, a
    /// scalar as one), or Err with Prometheus's error.
    async fn query(&self, expr: &str) -> Result<Vec<Value>, String> {
        let (code, json) = self
            .get(&format!("/api/v1/query?query={}", url_encoded(expr)))
            .await;
        if code != 200 || json["status"] != "success" {
            return Err(format!("{code}: {json}"));
        }
        let result = &json["data"]["result"];
        Ok(match json["data"]["resultType"].as_str() {
            Some("vector") | Some("matrix") => result.as_array().cloned().unwrap_or_default(),
            _ => vec![result.clone()],
        })
    }

    async fn wait_ready(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("prometheus exited with {status}:\n{}", self.log());
            }
            if tokio::net::TcpStream::connect(self.addr).await.is_ok()
                && http_get(self.addr, "/-/ready").await.0 == 200
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "prometheus not ready within 30 s:\n{}",
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `text` percent-encoded for a query string.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// Whether a sample's value (`[time, "value"]`) is a number, not NaN.
fn is_number(sample: &Value) -> bool {
    let value = if sample.is_array() {
        &sample[1]
    } else {
        &sample["value"][1]
    };
    value
        .as_str()
        .and_then(|value| value.parse::<f64>().ok())
        .is_some_and(|value| !value.is_nan())
}

/// `expr` with the dashboard's variables as Grafana fills them in.
fn filled(expr: &str, values: &BTreeMap<&str, String>) -> String {
    let mut expr = expr.to_string();
    for (name, value) in values {
        expr = expr
            .replace(&format!("${{{name}}}"), value)
            .replace(&format!("${name}"), value);
    }
    assert!(!expr.contains('$'), "a variable left unfilled in {expr}");
    expr
}

/// Background tasks, aborted when dropped (before the server they talk to).
struct Load(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Load {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

/// The load: one request every 5 ms, half of them on one user's counter (5 a minute, so denied
/// from the sixth), half on users never seen (admitted, each a store call), one in 20 for a
/// domain no configuration defines; and an Envoy's RLQS stream reporting every second.
async fn load(server: &Ratelimitd) -> Load {
    let mut client = server.client().await;
    let requests = tokio::spawn(async move {
        for i in 0u64.. {
            let (domain, user) = match i % 20 {
                0 => ("unconfigured".to_string(), "anyone".to_string()),
                n if n % 2 == 0 => ("obs".to_string(), "hot".to_string()),
                _ => ("obs".to_string(), format!("user-{i}")),
            };
            let request = RateLimitRequest {
                domain,
                descriptors: vec![descriptor(&[("user", &user)])],
                hits_addend: 0,
            };
            let _ = client.should_rate_limit(request).await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    });
    let mut envoy = Envoy::connect(server).await;
    let reports = tokio::spawn(async move {
        loop {
            envoy
                .report("obs", vec![usage(bucket(&[("user", "rlqs")]), 20, 5, 1)])
                .await;
            envoy.drain(Duration::from_millis(1000)).await;
        }
    });
    Load(vec![requests, reports])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_real_prometheus_scraping_ratelimitd_under_load_answers_every_panel_and_alert() {
    let redis = RedisServer::start();
    let plane = ControlPlane::start(None).await;
    plane.push("1", vec![domain_config("obs", "obs", &[("user", 5)])]);
    let server = Ratelimitd::start(&[
        "--config-source",
        "xds",
        "--xds-server",
        &plane.addr().to_string(),
        "--redis-url",
        &redis.url(),
        // Every rule leased, so that the lease panels have series: the limit of 5 a minute is
        // too small to lease, and its checks count as decided by the store.
        "--consistency",
        "leased",
    ]);
    plane
        .wait_for("the ACK of 1", Duration::from_secs(10), |received| {
            received.is_ack_of("1")
        })
        .await;
    let _load = load(&server).await;

    let mut prometheus = Prometheus::start(server.http_addr());
    prometheus.wait_ready().await;

    let dashboard = dashboard();
    let values: BTreeMap<&str, String> = [
        ("__rate_interval", RATE_INTERVAL.to_string()),
        ("job", JOB.to_string()),
        ("instance", server.http_addr().to_string()),
        ("domain", "obs".to_string()),
        ("rule", ".+".to_string()),
    ]
    .into_iter()
    .collect();

    let deadline = Instant::now() + DATA_TIMEOUT;
    loop {
        let mut missing = Vec::new();
        for (title, exprs) in panel_queries(&dashboard) {
            for expr in exprs {
                let expr = filled(&expr, &values);
                let samples = prometheus.query(&expr).await.unwrap_or_else(|e| {
                    panic!("panel {title:?}: Prometheus does not take `{expr}`: {e}")
                });
                if !samples.iter().any(is_number) {
                    missing.push(format!("panel {title:?}: `{expr}` returned {samples:?}"));
                }
            }
        }
        if missing.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "within {DATA_TIMEOUT:?}, these queries returned no number:\n{}\n\nratelimitd:\n{}\nprometheus:\n{}",
            missing.join("\n"),
            server.output(),
            prometheus.log()
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    let label_values = Regex::new(r"^label_values\((.+), *([a-z_]+)\)$").expect("a regex");
    for (name, query) in variable_queries(&dashboard) {
        let query = filled(&query, &values);
        let parts = label_values.captures(&query).unwrap_or_else(|| {
            panic!("variable {name}: not label_values(SELECTOR, LABEL): {query}")
        });
        let (code, json) = prometheus
            .get(&format!(
                "/api/v1/label/{}/values?match[]={}",
                &parts[2],
                url_encoded(&parts[1])
            ))
            .await;
        let found = json["data"].as_array().cloned().unwrap_or_default();
        assert!(
            code == 200 && !found.is_empty(),
            "variable {name}: `{query}` found no value: {code} {json}"
        );
    }

    for (alert, expr) in alerts() {
        if let Err(e) = prometheus.query(&expr).await {
            panic!("alert {alert}: Prometheus does not take its expression: {e}");
        }
    }
    let expected: BTreeSet<String> = alerts().into_iter().map(|(alert, _)| alert).collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (_, json) = prometheus.get("/api/v1/rules").await;
        let rules: Vec<&Value> = json["data"]["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|group| group["rules"].as_array().into_iter().flatten())
            .collect();
        let evaluated: BTreeSet<String> = rules
            .iter()
            .filter(|rule| rule["health"] == "ok")
            .filter_map(|rule| rule["name"].as_str().map(str::to_string))
            .collect();
        for rule in &rules {
            assert!(
                rule["health"] != "err",
                "Prometheus fails to evaluate {}: {}",
                rule["name"],
                rule["lastError"]
            );
        }
        if evaluated == expected {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "Prometheus evaluated {evaluated:?} of the rules {expected:?} within 10 s: {json}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
