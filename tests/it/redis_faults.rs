//! Failure handling of the Redis store against a real redis-server: lost scripts, a killed server,
//! a frozen server, a server restarted on the same port, bad settings.
//!
//! Durations asserted here are loose upper bounds on failure paths (a failing call must not hang),
//! not performance targets.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::store::redis::{CallCommand, RedisSettings};
use ratelimitd::store::{Check, RedisStore, Store, StoreError};
use testkit::redis_server::RedisServer;

fn check(value: &str, limit: u32, hits: u64) -> Check {
    Check {
        key: CounterKey::new(
            "faults",
            &[Entry {
                key: "k".into(),
                value: value.into(),
            }],
        ),
        rate: Rate::new(Algorithm::FixedWindow, limit, Unit::Hour, 1, None).unwrap(),
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

/// Calls `decide` until it succeeds, for at most `limit`; returns how long that took.
async fn recovery_time(store: &RedisStore, limit: Duration) -> Duration {
    let started = Instant::now();
    loop {
        match store.decide(&[check("recover", 1_000, 1)]).await {
            Ok(verdicts) => {
                assert!(verdicts[0].admitted);
                return started.elapsed();
            }
            Err(error) => {
                assert!(
                    started.elapsed() < limit,
                    "no recovery within {limit:?}; last error: {error}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
}

/// What the server runs the scripts as, flushed between calls (`SCRIPT FLUSH`, and `FUNCTION
/// FLUSH` where the server has Functions): reloaded within the call, which goes on as if nothing
/// happened.
#[tokio::test]
async fn script_and_function_flush_between_calls_is_transparent() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let functions = server.has_functions();
    let expected = if functions {
        CallCommand::Fcall
    } else {
        CallCommand::Evalsha
    };
    assert_eq!(store.call_commands(), [Some(expected)]);
    let mut direct = server.connection();
    assert_eq!(store.script_reloads(), 0);
    let v = store.decide(&[check("flush", 3, 1)]).await.unwrap();
    assert_eq!(v[0].remaining, 2);
    for round in 1..=3u64 {
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query(&mut direct)
            .unwrap();
        let exists: Vec<bool> = redis::cmd("SCRIPT")
            .arg("EXISTS")
            .arg(store.script_sha1())
            .query(&mut direct)
            .unwrap();
        assert_eq!(exists, [false]);
        if functions {
            let _: () = redis::cmd("FUNCTION")
                .arg("FLUSH")
                .query(&mut direct)
                .unwrap();
            let libraries: Vec<redis::Value> = redis::cmd("FUNCTION")
                .arg("LIST")
                .query(&mut direct)
                .unwrap();
            assert!(libraries.is_empty(), "{libraries:?}");
        }
        // Reloaded and retried within the same call; the counter kept its state.
        let v = store.decide(&[check("flush", 3, 1)]).await.unwrap();
        assert!(v[0].admitted || round == 3, "round {round}: {v:?}");
        assert_eq!(store.script_reloads(), round);
        assert_eq!(store.call_commands(), [Some(expected)]);
    }
    // The third flush round found the counter used up: 3 of 3 taken, nothing more written.
    let v = store.decide(&[check("flush", 3, 0)]).await.unwrap();
    assert_eq!(v[0].remaining, 0);
    if functions {
        let libraries: String = redis::cmd("FUNCTION")
            .arg("LIST")
            .query::<redis::Value>(&mut direct)
            .map(|value| format!("{value:?}"))
            .unwrap();
        assert!(libraries.contains(store.function_library()), "{libraries}");
        assert!(server.command_calls("fcall") > 0);
    }
    assert_eq!(
        server.command_calls("evalsha") > 0,
        !functions,
        "the store calls by {expected:?} only"
    );
}

#[tokio::test]
async fn killed_redis_fails_fast_then_recovers_on_restart() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    assert!(store.is_healthy().await);
    assert!(store.decide(&[check("kill", 10, 1)]).await.unwrap()[0].admitted);

    server.kill();
    for attempt in 0..20 {
        let started = Instant::now();
        let result = store.decide(&[check("kill", 10, 1)]).await;
        let took = started.elapsed();
        let error = result.expect_err("redis is dead");
        assert!(
            matches!(error, StoreError::Unavailable(_) | StoreError::Timeout(_)),
            "{error:?}"
        );
        assert!(took < Duration::from_secs(1), "attempt {attempt}: {took:?}");
        let started = Instant::now();
        assert!(!store.is_healthy().await);
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    server.restart();
    let took = recovery_time(&store, Duration::from_secs(5)).await;
    eprintln!("recovered {took:?} after the restart");
    assert!(store.is_healthy().await);
    // The new server had no script: it was loaded again on the fly.
    assert!(store.script_reloads() >= 1);
}

#[tokio::test]
async fn a_quick_restart_does_not_turn_health_off() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    assert!(store.decide(&[check("quick", 10, 1)]).await.unwrap()[0].admitted);
    assert!(store.is_healthy().await);
    assert_eq!(store.connections_lost(), 0);

    server.restart();
    // Every connection died with the old server; the probe replaces them as it meets them.
    assert!(
        store.is_healthy().await,
        "redis is already back: the first probe must say so"
    );
    assert!(store.connections_lost() >= 1);
    assert!(store.decide(&[check("quick", 10, 1)]).await.unwrap()[0].admitted);
}

#[tokio::test]
async fn redis_down_for_a_while_then_back() {
    let mut server = RedisServer::start();
    let store = connect(&server).await;
    server.kill();
    // Keep calling through a longer outage: every call fails fast, and the backoff keeps
    // connection attempts rare.
    let outage = Instant::now();
    let mut failures = 0;
    while outage.elapsed() < Duration::from_millis(1_500) {
        let started = Instant::now();
        assert!(store.decide(&[check("outage", 10, 1)]).await.is_err());
        assert!(started.elapsed() < Duration::from_secs(1));
        failures += 1;
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(failures > 10);
    server.restart();
    let took = recovery_time(&store, Duration::from_secs(5)).await;
    eprintln!("recovered {took:?} after a 1.5 s outage");
}

#[tokio::test]
async fn frozen_redis_times_out_then_recovers() {
    let mut server = RedisServer::start();
    let settings = RedisSettings {
        timeout: Duration::from_millis(100),
        ..RedisSettings::new(server.url())
    };
    let store = RedisStore::connect(settings).await.unwrap();
    assert!(store.decide(&[check("freeze", 10, 1)]).await.is_ok());
    server.pause();
    let started = Instant::now();
    let error = store
        .decide(&[check("freeze", 10, 1)])
        .await
        .expect_err("frozen");
    let took = started.elapsed();
    assert!(
        matches!(error, StoreError::Timeout(_) | StoreError::Unavailable(_)),
        "{error:?}"
    );
    assert!(took >= Duration::from_millis(90), "{took:?}");
    assert!(took < Duration::from_secs(1), "{took:?}");
    assert!(!store.is_healthy().await);
    server.resume();
    let took = recovery_time(&store, Duration::from_secs(5)).await;
    eprintln!("recovered {took:?} after a freeze");
}

#[tokio::test]
async fn unreachable_redis_fails_at_connect() {
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let started = Instant::now();
    let error = RedisStore::connect(RedisSettings::new(format!("redis://127.0.0.1:{port}/")))
        .await
        .expect_err("nothing listens there");
    assert!(matches!(error, StoreError::Unavailable(_)), "{error:?}");
    assert!(started.elapsed() < Duration::from_secs(1));
}

#[tokio::test]
async fn bad_settings_are_rejected() {
    for url in ["", "http://127.0.0.1:1/", "redis://127.0.0.1:notaport/"] {
        let error = RedisStore::connect(RedisSettings::new(url))
            .await
            .expect_err(url);
        assert!(
            matches!(error, StoreError::Unavailable(_)),
            "{url}: {error:?}"
        );
    }
    let server = RedisServer::start();
    for settings in [
        RedisSettings {
            pool_size: 0,
            ..RedisSettings::new(server.url())
        },
        RedisSettings {
            timeout: Duration::ZERO,
            ..RedisSettings::new(server.url())
        },
    ] {
        assert!(RedisStore::connect(settings).await.is_err());
    }
}

#[tokio::test]
async fn database_number_and_password_from_the_url() {
    let server = RedisServer::start();
    let mut direct = server.connection();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("requirepass")
        .arg("s3cret")
        .query(&mut direct)
        .unwrap();
    let url = format!("redis://:s3cret@127.0.0.1:{}/3", server.port());
    let store = RedisStore::connect(RedisSettings::new(url)).await.unwrap();
    assert!(store.decide(&[check("db", 5, 1)]).await.unwrap()[0].admitted);
    let _: () = redis::cmd("AUTH").arg("s3cret").query(&mut direct).unwrap();
    let _: () = redis::cmd("SELECT").arg(3).query(&mut direct).unwrap();
    let keys: u64 = redis::cmd("DBSIZE").query(&mut direct).unwrap();
    assert_eq!(keys, 1, "the counter lives in database 3");
    let wrong = format!("redis://:wrong@127.0.0.1:{}/3", server.port());
    assert!(RedisStore::connect(RedisSettings::new(wrong))
        .await
        .is_err());
}

#[tokio::test]
async fn a_foreign_value_under_a_counter_key_is_a_protocol_error() {
    let server = RedisServer::start();
    let store = connect(&server).await;
    let check = check("foreign", 5, 1);
    let mut connection = server.connection();
    let key = testkit::redis_server::state_key_now(&mut connection, &check.key, &check.rate);
    let _: () = redis::cmd("HSET")
        .arg(&key)
        .arg("f")
        .arg("v")
        .query(&mut connection)
        .unwrap();
    let error = store.decide(&[check]).await.expect_err("wrong type");
    assert!(matches!(error, StoreError::Protocol(_)), "{error:?}");
    // The connection is still fine.
    assert!(store.is_healthy().await);
}
