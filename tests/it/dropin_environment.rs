//! The real binary configured the way envoyproxy/ratelimit is: by its environment variables
//! only (no flags, no `RATELIMITD_*`), its configuration in a `RUNTIME_ROOT` tree behind a
//! `current` symlink, and Redis named by `REDIS_SOCKET_TYPE` / `REDIS_URL`, as upstream
//! Deployments set them.

use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::grpc_transport::{health_status, rls, tls_channel, uds_channel};
use testkit::pki::Pki;
use testkit::ratelimitd::{
    client, command, http_get, log_field, overall, request, run_to_end, should, Ratelimitd,
};
use testkit::redis_server::RedisServer;
use tonic_health::pb::health_check_response::ServingStatus;

const EDGE_V1: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n";
const EDGE_V2: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 5}\n";
const SHOP: &str = "domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: hour, requests_per_unit: 1}\n";

/// `root/current -> v1`, with `v1/ratelimit/config/` holding the configuration files.
struct RuntimeTree {
    dir: tempfile::TempDir,
}

impl RuntimeTree {
    fn new(files: &[(&str, &str)]) -> RuntimeTree {
        let tree = RuntimeTree {
            dir: tempfile::tempdir().unwrap(),
        };
        tree.write_version("v1", files);
        symlink("v1", tree.current()).unwrap();
        tree
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn current(&self) -> PathBuf {
        self.root().join("current")
    }

    fn write_version(&self, version: &str, files: &[(&str, &str)]) {
        let config = self.root().join(version).join("ratelimit/config");
        for (name, text) in files {
            let path = config.join(name);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, text).unwrap();
        }
    }

    /// Points `current` at `version` in one rename, as a deploy tool swaps it.
    fn swap_to(&self, version: &str) {
        let next = self.root().join("current.next");
        symlink(version, &next).unwrap();
        fs::rename(&next, self.current()).unwrap();
    }

    /// The upstream variables that find this tree.
    fn env(&self) -> Vec<(String, String)> {
        vec![
            ("RUNTIME_ROOT".into(), self.current().display().to_string()),
            ("RUNTIME_SUBDIRECTORY".into(), "ratelimit".into()),
        ]
    }
}

/// Upstream variables for loopback ports the kernel picks, logged at `info` so the harness
/// reads the addresses, with statsd off (nothing listens on localhost:8125 here).
fn loopback_env() -> Vec<(String, String)> {
    testkit::ratelimitd::UPSTREAM_LOOPBACK
        .iter()
        .chain(&[("LOG_LEVEL", "info")])
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect()
}

fn redis_env(redis: &RedisServer) -> Vec<(String, String)> {
    vec![
        ("REDIS_SOCKET_TYPE".into(), "tcp".into()),
        ("REDIS_URL".into(), format!("127.0.0.1:{}", redis.port())),
    ]
}

/// Starts the binary with no arguments at all and exactly `env` (beside the harness's own
/// hygiene variables).
fn start_bare(env: &[(String, String)]) -> Ratelimitd {
    let mut cmd = command();
    for (name, value) in env {
        cmd.env(name, value);
    }
    Ratelimitd::spawn(cmd)
}

/// The address a `serving HTTP` line gives for `port` (`metrics` or `debug`).
fn extra_port(server: &Ratelimitd, port: &str) -> SocketAddr {
    let marker = format!("port=\"{port}\"");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let output = server.output();
        if let Some(addr) = output
            .lines()
            .filter(|line| line.contains(&marker))
            .find_map(|line| log_field(line, "addr"))
        {
            return addr;
        }
        assert!(
            Instant::now() < deadline,
            "no {port} port in the log:\n{output}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn codes(server: &Ratelimitd, domain: &str, key: &str, value: &str, n: usize) -> Vec<Code> {
    let mut client = client(server.grpc_addr()).await;
    let mut codes = Vec::new();
    for _ in 0..n {
        let response = should(&mut client, request(domain, &[&[(key, value)]], 1)).await;
        codes.push(overall(&response));
    }
    codes
}

async fn health(server: &Ratelimitd) -> ServingStatus {
    testkit::ratelimitd::serving_status(server.grpc_addr()).await
}

async fn wait_for(what: &str, mut condition: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !condition().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unchanged_upstream_deployment_is_served_from_redis_and_reloads_on_a_symlink_swap() {
    let redis = RedisServer::start();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1), ("teams/shop.yaml", SHOP)]);
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    let server = start_bare(&env);

    assert_eq!(health(&server).await, ServingStatus::Serving);
    let ok_ok_ok_over = vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit];
    assert_eq!(
        codes(&server, "edge", "client", "a", 4).await,
        ok_ok_ok_over
    );
    // A file in a subdirectory of the runtime tree is configuration too, as upstream loads it.
    assert_eq!(
        codes(&server, "shop", "cart", "c1", 2).await,
        vec![Code::Ok, Code::OverLimit]
    );
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        keys.len() >= 2,
        "the counters live in the Redis of REDIS_URL: {keys:?}"
    );

    // The debug port serves /rlconfig, as upstream's does.
    let debug = extra_port(&server, "debug");
    let (status, body) = http_get(debug, "/rlconfig").await;
    assert_eq!(status, 200);
    assert!(body.contains("edge.client"), "{body}");

    tree.write_version("v2", &[("edge.yaml", EDGE_V2), ("teams/shop.yaml", SHOP)]);
    tree.swap_to("v2");
    wait_for("the swapped tree's limit", async || {
        let (_, body) = http_get(server.http_addr(), "/rlconfig").await;
        body.contains("requests_per_unit=5")
    })
    .await;
    let codes = codes(&server, "edge", "client", "b", 6).await;
    assert_eq!(
        codes.iter().filter(|c| **c == Code::Ok).count(),
        5,
        "{codes:?}"
    );
    let log = server.output();
    assert!(
        log.contains("envoyproxy/ratelimit setting: RATELIMITD_REDIS_URL"),
        "{log}"
    );
}

#[test]
fn check_reads_the_runtime_tree_with_upstreams_dotfile_rule() {
    let tree = RuntimeTree::new(&[
        ("edge.yaml", EDGE_V1),
        // Upstream loads every file of the tree, whatever its name.
        ("teams/shop", SHOP),
        (".edge-copy.yaml", EDGE_V2),
    ]);
    let run = |ignore_dotfiles: &str| {
        let mut cmd = command();
        cmd.arg("check");
        for (name, value) in tree.env() {
            cmd.env(name, value);
        }
        cmd.env("RUNTIME_IGNOREDOTFILES", ignore_dotfiles);
        run_to_end(cmd, Duration::from_secs(20))
    };
    let (status, stdout, stderr) = run("true");
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("2 domain(s), 2 limit(s)"), "{stdout}");

    // Without RUNTIME_IGNOREDOTFILES (upstream's default: false), the dotfile is read too and
    // its domain is defined twice.
    let (status, _, stderr) = run("false");
    assert!(!status.success());
    assert!(
        stderr.contains(".edge-copy.yaml") && stderr.contains("domain `edge` is already defined"),
        "{stderr}"
    );
}

#[tokio::test]
async fn global_modes_headers_and_merging_follow_upstreams_variables() {
    let tree = RuntimeTree::new(&[
        ("edge.yaml", EDGE_V1),
        ("edge-more.yaml", SHOP.replace("shop", "edge").as_str()),
    ]);
    let mut env = loopback_env();
    env.extend(tree.env());
    // No REDIS_URL: drop-in mode would use upstream's nutcracker socket; a Redis is given.
    let redis = RedisServer::start();
    env.extend(redis_env(&redis));
    for (name, value) in [
        ("MERGE_DOMAIN_CONFIG", "true"),
        ("SHADOW_MODE", "1"),
        ("LIMIT_RESPONSE_HEADERS_ENABLED", "T"),
        ("LIMIT_REMAINING_HEADER", "X-Left"),
        ("RESPONSE_DYNAMIC_METADATA", "true"),
    ] {
        env.push((name.into(), value.into()));
    }
    let server = start_bare(&env);
    let mut client = client(server.grpc_addr()).await;
    let mut last = None;
    for _ in 0..4 {
        last = Some(should(&mut client, request("edge", &[&[("client", "z")]], 1)).await);
    }
    let response = last.unwrap();
    // SHADOW_MODE: over the limit, yet the answer is OK and the status keeps its code.
    assert_eq!(overall(&response), Code::Ok);
    assert_eq!(response.statuses[0].code, Code::OverLimit as i32);
    let headers: Vec<(String, String)> = response
        .response_headers_to_add
        .iter()
        .map(|h| (h.key.clone(), h.value.clone()))
        .collect();
    assert_eq!(headers[0], ("RateLimit-Limit".into(), "3".into()));
    assert_eq!(headers[1], ("X-Left".into(), "0".into()));
    assert_eq!(headers[2].0, "RateLimit-Reset");
    assert!(response.dynamic_metadata.is_some());
    // MERGE_DOMAIN_CONFIG: the second file's `cart` is part of domain `edge`.
    assert_eq!(
        codes(&server, "edge", "cart", "c", 2).await,
        vec![Code::Ok, Code::Ok],
        "shadow mode answers OK"
    );
    let (_, body) = http_get(server.http_addr(), "/rlconfig").await;
    assert!(body.contains("edge.cart"), "{body}");
}

/// Two levels: `client` (3 a minute) and `client` → `path` (2 a minute), both key-only, so
/// envoyproxy/ratelimit's stat keys are `edge.client` and `edge.client.path`.
const EDGE_NESTED: &str = "domain: edge\ndescriptors:\n  - key: client\n    rate_limit: {unit: minute, requests_per_unit: 3}\n    descriptors:\n      - key: path\n        rate_limit: {unit: minute, requests_per_unit: 2}\n";

/// Over one minute window: 4 requests for `client=p` (3 admitted, the third near the limit,
/// 1 over), 3 for `client=q, path=/a` (2 admitted, the second near, 1 over) and one in the
/// unknown domain `edeg`: 8 requests.
async fn nested_decisions(server: &Ratelimitd) {
    testkit::ratelimitd::wait_for_window_room(60, 15);
    assert_eq!(
        codes(server, "edge", "client", "p", 4).await,
        vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    let mut client = client(server.grpc_addr()).await;
    let mut path_codes = Vec::new();
    for _ in 0..3 {
        let response = should(
            &mut client,
            request("edge", &[&[("client", "q"), ("path", "/a")]], 1),
        )
        .await;
        path_codes.push(overall(&response));
    }
    assert_eq!(path_codes, vec![Code::Ok, Code::Ok, Code::OverLimit]);
    assert_eq!(
        codes(server, "edeg", "client", "x", 1).await,
        vec![Code::Ok]
    );
}

/// The families of an exposition without the response-time histogram's buckets and sum, which
/// depend on how long the requests took; those are returned apart.
fn split_timing(body: &str) -> (String, Vec<String>) {
    let timing = |line: &&str| {
        line.starts_with("ratelimit_service_response_time_seconds_bucket")
            || line.starts_with("ratelimit_service_response_time_seconds_sum")
    };
    let rest: String = body
        .lines()
        .filter(|line| !timing(line))
        .map(|line| format!("{line}\n"))
        .collect();
    let buckets = body
        .lines()
        .filter(|line| timing(line))
        .map(str::to_string)
        .collect();
    (rest, buckets)
}

const HELP: &str = "Metric autogenerated by statsd_exporter.";

#[tokio::test]
async fn use_prometheus_serves_upstreams_names_and_labels_on_its_port_and_path() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_NESTED)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("USE_PROMETHEUS".into(), "true".into()));
    env.push(("PROMETHEUS_ADDR".into(), "127.0.0.1:0".into()));
    env.push(("PROMETHEUS_PATH".into(), "/stats/prometheus".into()));
    let server = start_bare(&env);
    nested_decisions(&server).await;
    let port = extra_port(&server, "envoyproxy_metrics");
    let (status, body) = http_get(port, "/stats/prometheus").await;
    assert_eq!(status, 200);
    // What envoyproxy/ratelimit's default mapper (src/stats/prom/default_mapper.yaml) makes of
    // the stats of these requests: the two-field key through its globs, the three-field key
    // through its regexes, the unknown domain's stat unmapped (its name escaped).
    let (families, timing) = split_timing(&body);
    let counter = |name: &str, series: &[&str]| {
        let mut text = format!("# HELP {name} {HELP}\n# TYPE {name} counter\n");
        for line in series {
            text.push_str(&format!("{name}{line}\n"));
        }
        text
    };
    let expected = [
        counter("ratelimit_service_config_load_success", &[" 1"]),
        counter(
            "ratelimit_service_rate_limit_edeg_domain_not_found",
            &[" 1"],
        ),
        counter(
            "ratelimit_service_rate_limit_near_limit",
            &[
                "{domain=\"edge\",key1=\"client\"} 1",
                "{domain=\"edge\",key1=\"client\",key2=\"path\"} 1",
            ],
        ),
        counter(
            "ratelimit_service_rate_limit_over_limit",
            &[
                "{domain=\"edge\",key1=\"client\"} 1",
                "{domain=\"edge\",key1=\"client\",key2=\"path\"} 1",
            ],
        ),
        counter(
            "ratelimit_service_rate_limit_total_hits",
            &[
                "{domain=\"edge\",key1=\"client\"} 4",
                "{domain=\"edge\",key1=\"client\",key2=\"path\"} 3",
            ],
        ),
        counter(
            "ratelimit_service_rate_limit_within_limit",
            &[
                "{domain=\"edge\",key1=\"client\"} 3",
                "{domain=\"edge\",key1=\"client\",key2=\"path\"} 2",
            ],
        ),
        format!(
            "# HELP ratelimit_service_response_time_seconds {HELP}\n\
             # TYPE ratelimit_service_response_time_seconds histogram\n\
             ratelimit_service_response_time_seconds_count{{grpc_method=\"ShouldRateLimit\"}} 8\n"
        ),
        counter(
            "ratelimit_service_total_requests",
            &["{grpc_method=\"ShouldRateLimit\"} 8"],
        ),
    ]
    .concat();
    assert_eq!(families, expected, "{body}");
    // client_golang's default buckets, in seconds.
    let bounds: Vec<&str> = timing
        .iter()
        .filter_map(|line| line.split("le=\"").nth(1)?.split('"').next())
        .collect();
    assert_eq!(
        bounds,
        ["0.005", "0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "1", "2.5", "5", "10", "+Inf"]
    );
    assert!(timing.contains(
        &"ratelimit_service_response_time_seconds_bucket{grpc_method=\"ShouldRateLimit\",le=\"+Inf\"} 8"
            .to_string()
    ));
    assert!(timing.iter().any(|line| line.starts_with(
        "ratelimit_service_response_time_seconds_sum{grpc_method=\"ShouldRateLimit\"} "
    )));
    // Only its path there; ratelimitd's own names stay on the HTTP port.
    assert_eq!(http_get(port, "/metrics").await.0, 404);
    let (status, own) = http_get(server.http_addr(), "/metrics").await;
    assert_eq!(status, 200);
    assert!(
        own.contains("ratelimitd_total_hits_total{domain=\"edge\",rule=\"edge.client\"} 4\n"),
        "{own}"
    );
    assert!(!own.contains("ratelimit_service_"), "{own}");
    assert!(
        server
            .output()
            .contains("differs from envoyproxy/ratelimit: USE_PROMETHEUS=true: upstream's families are current at each scrape"),
        "{}",
        server.output()
    );
}

#[tokio::test]
async fn a_prometheus_mapper_file_names_the_families() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_NESTED)]);
    let redis = RedisServer::start();
    let mapper = tree.root().join("mapper.yaml");
    fs::write(
        &mapper,
        "mappings:\n\
         - match: ratelimit.service.rate_limit.*.*.*\n  name: rl_$3\n  labels: {domain: $1, rule: $2}\n\
         - match: ratelimit\\.service\\.rate_limit\\.(.+)\\.([^.]+)$\n  match_type: regex\n  name: rl_deep_$2\n  labels: {key: $1}\n\
         - match: ratelimit_server.*.response_time\n  name: rl_time_ms\n  timer_type: histogram\n  buckets: [1, 100]\n  labels: {method: $1}\n\
         - match: ratelimit.service.*\n  name: x\n  action: drop\n\
         - match: ratelimit_server.*.total_requests\n  name: x\n  action: drop\n",
    )
    .unwrap();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("USE_PROMETHEUS".into(), "true".into()));
    env.push(("PROMETHEUS_ADDR".into(), "127.0.0.1:0".into()));
    env.push((
        "PROMETHEUS_MAPPER_YAML".into(),
        mapper.display().to_string(),
    ));
    let server = start_bare(&env);
    nested_decisions(&server).await;
    let (status, body) = http_get(extra_port(&server, "envoyproxy_metrics"), "/metrics").await;
    assert_eq!(status, 200);
    let lines: Vec<&str> = body.lines().filter(|l| !l.starts_with('#')).collect();
    let time = |le: &str| format!("rl_time_ms_bucket{{method=\"ShouldRateLimit\",le=\"{le}\"}} 8");
    for line in [
        "rl_total_hits{domain=\"edge\",rule=\"client\"} 4",
        "rl_over_limit{domain=\"edge\",rule=\"client\"} 1",
        "rl_deep_total_hits{key=\"edge.client.path\"} 3",
        "rl_deep_within_limit{key=\"edge.client.path\"} 2",
        "rl_time_ms_count{method=\"ShouldRateLimit\"} 8",
        &time("+Inf"),
    ] {
        assert!(lines.contains(&line), "{line}:\n{body}");
    }
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("rl_time_ms_bucket{method=\"ShouldRateLimit\",le=\"100\"} ")),
        "{body}"
    );
    assert!(
        !body.contains("config_load") && !body.contains("total_requests"),
        "dropped: {body}"
    );
}

#[test]
fn a_prometheus_mapper_that_cannot_be_honoured_stops_startup_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let mapper = dir.path().join("mapper.yaml");
    fs::write(&mapper, "mappings:\n- match: a.*\n  name: a\n  ttl: 5m\n").unwrap();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let mut cmd = command();
    for (name, value) in loopback_env().into_iter().chain(tree.env()) {
        cmd.env(name, value);
    }
    cmd.env("USE_PROMETHEUS", "true")
        .env("PROMETHEUS_ADDR", "127.0.0.1:0")
        .env("PROMETHEUS_MAPPER_YAML", &mapper)
        .env("REDIS_SOCKET_TYPE", "tcp")
        .env("REDIS_URL", "127.0.0.1:1");
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
    let expected = format!(
        "--envoyproxy-metrics-mapper: {}:4:8: ttl is not supported",
        mapper.display()
    );
    assert!(
        stdout.contains(&expected) || stderr.contains(&expected),
        "{stdout}{stderr}"
    );
}

/// The test's DogStatsD agent: the lines received on a loopback UDP port.
fn dogstatsd_lines(socket: &std::net::UdpSocket, until: impl Fn(&[String]) -> bool) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut lines = Vec::new();
    while !until(&lines) {
        assert!(Instant::now() < deadline, "DogStatsD received {lines:#?}");
        let mut buffer = [0u8; 2048];
        let Ok(length) = socket.recv(&mut buffer) else {
            continue;
        };
        assert!(length <= 1432, "a datagram of {length} bytes");
        lines.extend(
            String::from_utf8_lossy(&buffer[..length])
                .lines()
                .map(str::to_string),
        );
    }
    lines
}

/// Counter lines summed by name and tags: `name|#tags` -> total.
fn dog_counters(lines: &[String]) -> std::collections::BTreeMap<String, u64> {
    let mut counters = std::collections::BTreeMap::new();
    for line in lines {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let mut fields = rest.split('|');
        let (Some(value), Some("c")) = (fields.next(), fields.next()) else {
            continue;
        };
        let tags = fields.next().unwrap_or("");
        *counters.entry(format!("{name}|{tags}")).or_default() += value.parse::<u64>().unwrap();
    }
    counters
}

#[tokio::test]
async fn use_dog_statsd_sends_tags_and_applies_mogrifiers_as_upstream() {
    let agent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    agent
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_NESTED)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    for (name, value) in [
        ("USE_DOG_STATSD", "true".to_string()),
        ("STATSD_HOST", "127.0.0.1".into()),
        (
            "STATSD_PORT",
            agent.local_addr().unwrap().port().to_string(),
        ),
        ("STATS_FLUSH_INTERVAL", "100ms".into()),
        ("EXTRA_TAGS", "env:test".into()),
        // envoyproxy/ratelimit's README, "DogStatsD": the HITS mogrifier.
        ("USE_DOG_STATSD_MOGRIFIERS", "HITS".into()),
        (
            "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
            r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$".into(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_HITS_NAME",
            "ratelimit.service.rate_limit.$3".into(),
        ),
        (
            "DOG_STATSD_MOGRIFIER_HITS_TAGS",
            "domain:$1,descriptor:$2".into(),
        ),
        // datadog-go's own tag.
        ("DD_SERVICE", "ratelimit".into()),
    ] {
        env.push((name.into(), value));
    }
    let server = start_bare(&env);
    nested_decisions(&server).await;
    let tags = "#service:ratelimit,env:test";
    let hits = |stat: &str, descriptor: &str| {
        format!("ratelimit.service.rate_limit.{stat}|{tags},descriptor:{descriptor},domain:edge")
    };
    let expected: std::collections::BTreeMap<String, u64> = [
        (hits("total_hits", "client"), 4),
        (hits("within_limit", "client"), 3),
        (hits("near_limit", "client"), 1),
        (hits("over_limit", "client"), 1),
        (hits("total_hits", "client.path"), 3),
        (hits("within_limit", "client.path"), 2),
        (hits("near_limit", "client.path"), 1),
        (hits("over_limit", "client.path"), 1),
        // No mogrifier matches these: names as upstream sends them, the tags as tags.
        (
            format!("ratelimit.service.rate_limit.edeg.domain_not_found|{tags}"),
            1,
        ),
        (format!("ratelimit.service.config_load_success|{tags}"), 1),
        (
            format!("ratelimit_server.ShouldRateLimit.total_requests|{tags}"),
            8,
        ),
    ]
    .into_iter()
    .collect();
    let lines = dogstatsd_lines(&agent, |lines| dog_counters(lines) == expected);
    let timers: Vec<&String> = lines.iter().filter(|l| l.contains("|ms")).collect();
    assert!(!timers.is_empty(), "{lines:#?}");
    for timer in timers {
        let (name, rest) = timer.split_once(':').unwrap();
        assert_eq!(name, "ratelimit_server.ShouldRateLimit.response_time");
        let (value, tail) = rest.split_once('|').unwrap();
        let (whole, decimals) = value.split_once('.').unwrap();
        assert!(
            whole.parse::<u64>().is_ok() && decimals == "000000",
            "{timer}"
        );
        assert_eq!(tail, format!("ms|{tags}"), "{timer}");
    }
}
#[tokio::test]
async fn a_forced_start_is_unhealthy_until_a_configuration_loads() {
    let tree = RuntimeTree::new(&[("edge.yaml", "domain: edge\nbogus: 1\n")]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("FORCE_START_WITHOUT_INITIAL_CONFIG".into(), "true".into()));
    env.push((
        "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED".into(),
        "true".into(),
    ));
    let server = start_bare(&env);
    assert_eq!(health(&server).await, ServingStatus::NotServing);
    assert!(
        server.output().contains("edge.yaml:2:1"),
        "{}",
        server.output()
    );

    tree.write_version("v1", &[("edge.yaml", EDGE_V1)]);
    wait_for("health after a valid configuration", async || {
        health(&server).await == ServingStatus::Serving
    })
    .await;
    assert_eq!(
        codes(&server, "edge", "client", "f", 4).await,
        vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
}

#[tokio::test]
async fn redis_auth_and_a_unix_socket_as_upstream_names_them() {
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("redis.sock");
    let socket_text = socket.display().to_string();
    let redis = RedisServer::start_with(&[
        "--requirepass",
        "s3c@r/t",
        "--unixsocket",
        &socket_text,
        "--unixsocketperm",
        "700",
    ]);
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    for (socket_type, url) in [
        // REDIS_SOCKET_TYPE defaults to unix, as upstream's.
        (None, socket_text.clone()),
        (Some("tcp"), format!("127.0.0.1:{}", redis.port())),
    ] {
        let mut env = loopback_env();
        env.extend(tree.env());
        env.push(("REDIS_URL".into(), url));
        env.push(("REDIS_AUTH".into(), "s3c@r/t".into()));
        if let Some(socket_type) = socket_type {
            env.push(("REDIS_SOCKET_TYPE".into(), socket_type.into()));
        }
        let server = start_bare(&env);
        let value = format!("{socket_type:?}");
        assert_eq!(
            codes(&server, "edge", "client", &value, 4).await,
            vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit],
            "{socket_type:?}"
        );
        assert!(
            !server.output().contains("s3c@r"),
            "the password is never logged:\n{}",
            server.output()
        );
        let shown = match socket_type {
            None => format!("RATELIMITD_REDIS_URL=unix://{socket_text}?pass=***"),
            Some(_) => format!(
                "RATELIMITD_REDIS_URL=redis://:***@127.0.0.1:{}",
                redis.port()
            ),
        };
        assert!(
            server.output().contains(&shown),
            "the address is logged: {shown}\n{}",
            server.output()
        );
    }
}

/// Each refused value names what the user set (the upstream variable, or the `RATELIMITD_*` one,
/// never a flag they did not pass), the value and what is accepted; every one exits 1.
#[test]
fn refused_values_name_the_variable_the_user_set() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    for (env, expected) in [
        (
            vec![("REDIS_POOL_SIZE", "ten")],
            "REDIS_POOL_SIZE: `ten` is not a number of connections (a whole number from 1)",
        ),
        (
            vec![("NEAR_LIMIT_RATIO", "1.5")],
            "NEAR_LIMIT_RATIO=`1.5` is refused: `1.5` is not a ratio in (0, 1]",
        ),
        (
            vec![("RATELIMITD_REDIS_POOL_SIZE", "ten")],
            "RATELIMITD_REDIS_POOL_SIZE=`ten` is refused",
        ),
        (
            vec![("RATELIMITD_ON_STORE_ERROR", "maybe")],
            "RATELIMITD_ON_STORE_ERROR=`maybe` is refused: unknown store error policy `maybe` (expected unavailable, allow or deny)",
        ),
        (
            vec![("REDIS_URL", "127.0.0.1:6379")],
            "REDIS_URL: `127.0.0.1:6379` is read as the path of a unix socket because \
             REDIS_SOCKET_TYPE is unset, and upstream's default is unix; for a TCP address set \
             REDIS_SOCKET_TYPE=tcp",
        ),
    ] {
        let mut cmd = command();
        for (name, value) in tree.env() {
            cmd.env(name, value);
        }
        for (name, value) in &env {
            cmd.env(name, value);
        }
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{env:?}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{env:?}: {stderr}");
        assert!(!stderr.contains("'--"), "no flag the user did not pass: {stderr}");
    }
    // A flag that does not exist is a configuration error too: exit 1.
    let mut cmd = command();
    cmd.args(["serve", "--no-such-flag"]);
    let (status, _, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stderr}");
}

#[test]
fn ratelimitd_flags_and_variables_win_over_upstreams() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let own = tempfile::tempdir().unwrap();
    fs::write(own.path().join("shop.yaml"), SHOP).unwrap();
    let mut cmd = command();
    cmd.arg("check");
    for (name, value) in tree.env() {
        cmd.env(name, value);
    }
    cmd.env("RATELIMITD_CONFIG", own.path());
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert!(status.success(), "{stdout}{stderr}");
    assert!(stdout.contains("1 domain(s), 1 limit(s)"), "{stdout}");

    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(redis_env(&redis));
    env.push(("GRPC_PORT".into(), "1".into()));
    let mut cmd = command();
    cmd.args(["serve", "--config"]).arg(own.path());
    cmd.args(["--grpc-addr", "127.0.0.1:0"]);
    for (name, value) in &env {
        cmd.env(name, value);
    }
    let server = Ratelimitd::spawn(cmd);
    assert_ne!(server.grpc_addr().port(), 1, "the flag wins over GRPC_PORT");
}

#[test]
fn variables_that_cannot_be_honoured_stop_startup_by_name() {
    let cases: [(&[(&str, &str)], &str); 5] = [
        (
            &[("BACKEND_TYPE", "memcache")],
            "BACKEND_TYPE=memcache: Memcached is not supported",
        ),
        (
            &[("USE_STATSD", "true"), ("USE_PROMETHEUS", "true")],
            "USE_STATSD=true and USE_PROMETHEUS=true: one stats sink at a time",
        ),
        (
            &[
                ("USE_DOG_STATSD", "true"),
                ("USE_DOG_STATSD_MOGRIFIERS", "HITS"),
            ],
            "USE_DOG_STATSD_MOGRIFIERS: DOG_STATSD_MOGRIFIER_HITS_PATTERN is not set",
        ),
        (&[("CONFIG_TYPE", "REST")], "CONFIG_TYPE: `REST`"),
        (
            &[("SHADOW_MODE", "yes")],
            "SHADOW_MODE: `yes` is not a Go boolean",
        ),
    ];
    for (pairs, expected) in cases {
        let mut cmd = command();
        cmd.envs(pairs.iter().copied());
        let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{pairs:?}: {stdout}{stderr}");
        assert!(stderr.contains(expected), "{pairs:?}: {stderr}");
    }
}

#[tokio::test]
async fn statsd_is_on_by_default_as_upstreams_and_takes_its_host_port_tags_and_interval() {
    let statsd = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    statsd
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env: Vec<(String, String)> = loopback_env()
        .into_iter()
        .filter(|(name, _)| name != "USE_STATSD")
        .collect();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("STATSD_HOST".into(), "127.0.0.1".into()));
    let port = statsd.local_addr().unwrap().port().to_string();
    env.push(("STATSD_PORT".into(), port));
    env.push(("STATS_FLUSH_INTERVAL".into(), "100ms".into()));
    env.push(("EXTRA_TAGS".into(), "env:test".into()));
    let server = start_bare(&env);
    assert_eq!(
        codes(&server, "edge", "client", "s", 4).await,
        vec![Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]
    );
    let mut totals = std::collections::BTreeMap::<String, i64>::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    let hits = "ratelimit.service.rate_limit.edge.client.total_hits.__env=test";
    let over = "ratelimit.service.rate_limit.edge.client.over_limit.__env=test";
    while totals.get(hits) != Some(&4) || totals.get(over) != Some(&1) {
        assert!(Instant::now() < deadline, "statsd received {totals:?}");
        let mut buffer = [0u8; 2048];
        let Ok(length) = statsd.recv(&mut buffer) else {
            continue;
        };
        for line in String::from_utf8_lossy(&buffer[..length]).lines() {
            if let Some((name, rest)) = line.split_once(':') {
                if let Some(count) = rest.strip_suffix("|c") {
                    *totals.entry(name.to_string()).or_default() += count.parse::<i64>().unwrap();
                }
            }
        }
    }
}

#[tokio::test]
async fn grpc_tls_and_mutual_tls_from_upstreams_variables() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd drop-in", 2);
    let client = ca.client("envoy", "DNS:envoy.client.test");
    let impostor = ca.client("impostor", "DNS:other.client.test");
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    for (name, path) in [
        ("GRPC_SERVER_TLS_CERT", &cert.cert),
        ("GRPC_SERVER_TLS_KEY", &cert.key),
        ("GRPC_CLIENT_TLS_CACERT", &ca.cert),
    ] {
        env.push((name.into(), path.display().to_string()));
    }
    env.push(("GRPC_SERVER_USE_TLS".into(), "true".into()));
    env.push(("GRPC_CLIENT_TLS_SAN".into(), "envoy.client.test".into()));
    let server = start_bare(&env);

    let anonymous = tls_channel(server.grpc_addr(), &ca.cert, None).await;
    let refused = match anonymous {
        Err(_) => true,
        Ok(channel) => health_status(channel).await.is_err(),
    };
    assert!(refused, "a client without a certificate is refused");
    let wrong_san = match tls_channel(server.grpc_addr(), &ca.cert, Some(&impostor)).await {
        Err(_) => true,
        Ok(channel) => health_status(channel).await.is_err(),
    };
    assert!(
        wrong_san,
        "a client certificate without GRPC_CLIENT_TLS_SAN is refused"
    );
    let channel = tls_channel(server.grpc_addr(), &ca.cert, Some(&client))
        .await
        .expect("the pinned client connects");
    let mut client = rls(channel);
    let mut codes = Vec::new();
    for _ in 0..4 {
        let response = should(&mut client, request("edge", &[&[("client", "tls")]], 1)).await;
        codes.push(overall(&response));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::Ok, Code::OverLimit]);
}

#[tokio::test]
async fn grpc_uds_and_connection_age_from_upstreams_variables() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let socket_dir = tempfile::tempdir().unwrap();
    let socket = socket_dir.path().join("ratelimit.sock");
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("GRPC_UDS".into(), socket.display().to_string()));
    env.push(("GRPC_MAX_CONNECTION_AGE".into(), "1s".into()));
    env.push(("GRPC_MAX_CONNECTION_AGE_GRACE".into(), "500ms".into()));
    let server = start_bare(&env);
    assert_eq!(
        server.grpc_uds(),
        socket,
        "GRPC_UDS replaces GRPC_HOST:GRPC_PORT"
    );

    let mut client = rls(uds_channel(&socket).await);
    let response = should(&mut client, request("edge", &[&[("client", "uds")]], 1)).await;
    assert_eq!(overall(&response), Code::Ok);
    wait_for(
        "a connection aged out by GRPC_MAX_CONNECTION_AGE",
        async || {
            let (_, metrics) = http_get(server.http_addr(), "/metrics").await;
            metrics
                .lines()
                .find_map(|line| line.strip_prefix("ratelimitd_grpc_connections_aged_total "))
                .and_then(|count| count.parse::<u64>().ok())
                .is_some_and(|count| count >= 1)
        },
    )
    .await;
}

#[tokio::test]
async fn cache_key_prefix_and_upstreams_key_format_by_default() {
    let tree = RuntimeTree::new(&[("edge.yaml", EDGE_V1)]);
    let redis = RedisServer::start();
    let mut env = loopback_env();
    env.extend(tree.env());
    env.extend(redis_env(&redis));
    env.push(("CACHE_KEY_PREFIX".into(), "shop_".into()));

    // Drop-in mode writes envoyproxy/ratelimit's keys, with its 300 s of expiration jitter.
    let server = start_bare(&env);
    let before = testkit::ratelimitd::unix_now() as u64 / 60 * 60;
    codes(&server, "edge", "client", "u", 1).await;
    let after = testkit::ratelimitd::unix_now() as u64 / 60 * 60;
    let mut found = None;
    for window_start in [before, after] {
        let key = format!("shop_edge_client_u_{window_start}");
        let count: Option<u64> = redis::cmd("GET")
            .arg(&key)
            .query(&mut redis.connection())
            .unwrap();
        if count == Some(1) {
            found = Some(key);
        }
    }
    let upstream_key = found.expect("envoyproxy/ratelimit's key holds the hit");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&upstream_key)
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        (55..=360).contains(&ttl),
        "TTL within a minute plus 300 s of jitter: {ttl}"
    );
    drop(server);
    redis::cmd("FLUSHALL")
        .query::<()>(&mut redis.connection())
        .unwrap();

    // RATELIMITD_KEY_FORMAT=ratelimitd: ratelimitd's own keys, behind CACHE_KEY_PREFIX.
    env.push(("RATELIMITD_KEY_FORMAT".into(), "ratelimitd".into()));
    let server = start_bare(&env);
    codes(&server, "edge", "client", "k", 1).await;
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut redis.connection())
        .unwrap();
    assert!(
        !keys.is_empty() && keys.iter().all(|key| key.starts_with("shop_rl1:")),
        "ratelimitd's own keys, behind CACHE_KEY_PREFIX: {keys:?}"
    );
}
