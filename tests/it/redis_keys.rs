//! Redis key names and lifetimes, checked in a real redis-server: injective, bounded, tagged by
//! the code, one counter per key, and never a key without a TTL.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::store::redis::scripts::keys::{hash_tag, redis_key, state_key, MAX_KEY_LEN};
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, RedisStore, Store};
use testkit::redis_server::{redis_now_us, state_key_now, RedisServer};

const S: u64 = 1_000_000;

fn counter(domain: &str, entries: &[(&str, &str)]) -> CounterKey {
    let entries: Vec<Entry> = entries
        .iter()
        .map(|(key, value)| Entry {
            key: (*key).into(),
            value: (*value).into(),
        })
        .collect();
    CounterKey::new(domain, &entries)
}

fn check(key: &CounterKey, rate: Rate, hits: u64) -> Check {
    Check {
        key: key.clone(),
        rate,
        hits,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

async fn connect(server: &RedisServer) -> RedisStore {
    RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect to the test redis-server")
}

fn all_keys(server: &RedisServer) -> Vec<String> {
    let mut connection = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut connection).unwrap();
    // SCAN agrees with KEYS (the test database is tiny); SCAN is what production tools use.
    let mut cursor = 0u64;
    let mut scanned = HashSet::new();
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut connection)
            .unwrap();
        scanned.extend(batch);
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(scanned, keys.iter().cloned().collect::<HashSet<_>>());
    keys
}

/// Descriptors that naive joining (`key_value`, `key:value`, `{...}` tags) would confuse.
fn tricky_counters() -> Vec<CounterKey> {
    vec![
        counter("d", &[("a", "b_c")]),
        counter("d", &[("a_b", "c")]),
        counter("d", &[("a", "b:c")]),
        counter("d", &[("a", "b"), ("c", "")]),
        counter("d:a", &[("b", "c")]),
        counter("d", &[("a", "b=c")]),
        counter("d", &[("a=b", "c")]),
        counter("d", &[("a", "{b}")]),
        counter("d", &[("a", "}b{")]),
        counter("d", &[("a", "{")]),
        counter("d", &[("a", "%7B")]),
        counter("d", &[("a", "")]),
        counter("d", &[]),
        counter("d", &[("a", " ")]),
        counter("d", &[("a", "b"), ("c", "d")]),
        counter("d", &[("a", "b:c=d")]),
    ]
}

#[tokio::test]
async fn tricky_values_get_distinct_keys_and_separate_counters() {
    let counters = tricky_counters();
    let distinct: HashSet<&CounterKey> = counters.iter().collect();
    assert_eq!(distinct.len(), counters.len(), "test counters must differ");

    let server = RedisServer::start();
    let store = connect(&server).await;
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 1, Unit::Hour, 1, None).unwrap();
        let names: HashSet<String> = counters.iter().map(|c| redis_key(c, &rate)).collect();
        assert_eq!(names.len(), counters.len(), "{algorithm}: key collision");
        for name in &names {
            // The only braces are the code's hash tag.
            assert_eq!(name.matches('{').count(), 1, "{name}");
            assert_eq!(name.matches('}').count(), 1, "{name}");
            assert!(name.starts_with("rl1:{"), "{name}");
        }
        // Each counter admits exactly one hit: no counter is shared.
        for c in &counters {
            let v = store.decide(&[check(c, rate, 1)]).await.unwrap();
            assert!(v[0].admitted, "{algorithm} {c}: shares a counter");
        }
        for c in &counters {
            let v = store.decide(&[check(c, rate, 1)]).await.unwrap();
            assert!(!v[0].admitted, "{algorithm} {c}");
        }
    }
    assert_eq!(
        all_keys(&server).len(),
        counters.len() * Algorithm::ALL.len()
    );
}

#[tokio::test]
async fn the_hash_tag_is_the_code_s_and_shared_by_a_descriptor_s_keys() {
    let c = counter("edge", &[("remote_address", "10.0.0.1"), ("path", "{/x}")]);
    let tag = hash_tag(&c);
    assert_eq!(tag.len(), 16);
    assert!(tag.bytes().all(|b| b.is_ascii_hexdigit()));
    for algorithm in Algorithm::ALL {
        for unit in [Unit::Second, Unit::Day] {
            let rate = Rate::new(algorithm, 5, unit, 1, None).unwrap();
            let name = redis_key(&c, &rate);
            assert!(
                name.starts_with(&format!("rl1:{{{tag}}}:{algorithm}:")),
                "{name}"
            );
        }
    }
    assert_ne!(hash_tag(&counter("edge", &[("a", "b")])), tag);
}

#[tokio::test]
async fn long_values_give_bounded_keys_and_separate_counters() {
    let long_a = "a".repeat(100_000);
    let mut long_b = long_a.clone();
    long_b.replace_range(99_999.., "b");
    let a = counter("long", &[("k", &long_a)]);
    let b = counter("long", &[("k", &long_b)]);
    let server = RedisServer::start();
    let store = connect(&server).await;
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 1, Unit::Minute, 1, None).unwrap();
        let (ka, kb) = (redis_key(&a, &rate), redis_key(&b, &rate));
        assert_ne!(ka, kb);
        assert!(ka.len() <= MAX_KEY_LEN && kb.len() <= MAX_KEY_LEN);
        assert!(store.decide(&[check(&a, rate, 1)]).await.unwrap()[0].admitted);
        assert!(store.decide(&[check(&b, rate, 1)]).await.unwrap()[0].admitted);
        assert!(!store.decide(&[check(&a, rate, 1)]).await.unwrap()[0].admitted);
    }
    let keys = all_keys(&server);
    assert_eq!(keys.len(), 10);
    assert!(keys.iter().all(|k| k.len() <= MAX_KEY_LEN), "{keys:?}");
}

/// The longest a state of `rate` can be needed, in ms, from the instant it is written.
fn needed_ms(rate: &Rate) -> u64 {
    let us = match rate.algorithm() {
        Algorithm::FixedWindow | Algorithm::SlidingWindowLog => rate.window_us(),
        // The current count weighs on the next window's estimate.
        Algorithm::SlidingWindowCounter => 2 * rate.window_us(),
        // Refilling a whole burst.
        Algorithm::TokenBucket => {
            (u64::from(rate.burst()) * rate.window_us()).div_ceil(u64::from(rate.limit()))
        }
        Algorithm::Gcra => u64::from(rate.burst()) * rate.emission_interval_us(),
    };
    us.div_ceil(1_000)
}

#[tokio::test]
async fn every_key_has_a_ttl_no_longer_than_its_state_needs_plus_one_second() {
    let server = RedisServer::start();
    // Redis's own clock, as in production.
    let store = connect(&server).await;
    let mut rates = Vec::new();
    for algorithm in Algorithm::ALL {
        rates.push(Rate::new(algorithm, 5, Unit::Second, 1, None).unwrap());
        rates.push(Rate::new(algorithm, 100, Unit::Minute, 1, None).unwrap());
        rates.push(Rate::new(algorithm, 3, Unit::Hour, 2, Some(7)).unwrap());
    }
    let mut rate_of_key: HashMap<String, Rate> = HashMap::new();
    for (i, rate) in rates.iter().enumerate() {
        for round in 0..4u64 {
            let c = counter(
                "ttl",
                &[("i", &i.to_string()), ("r", &(round % 2).to_string())],
            );
            rate_of_key.insert(redis_key(&c, rate), *rate);
            // Some admitted, some denied, some check-only.
            let _ = store.decide(&[check(&c, *rate, round + 1)]).await.unwrap();
            let _ = store.decide(&[check(&c, *rate, 0)]).await.unwrap();
        }
    }
    let keys = all_keys(&server);
    // A fixed window's count lives under its counter's key + `@<window index>`; a second's
    // window may have turned between the rounds, leaving two of them.
    let counter_key_of = |key: &str| key.split_once('@').map_or(key, |(base, _)| base).to_owned();
    let counters: HashSet<String> = keys.iter().map(|k| counter_key_of(k)).collect();
    assert_eq!(counters.len(), rates.len() * 2, "{keys:?}");
    let mut connection = server.connection();
    for key in keys {
        let rate = rate_of_key
            .get(&counter_key_of(&key))
            .unwrap_or_else(|| panic!("unknown key {key}"));
        let pttl: i64 = redis::cmd("PTTL").arg(&key).query(&mut connection).unwrap();
        let bound = needed_ms(rate) + 1_000;
        assert!(pttl > 0, "{key} has no TTL ({pttl})");
        assert!(
            pttl as u64 <= bound,
            "{key}: PTTL {pttl} ms > needed + 1 s = {bound} ms"
        );
    }
}

/// The instant (µs) from which a stored state of `algorithm` is worthless, from its key and value.
fn worthless_at_us(algorithm: Algorithm, key: &str, value: &str, window_us: u64) -> u64 {
    let first: u64 = value.split(':').next().unwrap().parse().unwrap();
    match algorithm {
        Algorithm::Gcra => first,
        Algorithm::FixedWindow => {
            let (_, index) = key.rsplit_once('@').expect("a window's key");
            (index.parse::<u64>().unwrap() + 1) * window_us
        }
        Algorithm::SlidingWindowCounter => first + 2 * window_us,
        other => unreachable!("{other:?} is not written with KEEPTTL"),
    }
}

/// Writes that stay in their key's half-second expiry step keep its expiry (`KEEPTTL`) rather than
/// set a new one: after every write of a busy key, through steps and windows, its expiry still
/// falls 0.5 to 1 s after its state becomes worthless, never before.
#[tokio::test]
async fn a_busy_key_expires_half_a_second_to_a_second_after_its_state_is_worthless() {
    let server = RedisServer::start();
    // Redis's own clock, as in production: the expiry runs on it.
    let store = connect(&server).await;
    let mut connection = server.connection();
    let rates = [
        // T = 20 ms, one hit every ~10 ms: the TAT runs ahead, through several steps.
        Rate::new(Algorithm::Gcra, 50, Unit::Second, 1, None).unwrap(),
        Rate::new(Algorithm::FixedWindow, 1000, Unit::Second, 1, None).unwrap(),
        Rate::new(Algorithm::SlidingWindowCounter, 1000, Unit::Second, 1, None).unwrap(),
    ];
    let started = std::time::Instant::now();
    let mut writes = [0u32; 3];
    while started.elapsed() < std::time::Duration::from_millis(1600) {
        for (i, rate) in rates.iter().enumerate() {
            let c = counter("busy", &[("a", rate.algorithm().as_str())]);
            let before = redis_now_us(&mut connection);
            let verdict = store.decide(&[check(&c, *rate, 1)]).await.unwrap();
            if !verdict[0].admitted {
                continue;
            }
            let counter_key = redis_key(&c, rate);
            let key = state_key(&counter_key, rate, before);
            if state_key(&counter_key, rate, redis_now_us(&mut connection)) != key {
                // A fixed window turned during the decision: which window's key it wrote is not
                // known here.
                continue;
            }
            writes[i] += 1;
            let (value, pttl, time): (String, i64, (u64, u64)) = redis::pipe()
                .cmd("GET")
                .arg(&key)
                .cmd("PTTL")
                .arg(&key)
                .cmd("TIME")
                .query(&mut connection)
                .unwrap();
            assert!(pttl > 0, "{key} has no TTL ({pttl})");
            let now_ms = time.0 * 1000 + time.1 / 1000;
            let expires_ms = now_ms + pttl as u64;
            let worthless_ms =
                worthless_at_us(rate.algorithm(), &key, &value, rate.window_us()) / 1000;
            // PTTL and TIME are read a moment apart, in whole ms.
            assert!(
                expires_ms + 3 >= worthless_ms + 500,
                "{key} = {value} expires at {expires_ms} ms, before its state is worthless + 0.5 s \
                 ({worthless_ms} ms + 500)"
            );
            assert!(
                expires_ms <= worthless_ms + 1000 + 3,
                "{key} = {value} expires at {expires_ms} ms, later than worthless + 1 s \
                 ({worthless_ms} ms + 1000)"
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(
        writes.iter().all(|&n| n >= 30),
        "too few writes: {writes:?}"
    );
}

#[tokio::test]
async fn check_only_and_denied_requests_write_nothing() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let mut connection = server.connection();
    let dbsize = |connection: &mut redis::Connection| -> u64 {
        redis::cmd("DBSIZE").query(connection).unwrap()
    };
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 2, Unit::Minute, 1, None).unwrap();
        let c = counter("nowrite", &[("a", algorithm.as_str())]);
        for _ in 0..3 {
            let v = store
                .decide(&[check(&c, rate, 0), check(&c, rate, 0)])
                .await;
            assert!(v.unwrap().iter().all(|v| v.admitted));
        }
        // Over capacity from the start: denied, nothing written either.
        let v = store.decide(&[check(&c, rate, 3)]).await.unwrap();
        assert!(!v[0].admitted);
    }
    assert_eq!(dbsize(&mut connection), 0, "{:?}", all_keys(&server));

    // A denied request leaves every stored value as it was.
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 2, Unit::Minute, 1, None).unwrap();
        let c = counter("nowrite", &[("b", algorithm.as_str())]);
        assert!(store.decide(&[check(&c, rate, 2)]).await.unwrap()[0].admitted);
    }
    let dump = |connection: &mut redis::Connection| -> Vec<(String, Vec<u8>)> {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query(connection).unwrap();
        keys.sort();
        keys.into_iter()
            .map(|k| {
                let value: Vec<u8> = redis::cmd("DUMP").arg(&k).query(connection).unwrap();
                (k, value)
            })
            .collect()
    };
    let before = dump(&mut connection);
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 2, Unit::Minute, 1, None).unwrap();
        let c = counter("nowrite", &[("b", algorithm.as_str())]);
        let other = counter("nowrite", &[("c", algorithm.as_str())]);
        let v = store
            .decide(&[check(&other, rate, 1), check(&c, rate, 1)])
            .await
            .unwrap();
        assert!(v[0].admitted && !v[1].admitted);
    }
    assert_eq!(dump(&mut connection), before);
}

/// Stored values that are no state: not a number, not an integer, negative, or beyond what a
/// double holds exactly (2^53) or INCRBY can add to (2^63 - 1, and more).
const UNREADABLE: [&str; 11] = [
    "",
    "abc",
    "-5",
    "1.5",
    "12abc",
    "inf",
    "nan",
    "1e300",
    "9007199254740993",
    "9223372036854775807",
    "99999999999999999999",
];

#[tokio::test]
async fn an_unreadable_gcra_state_counts_as_absent_and_is_replaced() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let mut connection = server.connection();
    let rate = Rate::new(Algorithm::Gcra, 2, Unit::Minute, 1, None).unwrap();
    for (i, garbage) in UNREADABLE.iter().enumerate() {
        let c = counter("garbage", &[("i", &i.to_string())]);
        let key = redis_key(&c, &rate);
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(garbage)
            .query(&mut connection)
            .unwrap();
        let v = store.decide(&[check(&c, rate, 1)]).await.unwrap();
        assert!(v[0].admitted, "state {garbage:?}: {v:?}");
        assert_eq!(
            v[0].remaining, 1,
            "state {garbage:?} was not read as absent"
        );
        let stored: String = redis::cmd("GET").arg(&key).query(&mut connection).unwrap();
        assert!(
            !stored.is_empty() && stored.bytes().all(|b| b.is_ascii_digit()),
            "state {garbage:?} replaced by {stored:?}"
        );
    }

    // A readable state is read: a TAT an hour ahead leaves no room.
    let tat = redis_now_us(&mut connection) + 3_600 * S;
    let c = counter("garbage", &[("i", "readable")]);
    let _: () = redis::cmd("SET")
        .arg(redis_key(&c, &rate))
        .arg(tat.to_string())
        .query(&mut connection)
        .unwrap();
    let v = store.decide(&[check(&c, rate, 1)]).await.unwrap();
    assert!(!v[0].admitted, "{v:?}");
}

/// A fixed window's key holding text that is no count counts as absent, on the one-check path
/// (which adds its hits first) as on the general one, and is replaced by the admitted hits.
#[tokio::test]
async fn an_unreadable_fixed_window_count_counts_as_absent_and_is_replaced() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let mut connection = server.connection();
    let rate = Rate::new(Algorithm::FixedWindow, 2, Unit::Hour, 1, None).unwrap();
    for (i, garbage) in UNREADABLE.iter().enumerate() {
        let one = counter("garbage-fw", &[("i", &i.to_string())]);
        let first = counter("garbage-fw", &[("i", &i.to_string()), ("of", "two")]);
        let second = counter(
            "garbage-fw",
            &[("i", &i.to_string()), ("of", "two"), ("n", "2")],
        );
        let keys: Vec<String> = [&one, &first, &second]
            .iter()
            .map(|c| state_key_now(&mut connection, c, &rate))
            .collect();
        for key in &keys {
            let _: () = redis::cmd("SET")
                .arg(key)
                .arg(garbage)
                .query(&mut connection)
                .unwrap();
        }
        let peek = store.decide(&[check(&one, rate, 0)]).await.unwrap();
        assert_eq!(
            (peek[0].admitted, peek[0].remaining),
            (true, 2),
            "{garbage:?}"
        );
        let v = store.decide(&[check(&one, rate, 1)]).await.unwrap();
        assert_eq!(
            (v[0].admitted, v[0].remaining),
            (true, 1),
            "one check on {garbage:?}"
        );
        let v = store
            .decide(&[check(&first, rate, 1), check(&second, rate, 2)])
            .await
            .unwrap();
        assert_eq!(
            v.iter()
                .map(|v| (v.admitted, v.remaining))
                .collect::<Vec<_>>(),
            [(true, 1), (true, 0)],
            "two checks on {garbage:?}"
        );
        let counts: Vec<u64> = redis::cmd("MGET")
            .arg(&keys)
            .query(&mut connection)
            .unwrap_or_else(|e| panic!("{garbage:?} not replaced by counts: {e}"));
        assert_eq!(counts, [1, 1, 2], "{garbage:?}");
        for key in &keys {
            let pttl: i64 = redis::cmd("PTTL").arg(key).query(&mut connection).unwrap();
            assert!(pttl > 0, "{key} replaced without a TTL ({pttl})");
        }
    }
}

/// Memory per key, printed as a markdown table: `cargo test --test redis_keys -- --ignored
/// --nocapture memory_per_key`.
#[tokio::test]
#[ignore = "measurement, prints a table"]
async fn memory_per_key() {
    let server = RedisServer::start();
    let clock = Arc::new(ManualClock::new(1_700_000_040 * S));
    let store = connect(&server)
        .await
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let mut connection = server.connection();
    let c = counter("edge", &[("remote_address", "203.0.113.7")]);
    let mut rows = Vec::new();
    let mut plans: Vec<(String, Rate, u64, u64)> = Vec::new();
    for algorithm in Algorithm::ALL {
        let rate = Rate::new(algorithm, 100, Unit::Minute, 1, None).unwrap();
        plans.push((format!("{algorithm}, L=100/min, after 1 hit"), rate, 1, 1));
        plans.push((
            format!("{algorithm}, L=100/min, full: 100 requests of 1 hit"),
            rate,
            1,
            100,
        ));
    }
    for limit in [10u32, 100, 1000] {
        let rate = Rate::new(Algorithm::SlidingWindowLog, limit, Unit::Minute, 1, None).unwrap();
        let l = u64::from(limit);
        plans.push((
            format!("sliding_window_log, L={limit}, full: {limit} requests of 1 hit"),
            rate,
            1,
            l,
        ));
        plans.push((
            format!("sliding_window_log, L={limit}, full: 1 request of {limit} hits"),
            rate,
            l,
            1,
        ));
    }
    for (label, rate, hits, requests) in plans {
        let _: () = redis::cmd("FLUSHALL").query(&mut connection).unwrap();
        clock.set_us(1_700_000_040 * S);
        for _ in 0..requests {
            clock.advance_us(1_000);
            let v = store.decide(&[check(&c, rate, hits)]).await.unwrap();
            assert!(v[0].admitted, "{label}");
        }
        let key = state_key(&redis_key(&c, &rate), &rate, clock.now_us());
        let bytes: u64 = redis::cmd("MEMORY")
            .arg("USAGE")
            .arg(&key)
            .arg("SAMPLES")
            .arg(0)
            .query(&mut connection)
            .unwrap();
        let encoding: String = redis::cmd("OBJECT")
            .arg("ENCODING")
            .arg(&key)
            .query(&mut connection)
            .unwrap();
        rows.push((label, key.len(), encoding, bytes));
    }
    let version: String = redis::cmd("INFO")
        .arg("server")
        .query(&mut connection)
        .unwrap();
    let version = version
        .lines()
        .find_map(|l| l.strip_prefix("redis_version:"))
        .unwrap_or("?")
        .to_owned();
    println!(
        "\nMEMORY USAGE per key (redis {version}, key name {} bytes)\n",
        rows[0].1
    );
    println!("| state | encoding | bytes |");
    println!("|---|---|---|");
    for (label, _, encoding, bytes) in rows {
        println!("| {label} | {encoding} | {bytes} |");
    }
}
