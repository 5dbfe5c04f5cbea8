//! Every Redis URL form the store accepts, against real redis-server processes: TLS
//! (`rediss://`, with a custom CA, with default roots, with `#insecure`), a password
//! (`redis://:password@`), an ACL user (`redis://user:password@`) and a database number (`/db`).
//!
//! The TLS tests make a throwaway CA and server certificate with the `openssl` CLI and need a
//! redis-server built with TLS (Debian's is): without either they fail, they never skip.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use ratelimitd::limiter::counter_key::CounterKey;
use ratelimitd::limiter::{Algorithm, Entry, Rate, Unit};
use ratelimitd::proto::rls::rate_limit_response::Code;
use ratelimitd::store::redis::scripts::keys::{redis_key, state_key};
use ratelimitd::store::redis::{RedisSettings, RedisTlsSettings};
use ratelimitd::store::{Check, RedisStore, Store, StoreError};
use testkit::ratelimitd::{code, overall, request, should, Ratelimitd};
use testkit::redis_server::{RedisServer, TlsFiles};

fn check(value: &str, limit: u32) -> Check {
    Check {
        key: CounterKey::new(
            "urls",
            &[Entry {
                key: "k".into(),
                value: value.into(),
            }],
        ),
        rate: Rate::new(Algorithm::FixedWindow, limit, Unit::Hour, 1, None).unwrap(),
        hits: 1,
        shadow: false,
        consistency: ratelimitd::limiter::Consistency::Exact,
        rule: None,
    }
}

/// The key holding `check`'s count now. The test's redis-server runs on this host, on its clock,
/// and the window is an hour long.
fn key_of(check: &Check) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    let now_us = u64::try_from(now.as_micros()).expect("µs fit in u64");
    state_key(&redis_key(&check.key, &check.rate), &check.rate, now_us)
}

fn settings(url: String, tls_ca: Option<PathBuf>) -> RedisSettings {
    RedisSettings {
        // Loose: TLS handshakes in a debug build on a small machine.
        timeout: Duration::from_secs(2),
        tls: tls_ca.map(RedisTlsSettings::with_ca).unwrap_or_default(),
        ..RedisSettings::new(url)
    }
}

/// Limit 2, three hits on one key: admitted, admitted, refused.
async fn assert_limits(store: &RedisStore, value: &str) {
    let decisions: Vec<bool> = {
        let mut decisions = Vec::new();
        for _ in 0..3 {
            let verdicts = store.decide(&[check(value, 2)]).await.expect("decide");
            decisions.push(verdicts[0].admitted);
        }
        decisions
    };
    assert_eq!(decisions, [true, true, false], "limit 2 on {value}");
}

fn connect_error(result: Result<RedisStore, StoreError>) -> String {
    match result {
        Ok(store) => panic!("connected, expected a failure: {store:?}"),
        Err(StoreError::Unavailable(message)) => message,
        Err(other) => panic!("expected Unavailable, got {other:?}"),
    }
}

/// Runs `redis-cli args...` and returns its trimmed output; panics if it fails.
fn redis_cli(args: &[&str]) -> String {
    let output = Command::new("redis-cli")
        .args(args)
        .output()
        .expect("run redis-cli");
    let stdout = String::from_utf8_lossy(&output.stdout).trim().to_owned();
    assert!(
        output.status.success() && !stdout.starts_with("ERR") && !stdout.contains("NOAUTH"),
        "redis-cli {args:?}: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// `redis-cli --tls` against a TLS test server, verifying it with the test CA.
fn redis_cli_tls(server: &RedisServer, args: &[&str]) -> String {
    let tls = server.tls().expect("a TLS server");
    let port = server.port().to_string();
    let ca = tls.ca.to_str().unwrap();
    let base = ["--tls", "--cacert", ca, "-h", "127.0.0.1", "-p", &port];
    redis_cli(&[&base[..], args].concat())
}

fn dbsize(connection: &mut redis::Connection, db: u32) -> u64 {
    let _: () = redis::cmd("SELECT").arg(db).query(connection).unwrap();
    redis::cmd("DBSIZE").query(connection).unwrap()
}

fn scan_all(connection: &mut redis::Connection) -> Vec<String> {
    let mut keys = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(connection)
            .unwrap();
        keys.extend(batch);
        if next == 0 {
            keys.sort();
            return keys;
        }
        cursor = next;
    }
}

// ---------------------------------------------------------------------------------------------
// TLS

#[tokio::test]
async fn tls_with_the_deployment_ca_decides_and_writes_keys() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, &[]);
    let url = format!("rediss://127.0.0.1:{}", server.port());
    let store = RedisStore::connect(settings(url, Some(tls.ca.clone())))
        .await
        .expect("rediss:// with the deployment's CA");
    assert!(store.is_healthy().await);
    assert_limits(&store, "tls").await;

    // The counter is in Redis: seen by a redis-rs TLS client and by `redis-cli --tls`.
    let key = key_of(&check("tls", 2));
    let mut direct = server.connection();
    let exists: bool = redis::cmd("EXISTS").arg(&key).query(&mut direct).unwrap();
    assert!(exists, "{key} exists");
    assert_eq!(redis_cli_tls(&server, &["EXISTS", &key]), "1");
    assert_eq!(redis_cli_tls(&server, &["DBSIZE"]), "1");
    // Plain TCP is off on this server: the port speaks TLS only.
    let plain = format!("redis://127.0.0.1:{}/", server.port());
    assert!(RedisStore::connect(settings(plain, None)).await.is_err());
}

#[tokio::test]
async fn tls_by_host_name_verifies_the_name() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, &[]);
    // The certificate names DNS:localhost as well as IP:127.0.0.1.
    let url = format!("rediss://localhost:{}/", server.port());
    let store = RedisStore::connect(settings(url, Some(tls.ca.clone())))
        .await
        .expect("rediss://localhost with the deployment's CA");
    assert_limits(&store, "tls-name").await;
}

#[tokio::test]
async fn tls_refuses_a_server_the_roots_do_not_vouch_for() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, &[]);
    let url = format!("rediss://127.0.0.1:{}/", server.port());

    // Default (public) roots: the self-signed CA is unknown.
    let started = Instant::now();
    let message = connect_error(RedisStore::connect(settings(url.clone(), None)).await);
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer")
            && message.contains("--redis-tls-ca"),
        "clear TLS error: {message}"
    );
    assert!(started.elapsed() < Duration::from_secs(3), "fails fast");

    // Another deployment's CA: refused the same way.
    let other = TlsFiles::generate();
    let message = connect_error(RedisStore::connect(settings(url, Some(other.ca.clone()))).await);
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "clear TLS error: {message}"
    );
    // Nothing was written.
    assert_eq!(redis_cli_tls(&server, &["DBSIZE"]), "0");
}

#[tokio::test]
async fn tls_insecure_fragment_skips_verification() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, &[]);
    let url = format!("rediss://127.0.0.1:{}/#insecure", server.port());
    let store = RedisStore::connect(settings(url, None))
        .await
        .expect("rediss://...#insecure with an unknown CA");
    assert_limits(&store, "insecure").await;
    let key = key_of(&check("insecure", 2));
    assert_eq!(redis_cli_tls(&server, &["EXISTS", &key]), "1");
}

#[tokio::test]
async fn tls_with_password_and_database() {
    let tls = TlsFiles::generate();
    let server = RedisServer::start_tls(&tls, &["--requirepass", "secret"]);
    let url = format!("rediss://:secret@127.0.0.1:{}/5", server.port());
    let store = RedisStore::connect(settings(url, Some(tls.ca.clone())))
        .await
        .expect("rediss:// with a password and a database");
    assert_limits(&store, "tls-db").await;
    let mut direct = server
        .client_for(&format!("rediss://:secret@127.0.0.1:{}/", server.port()))
        .get_connection()
        .unwrap();
    assert_eq!(dbsize(&mut direct, 5), 1, "the counter lives in database 5");
    assert_eq!(dbsize(&mut direct, 0), 0, "nothing in database 0");
    let wrong = format!("rediss://:wrong@127.0.0.1:{}/5", server.port());
    let message = connect_error(RedisStore::connect(settings(wrong, Some(tls.ca.clone()))).await);
    assert!(
        message.contains("wrong user or password"),
        "clear auth error: {message}"
    );
}

#[tokio::test]
async fn tls_store_reconnects_after_a_restart() {
    let tls = TlsFiles::generate();
    let mut server = RedisServer::start_tls(&tls, &[]);
    let url = format!("rediss://127.0.0.1:{}/", server.port());
    let store = RedisStore::connect(settings(url, Some(tls.ca.clone())))
        .await
        .unwrap();
    assert!(store.decide(&[check("restart", 10)]).await.is_ok());
    server.restart();
    let started = Instant::now();
    loop {
        match store.decide(&[check("restart", 10)]).await {
            Ok(verdicts) => {
                assert!(verdicts[0].admitted);
                break;
            }
            Err(error) => {
                assert!(
                    started.elapsed() < Duration::from_secs(10),
                    "no TLS reconnection: {error}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    assert!(store.is_healthy().await);
}

#[tokio::test]
async fn tls_ca_setting_errors_are_clear() {
    let tls = TlsFiles::generate();
    // A CA file only makes sense with rediss://.
    let message = connect_error(
        RedisStore::connect(settings(
            "redis://127.0.0.1:1/".into(),
            Some(tls.ca.clone()),
        ))
        .await,
    );
    assert!(
        message.contains("--redis-tls-ca: used by TLS connections only; use a rediss:// url"),
        "{message}"
    );
    // Missing file.
    let missing = tls.ca.with_file_name("missing.crt");
    let message = connect_error(
        RedisStore::connect(settings(
            "rediss://127.0.0.1:1/".into(),
            Some(missing.clone()),
        ))
        .await,
    );
    assert!(
        message.contains(&format!(
            "--redis-tls-ca {}: cannot read",
            missing.display()
        )),
        "{message}"
    );
    // A file without any certificate (a key is not a CA).
    let message = connect_error(
        RedisStore::connect(settings(
            "rediss://127.0.0.1:1/".into(),
            Some(tls.key.clone()),
        ))
        .await,
    );
    assert!(message.contains("no PEM certificate"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// Credentials

#[tokio::test]
async fn password_in_the_url() {
    let server = RedisServer::start_with(&["--requirepass", "secret"]);
    let url = format!("redis://:secret@127.0.0.1:{}", server.port());
    let store = RedisStore::connect(settings(url, None))
        .await
        .expect("redis://:secret@");
    assert!(store.is_healthy().await);
    assert_limits(&store, "password").await;
    let key = key_of(&check("password", 2));
    let port = server.port().to_string();
    let cli = ["-h", "127.0.0.1", "-p", &port, "--no-auth-warning", "-a"];
    assert_eq!(
        redis_cli(&[&cli[..], &["secret", "EXISTS", &key]].concat()),
        "1"
    );

    let wrong = format!("redis://:wrong@127.0.0.1:{}", server.port());
    let message = connect_error(RedisStore::connect(settings(wrong, None)).await);
    assert!(
        message.contains("wrong user or password") && !message.contains("wrong@"),
        "clear auth error, no URL echoed: {message}"
    );
    let none = format!("redis://127.0.0.1:{}", server.port());
    let message = connect_error(RedisStore::connect(settings(none, None)).await);
    assert!(
        message.contains("redis requires authentication"),
        "clear auth error: {message}"
    );
}

#[tokio::test]
async fn acl_user_in_the_url() {
    let server = RedisServer::start();
    let mut admin = server.connection();
    // A password with URL-reserved characters, percent-encoded in the URL.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limiter")
        .arg("on")
        .arg(">p@ss:w/rd")
        .arg("~*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    let url = format!(
        "redis://limiter:p%40ss%3Aw%2Frd@127.0.0.1:{}/",
        server.port()
    );
    let store = RedisStore::connect(settings(url, None))
        .await
        .expect("redis://limiter:pw@");
    assert_limits(&store, "acl").await;
    let key = key_of(&check("acl", 2));
    let exists: bool = redis::cmd("EXISTS").arg(&key).query(&mut admin).unwrap();
    assert!(exists);
    // The store's connections are logged in as `limiter`.
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut admin).unwrap();
    assert!(clients.contains("user=limiter"), "{clients}");

    let wrong = format!("redis://limiter:nope@127.0.0.1:{}/", server.port());
    let message = connect_error(RedisStore::connect(settings(wrong, None)).await);
    assert!(
        message.contains("wrong user or password"),
        "clear auth error: {message}"
    );
    // A user that may not run scripts fails at connect (the script is loaded then), not later.
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("reader")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@read")
        .arg("+ping")
        .query(&mut admin)
        .unwrap();
    let reader = format!("redis://reader:pw@127.0.0.1:{}/", server.port());
    let message = connect_error(RedisStore::connect(settings(reader, None)).await);
    assert!(
        message.contains("cannot load the rate-limit script")
            && message.contains("no permissions to run the 'script|load' command"),
        "clear permission error: {message}"
    );
}

// ---------------------------------------------------------------------------------------------
// Database number

#[tokio::test]
async fn database_number_selects_the_database() {
    let server = RedisServer::start();
    let url = format!("redis://127.0.0.1:{}/3", server.port());
    let store = RedisStore::connect(settings(url, None))
        .await
        .expect("redis://.../3");
    assert_limits(&store, "db-a").await;
    assert_limits(&store, "db-b").await;
    let mut direct = server.connection();
    assert_eq!(dbsize(&mut direct, 0), 0, "nothing in database 0");
    assert_eq!(dbsize(&mut direct, 3), 2, "both counters in database 3");
    let mut expected = vec![key_of(&check("db-a", 2)), key_of(&check("db-b", 2))];
    expected.sort();
    assert_eq!(scan_all(&mut direct), expected);

    // Every pooled connection uses database 3, not only the first one.
    let tasks: Vec<_> = (0..32)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.decide(&[check(&format!("db-{i}"), 5)]).await })
        })
        .collect();
    for task in tasks {
        assert!(task.await.unwrap().unwrap()[0].admitted);
    }
    assert_eq!(dbsize(&mut direct, 0), 0, "still nothing in database 0");
    assert_eq!(dbsize(&mut direct, 3), 34, "db-a, db-b and db-0..db-31");

    // A database Redis does not have fails at connect, clearly.
    let url = format!("redis://127.0.0.1:{}/99", server.port());
    let message = connect_error(RedisStore::connect(settings(url, None)).await);
    assert!(message.contains("DB index is out of range"), "{message}");
}

// ---------------------------------------------------------------------------------------------
// End to end through the binary's --redis-url

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("urls.yaml");
    std::fs::write(
        &path,
        "domain: urls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

async fn assert_serve_limits(url: &str) {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--redis-url",
        url,
        "--redis-timeout",
        "2s",
    ]);
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let resp = should(&mut client, request("urls", &[&[("k", "v")]], 1)).await;
        assert_eq!(overall(&resp), code(&resp.statuses[0]));
        codes.push(overall(&resp));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit], "{url}");
}

#[tokio::test]
async fn binary_serves_through_tls_password_and_database_urls() {
    let tls = TlsFiles::generate();
    let tls_server = RedisServer::start_tls(&tls, &["--requirepass", "secret"]);
    assert_serve_limits(&format!(
        "rediss://:secret@127.0.0.1:{}/2#insecure",
        tls_server.port()
    ))
    .await;
    let mut direct = tls_server
        .client_for(&format!(
            "rediss://:secret@127.0.0.1:{}/",
            tls_server.port()
        ))
        .get_connection()
        .unwrap();
    assert_eq!(dbsize(&mut direct, 2), 1, "the counter lives in database 2");

    let server = RedisServer::start();
    let mut admin = server.connection();
    let _: () = redis::cmd("ACL")
        .arg("SETUSER")
        .arg("limiter")
        .arg("on")
        .arg(">pw")
        .arg("~*")
        .arg("+@all")
        .query(&mut admin)
        .unwrap();
    assert_serve_limits(&format!("redis://limiter:pw@127.0.0.1:{}/4", server.port())).await;
    assert_eq!(dbsize(&mut admin, 4), 1, "the counter lives in database 4");
}
