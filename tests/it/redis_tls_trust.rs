//! Whom TLS to Redis trusts, through the real binary and a real TLS redis-server: a self-signed
//! server certificate marked as a CA (what `openssl req -x509` makes, and envoyproxy/ratelimit's
//! CI uses) given as `--redis-tls-ca`, or found in the system's certificate store
//! (`SSL_CERT_FILE`, as `update-ca-certificates` would install it); one trusted by neither is
//! refused with the reason, at once natively and in the log while drop-in mode waits. The same
//! through envoyproxy/ratelimit's variables (`REDIS_TLS`, `REDIS_TLS_CACERT`).

use std::fs;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use testkit::ratelimitd::{
    assert_two_then_over, command, refused_start, Ratelimitd, UPSTREAM_LOOPBACK,
};
use testkit::redis_server::{RedisServer, TlsFiles};

const CONFIG: &str =
    "domain: tls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tls.yaml");
    fs::write(&path, CONFIG).unwrap();
    path.to_str().unwrap().to_owned()
}

/// envoyproxy/ratelimit's runtime tree holding [`CONFIG`], and the variables that find it.
fn runtime_env(dir: &tempfile::TempDir) -> Vec<(String, String)> {
    let config = dir.path().join("runtime/ratelimit/config");
    fs::create_dir_all(&config).unwrap();
    fs::write(config.join("tls.yaml"), CONFIG).unwrap();
    [
        ("RUNTIME_ROOT", dir.path().join("runtime").to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("LOG_LEVEL", "info"),
    ]
    .iter()
    .chain(UPSTREAM_LOOPBACK.iter())
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect()
}

/// The variables that make the system's certificate store the certificates of `file` alone
/// (OpenSSL's, which the binary reads as OpenSSL does): `SSL_CERT_DIR` names `empty_dir`, so no
/// directory of the caller's environment adds to it.
fn system_store<'a>(file: &'a Path, empty_dir: &'a Path) -> [(&'static str, &'a str); 2] {
    [
        ("SSL_CERT_FILE", file.to_str().unwrap()),
        ("SSL_CERT_DIR", empty_dir.to_str().unwrap()),
    ]
}

#[tokio::test]
async fn a_self_signed_ca_certificate_given_as_the_ca_file_is_trusted() {
    let tls = TlsFiles::self_signed();
    let redis = RedisServer::start_tls(&tls, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let cert = tls.cert.to_str().unwrap();
    for (host, value) in [("127.0.0.1", "by-ip"), ("localhost", "by-name")] {
        let url = format!("rediss://{host}:{}/", redis.port());
        let server = Ratelimitd::start(&[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            cert,
            "--redis-timeout",
            "2s",
        ]);
        assert_two_then_over(&server, "tls", "k", value).await;
        assert!(
            server.output().contains("redis TLS trusts the CA file"),
            "{}",
            server.output()
        );
    }

    // Another self-signed certificate is no anchor: refused, with what to do.
    let url = format!("rediss://127.0.0.1:{}/", redis.port());
    let other = TlsFiles::self_signed();
    let text = refused_start(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            other.cert.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text.contains("invalid peer certificate")
            && text.contains("CaUsedAsEndEntity")
            && text.contains("exactly one of the trusted certificates (--redis-tls-ca"),
        "{text}"
    );
}

#[tokio::test]
async fn the_system_certificate_store_is_trusted_without_a_ca_file() {
    let tls = TlsFiles::self_signed();
    let redis = RedisServer::start_tls(&tls, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let url = format!("rediss://localhost:{}/", redis.port());
    let empty = tempfile::tempdir().unwrap();
    let store = system_store(&tls.cert, empty.path());
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-timeout",
            "2s",
        ],
        &store,
    );
    assert_two_then_over(&server, "tls", "k", "system").await;
    assert!(
        server
            .output()
            .contains("redis TLS trusts the system's certificate store"),
        "{}",
        server.output()
    );
    drop(server);

    // A leaf its CA issued, the CA in the system's store.
    let issued = TlsFiles::generate();
    let leaf = RedisServer::start_tls(&issued, &[]);
    let url = format!("rediss://127.0.0.1:{}/", leaf.port());
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-timeout",
            "2s",
        ],
        &system_store(&issued.ca, empty.path()),
    );
    assert_two_then_over(&server, "tls", "k", "system-ca").await;
    drop(server);

    // --redis-tls-ca alone replaces the store; --redis-tls-system-roots adds it back.
    let other = TlsFiles::self_signed();
    let url = format!("rediss://localhost:{}/", redis.port());
    let text = refused_start(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            other.cert.to_str().unwrap(),
        ],
        &store,
    );
    assert!(text.contains("CaUsedAsEndEntity"), "{text}");
    let server = Ratelimitd::start_with_env(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            other.cert.to_str().unwrap(),
            "--redis-tls-system-roots",
            "--redis-timeout",
            "2s",
        ],
        &store,
    );
    assert_two_then_over(&server, "tls", "k", "both").await;
    assert!(
        server
            .output()
            .contains("redis TLS trusts the CA file and the system's certificate store"),
        "{}",
        server.output()
    );
    drop(server);

    // No system store at all: the bundled public roots, said at startup; they know no test CA.
    let text = refused_start(
        &["--config", &config, "--redis-url", &url],
        &system_store(&empty.path().join("missing.pem"), empty.path()),
    );
    assert!(
        text.contains("no system certificate store found")
            && text.contains("redis TLS trusts the bundled Mozilla roots")
            && text.contains("CaUsedAsEndEntity"),
        "{text}"
    );
    // --redis-tls-system-roots means nothing without --redis-tls-ca.
    let text = refused_start(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-system-roots",
        ],
        &[],
    );
    assert!(
        text.contains(
            "--redis-tls-system-roots adds the system's certificate store to --redis-tls-ca"
        ),
        "{text}"
    );
}

/// The binary, bare, configured by `env` alone (drop-in mode), its output in `log`.
fn spawn_drop_in(env: &[(String, String)], log: &Path) -> Child {
    let mut cmd = command();
    for (name, value) in env {
        cmd.env(name, value);
    }
    let out = fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out);
    cmd.spawn().expect("spawn ratelimitd")
}

#[tokio::test]
async fn upstreams_tls_variables_trust_the_system_store_and_the_cacert_beside_it() {
    let tls = TlsFiles::self_signed();
    let redis = RedisServer::start_tls(&tls, &["--requirepass", "password123"]);
    let dir = tempfile::tempdir().unwrap();
    let mut env = runtime_env(&dir);
    env.extend(
        [
            ("REDIS_SOCKET_TYPE", "tcp"),
            ("REDIS_URL", &format!("localhost:{}", redis.port())),
            ("REDIS_AUTH", "password123"),
            ("REDIS_TLS", "true"),
            ("REDIS_TIMEOUT", "2s"),
        ]
        .map(|(name, value)| (name.to_owned(), value.to_owned())),
    );
    let start = |extra: &[(&str, &str)]| {
        let mut cmd = command();
        for (name, value) in env
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .chain(extra.iter().copied())
        {
            cmd.env(name, value);
        }
        Ratelimitd::spawn(cmd)
    };

    // As envoyproxy/ratelimit's CI: the certificate installed in the system's store.
    let empty = tempfile::tempdir().unwrap();
    let store = system_store(&tls.cert, empty.path());
    let server = start(&store);
    assert_two_then_over(&server, "tls", "k", "ci").await;
    drop(server);

    // REDIS_TLS_CACERT: trusted beside the system's store, which still counts.
    let other = TlsFiles::self_signed();
    let server = start(&[("REDIS_TLS_CACERT", tls.cert.to_str().unwrap())]);
    assert_two_then_over(&server, "tls", "k", "cacert").await;
    drop(server);
    let server = start(
        &[
            &[("REDIS_TLS_CACERT", other.cert.to_str().unwrap())][..],
            &store,
        ]
        .concat(),
    );
    assert_two_then_over(&server, "tls", "k", "cacert-and-store").await;
    drop(server);

    // Trusted by neither: startup waits for Redis (upstream's default, for ever), and the log
    // says why at each attempt.
    let log = dir.path().join("untrusted.log");
    let untrusted: Vec<(String, String)> = env
        .iter()
        .cloned()
        .chain([
            (
                "REDIS_TLS_CACERT".into(),
                other.cert.to_str().unwrap().into(),
            ),
            ("REDIS_STARTUP_INITIAL_INTERVAL".into(), "200ms".into()),
        ])
        .collect();
    let mut waiting = spawn_drop_in(&untrusted, &log);
    let deadline = Instant::now() + Duration::from_secs(20);
    let needle = "redis not reachable at startup; retrying";
    let text = loop {
        let text = fs::read_to_string(&log).unwrap_or_default();
        if text.contains(needle) {
            break text;
        }
        if let Some(status) = waiting.try_wait().unwrap() {
            panic!("exited with {status} instead of waiting:\n{text}");
        }
        assert!(
            Instant::now() < deadline,
            "no `{needle}` within 20 s:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let _ = waiting.kill();
    let _ = waiting.wait();
    let line = text.lines().find(|line| line.contains(needle)).unwrap();
    assert!(
        line.contains("CaUsedAsEndEntity")
            && line.contains("exactly one of the trusted certificates"),
        "{line}"
    );
}
