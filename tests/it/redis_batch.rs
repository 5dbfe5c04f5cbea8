//! Requests sharing one script call, in a real redis-server: decided in order, each all or
//! nothing on the state the earlier ones left; answered one by one (a failing request does not
//! fail the others); a layout that does not add up decides nothing; and concurrent callers of
//! the store really share calls without losing exactness.

use std::sync::Arc;
use std::time::Duration;

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::store::redis::scripts::keys::{redis_key, state_key};
use ratelimitd::store::redis::scripts::reply::decode_batch_reply;
use ratelimitd::store::redis::scripts::request::{evalsha, script_load, sha1, Invocation};
use ratelimitd::store::redis::RedisSettings;
use ratelimitd::store::{Check, RedisStore, Store, StoreError};
use testkit::redis_server::{state_key_now, RedisServer};

const NOW_US: u64 = 1_800_000_000_000_000;

fn counter(value: &str) -> CounterKey {
    CounterKey::new(
        "batch",
        &[Entry {
            key: "user".into(),
            value: value.into(),
        }],
    )
}

fn check(value: &str, limit: u32) -> Check {
    Check {
        key: counter(value),
        rate: Rate::new(Algorithm::FixedWindow, limit, Unit::Hour, 1, None).unwrap(),
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

/// A store connected to `server`, and the request script loaded there for the raw `EVALSHA`
/// calls below (the store itself loads it only where the server has no Functions).
async fn connect(server: &RedisServer) -> RedisStore {
    let store = RedisStore::connect(RedisSettings::new(server.url()))
        .await
        .expect("connect to the test redis-server");
    let _: String = script_load()
        .query(&mut server.connection())
        .expect("SCRIPT LOAD");
    store
}

/// One raw script call carrying `requests` (each a list of checks), at a pinned time.
fn call(server: &RedisServer, requests: &[Vec<Check>]) -> redis::RedisResult<redis::Value> {
    let invocations: Vec<Invocation> = requests
        .iter()
        .map(|checks| Invocation::new(checks, Some(NOW_US)))
        .collect();
    evalsha(invocations.iter()).query(&mut server.connection())
}

fn admitted(reply: redis::Value, checks: &[usize]) -> Vec<Result<Vec<bool>, StoreError>> {
    decode_batch_reply(reply, checks.iter().copied())
        .expect("a well-formed batch reply")
        .into_iter()
        .map(|request| request.map(|verdicts| verdicts.iter().map(|v| v.admitted).collect()))
        .collect()
}

#[tokio::test]
async fn requests_of_one_call_are_decided_in_order_on_the_state_the_earlier_ones_left() {
    let server = RedisServer::start();
    let _store = connect(&server).await;
    // Limit 2 on "alice": the first two requests take it, the third is denied; the fourth request
    // wants "alice" and "bob" together, so it is denied whole and "bob" stays untouched, which
    // the fifth request (bob alone, limit 1) proves by being admitted.
    let reply = call(
        &server,
        &[
            vec![check("alice", 2)],
            vec![check("alice", 2)],
            vec![check("alice", 2)],
            vec![check("bob", 1), check("alice", 2)],
            vec![check("bob", 1)],
        ],
    )
    .unwrap();
    assert_eq!(
        admitted(reply, &[1, 1, 1, 2, 1]),
        vec![
            Ok(vec![true]),
            Ok(vec![true]),
            Ok(vec![false]),
            Ok(vec![true, false]),
            Ok(vec![true]),
        ]
    );
}

/// A request whose key holds something else (WRONGTYPE) fails alone: its neighbours in the same
/// call, checks made by `check_of`, are decided and counted.
async fn assert_a_failing_request_fails_alone(check_of: impl Fn(&str) -> Check) {
    let server = RedisServer::start();
    let _store = connect(&server).await;
    let poisoned = check_of("mallory");
    let _: () = redis::cmd("HSET")
        // The raw calls here run at NOW_US.
        .arg(state_key(
            &redis_key(&poisoned.key, &poisoned.rate),
            &poisoned.rate,
            NOW_US,
        ))
        .arg("field")
        .arg("value")
        .query(&mut server.connection())
        .unwrap();
    let reply = call(
        &server,
        &[
            vec![check_of("carol")],
            vec![poisoned],
            vec![check_of("dave")],
        ],
    )
    .unwrap();
    let answers = admitted(reply, &[1, 1, 1]);
    assert_eq!(answers[0], Ok(vec![true]));
    assert!(
        matches!(&answers[1], Err(StoreError::Protocol(message)) if message.contains("WRONGTYPE")),
        "{:?}",
        answers[1]
    );
    assert_eq!(answers[2], Ok(vec![true]));
    // Both neighbours were counted: a second call finds their limit of 1 used up.
    let reply = call(&server, &[vec![check_of("carol")], vec![check_of("dave")]]).unwrap();
    assert_eq!(
        admitted(reply, &[1, 1]),
        vec![Ok(vec![false]), Ok(vec![false])]
    );
}

#[tokio::test]
async fn a_failing_request_does_not_fail_the_others_of_its_call() {
    assert_a_failing_request_fails_alone(|value| check(value, 1)).await;
}

/// The one-check path of gcra answers a Redis error for its request alone too.
#[tokio::test]
async fn a_failing_gcra_request_does_not_fail_the_others_of_its_call() {
    assert_a_failing_request_fails_alone(|value| Check {
        rate: Rate::new(Algorithm::Gcra, 1, Unit::Hour, 1, None).unwrap(),
        ..check(value, 1)
    })
    .await;
}

#[tokio::test]
async fn a_layout_that_does_not_add_up_decides_nothing() {
    let server = RedisServer::start();
    let _store = connect(&server).await;
    let good = check("erin", 5);
    let key = redis_key(&good.key, &good.rate);
    let rate_table = [1u64, 0, 5, 3_600_000_000, 5, 720_000_000];
    // Request 1 is well-formed; request 2 claims 2 checks but brings the spec of one.
    let error = redis::cmd("EVALSHA")
        .arg(sha1())
        .arg(2)
        .arg(&key)
        .arg(&key)
        .arg(&rate_table[..])
        .arg("1")
        .arg("1:1:0:2")
        .query::<redis::Value>(&mut server.connection())
        .unwrap_err();
    assert!(error.to_string().contains("malformed request 2"), "{error}");
    // A further check where a request's first is due, a rate position outside the table, a
    // pinned time beyond 2^53, or no spec at all: the whole call fails, nothing is decided.
    for spec in ["+1", "2", "1:1:0:1:9007199254740992", "1:1:2:1", "x", ""] {
        let error = redis::cmd("EVALSHA")
            .arg(sha1())
            .arg(1)
            .arg(&key)
            .arg(&rate_table[..])
            .arg(spec)
            .query::<redis::Value>(&mut server.connection())
            .unwrap_err();
        assert!(
            error.to_string().contains("malformed request 1"),
            "{spec}: {error}"
        );
    }
    // One spec per key.
    let error = redis::cmd("EVALSHA")
        .arg(sha1())
        .arg(1)
        .arg(&key)
        .arg(&rate_table[..])
        .arg("1")
        .arg("1")
        .query::<redis::Value>(&mut server.connection())
        .unwrap_err();
    assert!(error.to_string().contains("1 keys for 2 checks"), "{error}");
    // A rate that is not one (limit 0) fails the call before anything is decided.
    let error = redis::cmd("EVALSHA")
        .arg(sha1())
        .arg(1)
        .arg(&key)
        .arg(&[1u64, 0, 0, 3_600_000_000, 5, 720_000_000][..])
        .arg("1")
        .query::<redis::Value>(&mut server.connection())
        .unwrap_err();
    assert!(error.to_string().contains("invalid rate 1"), "{error}");
    let exists: bool = redis::cmd("EXISTS")
        .arg(&key)
        .query(&mut server.connection())
        .unwrap();
    assert!(!exists, "a rejected call must not write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_callers_share_calls_and_admit_exactly_the_limit() {
    let server = RedisServer::start();
    let store = Arc::new(connect(&server).await);
    let before = server.script_calls();
    let callers = 400;
    let mut tasks = Vec::new();
    for _ in 0..callers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            store.decide(&[check("hot", 50)]).await.unwrap()[0].admitted
        }));
    }
    let mut admitted = 0;
    for task in tasks {
        admitted += usize::from(task.await.unwrap());
    }
    let calls = server.script_calls() - before;
    assert_eq!(admitted, 50, "exactly the limit is admitted");
    assert!(
        calls < callers as u64 / 2,
        "{callers} concurrent requests took {calls} script calls: they should share calls"
    );
}

#[test]
fn every_thread_decides_through_its_own_dispatcher_even_after_its_runtime_ended() {
    let server = RedisServer::start();
    // The store's home runtime keeps running (as the server's main thread does).
    let home = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = home.block_on(connect(&server));
    let lanes: Vec<_> = (0..3)
        .map(|lane| {
            let store = store.clone();
            std::thread::spawn(move || {
                // Two runtimes in turn on one thread: the second must not reuse the dispatcher
                // that ended with the first.
                for _ in 0..2 {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    let verdicts = runtime
                        .block_on(store.decide(&[check(&format!("lane-{lane}"), 100)]))
                        .unwrap();
                    assert!(verdicts[0].admitted);
                }
            })
        })
        .collect();
    for lane in lanes {
        lane.join().unwrap();
    }
    // Each lane's two requests were counted on the shared counter of its key.
    for lane in 0..3 {
        let probe = check(&format!("lane-{lane}"), 100);
        let mut connection = server.connection();
        let count: u64 = redis::cmd("GET")
            .arg(state_key_now(&mut connection, &probe.key, &probe.rate))
            .query(&mut connection)
            .unwrap();
        assert_eq!(count, 2, "lane {lane}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queued_requests_are_answered_by_their_deadline_when_redis_hangs() {
    let mut server = RedisServer::start();
    let timeout = Duration::from_millis(300);
    let store = Arc::new(
        RedisStore::connect(RedisSettings {
            timeout,
            pool_size: 1,
            ..RedisSettings::new(server.url())
        })
        .await
        .unwrap(),
    );
    assert!(store.decide(&[check("warm", 10)]).await.is_ok());
    server.pause();
    // One call in flight per thread, the rest queued behind it: each must still be answered
    // by its own deadline, not after the calls ahead of it.
    let tasks: Vec<_> = (0..60)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let started = std::time::Instant::now();
                let answer = store.decide(&[check(&format!("frozen-{i}"), 10)]).await;
                (answer, started.elapsed())
            })
        })
        .collect();
    for task in tasks {
        let (answer, took) = task.await.unwrap();
        assert!(matches!(answer, Err(StoreError::Timeout(_))), "{answer:?}");
        assert!(took < 2 * timeout, "answered after {took:?}");
    }
    server.resume();
    assert!(store.decide(&[check("thawed", 10)]).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_larger_than_a_batch_goes_alone_and_its_neighbours_still_get_answers() {
    let server = RedisServer::start();
    let store = Arc::new(
        RedisStore::connect(RedisSettings {
            timeout: Duration::from_secs(10),
            pool_size: 1,
            ..RedisSettings::new(server.url())
        })
        .await
        .unwrap(),
    );
    // 10 000 distinct counters in one request (above MAX_BATCH_CHECKS), between small requests
    // queued before and after it on the same dispatcher.
    let big: Vec<Check> = (0..10_000).map(|i| check(&format!("big-{i}"), 3)).collect();
    let mut small = Vec::new();
    for i in 0..20 {
        let store = store.clone();
        small.push(tokio::spawn(async move {
            store.decide(&[check(&format!("small-{i}"), 3)]).await
        }));
    }
    let verdicts = store.decide(&big).await.unwrap();
    assert_eq!(verdicts.len(), 10_000);
    assert!(verdicts.iter().all(|v| v.admitted && v.remaining == 2));
    for task in small {
        let verdicts = task.await.unwrap().unwrap();
        assert!(verdicts[0].admitted && verdicts[0].remaining == 2);
    }
    // Every counter of the big request was written once.
    let keys: usize = redis::cmd("DBSIZE")
        .query(&mut server.connection())
        .unwrap();
    assert_eq!(keys, 10_000 + 20);
}
