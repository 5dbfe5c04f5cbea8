//! envoyproxy/ratelimit's own configuration fixtures, which are not part of this repository:
//! its invalid files are rejected with the line and reason expected, and its valid and later/
//! files, served as they are (later/'s merged where upstream merges them), give the limits,
//! shared counters and dynamic metadata envoyproxy/ratelimit gives them.
//!
//! Every test is ignored by the test command: `scripts/compat-check.sh [DIR]` runs them with
//! `RATELIMITD_COMPAT_DIR=DIR` (the directory that holds `valid/` and `invalid/`) after checking
//! each file with `ratelimitd check`. The repository's own counterparts of these files, in
//! `tests/fixtures/compat/`, are checked by tests/it/config_compat.rs, tests/it/cli_check.rs and
//! tests/it/grpc_matching.rs on every run.

use std::fs;
use std::path::{Path, PathBuf};

use ratelimitd::config::parse_domain;
use ratelimitd::proto::rls::rate_limit_response::rate_limit::Unit;
use ratelimitd::proto::rls::rate_limit_response::{Code, DescriptorStatus};
use testkit::ratelimitd::*;

const MAX: u32 = u32::MAX;

const NEEDS_UPSTREAM: &str =
    "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh";

/// A file of the directory named by `RATELIMITD_COMPAT_DIR`.
fn upstream(name: &str) -> PathBuf {
    let dir = std::env::var_os("RATELIMITD_COMPAT_DIR").unwrap_or_else(|| {
        panic!("RATELIMITD_COMPAT_DIR is not set: {NEEDS_UPSTREAM}");
    });
    let dir = PathBuf::from(dir);
    assert!(
        dir.join("valid").is_dir() && dir.join("invalid").is_dir(),
        "{} has no valid/ and invalid/ directories",
        dir.display()
    );
    dir.join(name)
}

fn serve_upstream(file: &str) -> Ratelimitd {
    let file = upstream(file);
    let file = file.to_str().expect("utf-8 path");
    Ratelimitd::start(&["--config", file])
}

async fn one_in(client: &mut Client, domain: &str, entries: &[(&str, &str)]) -> DescriptorStatus {
    let resp = should(client, request(domain, &[entries], 0)).await;
    resp.statuses
        .into_iter()
        .next()
        .expect("one status per descriptor")
}

#[track_caller]
fn assert_no_limit(status: &DescriptorStatus, what: &str) {
    assert_eq!(code(status), Code::Ok, "{what}: {status:?}");
    assert!(
        status.current_limit.is_none(),
        "{what}: expected no current_limit: {status:?}"
    );
}

#[track_caller]
fn assert_limit(status: &DescriptorStatus, rpu: u32, unit: Unit, what: &str) {
    assert_eq!(limit(status), Some((rpu, unit)), "{what}: {status:?}");
}

fn name(status: &DescriptorStatus) -> &str {
    status
        .current_limit
        .as_ref()
        .map(|l| l.name.as_str())
        .unwrap_or("<no current_limit>")
}

// ---------------------------------------------------------------------------------------------
// invalid/: rejected with a position and a reason
// ---------------------------------------------------------------------------------------------

/// Every invalid file with the line and a fragment of the reason it must be rejected for.
const INVALID: &[(&str, usize, &str)] = &[
    ("bad_limit_unit.yaml", 6, "unknown unit `foo`"),
    ("bad_yaml.yaml", 1, "invalid YAML"),
    ("duplicate_key.yaml", 6, "duplicate descriptor"),
    ("empty_domain.yaml", 1, "`domain`"),
    ("empty_key.yaml", 3, "`key`"),
    ("misspelled_key.yaml", 5, "unknown field `ratelimit`"),
    ("misspelled_key2.yaml", 7, "unknown field `requestsperunit`"),
    ("non_map_list.yaml", 3, "must be a map"),
    ("non_string_key.yaml", 1, "keys must be strings"),
    ("replaces_empty.yaml", 10, "must not be empty"),
    ("replaces_self.yaml", 10, "cannot replace itself"),
    (
        "unlimited_with_unit.yaml",
        6,
        "cannot be combined with `unlimited: true`",
    ),
];

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let entries =
        fs::read_dir(dir).unwrap_or_else(|error| panic!("cannot list {}: {error}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("listing fixtures").path())
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

#[test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
fn upstream_invalid_files_are_rejected_with_line_and_reason() {
    let mut failures = Vec::new();
    for path in yaml_files(&upstream("invalid")) {
        let file = path
            .file_name()
            .and_then(|name| name.to_str())
            .expect("fixture names are UTF-8");
        let Some(&(_, line, reason)) = INVALID.iter().find(|entry| entry.0 == file) else {
            failures.push(format!(
                "{file}: new fixture, add its expected error to INVALID"
            ));
            continue;
        };
        let text = fs::read_to_string(&path).expect("reading fixture");
        match parse_domain(&path, &text) {
            Ok(rules) => failures.push(format!("{file}: accepted as {rules:?}")),
            Err(errors) => {
                assert!(errors
                    .iter()
                    .all(|error| error.line > 0 && error.file() == Some(&*path)));
                if !errors
                    .iter()
                    .any(|error| error.line == line && error.message.contains(reason))
                {
                    failures.push(format!(
                        "{file}: expected line {line} mentioning {reason:?}, got:\n{errors}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

// ---------------------------------------------------------------------------------------------
// valid/: served unchanged, the limits envoyproxy/ratelimit gives
// ---------------------------------------------------------------------------------------------

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_basic_config_gives_envoyproxy_limits() {
    let server = serve_upstream("valid/basic_config.yaml");
    let mut c = server.client().await;
    let d = "test-domain";

    let s = one_in(&mut c, d, &[("key1", "value1"), ("subkey1", "x")]).await;
    assert_limit(&s, 5, Unit::Second, "key1=value1,subkey1=x");
    assert_eq!(s.limit_remaining, 4);
    let s = one_in(&mut c, d, &[("key1", "value1"), ("subkey1", "subvalue1")]).await;
    assert_limit(&s, 10, Unit::Second, "key1=value1,subkey1=subvalue1");
    assert_eq!(s.limit_remaining, 9);
    let s = one_in(&mut c, d, &[("key1", "value1")]).await;
    assert_no_limit(&s, "key1=value1 has no limit of its own");
    let s = one_in(&mut c, d, &[("key1", "other"), ("subkey1", "x")]).await;
    assert_no_limit(&s, "key1=other");

    let s = one_in(&mut c, d, &[("key2", "anything")]).await;
    assert_limit(&s, 20, Unit::Minute, "key2 default");
    let s = one_in(&mut c, d, &[("key2", "value2")]).await;
    assert_limit(&s, 30, Unit::Minute, "key2=value2");
    for _ in 0..3 {
        let s = one_in(&mut c, d, &[("key2", "value3")]).await;
        assert_no_limit(&s, "key2=value3 is whitelisted");
    }

    let s = one_in(&mut c, d, &[("key3", "x")]).await;
    assert_limit(&s, 1, Unit::Hour, "key3");
    assert_eq!(code(&s), Code::Ok);
    let s = one_in(&mut c, d, &[("key3", "x")]).await;
    assert_eq!(code(&s), Code::OverLimit, "key3 is 1 per hour");

    let s = one_in(&mut c, d, &[("key4", "x")]).await;
    assert_limit(&s, 1, Unit::Day, "key4");
    assert_eq!(name(&s), "key4_rate_limit");

    let s = one_in(&mut c, d, &[("key5", "value5")]).await;
    assert_limit(&s, 15, Unit::Day, "key5=value5");
    let s = one_in(&mut c, d, &[("key5", "value5"), ("subkey5", "subvalue5")]).await;
    assert_limit(&s, 25, Unit::Day, "key5=value5,subkey5=subvalue5");
    let s = one_in(&mut c, d, &[("key5", "other")]).await;
    assert_no_limit(&s, "key5=other");

    for _ in 0..3 {
        let s = one_in(&mut c, d, &[("key6", "x")]).await;
        assert_eq!(
            (code(&s), s.limit_remaining),
            (Code::Ok, MAX),
            "key6 unlimited"
        );
    }

    let s = one_in(&mut c, d, &[("key7", "x")]).await;
    assert_limit(&s, 70, Unit::Minute, "key7 (detailed_metric)");
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_wildcard_config() {
    let server = serve_upstream("valid/wildcard.yaml");
    let mut c = server.client().await;
    let d = "test-domain";
    let s = one_in(&mut c, d, &[("wild", "foo123")]).await;
    assert_limit(&s, 20, Unit::Minute, "wild=foo123");
    let s = one_in(&mut c, d, &[("wild", "foo")]).await;
    assert_limit(&s, 20, Unit::Minute, "wild=foo");
    let s = one_in(&mut c, d, &[("wild", "fo")]).await;
    assert_no_limit(&s, "wild=fo");
    let s = one_in(&mut c, d, &[("noWild", "foo")]).await;
    assert_limit(&s, 20, Unit::Minute, "noWild=foo");
    let s = one_in(&mut c, d, &[("noWild", "foo1")]).await;
    assert_no_limit(&s, "noWild=foo1: no wildcard");
    let s = one_in(&mut c, d, &[("noVal", "anything")]).await;
    assert_limit(&s, 20, Unit::Minute, "noVal");
    let s = one_in(&mut c, d, &[("nestedWild", "val1"), ("wild", "goober")]).await;
    assert_limit(&s, 20, Unit::Minute, "nested wildcard");
    let s = one_in(&mut c, d, &[("nestedWild", "val1"), ("wild", "foo")]).await;
    assert_no_limit(&s, "nested: foo is no goo*");
    // `*` in the middle, and several of them.
    let s = one_in(&mut c, d, &[("midWild", "barxyzb")]).await;
    assert_limit(&s, 20, Unit::Minute, "midWild=barxyzb");
    let s = one_in(&mut c, d, &[("midWild", "barb")]).await;
    assert_limit(&s, 20, Unit::Minute, "midWild=barb");
    let s = one_in(&mut c, d, &[("midWild", "barxyz")]).await;
    assert_no_limit(&s, "midWild=barxyz: no trailing b");
    let s = one_in(&mut c, d, &[("multiWild", "foo1bar2baz")]).await;
    assert_limit(&s, 10, Unit::Minute, "multiWild=foo1bar2baz");
    let s = one_in(&mut c, d, &[("multiWild", "foobaz")]).await;
    assert_no_limit(&s, "multiWild=foobaz: no bar");
}

/// One descriptor's entries.
type Entries<'a> = &'a [(&'a str, &'a str)];

fn serve_upstream_with(files: &[&str], flags: &[&str]) -> Ratelimitd {
    let paths: Vec<String> = files
        .iter()
        .map(|file| upstream(file).to_str().expect("utf-8 path").to_string())
        .collect();
    let mut args: Vec<&str> = Vec::new();
    for path in &paths {
        args.extend(["--config", path.as_str()]);
    }
    args.extend_from_slice(flags);
    Ratelimitd::start(&args)
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_share_threshold() {
    let server = serve_upstream("later/share_threshold.yaml");
    let mut c = server.client().await;
    wait_for_window_room(60, 10);
    let d = "test-domain";
    // (descriptor spending the whole shared limit, another value of the same wildcard(s)).
    let cases: [(Entries, Entries, u32); 6] = [
        (
            &[("files", "files/a.pdf")],
            &[("files", "files/b.csv")],
            100,
        ),
        (
            &[("nested", "parent"), ("files", "nested/x.txt")],
            &[("nested", "parent"), ("files", "nested/y/z.txt")],
            200,
        ),
        (
            &[("midpath", "/api/users/v1")],
            &[("midpath", "/apiv1")],
            100,
        ),
        (
            &[("multiroute", "svc.orders.ep.get.rpc")],
            &[("multiroute", "svceprpc")],
            50,
        ),
        (
            &[("tenant", "t1-prod"), ("resource", "res-a-v2")],
            &[("tenant", "t2-prod"), ("resource", "res-b-v2")],
            60,
        ),
        (
            &[("files", "top/a"), ("files", "nested/b")],
            &[("files", "top/c"), ("files", "nested/d")],
            300,
        ),
    ];
    for (spend, other, limit) in cases {
        let resp = should(&mut c, request(d, &[spend], limit)).await;
        assert_eq!(
            overall(&resp),
            Code::Ok,
            "{spend:?} spends {limit}: {resp:?}"
        );
        assert_limit(&resp.statuses[0], limit, Unit::Minute, "shared limit");
        let s = one_in(&mut c, d, other).await;
        assert_eq!(
            code(&s),
            Code::OverLimit,
            "{other:?} shares {spend:?}'s counter: {s:?}"
        );
    }
    // An explicit value keeps its own limit and counter beside a shared wildcard.
    let s = one_in(&mut c, d, &[("file", "test1")]).await;
    assert_limit(&s, 50, Unit::Minute, "file=test1 exact");
    let resp = should(&mut c, request(d, &[&[("file", "test2")]], 100)).await;
    assert_eq!(overall(&resp), Code::Ok);
    let s = one_in(&mut c, d, &[("file", "test3")]).await;
    assert_eq!(code(&s), Code::OverLimit, "test* shared: {s:?}");
    let s = one_in(&mut c, d, &[("file", "test1")]).await;
    assert_eq!(code(&s), Code::Ok, "test1 has its own counter: {s:?}");
    // A shared wildcard above a key-only level: the route entry is shared, the method entry
    // keeps one counter per value.
    let resp = should(
        &mut c,
        request(d, &[&[("route", "api/a"), ("method", "GET")]], 60),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok);
    let s = one_in(&mut c, d, &[("route", "api/b"), ("method", "GET")]).await;
    assert_eq!(
        code(&s),
        Code::OverLimit,
        "route shared, same method: {s:?}"
    );
    let s = one_in(&mut c, d, &[("route", "api/b"), ("method", "POST")]).await;
    assert_eq!(
        code(&s),
        Code::Ok,
        "another method has its own counter: {s:?}"
    );
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_metadata_in_dynamic_metadata() {
    let server = serve_upstream_with(&["later/metadata.yaml"], &["--response-dynamic-metadata"]);
    let mut c = server.client().await;
    let d = "test-domain";
    let resp = should(
        &mut c,
        request(
            d,
            &[&[("key1", "value1"), ("subkey1", "x")], &[("key2", "y")]],
            0,
        ),
    )
    .await;
    let metadata = resp.dynamic_metadata.expect("dynamic_metadata");
    let merged = match metadata.fields.get("metadata").and_then(|v| v.kind.clone()) {
        Some(prost_types::value::Kind::StructValue(merged)) => merged,
        other => panic!("metadata: {other:?}"),
    };
    let mut keys: Vec<&str> = merged.fields.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["name", "service_with_quota"], "{merged:?}");
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_merge_domain_config() {
    let server = serve_upstream_with(
        &[
            "later/merge_domain_key1.yaml",
            "later/merge_domain_key2.yaml",
            "later/duplicate_domain.yaml",
        ],
        &["--merge-domain-config"],
    );
    let mut c = server.client().await;
    let s = one_in(&mut c, "test-domain", &[("key1", "value1")]).await;
    assert_limit(
        &s,
        10,
        Unit::Minute,
        "key1=value1 from merge_domain_key1.yaml",
    );
    let s = one_in(&mut c, "test-domain", &[("key2", "value2")]).await;
    assert_limit(
        &s,
        20,
        Unit::Minute,
        "key2=value2 from merge_domain_key2.yaml",
    );
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_example_replaces_and_shadow() {
    let server = serve_upstream("valid/example.yaml");
    let mut c = server.client().await;
    wait_for_window_room(60, 10);
    let d = "rl";

    let s = one_in(&mut c, d, &[("foo", "f1"), ("bar", "bkthomps")]).await;
    assert_limit(&s, 1, Unit::Minute, "bar=bkthomps alone");
    assert_eq!(name(&s), "bkthomps");

    let resp = should(
        &mut c,
        request(
            d,
            &[
                &[("foo", "f2"), ("bar", "bkthomps")],
                &[("category", "account")],
            ],
            0,
        ),
    )
    .await;
    assert_no_limit(&resp.statuses[0], "bkthomps replaced by category=account");
    assert_limit(&resp.statuses[1], 4, Unit::Minute, "category=account");

    // requests_per_unit 0: always over the limit, unless replaced.
    let s = one_in(&mut c, d, &[("foo", "f3"), ("bar", "banned")]).await;
    assert_eq!(code(&s), Code::OverLimit, "requests_per_unit 0: {s:?}");
    assert_limit(&s, 0, Unit::Minute, "banned");
    let resp = should(
        &mut c,
        request(
            d,
            &[
                &[("foo", "f3"), ("bar", "banned")],
                &[
                    ("source_cluster", "proxy"),
                    ("destination_cluster", "override"),
                ],
            ],
            0,
        ),
    )
    .await;
    assert_eq!(overall(&resp), Code::Ok, "banned_limit replaced: {resp:?}");
    assert_no_limit(&resp.statuses[0], "banned replaced");
    assert_limit(&resp.statuses[1], 2, Unit::Minute, "override");

    // Shadow mode on foo,baz=shady (3/minute): the 4th is over the limit but admitted (OK).
    for i in 0..4 {
        let resp = should(&mut c, request(d, &[&[("foo", "f4"), ("baz", "shady")]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "shadow #{i}");
        assert_eq!(code(&resp.statuses[0]), Code::Ok, "shadow #{i}");
        assert_limit(&resp.statuses[0], 3, Unit::Minute, "shady");
        let expected = [2, 1, 0, 0][i];
        assert_eq!(resp.statuses[0].limit_remaining, expected, "shadow #{i}");
    }
    // Same shape without shadow mode denies.
    for i in 0..4 {
        let resp = should(
            &mut c,
            request(d, &[&[("foo", "f4"), ("baz", "not-so-shady")]], 0),
        )
        .await;
        let expected = if i < 3 { Code::Ok } else { Code::OverLimit };
        assert_eq!(overall(&resp), expected, "not-so-shady #{i}");
    }

    let s = one_in(&mut c, d, &[("foo", "f5"), ("bay", "x")]).await;
    assert_eq!(s.limit_remaining, MAX, "bay unlimited");
    let s = one_in(&mut c, d, &[("foo", "f5")]).await;
    assert_limit(&s, 2, Unit::Minute, "foo alone");
    let s = one_in(&mut c, d, &[("foo", "f5"), ("bar", "anything")]).await;
    assert_limit(&s, 3, Unit::Minute, "foo,bar key-only");
    let s = one_in(&mut c, d, &[("service", "service_1")]).await;
    assert_limit(&s, 1, Unit::Minute, "quota_mode parses");
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_shadowmode_config() {
    let server = serve_upstream("valid/shadowmode_config.yaml");
    let mut c = server.client().await;
    wait_for_window_room(60, 10);
    let d = "test-domain";
    for i in 0..21 {
        let resp = should(&mut c, request(d, &[&[("key2", "x")]], 0)).await;
        assert_eq!(overall(&resp), Code::Ok, "key2 is shadow mode (#{i})");
        assert_eq!(code(&resp.statuses[0]), Code::Ok, "#{i}");
        let expected = 19u32.saturating_sub(i);
        assert_eq!(resp.statuses[0].limit_remaining, expected, "#{i}");
    }
    // key2=value2 is not in shadow mode: 30 per minute, with hits 31 denied.
    let resp = should(&mut c, request(d, &[&[("key2", "value2")]], 31)).await;
    assert_eq!(overall(&resp), Code::OverLimit);
}

#[tokio::test]
#[ignore = "needs envoyproxy/ratelimit's fixtures in RATELIMITD_COMPAT_DIR: run scripts/compat-check.sh"]
async fn upstream_mongo_config() {
    let server = serve_upstream("valid/config.yaml");
    let mut c = server.client().await;
    let s = one_in(&mut c, "mongo_cps", &[("database", "users")]).await;
    assert_limit(&s, 500, Unit::Second, "database=users");
    let s = one_in(&mut c, "mongo_cps", &[("database", "default")]).await;
    assert_limit(&s, 500, Unit::Second, "database=default");
    let s = one_in(&mut c, "mongo_cps", &[("database", "other")]).await;
    assert_no_limit(&s, "database=other");
}
