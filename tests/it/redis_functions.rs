//! Redis Functions against a real server that has them (Redis 7, Valkey 8; scripts/test.sh runs
//! this file with each): the store calls its versioned library with `FCALL`; a user whose ACL
//! refuses `FUNCTION LOAD` gets `EVALSHA`, with one log line saying why; both decide alike and
//! leave the same state; and a library of another version is never called.

use std::collections::BTreeMap;
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Clock, Entry, ManualClock, Rate, Unit};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::store::redis::{CallCommand, RedisSettings};
use ratelimitd::store::{Check, RedisStore, Store};
use testkit::ratelimitd::*;
use testkit::redis_server::{Auth, RedisServer};

const S: u64 = 1_000_000;

/// The ACL of a user that may do everything but load or list functions (`-function`), as managed
/// services set up users that may run scripts but not install code.
const NO_FUNCTION_LOAD: [&str; 6] = ["on", ">scripts-pass", "~*", "&*", "+@all", "-function"];

/// A server that has Functions; panics on one that has none (this file tests Functions).
fn server_with_functions() -> RedisServer {
    let server = RedisServer::start();
    assert!(
        server.has_functions(),
        "this test needs a server with Redis Functions (Redis 7.0+, Valkey); scripts/test.sh runs \
         it only with those"
    );
    server
}

/// Adds the user `scripts` (password `scripts-pass`) that may not load functions.
fn add_user_without_function_load(server: &RedisServer) -> Auth {
    let mut acl = redis::cmd("ACL");
    acl.arg("SETUSER").arg("scripts");
    for rule in NO_FUNCTION_LOAD {
        acl.arg(rule);
    }
    let _: () = acl.query(&mut server.connection()).expect("ACL SETUSER");
    Auth::user("scripts", "scripts-pass")
}

fn rate(algorithm: Algorithm, limit: u32, unit: Unit, burst: Option<u32>) -> Rate {
    Rate::new(algorithm, limit, unit, 1, burst).expect("a valid rate")
}

fn rates() -> Vec<Rate> {
    vec![
        rate(Algorithm::FixedWindow, 5, Unit::Second, None),
        rate(Algorithm::FixedWindow, 20, Unit::Minute, None),
        rate(Algorithm::SlidingWindowLog, 4, Unit::Second, None),
        rate(Algorithm::SlidingWindowCounter, 6, Unit::Second, None),
        rate(Algorithm::TokenBucket, 3, Unit::Second, Some(5)),
        rate(Algorithm::Gcra, 4, Unit::Second, Some(2)),
    ]
}

/// A random request of 1 to 4 checks over a few counters (repeats, shadow checks and checks of 0
/// hits included).
fn random_request(rng: &mut StdRng, rates: &[Rate]) -> Vec<Check> {
    (0..rng.random_range(1..=4))
        .map(|_| Check {
            key: CounterKey::new(
                "functions",
                &[Entry {
                    key: "user".into(),
                    value: format!("u{}", rng.random_range(0..4)),
                }],
            ),
            rate: rates[rng.random_range(0..rates.len())],
            hits: [0, 1, 1, 1, 2, 3][rng.random_range(0..6)],
            shadow: rng.random_range(0..8) == 0,
            consistency: ratelimitd::limiter::Consistency::Exact,
            rule: None,
        })
        .collect()
}

/// Every key of the server and what it holds: a string's value, a sorted set's members with
/// their scores; and its expiry (`PTTL`, ms).
/// The differences between two servers' [`stored`] states, empty when they hold the same keys
/// and values, with expiries within 500 ms of each other (both stores wrote the same expiry,
/// which the two servers' clocks count down from slightly different moments). A key that one
/// server holds with less than a second to live may have expired on the other between the two
/// readings.
fn differences(
    one: &BTreeMap<String, (String, i64)>,
    other: &BTreeMap<String, (String, i64)>,
) -> Vec<String> {
    let keys: std::collections::BTreeSet<&String> = one.keys().chain(other.keys()).collect();
    keys.into_iter()
        .filter_map(|key| match (one.get(key), other.get(key)) {
            (Some((a, ttl_a)), Some((b, ttl_b))) if a == b && (ttl_a - ttl_b).abs() <= 500 => None,
            (Some((_, ttl)), None) | (None, Some((_, ttl))) if *ttl < 1_000 => None,
            (a, b) => Some(format!("{key}: {a:?} / {b:?}")),
        })
        .collect()
}

fn stored(server: &RedisServer) -> BTreeMap<String, (String, i64)> {
    let mut connection = server.connection();
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut connection).unwrap();
    keys.into_iter()
        .filter_map(|key| {
            let kind: String = redis::cmd("TYPE").arg(&key).query(&mut connection).unwrap();
            let value = match kind.as_str() {
                // Expired since KEYS listed it.
                "none" => return None,
                // `None`: expired since TYPE saw it.
                "string" => redis::cmd("GET")
                    .arg(&key)
                    .query::<Option<String>>(&mut connection)
                    .unwrap()?,
                "zset" => format!(
                    "{:?}",
                    redis::cmd("ZRANGE")
                        .arg(&key)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query::<Vec<String>>(&mut connection)
                        .unwrap()
                ),
                other => panic!("{key} is a {other}"),
            };
            let ttl_ms: i64 = redis::cmd("PTTL").arg(&key).query(&mut connection).unwrap();
            Some((key, (value, ttl_ms)))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fcall_and_evalsha_decide_alike_and_leave_the_same_state() {
    let with_functions = server_with_functions();
    let without = server_with_functions();
    let scripts_user = add_user_without_function_load(&without);

    let start = 1_700_000_000 * S + 271_828;
    let clock = Arc::new(ManualClock::new(start));
    let fcall = RedisStore::connect(RedisSettings::new(with_functions.url()))
        .await
        .expect("connect")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    let evalsha = RedisStore::connect(RedisSettings::new(without.url_as(&scripts_user)))
        .await
        .expect("connect as a user refused FUNCTION LOAD")
        .with_pinned_clock(clock.clone() as Arc<dyn Clock>);
    assert_eq!(fcall.call_commands(), [Some(CallCommand::Fcall)]);
    assert_eq!(evalsha.call_commands(), [Some(CallCommand::Evalsha)]);

    let seed = rand::random::<u64>();
    eprintln!("seed {seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let rates = rates();
    let mut now = start;
    let (mut admitted, mut denied) = (0, 0);
    for step in 0..1_500 {
        now += rng.random_range(0..150_000);
        clock.set_us(now);
        let checks = random_request(&mut rng, &rates);
        let by_fcall = fcall.decide(&checks).await.expect("FCALL decides");
        let by_evalsha = evalsha.decide(&checks).await.expect("EVALSHA decides");
        assert_eq!(
            by_fcall, by_evalsha,
            "seed {seed}, step {step}: FCALL and EVALSHA answered differently for {checks:#?}"
        );
        for verdict in &by_fcall {
            if verdict.admitted {
                admitted += 1;
            } else {
                denied += 1;
            }
        }
        if step % 100 == 99 {
            let differ = differences(&stored(&with_functions), &stored(&without));
            assert!(
                differ.is_empty(),
                "seed {seed}, step {step}: the stored states differ: {differ:#?}"
            );
        }
    }
    assert!(
        admitted > 500 && denied > 200,
        "{admitted} admitted, {denied} denied"
    );
    let state = stored(&with_functions);
    assert!(!state.is_empty());
    assert_eq!(differences(&state, &stored(&without)), Vec::<String>::new());

    // Each server ran the scripts one way only (beside the probe that found no library for the
    // user refused FUNCTION LOAD), and that user left no library.
    assert!(with_functions.command_calls("fcall") >= 1_500);
    assert_eq!(with_functions.command_calls("evalsha"), 0);
    assert!(without.command_calls("evalsha") >= 1_500);
    assert!(without.command_calls("fcall") <= 1);
    let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query(&mut without.connection())
        .unwrap();
    assert!(libraries.is_empty(), "{libraries:?}");
}

#[tokio::test]
async fn a_user_refused_function_load_is_served_with_evalsha_and_one_log_line_says_why() {
    let redis = server_with_functions();
    let auth = add_user_without_function_load(&redis);
    let config = fixture("serve/algorithms.yaml");
    let url = redis.url_as(&auth);
    let server = Ratelimitd::start(&[
        "--config",
        config.to_str().unwrap(),
        "--redis-url",
        &url,
        "--no-deny-cache",
    ]);
    let mut client = server.client().await;
    for i in 0..20 {
        let value = format!("v{i}");
        let answer = should(
            &mut client,
            request("algorithms", &[&[("gcra", &value)]], 0),
        )
        .await;
        check_invariants(&answer, 1);
        assert_eq!(overall(&answer), Code::Ok);
    }
    assert!(redis.command_calls("evalsha") >= 1);
    // The probe that found no library, no more.
    assert!(redis.command_calls("fcall") <= 1);
    let output = server.output();
    let said: Vec<&str> = output
        .lines()
        .filter(|line| line.contains("refuses the ratelimitd Functions library"))
        .collect();
    assert_eq!(said.len(), 1, "{output}");
    assert!(
        said[0].contains("no permissions") && said[0].contains("EVALSHA"),
        "the line says why and what instead: {}",
        said[0]
    );
}

#[tokio::test]
async fn a_library_of_another_version_is_never_called() {
    let server = server_with_functions();
    // A library as an older ratelimitd would have left it: its functions mark that they ran.
    let old = "ratelimitd_0123456789abcdef";
    let source = format!(
        "#!lua name={old}\n\
         redis.register_function{{function_name='{old}_request', callback=function(keys, args) \
         redis.call('SET', 'old library ran', '1') return {{0}} end, \
         flags={{'allow-cross-slot-keys'}}}}\n\
         redis.register_function{{function_name='{old}_version', callback=function() \
         return '{old}' end, flags={{'no-writes'}}}}\n"
    );
    let _: String = redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg(&source)
        .query(&mut server.connection())
        .expect("FUNCTION LOAD of the old library");

    let store = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect");
    assert_ne!(store.function_library(), old);
    assert_eq!(store.call_commands(), [Some(CallCommand::Fcall)]);
    let check = Check {
        key: CounterKey::new(
            "functions",
            &[Entry {
                key: "k".into(),
                value: "v".into(),
            }],
        ),
        rate: rate(Algorithm::Gcra, 2, Unit::Hour, None),
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    };
    let admitted: Vec<bool> = {
        let mut answers = Vec::new();
        for _ in 0..3 {
            answers.push(store.decide(std::slice::from_ref(&check)).await.unwrap()[0].admitted);
        }
        answers
    };
    assert_eq!(admitted, [true, true, false]);
    let mut connection = server.connection();
    let ran: Option<String> = redis::cmd("GET")
        .arg("old library ran")
        .query(&mut connection)
        .unwrap();
    assert_eq!(ran, None, "the old library's function was called");
    let libraries = format!(
        "{:?}",
        redis::cmd("FUNCTION")
            .arg("LIST")
            .query::<redis::Value>(&mut connection)
            .unwrap()
    );
    assert!(libraries.contains(old) && libraries.contains(store.function_library()));
}
