//! `--key-format envoyproxy` (with `--redis-key-prefix`, `--expiration-jitter-max-seconds` and
//! `--stop-cache-key-increment-when-overlimit`) on real redis-servers, a real Redis Cluster and the
//! real binary: the exact keys, counts and TTLs envoyproxy/ratelimit writes; one count shared
//! with a simulated envoyproxy/ratelimit instance through a rolling migration; exact admission
//! through several processes; the prefix in both formats; and the settings that are refused.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::store::redis::{KeyFormat, KeyLayout, RedisSettings};
use ratelimitd::store::{Check, RedisStore, Store};
use testkit::ratelimitd::*;
use testkit::redis_cluster::RedisCluster;
use testkit::redis_server::{all_keys, RedisServer};
use testkit::upstream_model::*;

const S: u64 = 1_000_000;
const ENVOYPROXY: [&str; 2] = ["--key-format", "envoyproxy"];

fn config() -> String {
    fixture("serve/envoyproxy_keys.yaml")
        .to_str()
        .expect("utf-8 path")
        .to_owned()
}

/// ratelimitd on `redis` with `extra` flags. Hundreds of simultaneous calls on a shared machine
/// can exceed the default 100 ms store timeout.
fn serve_with(redis: &[&str], extra: &[&str]) -> Ratelimitd {
    let config = config();
    let mut args = vec![
        "--config",
        &config,
        "--threads",
        "2",
        "--redis-timeout",
        "5s",
    ];
    args.extend_from_slice(redis);
    args.extend_from_slice(extra);
    Ratelimitd::start(&args)
}

fn serve(server: &RedisServer, extra: &[&str]) -> Ratelimitd {
    let url = server.url();
    serve_with(&["--redis-url", &url], extra)
}

fn get_count(connection: &mut redis::Connection, key: &str) -> Option<u64> {
    redis::cmd("GET").arg(key).query(connection).expect("GET")
}

fn pttl(connection: &mut redis::Connection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query(connection).expect("PTTL")
}

fn admitted(resp: &ratelimitd::proto::rls::RateLimitResponse) -> bool {
    resp.overall_code == Code::Ok as i32
}

/// The request ratelimitd gets for `descriptors`, `hits` each (request-level hits_addend).
fn request_of(
    descriptors: &[LimitedDescriptor],
    hits: u32,
) -> ratelimitd::proto::rls::RateLimitRequest {
    let entries: Vec<Vec<(&str, &str)>> =
        descriptors.iter().map(LimitedDescriptor::entries).collect();
    let entries: Vec<&[(&str, &str)]> = entries.iter().map(Vec::as_slice).collect();
    request("domain", &entries, if hits == 1 { 0 } else { hits })
}

#[tokio::test]
async fn keys_counts_and_ttls_are_those_envoyproxy_ratelimit_writes() {
    let redis = RedisServer::start();
    let jitter = 30;
    let server = serve(
        &redis,
        &[
            ENVOYPROXY[0],
            ENVOYPROXY[1],
            "--expiration-jitter-max-seconds",
            "30",
        ],
    );
    let mut client = server.client().await;
    wait_for_window_room(HOUR, 45);
    wait_for_window_room(60, 20);
    type Entries = &'static [(&'static str, &'static str)];
    let sent: [(Entries, u32, usize); 6] = [
        // (entries, limit, requests)
        (&[("key", "value")], 10, 3),
        (&[("key2", "value2"), ("subkey2", "subvalue2")], 10, 2),
        (&[("remote_address", "10.0.0.1")], 5, 4),
        (&[("files", "files/a.pdf")], 3, 1),
        (&[("files", "files/b.csv")], 3, 1),
        (&[("paced", "x")], 5, 1),
    ];
    for (entries, limit, requests) in sent {
        for n in 1..=requests {
            let resp = should(&mut client, request("domain", &[entries], 0)).await;
            assert!(admitted(&resp), "{entries:?} #{n}: {resp:?}");
            if entries[0].0 != "paced" && entries[0].0 != "files" {
                // envoyproxy/ratelimit's remaining: the limit less the count after the INCRBY.
                assert_eq!(resp.statuses[0].limit_remaining, limit - n as u32);
            }
        }
    }

    // Keys named as envoyproxy/ratelimit names them (expected strings as in its
    // test/redis/fixed_cache_impl_test.go: `domain_key2_value2_subkey2_subvalue2_1200`, and
    // test/limiter/base_limiter_test.go for share_threshold: `domain_files_files/*_1234`).
    let mut connection = redis.connection();
    let expected = [
        (
            upstream_key("", "domain", &[("key", "value")], 86_400),
            86_400,
            3,
        ),
        (
            upstream_key(
                "",
                "domain",
                &[("key2", "value2"), ("subkey2", "subvalue2")],
                HOUR,
            ),
            HOUR,
            2,
        ),
        (
            upstream_key("", "domain", &[("remote_address", "10.0.0.1")], 60),
            60,
            4,
        ),
        (
            upstream_key("", "domain", &[("files", "files/*")], HOUR),
            HOUR,
            2,
        ),
    ];
    let keys = all_keys(&mut connection);
    let natives: Vec<&String> = keys.iter().filter(|k| k.starts_with("rl1:{")).collect();
    assert_eq!(natives.len(), 1, "gcra keeps ratelimitd's key: {keys:?}");
    assert!(natives[0].contains(":gcra:"), "{keys:?}");
    let upstream: BTreeSet<String> = expected.iter().map(|(k, _, _)| k.clone()).collect();
    assert_eq!(
        keys.iter()
            .filter(|k| !k.starts_with("rl1:{"))
            .cloned()
            .collect::<BTreeSet<_>>(),
        upstream
    );
    let mut jittered = 0;
    for (key, window_s, count) in &expected {
        assert_eq!(get_count(&mut connection, key), Some(*count), "{key}");
        let ttl_ms = pttl(&mut connection, key);
        // EXPIRE window + rand[0, jitter), set by the last write a moment ago.
        let lowest = (*window_s as i64 - 2) * 1000;
        let highest = (*window_s as i64 + jitter) * 1000;
        assert!(
            (lowest..=highest).contains(&ttl_ms),
            "{key}: PTTL {ttl_ms} ms outside [{window_s} s, {window_s} s + {jitter} s]"
        );
        if ttl_ms > *window_s as i64 * 1000 {
            jittered += 1;
        }
    }
    assert!(jittered > 0, "no TTL was jittered");
}

/// The keys and counts of envoyproxy/ratelimit's own tests, with time pinned where they pin it:
/// test/redis/fixed_cache_impl_test.go (`TestRedis`: INCRBY answering 5 leaves 5 of 10; 11 and
/// 13 are over the limit) and test/limiter/base_limiter_test.go (`TestGenerateCacheKeysPrefix`).
#[tokio::test]
async fn the_keys_of_envoyproxy_ratelimit_s_own_tests_at_their_instants() {
    let redis = RedisServer::start();
    let mut connection = redis.connection();
    let clock = Arc::new(ManualClock::new(1234 * S));
    let store = |prefix: &'static str| {
        let url = redis.url();
        let clock = clock.clone();
        async move {
            RedisStore::connect(RedisSettings::new(url))
                .await
                .expect("connect")
                .with_pinned_clock(clock as Arc<dyn Clock>)
                .with_key_layout(
                    KeyLayout::new(KeyFormat::Envoyproxy, prefix, 0, false).expect("layout"),
                )
        }
    };
    let plain = store("").await;
    let prefixed = store("prefix:").await;
    let counter = |entries: &[(&str, &str)]| {
        let entries: Vec<Entry> = entries
            .iter()
            .map(|(key, value)| Entry {
                key: (*key).into(),
                value: (*value).into(),
            })
            .collect();
        CounterKey::new("domain", &entries)
    };
    let check = |entries: &[(&str, &str)], unit: Unit| Check {
        key: counter(entries),
        rate: Rate::new(Algorithm::FixedWindow, 10, unit, 1, None).unwrap(),
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    };
    let set = |connection: &mut redis::Connection, key: &str, count: u64| {
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(count)
            .query(connection)
            .unwrap();
    };

    set(&mut connection, "domain_key_value_1234", 4);
    let v = plain
        .decide(&[check(&[("key", "value")], Unit::Second)])
        .await
        .unwrap();
    assert!(v[0].admitted && v[0].remaining == 5, "{v:?}");
    assert_eq!(get_count(&mut connection, "domain_key_value_1234"), Some(5));
    let ttl = pttl(&mut connection, "domain_key_value_1234");
    assert!((1..=1000).contains(&ttl), "EXPIRE 1 for a second: {ttl}");
    // A check of 0 hits reads without writing (envoyproxy/ratelimit's INCRBY 0 changes no count).
    let mut only = check(&[("key", "value")], Unit::Second);
    only.hits = 0;
    let v = plain.decide(&[only]).await.unwrap();
    assert!(v[0].admitted && v[0].remaining == 5, "{v:?}");
    assert_eq!(get_count(&mut connection, "domain_key_value_1234"), Some(5));

    let nested = "domain_key2_value2_subkey2_subvalue2_1200";
    set(&mut connection, nested, 10);
    let v = plain
        .decide(&[check(
            &[("key2", "value2"), ("subkey2", "subvalue2")],
            Unit::Minute,
        )])
        .await
        .unwrap();
    assert!(!v[0].admitted && v[0].remaining == 0, "{v:?}");
    assert_eq!(get_count(&mut connection, nested), Some(11), "counted");
    let ttl = pttl(&mut connection, nested);
    assert!((59_000..=60_000).contains(&ttl), "EXPIRE 60: {ttl}");

    clock.set_us(1_000_000 * S);
    set(&mut connection, "domain_key3_value3_997200", 10);
    set(
        &mut connection,
        "domain_key3_value3_subkey3_subvalue3_950400",
        12,
    );
    let v = plain
        .decide(&[
            check(&[("key3", "value3")], Unit::Hour),
            check(&[("key3", "value3"), ("subkey3", "subvalue3")], Unit::Day),
        ])
        .await
        .unwrap();
    assert!(!v[0].admitted && !v[1].admitted, "{v:?}");
    assert_eq!(
        get_count(&mut connection, "domain_key3_value3_997200"),
        Some(11)
    );
    assert_eq!(
        get_count(
            &mut connection,
            "domain_key3_value3_subkey3_subvalue3_950400"
        ),
        Some(13)
    );
    let ttl = pttl(
        &mut connection,
        "domain_key3_value3_subkey3_subvalue3_950400",
    );
    assert!(
        (86_399_000..=86_400_000).contains(&ttl),
        "EXPIRE 86400: {ttl}"
    );

    clock.set_us(1234 * S);
    let v = prefixed
        .decide(&[check(&[("key", "value")], Unit::Second)])
        .await
        .unwrap();
    assert!(v[0].admitted && v[0].remaining == 9, "{v:?}");
    assert_eq!(
        get_count(&mut connection, "prefix:domain_key_value_1234"),
        Some(1)
    );
}

/// Counts far above any limit saturate at 2^50 instead of growing towards INCRBY's 2^63 limit (a
/// failing INCRBY would stop a request's writes halfway), and a key holding anything but a count
/// fails its request before anything is written.
#[tokio::test]
async fn huge_and_unreadable_counts_never_break_a_request_halfway() {
    let redis = RedisServer::start();
    let mut connection = redis.connection();
    let store = RedisStore::connect(RedisSettings::new(redis.url()))
        .await
        .expect("connect")
        .with_pinned_clock(Arc::new(ManualClock::new(1234 * S)) as Arc<dyn Clock>)
        .with_key_layout(KeyLayout::new(KeyFormat::Envoyproxy, "", 0, false).expect("layout"));
    let check = |value: &str, hits: u64| Check {
        key: CounterKey::new(
            "domain",
            &[Entry {
                key: "key".into(),
                value: value.into(),
            }],
        ),
        rate: Rate::new(Algorithm::FixedWindow, 10, Unit::Hour, 1, None).unwrap(),
        hits,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    };
    let saturated = 1u64 << 50;
    for (stored, hits, expected) in [
        (saturated - 3, u64::MAX, saturated),
        (saturated + 5, 1, saturated + 5),
        (9_000_000_000_000_000_000, 7, 9_000_000_000_000_000_000),
    ] {
        let key = "domain_key_huge_0";
        let _: () = redis::cmd("SET")
            .arg(key)
            .arg(stored)
            .query(&mut connection)
            .unwrap();
        let v = store.decide(&[check("huge", hits)]).await.unwrap();
        assert!(!v[0].admitted, "{stored} + {hits}: {v:?}");
        assert_eq!(
            get_count(&mut connection, key),
            Some(expected),
            "{stored} + {hits}"
        );
    }

    let dump = |connection: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        all_keys(connection)
            .into_iter()
            .map(|k| {
                let value: Vec<u8> = redis::cmd("DUMP").arg(&k).query(connection).unwrap();
                (k, value)
            })
            .collect()
    };
    for garbage in ["abc", "-3", "1.5", "", "12345678901234567890"] {
        let _: () = redis::cmd("SET")
            .arg("domain_key_garbage_0")
            .arg(garbage)
            .query(&mut connection)
            .unwrap();
        let before = dump(&mut connection);
        let result = store.decide(&[check("fine", 1), check("garbage", 1)]).await;
        assert!(result.is_err(), "{garbage:?}: {result:?}");
        assert_eq!(
            dump(&mut connection),
            before,
            "{garbage:?}: nothing written"
        );
    }
}

#[tokio::test]
async fn a_rolling_migration_shares_one_count() {
    let redis = RedisServer::start();
    let flags = [
        ENVOYPROXY[0],
        ENVOYPROXY[1],
        "--expiration-jitter-max-seconds",
        "5",
    ];
    // Without the deny cache every denied request reaches Redis, so the counts are exact; the
    // cache answers only requests that are over the limit anyway (see the second part).
    let uncached = serve(&redis, &[&flags[..], &["--no-deny-cache"]].concat());
    let cached = serve(&redis, &flags);
    let mut client = uncached.client().await;
    let mut connection = redis.connection();
    wait_for_window_room(HOUR, 60);

    // One request at a time, alternately through ratelimitd and an envoyproxy/ratelimit
    // instance: together they admit exactly the limit (20), each half of it, and both count
    // every hit asked for.
    let alternate = [LimitedDescriptor::hourly("migrate", "alternate", 20)];
    let (mut ours, mut theirs) = (0, 0);
    for i in 0..40 {
        if i % 2 == 0 {
            if admitted(&should(&mut client, request_of(&alternate, 1)).await) {
                ours += 1;
            }
        } else if !upstream_do_limit(&mut connection, "", &alternate, 1, 5, false)[0] {
            theirs += 1;
        }
    }
    assert_eq!(
        (ours, theirs),
        (10, 10),
        "ratelimitd and envoyproxy/ratelimit admitted"
    );
    assert_eq!(get_count(&mut connection, &alternate[0].key()), Some(40));

    // Both at once: four envoyproxy/ratelimit instances (threads, 30 requests each) and 120
    // concurrent ratelimitd calls on one counter of 20, through the process with a deny cache.
    let race = [LimitedDescriptor::hourly("migrate", "race", 20)];
    let instances: Vec<_> = (0..4)
        .map(|_| {
            let mut connection = redis.connection();
            let race = race.clone();
            std::thread::spawn(move || {
                (0..30)
                    .filter(|_| !upstream_do_limit(&mut connection, "", &race, 1, 5, false)[0])
                    .count()
            })
        })
        .collect();
    let resps = hammer(&[cached.grpc_addr()], 4, 120, |_| request_of(&race, 1)).await;
    let ours = resps.iter().filter(|r| admitted(r)).count();
    let theirs: usize = instances
        .into_iter()
        .map(|thread| thread.join().expect("instance"))
        .sum();
    assert_eq!(
        ours + theirs,
        20,
        "ratelimitd {ours} + envoyproxy/ratelimit {theirs}"
    );
    let count = get_count(&mut connection, &race[0].key()).expect("a count");
    assert!(
        (120 + ours as u64..=240).contains(&count),
        "count {count}: every envoyproxy/ratelimit hit and every admitted one"
    );
}

/// The same requests (two descriptors: 4 and 100 per hour; some of 3 hits), once alternately
/// through ratelimitd and an envoyproxy/ratelimit instance and once through envoyproxy/ratelimit
/// alone: the same answers (codes and `limit_remaining`), and the same counts, denied requests
/// included: by default every descriptor counts every hit, and the one that admitted a denied
/// request reports them spent; with STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT a denied request
/// counts only where it is over the limit.
#[tokio::test]
async fn denied_requests_count_as_envoyproxy_ratelimit_counts_them() {
    let redis = RedisServer::start();
    let url = redis.url();
    let mut connection = redis.connection();
    let default = serve_with(&["--redis-url", &url], &ENVOYPROXY);
    let stopping = serve_with(
        &["--redis-url", &url],
        &[
            ENVOYPROXY[0],
            ENVOYPROXY[1],
            "--stop-cache-key-increment-when-overlimit",
        ],
    );
    wait_for_window_room(HOUR, 60);
    let hits_of = |i: usize| if i % 4 == 3 { 3 } else { 1 };
    for (server, stop, expected) in [(&default, false, (18, 18)), (&stopping, true, (18, 3))] {
        let mut client = server.client().await;
        let pair = |value: &str| {
            [
                LimitedDescriptor::hourly("small", value, 4),
                LimitedDescriptor::hourly("large", value, 100),
            ]
        };
        let mixed = pair(&format!("mixed-{stop}"));
        let model = pair(&format!("model-{stop}"));
        let mut mixed_answers = Vec::new();
        let mut model_answers = Vec::new();
        for i in 0..12 {
            let hits = hits_of(i);
            let answer = if i % 2 == 0 {
                let resp = should(&mut client, request_of(&mixed, hits as u32)).await;
                resp.statuses
                    .iter()
                    .map(|s| UpstreamStatus {
                        over_limit: s.code == Code::OverLimit as i32,
                        remaining: u64::from(s.limit_remaining),
                    })
                    .collect()
            } else {
                upstream_statuses(&mut connection, "", &mixed, hits, 0, stop)
            };
            mixed_answers.push(answer);
            model_answers.push(upstream_statuses(
                &mut connection,
                "",
                &model,
                hits,
                0,
                stop,
            ));
        }
        assert_eq!(
            mixed_answers, model_answers,
            "stop {stop}: each descriptor's code and limit_remaining"
        );
        let mut count = |limited: &LimitedDescriptor| get_count(&mut connection, &limited.key());
        let mixed_counts = (count(&mixed[0]), count(&mixed[1]));
        let model_counts = (count(&model[0]), count(&model[1]));
        assert_eq!(
            mixed_counts, model_counts,
            "stop {stop}: counts of the mixed and the envoyproxy/ratelimit-only runs"
        );
        assert_eq!(
            mixed_counts,
            (Some(expected.0), Some(expected.1)),
            "stop {stop}"
        );
    }
}

#[tokio::test]
async fn several_processes_admit_exactly_the_limit() {
    let redis = RedisServer::start();
    let url = redis.url();
    let config = fixture("serve/concurrency.yaml");
    let start = |extra: &[&str]| {
        let mut args = vec![
            "--config",
            config.to_str().unwrap(),
            "--redis-url",
            &url,
            "--threads",
            "2",
            "--redis-timeout",
            "5s",
            ENVOYPROXY[0],
            ENVOYPROXY[1],
        ];
        args.extend_from_slice(extra);
        Ratelimitd::start(&args)
    };
    // Without the deny cache every denied request reaches Redis, so the count is exact.
    let servers = [
        start(&["--no-deny-cache"]),
        start(&["--no-deny-cache"]),
        start(&["--no-deny-cache"]),
    ];
    let addrs: Vec<SocketAddr> = servers.iter().map(Ratelimitd::grpc_addr).collect();
    assert_exact_admission(&addrs, "fixed_window", "several").await;
    let key = upstream_key("", "concurrency", &[("fixed_window", "several")], HOUR);
    assert_eq!(
        get_count(&mut redis.connection(), &key),
        Some(300),
        "the 250 denied requests are counted too, as envoyproxy/ratelimit counts them"
    );

    // With STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT, denied requests count only where they are
    // over the limit: the other two descriptors are charged by the 50 admitted requests alone.
    let stopping = [
        start(&["--stop-cache-key-increment-when-overlimit"]),
        start(&["--stop-cache-key-increment-when-overlimit"]),
    ];
    let addrs: Vec<SocketAddr> = stopping.iter().map(Ratelimitd::grpc_addr).collect();
    assert_exact_admission_three_descriptors(&addrs, "fixed_window", "stopping").await;
}

#[tokio::test]
async fn the_prefix_applies_to_both_formats() {
    let redis = RedisServer::start();
    let url = redis.url();
    let native = serve_with(&["--redis-url", &url], &["--redis-key-prefix", "app1:"]);
    let envoyproxy = serve_with(
        &["--redis-url", &url],
        &[ENVOYPROXY[0], ENVOYPROXY[1], "--redis-key-prefix", "app2:"],
    );
    wait_for_window_room(HOUR, 30);
    for server in [&native, &envoyproxy] {
        let mut client = server.client().await;
        let outcomes: Vec<bool> = {
            let mut outcomes = Vec::new();
            for _ in 0..25 {
                let resp = should(&mut client, request("domain", &[&[("migrate", "p")]], 0)).await;
                outcomes.push(admitted(&resp));
            }
            outcomes
        };
        assert_eq!(outcomes.iter().filter(|&&ok| ok).count(), 20);
        assert!(admitted(
            &should(&mut client, request("domain", &[&[("paced", "p")]], 0)).await
        ));
    }
    let keys = all_keys(&mut redis.connection());
    let app1: Vec<&String> = keys.iter().filter(|k| k.starts_with("app1:")).collect();
    let app2: Vec<&String> = keys.iter().filter(|k| k.starts_with("app2:")).collect();
    assert_eq!((app1.len(), app2.len(), keys.len()), (2, 2, 4), "{keys:?}");
    for key in &app1 {
        // The prefix comes before `rl1:`; the only braces are the code's hash tag.
        assert!(key.starts_with("app1:rl1:{"), "{key}");
        assert_eq!((key.matches('{').count(), key.matches('}').count()), (1, 1));
    }
    assert!(app2.contains(&&upstream_key("app2:", "domain", &[("migrate", "p")], HOUR)));
    assert!(
        app2.iter()
            .any(|k| k.starts_with("app2:rl1:{") && k.contains(":gcra:")),
        "{keys:?}"
    );
}

/// The master of `key`'s slot, and the other masters.
fn owner_and_others(cluster: &RedisCluster, key: &str) -> (u16, Vec<u16>) {
    let owner = cluster.master_of_key(key);
    let others = cluster
        .masters()
        .into_iter()
        .filter(|m| *m != owner)
        .collect();
    (owner, others)
}

/// Whether the node on `port` stores `key` itself (`KEYS` lists a node's own keys; a node
/// answers `MOVED` for the others' when asked for them by name).
fn holds(cluster: &RedisCluster, port: u16, key: &str) -> bool {
    all_keys(&mut cluster.connection(port)).contains(key)
}

#[tokio::test]
async fn on_a_cluster_keys_live_where_the_whole_key_hashes_and_count_exactly() {
    let cluster = RedisCluster::start(3, 0);
    let seeds = cluster.seeds();
    let default = serve_with(
        &["--redis-cluster", &seeds],
        &[ENVOYPROXY[0], ENVOYPROXY[1], "--no-deny-cache"],
    );
    let stopping = serve_with(
        &["--redis-cluster", &seeds],
        &[
            ENVOYPROXY[0],
            ENVOYPROXY[1],
            "--stop-cache-key-increment-when-overlimit",
        ],
    );
    wait_for_window_room(HOUR, 60);

    // 25 concurrent requests on counters of 20: exactly 20 admitted, and the key (no hash tag,
    // or one that a value brought) is on the master of its slot only.
    for value in ["plain", "{tagged}-by-a-value", "a_b"] {
        let counter = [LimitedDescriptor::hourly("migrate", value, 20)];
        let resps = hammer(&[default.grpc_addr()], 4, 25, |_| request_of(&counter, 1)).await;
        assert_eq!(resps.iter().filter(|r| admitted(r)).count(), 20, "{value}");
        let key = counter[0].key();
        let (owner, others) = owner_and_others(&cluster, &key);
        assert_eq!(
            get_count(&mut cluster.connection(owner), &key),
            Some(25),
            "{key}"
        );
        assert!(holds(&cluster, owner, &key), "{key}");
        assert!(
            others.iter().all(|&port| !holds(&cluster, port, &key)),
            "{key}"
        );
    }

    // Requests whose two counters live on two masters (4 and 100 per hour), 10 of them: 4
    // admitted. By default the denied ones count at both; with the stop setting the master that
    // admitted them is refunded, so its counter holds only the admitted 4.
    let split = |name: &str| {
        (0..10_000)
            .map(|i| {
                [
                    LimitedDescriptor::hourly("small", &format!("{name}-{i}"), 4),
                    LimitedDescriptor::hourly("large", &format!("{name}-{i}"), 100),
                ]
            })
            .find(|pair| {
                cluster.master_of_key(&pair[0].key()) != cluster.master_of_key(&pair[1].key())
            })
            .expect("two counters on two masters")
    };
    for (server, name, expected_large) in [(&default, "split", 10), (&stopping, "split-stop", 4)] {
        let pair = split(name);
        let mut client = server.client().await;
        let mut ok = 0;
        for _ in 0..10 {
            ok += usize::from(admitted(&should(&mut client, request_of(&pair, 1)).await));
        }
        assert_eq!(ok, 4, "{name}");
        let count = |limited: &LimitedDescriptor| {
            let key = limited.key();
            get_count(&mut cluster.connection(cluster.master_of_key(&key)), &key)
        };
        assert_eq!(
            count(&pair[0]),
            Some(10),
            "{name}: over the limit, every hit counts"
        );
        assert_eq!(count(&pair[1]), Some(expected_large), "{name}");
    }
}

#[test]
fn settings_that_cannot_work_are_refused_with_the_flag_named() {
    let config = config();
    let run = |args: &[&str]| {
        let mut cmd = command();
        cmd.args(["serve", "--config", &config, "--grpc-addr", "127.0.0.1:0"])
            .args(["--http-addr", "127.0.0.1:0"])
            .args(args);
        let (status, out, err) = run_to_end(cmd, Duration::from_secs(20));
        assert!(!status.success(), "{args:?} started: {out}{err}");
        format!("{out}{err}")
    };
    let said = run(&ENVOYPROXY);
    assert!(
        said.contains("--key-format envoyproxy") && said.contains("Redis"),
        "{said}"
    );
    let long = "p".repeat(129);
    let said = run(&["--redis-key-prefix", &long]);
    assert!(
        said.contains("--redis-key-prefix") && said.contains("longer than 128 bytes"),
        "{said}"
    );
    let said = run(&["--redis-key-prefix", "{app}:"]);
    assert!(
        said.contains("--redis-key-prefix") && said.contains('{'),
        "{said}"
    );
    let said = run(&["--key-format", "upstream"]);
    assert!(
        said.contains("--key-format") && said.contains("envoyproxy"),
        "{said}"
    );

    // The refusal comes before any Redis work: it is immediate.
    let started = Instant::now();
    let _ = run(&ENVOYPROXY);
    assert!(started.elapsed() < Duration::from_secs(10));
}
