//! The metrics table of docs/operations/metrics.md is `/metrics`, exactly: the real binary is
//! started in configurations that between them meet every *shown* condition of the table (the
//! memory store with gRPC TLS and the statsd sink; a Redis store of a redis-server the test
//! starts, with the deny cache and the failure window and without them; the configuration from
//! an xDS control plane), answers a few requests, and in each the `# TYPE` lines of `/metrics`
//! must be the table's rows whose condition that configuration meets, each with the table's
//! type: a family missing from the table, a row that names no family, a wrong type or a wrong
//! condition fails. A row whose condition ends in `, once counted` is a family with a series per
//! label value seen, absent until the first: it may be missing, but when shown it must meet the
//! condition and have the table's type.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::UdpSocket;
use std::time::{Duration, Instant};

use testkit::control_plane::{domain_config, ControlPlane};
use testkit::ops_support::{metrics, ops_fixture, post_json};
use testkit::pki::Pki;
use testkit::ratelimitd::{request, should, Ratelimitd};
use testkit::redis_server::RedisServer;

/// How long registrations made after the serving line (the statsd sink's) may take to show.
const SETTLE: Duration = Duration::from_secs(10);

/// The conditions each server these tests start meets.
const MEMORY_TLS_STATSD: &[Shown] = &[Shown::Always, Shown::Tls, Shown::Statsd];
const REDIS_DEFAULTS: &[Shown] = &[
    Shown::Always,
    Shown::Redis,
    Shown::DenyCache,
    Shown::FailureWindow,
];
const REDIS_BARE: &[Shown] = &[Shown::Always, Shown::Redis];
const XDS: &[Shown] = &[Shown::Always, Shown::Xds];
const STARTED: [&[Shown]; 4] = [MEMORY_TLS_STATSD, REDIS_DEFAULTS, REDIS_BARE, XDS];

/// When a family is on `/metrics`: the *shown* column of the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Shown {
    Always,
    Redis,
    DenyCache,
    FailureWindow,
    Tls,
    Xds,
    Statsd,
}

impl Shown {
    const ALL: [Shown; 7] = [
        Shown::Always,
        Shown::Redis,
        Shown::DenyCache,
        Shown::FailureWindow,
        Shown::Tls,
        Shown::Xds,
        Shown::Statsd,
    ];

    fn parse(cell: &str) -> Option<Shown> {
        Some(match cell {
            "always" => Shown::Always,
            "Redis" => Shown::Redis,
            "deny cache" => Shown::DenyCache,
            "failure window" => Shown::FailureWindow,
            "TLS" => Shown::Tls,
            "xDS" => Shown::Xds,
            "statsd" => Shown::Statsd,
            _ => return None,
        })
    }
}

/// One row of the table: the family, its type and when it is shown.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Family {
    name: String,
    kind: String,
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name, self.kind)
    }
}

/// A row of the table: the family, when it is shown, and whether only once counted.
#[derive(Clone, Debug)]
struct Row {
    family: Family,
    shown: Shown,
    once_counted: bool,
}

/// The rows of the metrics table of docs/operations/metrics.md (every table of the page), by
/// family name.
fn documented() -> BTreeMap<String, Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations/metrics.md");
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let section: Vec<&str> = text.lines().collect();

    let cells = |line: &str| -> Vec<String> {
        line.trim()
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_string())
            .collect()
    };
    let mut rows = BTreeMap::new();
    let mut columns: Option<(usize, usize, usize)> = None;
    for line in &section {
        if !line.starts_with('|') {
            columns = None;
            continue;
        }
        let row = cells(line);
        if row
            .iter()
            .all(|cell| cell.chars().all(|c| c == '-' || c == ':'))
        {
            continue;
        }
        let Some((metric, kind, shown)) = columns else {
            let at = |name: &str| {
                row.iter().position(|cell| cell == name).unwrap_or_else(|| {
                    panic!("{path}: a metrics table without a `{name}` column: {line}")
                })
            };
            columns = Some((at("metric"), at("type"), at("shown")));
            continue;
        };
        let name = row[metric]
            .trim_matches('`')
            .split('{')
            .next()
            .unwrap_or_default()
            .to_string();
        assert!(
            name.starts_with("ratelimitd_") && !name.contains(['`', ' ', ',']),
            "{path}: one `ratelimitd_*` family per row, found {:?} in: {line}",
            row[metric]
        );
        let (condition, once_counted) = match row[shown].strip_suffix(", once counted") {
            Some(condition) => (condition, true),
            None => (row[shown].as_str(), false),
        };
        let shown = Shown::parse(condition).unwrap_or_else(|| {
            panic!(
                "{path}: unknown shown condition {:?} of {name} (known: always, Redis, deny cache, failure window, TLS, xDS, statsd, each optionally followed by `, once counted`)",
                row[shown]
            )
        });
        let family = Family {
            name: name.clone(),
            kind: row[kind].clone(),
        };
        let row = Row {
            family,
            shown,
            once_counted,
        };
        assert!(
            rows.insert(name.clone(), row).is_none(),
            "{path}: {name} is listed twice"
        );
    }
    assert!(rows.len() >= 40, "only {} metrics documented", rows.len());
    rows
}

/// The families of a `/metrics` text, from its `# TYPE name kind` lines.
fn exported(text: &str) -> BTreeSet<Family> {
    text.lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .map(|rest| {
            let (name, kind) = rest
                .split_once(' ')
                .unwrap_or_else(|| panic!("malformed TYPE line: {rest}"));
            Family {
                name: name.to_string(),
                kind: kind.to_string(),
            }
        })
        .filter(|family| family.name.starts_with("ratelimitd_"))
        .collect()
}

/// What the table says a server meeting `conditions` exports: the families it must show, and
/// those it may show once counted.
fn expected(
    table: &BTreeMap<String, Row>,
    conditions: &[Shown],
) -> (BTreeSet<Family>, BTreeSet<Family>) {
    let (once_counted, always): (Vec<&Row>, Vec<&Row>) = table
        .values()
        .filter(|row| conditions.contains(&row.shown))
        .partition(|row| row.once_counted);
    let families = |rows: Vec<&Row>| rows.into_iter().map(|row| row.family.clone()).collect();
    (families(always), families(once_counted))
}

/// Scrapes `server` until its families are what the table says for `conditions` (families
/// registered after the serving line, such as the statsd sink's, get [`SETTLE`]); panics with
/// the difference otherwise.
async fn assert_matches_table(server: &Ratelimitd, what: &str, conditions: &[Shown]) {
    let table = documented();
    let (wanted, may_show) = expected(&table, conditions);
    let deadline = Instant::now() + SETTLE;
    loop {
        let text = metrics(server.http_addr()).await;
        let found = exported(&text);
        let unexpected: Vec<&Family> = found
            .difference(&wanted)
            .filter(|family| !may_show.contains(*family))
            .collect();
        let missing: Vec<&Family> = wanted.difference(&found).collect();
        if unexpected.is_empty() && missing.is_empty() {
            return;
        }
        if Instant::now() >= deadline {
            let list = |families: Vec<&Family>| {
                families
                    .iter()
                    .map(|family| format!("\n  {family}"))
                    .collect::<String>()
            };
            panic!(
                "{what} (shown: {conditions:?}): /metrics and docs/operations/metrics.md's table differ\n\
                 on /metrics, not in the table for these conditions:{}\n\
                 in the table for these conditions, not on /metrics:{}\n\
                 /metrics:\n{text}",
                list(unexpected),
                list(missing),
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A few requests over `/json`: admitted, denied, an unknown domain, an invalid one.
async fn json_requests(server: &Ratelimitd) {
    let addr = server.http_addr();
    for body in [
        r#"{"domain":"ops","descriptors":[{"entries":[{"key":"plain","value":"a"}]}]}"#,
        r#"{"domain":"ops","descriptors":[{"entries":[{"key":"banned","value":"q"}]}]}"#,
        r#"{"domain":"nope","descriptors":[{"entries":[{"key":"plain","value":"a"}]}]}"#,
    ] {
        let response = post_json(addr, body).await;
        assert!(matches!(response.status, 200 | 429), "{body}: {response:?}");
    }
    let response = post_json(addr, r#"{"domain":"","descriptors":[]}"#).await;
    assert_eq!(response.status, 400, "{response:?}");
}

/// A few requests over gRPC: admitted and denied.
async fn grpc_requests(server: &Ratelimitd, domain: &str, key: &str) {
    let mut client = server.client().await;
    for _ in 0..3 {
        should(&mut client, request(domain, &[&[(key, "a")]], 0)).await;
    }
}

fn config() -> String {
    ops_fixture("metrics.yaml").display().to_string()
}

#[tokio::test]
async fn the_memory_store_with_tls_and_statsd_exports_the_table() {
    let pki = Pki::new();
    let cert = pki.ca("metrics").server("server", "ratelimitd metrics", 2);
    let statsd = UdpSocket::bind("127.0.0.1:0").expect("a UDP socket for statsd");
    let statsd_addr = statsd.local_addr().expect("its address").to_string();
    let config = config();
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--grpc-tls-cert",
        cert.cert.to_str().unwrap(),
        "--grpc-tls-key",
        cert.key.to_str().unwrap(),
        "--statsd-addr",
        &statsd_addr,
        "--statsd-flush-interval",
        "100ms",
    ]);
    json_requests(&server).await;
    assert_matches_table(&server, "memory store, gRPC TLS, statsd", MEMORY_TLS_STATSD).await;
    let text = metrics(server.http_addr()).await;
    assert!(
        text.contains("# TYPE ratelimitd_domain_not_found_total counter\n"),
        "an unknown domain was asked for, so its family shows:\n{text}"
    );
}

#[tokio::test]
async fn a_redis_store_exports_the_table() {
    let redis = RedisServer::start();
    let url = redis.url();
    let config = config();

    let server = Ratelimitd::start(&["--config", &config, "--redis-url", &url]);
    grpc_requests(&server, "ops", "plain").await;
    json_requests(&server).await;
    assert_matches_table(
        &server,
        "Redis, deny cache and failure window on (the defaults)",
        REDIS_DEFAULTS,
    )
    .await;
    drop(server);

    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--redis-url",
        &url,
        "--no-deny-cache",
        "--health-failure-window",
        "0s",
    ]);
    grpc_requests(&server, "ops", "plain").await;
    assert_matches_table(
        &server,
        "Redis, deny cache and failure window off",
        REDIS_BARE,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_from_xds_exports_the_table() {
    let plane = ControlPlane::start(None).await;
    plane.push("1", vec![domain_config("edge", "edge", &[("user", 2)])]);
    let plane_addr = plane.addr().to_string();
    let server = Ratelimitd::start(&["--config-source", "xds", "--xds-server", &plane_addr]);
    plane
        .wait_for("the ACK of 1", SETTLE, |received| received.is_ack_of("1"))
        .await;
    grpc_requests(&server, "edge", "user").await;
    let text = metrics(server.http_addr()).await;
    assert!(
        text.contains("ratelimitd_config_xds_version_info{version=\"1\"} 1"),
        "{text}"
    );
    assert_matches_table(&server, "xDS", XDS).await;
}

/// Every condition is met by one of the servers above, so every row of the table is checked
/// against a real `/metrics` (a condition added to [`Shown`] needs a server that meets it).
#[test]
fn every_row_is_shown_by_a_server_these_tests_start() {
    let started: BTreeSet<Shown> = STARTED.concat().into_iter().collect();
    for shown in Shown::ALL {
        assert!(started.contains(&shown), "no server here meets {shown:?}");
    }
    for (name, row) in documented() {
        assert!(
            started.contains(&row.shown),
            "{name}: no server here meets {:?}",
            row.shown
        );
    }
}
