//! `GET /top` (docs/operations/http-endpoints.md, "/top") over real sockets: one value denied
//! far more often than many others is listed first for its rule, with a count within the stated
//! bound; a rule without `detailed_metric` shows hashes, not values (unless
//! `--top-show-values`); replicas sharing `--top-hash-key-file` hash a value alike; a malformed
//! query is a 400 naming what is wrong.

use std::net::SocketAddr;

use ratelimitd::limiter::{Descriptor, Entry};
use ratelimitd::server::Settings;
use ratelimitd::service::top_values::{HashKey, TopSettings};
use serde_json::Value;
use testkit::in_process::InProcess;
use testkit::ratelimitd::*;

const KEY: &[u8] = b"a key every replica shares";
/// Requests of the heavy value; the limit admits 2 of them.
const HEAVY: u64 = 60;
/// Other values, each sent 3 times (2 admitted, 1 denied).
const OTHERS: u64 = 40;
const K: usize = 5;

fn hash_of(key: &[u8], entry: &str, value: &str) -> String {
    let descriptor = Descriptor {
        entries: vec![Entry {
            key: entry.into(),
            value: value.into(),
        }],
        limit_override: None,
        hits_addend: None,
    };
    HashKey::new(key)
        .descriptor(&descriptor)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// The heavy value `mallory` and `OTHERS` light ones, on the `user` and `account` rules.
async fn load(client: &mut Client) {
    for key in ["user", "account"] {
        for _ in 0..HEAVY {
            should(client, request("top", &[&[(key, "mallory")]], 0)).await;
        }
        for other in 0..OTHERS {
            let value = format!("light-{other}");
            for _ in 0..3 {
                should(client, request("top", &[&[(key, value.as_str())]], 0)).await;
            }
        }
    }
}

async fn top(addr: SocketAddr, query: &str) -> Value {
    let (status, body) = http_get(addr, &format!("/top{query}")).await;
    assert_eq!(status, 200, "/top{query}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("/top{query} is not JSON ({e}): {body}"))
}

fn rule<'a>(top: &'a Value, path: &str) -> &'a Value {
    top["rules"]
        .as_array()
        .expect("a list of rules")
        .iter()
        .find(|rule| rule["domain"] == "top" && rule["rule"] == path)
        .unwrap_or_else(|| panic!("rule {path} missing from {top}"))
}

/// The first value of `ranking`, checked against the true count within the stated bound
/// (`count - error <= truth <= count`, `error <= total / k`).
#[track_caller]
fn assert_heaviest(ranking: &Value, truth: u64, hash: &str) -> Value {
    let total = ranking["total"].as_u64().expect("a total");
    let first = &ranking["top"][0];
    assert_eq!(first["hash"], hash, "{ranking}");
    let (count, error) = (
        first["count"].as_u64().unwrap(),
        first["error"].as_u64().unwrap(),
    );
    assert!(
        count >= truth && count - error <= truth && error <= total / K as u64,
        "count {count} error {error} true {truth} total {total}: {ranking}"
    );
    assert!(ranking["top"].as_array().unwrap().len() <= K, "{ranking}");
    first.clone()
}

#[tokio::test]
async fn the_most_denied_value_comes_first_hashed_unless_its_rule_shows_values() {
    let mut settings = Settings::new(vec![fixture("ops/top.yaml")]);
    settings.top = TopSettings {
        values: K,
        max_rules: 100,
        hash_key: Some(HashKey::new(KEY)),
        ..TopSettings::default()
    };
    let server = InProcess::start(settings);
    let mut client = server.client().await;
    load(&mut client).await;
    for window in ["", "?window=1m", "?window=5m", "?window=15m&domain=top"] {
        let top = top(server.http_addr(), window).await;
        for (path, key, shown) in [
            ("top.user", "user", false),
            ("top.account", "account", true),
        ] {
            let rule = rule(&top, path);
            assert_eq!(rule["values_shown"], shown, "{rule}");
            assert_eq!(rule["denied"]["total"], HEAVY - 2 + OTHERS, "{rule}");
            assert_eq!(rule["hits"]["total"], HEAVY + 3 * OTHERS, "{rule}");
            let hash = hash_of(KEY, key, "mallory");
            let denied = assert_heaviest(&rule["denied"], HEAVY - 2, &hash);
            assert_heaviest(&rule["hits"], HEAVY, &hash);
            if shown {
                assert_eq!(denied["value"], format!("{key}_mallory"), "{rule}");
            } else {
                assert!(denied.get("value").is_none(), "{rule}");
                assert!(!rule.to_string().contains("mallory"), "{rule}");
                assert!(!rule.to_string().contains("light-"), "{rule}");
            }
        }
        assert_eq!(top["untracked_rules"], 0, "{top}");
    }
    let one = top(server.http_addr(), "?rule=top.account").await;
    assert_eq!(one["rules"].as_array().map(Vec::len), Some(1), "{one}");
    let none = top(server.http_addr(), "?domain=elsewhere").await;
    assert_eq!(none["rules"].as_array().map(Vec::len), Some(0), "{none}");
}

#[tokio::test]
async fn rules_beyond_the_cap_are_counted_untracked() {
    let mut settings = Settings::new(vec![fixture("ops/top.yaml")]);
    settings.top = TopSettings {
        max_rules: 1,
        ..TopSettings::default()
    };
    let server = InProcess::start(settings);
    let mut client = server.client().await;
    should(&mut client, request("top", &[&[("user", "a")]], 0)).await;
    should(&mut client, request("top", &[&[("account", "b")]], 0)).await;
    let top = top(server.http_addr(), "").await;
    assert_eq!(top["untracked_rules"], 1, "{top}");
    assert_eq!(top["max_rules"], 1, "{top}");
    let tracked = top["rules"].as_array().expect("rules");
    assert_eq!(tracked.len(), 1, "{top}");
    assert_eq!(tracked[0]["rule"], "top.user", "{top}");
}

#[tokio::test]
async fn a_malformed_query_is_a_400_naming_it() {
    let server = InProcess::start(Settings::new(vec![fixture("ops/top.yaml")]));
    for (query, named) in [
        ("?window=7m", "`window`"),
        ("?window=", "`window`"),
        ("?limit=3", "`limit`"),
        ("?rule=%zz", "`rule`"),
    ] {
        let (status, body) = http_get(server.http_addr(), &format!("/top{query}")).await;
        assert_eq!(status, 400, "/top{query}: {body}");
        assert!(body.contains(named), "/top{query}: {body}");
    }
}

#[tokio::test]
async fn replicas_sharing_a_key_file_hash_alike_and_the_flag_shows_every_value() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let key_file = dir.path().join("top.key");
    std::fs::write(&key_file, [KEY, b"\n"].concat()).expect("write the key");
    let config = fixture("ops/top.yaml");
    let args = [
        "--config",
        config.to_str().expect("utf-8 path"),
        "--top-hash-key-file",
        key_file.to_str().expect("utf-8 path"),
        "--top-max-rules",
        "10",
    ];
    let hidden = Ratelimitd::start(&args);
    let shown = Ratelimitd::start(&[&args[..], &["--top-show-values"]].concat());
    let hash = hash_of(KEY, "user", "mallory");
    for (replica, show) in [(&hidden, false), (&shown, true)] {
        let mut client = replica.client().await;
        for _ in 0..3 {
            should(&mut client, request("top", &[&[("user", "mallory")]], 0)).await;
        }
        let top = top(replica.http_addr(), "?window=5m&rule=top.user").await;
        let first = &rule(&top, "top.user")["denied"]["top"][0];
        assert_eq!(first["hash"], hash, "{top}");
        assert_eq!(first["count"], 1, "{top}");
        assert_eq!(first.get("value").is_some(), show, "{top}");
    }
    let short = dir.path().join("short.key");
    std::fs::write(&short, "too short").expect("write the key");
    let refused = refused_start(
        &[
            "--config",
            config.to_str().unwrap(),
            "--top-hash-key-file",
            short.to_str().unwrap(),
        ],
        &[],
    );
    assert!(refused.contains("--top-hash-key-file"), "{refused}");
}
