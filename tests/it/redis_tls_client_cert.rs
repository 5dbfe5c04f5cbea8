//! Mutual TLS to Redis through the real binary: a redis-server started with
//! `--tls-auth-clients yes` serves ratelimitd when it presents the client certificate of
//! `--redis-tls-client-cert` / `--redis-tls-client-key` (or their `RATELIMITD_*` variables, or
//! envoyproxy/ratelimit's `REDIS_TLS_CLIENT_CERT` / `REDIS_TLS_CLIENT_KEY`), and refuses it
//! without one or with one it does not trust: startup stops with the reason, not a hang. A key
//! that is not the certificate's, or one file without the other, is refused by name.

use std::fs;
use std::time::Duration;

use testkit::ratelimitd::{
    assert_two_then_over, command, refused_start, run_to_end, Ratelimitd, UPSTREAM_LOOPBACK,
};
use testkit::redis_server::{RedisServer, TlsFiles};

const CONFIG: &str =
    "domain: mtls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n";

const REQUIRE_CLIENT_CERTIFICATES: [&str; 2] = ["--tls-auth-clients", "yes"];

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("mtls.yaml");
    fs::write(&path, CONFIG).unwrap();
    path.to_str().unwrap().to_owned()
}

/// `serve` with `args` and `env`, which must stop at once with exit 1 and never serve: its output.
fn refused(args: &[&str], env: &[(&str, &str)]) -> String {
    let text = refused_start(args, env);
    assert!(!text.contains("serving"), "never served: {text}");
    text
}

#[tokio::test]
async fn a_server_that_requires_client_certificates_serves_ratelimitd_with_one() {
    let tls = TlsFiles::generate();
    let redis = RedisServer::start_tls(&tls, &REQUIRE_CLIENT_CERTIFICATES);
    let (cert, key) = tls.client_certificate("ratelimitd");
    let (cert, key) = (cert.to_str().unwrap(), key.to_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let url = format!("rediss://127.0.0.1:{}/", redis.port());
    let ca = tls.ca.to_str().unwrap();
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--redis-url",
        &url,
        "--redis-tls-ca",
        ca,
        "--redis-tls-client-cert",
        cert,
        "--redis-tls-client-key",
        key,
        "--redis-timeout",
        "2s",
    ]);
    assert_two_then_over(&server, "mtls", "k", "flags").await;
    assert!(
        server.output().contains("client_certificate=true"),
        "{}",
        server.output()
    );
    drop(server);
    let server = Ratelimitd::start_with_env(
        &["--config", &config, "--redis-timeout", "2s"],
        &[
            ("RATELIMITD_REDIS_URL", &url),
            ("RATELIMITD_REDIS_TLS_CA", ca),
            ("RATELIMITD_REDIS_TLS_CLIENT_CERT", cert),
            ("RATELIMITD_REDIS_TLS_CLIENT_KEY", key),
        ],
    );
    assert_two_then_over(&server, "mtls", "k", "variables").await;
    drop(server);

    // Without a client certificate: refused by the server, and said so.
    let text = refused(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            ca,
        ],
        &[],
    );
    assert!(
        text.contains("CertificateRequired")
            && text.contains("the server requires a client certificate: --redis-tls-client-cert"),
        "{text}"
    );
    // A certificate of a CA the server does not trust.
    let stranger = TlsFiles::generate();
    let (other_cert, other_key) = stranger.client_certificate("stranger");
    let text = refused(
        &[
            "--config",
            &config,
            "--redis-url",
            &url,
            "--redis-tls-ca",
            ca,
            "--redis-tls-client-cert",
            other_cert.to_str().unwrap(),
            "--redis-tls-client-key",
            other_key.to_str().unwrap(),
        ],
        &[],
    );
    assert!(
        text.contains("the server refused the client certificate of --redis-tls-client-cert"),
        "{text}"
    );
}

#[test]
fn a_key_that_is_not_the_certificates_or_one_file_alone_is_refused_by_name() {
    let tls = TlsFiles::generate();
    let (cert, _) = tls.client_certificate("ratelimitd");
    let (_, other_key) = tls.client_certificate("other");
    let (cert, other_key) = (cert.to_str().unwrap(), other_key.to_str().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    // No server is needed: these are refused before any connection.
    let url = "rediss://127.0.0.1:1/";
    let base = ["--config", config.as_str(), "--redis-url", url];

    let text = refused(
        &[&base[..], &["--redis-tls-client-cert", cert]].concat(),
        &[],
    );
    assert!(
        text.contains(
            "--redis-tls-client-cert needs --redis-tls-client-key (RATELIMITD_REDIS_TLS_CLIENT_KEY)"
        ),
        "{text}"
    );
    let text = refused(&base, &[("RATELIMITD_REDIS_TLS_CLIENT_KEY", other_key)]);
    assert!(
        text.contains(
            "--redis-tls-client-key needs --redis-tls-client-cert (RATELIMITD_REDIS_TLS_CLIENT_CERT)"
        ),
        "{text}"
    );
    let text = refused(
        &[
            &base[..],
            &[
                "--redis-tls-client-cert",
                cert,
                "--redis-tls-client-key",
                other_key,
            ],
        ]
        .concat(),
        &[],
    );
    assert!(
        text.contains(&format!(
            "--redis-tls-client-key {other_key} is not the private key of the certificate in \
             --redis-tls-client-cert {cert}"
        )),
        "{text}"
    );
    // A certificate where the key belongs.
    let text = refused(
        &[
            &base[..],
            &[
                "--redis-tls-client-cert",
                cert,
                "--redis-tls-client-key",
                cert,
            ],
        ]
        .concat(),
        &[],
    );
    assert!(
        text.contains(&format!(
            "--redis-tls-client-key {cert}: holds no unencrypted PEM private key"
        )),
        "{text}"
    );
    // Client certificates only go with TLS.
    let plain = [
        "--config",
        config.as_str(),
        "--redis-url",
        "redis://127.0.0.1:1/",
        "--redis-tls-client-cert",
        cert,
        "--redis-tls-client-key",
        other_key,
    ];
    let text = refused(&plain, &[]);
    assert!(
        text.contains(
            "--redis-tls-client-cert, --redis-tls-client-key: used by TLS connections only"
        ),
        "{text}"
    );
}

/// envoyproxy/ratelimit's variables for a TLS Redis at `port` (password `password123`), with its
/// runtime tree in `dir`.
fn upstream_env(dir: &tempfile::TempDir, port: u16) -> Vec<(String, String)> {
    let config = dir.path().join("runtime/ratelimit/config");
    fs::create_dir_all(&config).unwrap();
    fs::write(config.join("mtls.yaml"), CONFIG).unwrap();
    let runtime = dir.path().join("runtime");
    let url = format!("localhost:{port}");
    [
        ("RUNTIME_ROOT", runtime.to_str().unwrap()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit"),
        ("REDIS_SOCKET_TYPE", "tcp"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_AUTH", "password123"),
        ("REDIS_TLS", "true"),
        ("REDIS_TIMEOUT", "2s"),
        // The harness reads the listeners' addresses from the info lines.
        ("LOG_LEVEL", "info"),
    ]
    .iter()
    .chain(UPSTREAM_LOOPBACK.iter())
    .map(|(name, value)| (name.to_string(), value.to_string()))
    .collect()
}

/// envoyproxy/ratelimit's `WithoutPerSecondRedisTLSWithClientCert`: one self-signed certificate
/// is the server's, its CA, and the client certificate the server verifies.
#[tokio::test]
async fn upstreams_client_certificate_variables_drive_the_same() {
    let tls = TlsFiles::self_signed();
    let redis = RedisServer::start_tls(
        &tls,
        &[
            &REQUIRE_CLIENT_CERTIFICATES[..],
            &["--requirepass", "password123"],
        ]
        .concat(),
    );
    let dir = tempfile::tempdir().unwrap();
    let env = upstream_env(&dir, redis.port());
    let cert = tls.cert.to_str().unwrap();
    let key = tls.key.to_str().unwrap();
    let with = |extra: &[(&str, &str)]| {
        let mut cmd = command();
        for (name, value) in &env {
            cmd.env(name, value);
        }
        for (name, value) in extra {
            cmd.env(name, value);
        }
        cmd
    };
    let server = Ratelimitd::spawn(with(&[
        ("REDIS_TLS_CLIENT_CERT", cert),
        ("REDIS_TLS_CLIENT_KEY", key),
        ("REDIS_TLS_CACERT", cert),
    ]));
    assert_two_then_over(&server, "mtls", "k", "upstream").await;
    drop(server);

    for (extra, expected) in [
        (
            vec![("REDIS_TLS_CLIENT_CERT", cert), ("REDIS_TLS_CACERT", cert)],
            "REDIS_TLS_CLIENT_CERT is set without REDIS_TLS_CLIENT_KEY",
        ),
        (
            vec![("REDIS_TLS_CLIENT_KEY", key), ("REDIS_TLS_CACERT", cert)],
            "REDIS_TLS_CLIENT_KEY is set without REDIS_TLS_CLIENT_CERT",
        ),
    ] {
        let (status, stdout, stderr) = run_to_end(with(&extra), Duration::from_secs(20));
        assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
        assert!(stderr.contains(expected), "{stdout}{stderr}");
    }

    // A key that is not the certificate's, named as the user named it.
    let other = TlsFiles::self_signed();
    let other_key = other.key.to_str().unwrap();
    let (status, stdout, stderr) = run_to_end(
        with(&[
            ("REDIS_TLS_CLIENT_CERT", cert),
            ("REDIS_TLS_CLIENT_KEY", other_key),
            ("REDIS_TLS_CACERT", cert),
        ]),
        Duration::from_secs(20),
    );
    let text = format!("{stdout}{stderr}");
    assert_eq!(status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "REDIS_TLS_CLIENT_KEY {other_key} is not the private key of the certificate in \
             REDIS_TLS_CLIENT_CERT {cert}"
        )),
        "{text}"
    );
}
