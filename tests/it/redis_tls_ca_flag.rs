//! `--redis-tls-ca` / RATELIMITD_REDIS_TLS_CA through the real binary: a private CA makes
//! `rediss://` work, and without it the binary refuses to start with a hint.

use std::time::Duration;

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::{code, command, overall, request, run_to_end, should, Ratelimitd};
use testkit::redis_server::{RedisServer, TlsFiles};

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("urls.yaml");
    std::fs::write(
        &path,
        "domain: urls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

async fn assert_two_then_over(server: &Ratelimitd) {
    let mut client = server.client().await;
    let mut codes = Vec::new();
    for _ in 0..3 {
        let resp = should(&mut client, request("urls", &[&[("k", "v")]], 1)).await;
        assert_eq!(overall(&resp), code(&resp.statuses[0]));
        codes.push(overall(&resp));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
}

#[tokio::test]
async fn redis_tls_ca_flag_and_env() {
    let tls = TlsFiles::generate();
    let redis = RedisServer::start_tls(&tls, &[]);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let url = redis.url();
    let ca = tls.ca.to_str().unwrap();
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--redis-url",
        &url,
        "--redis-tls-ca",
        ca,
        "--redis-timeout",
        "2s",
    ]);
    assert_two_then_over(&server).await;
    drop(server);
    let _: () = redis::cmd("FLUSHALL")
        .query(&mut redis.connection())
        .unwrap();
    let server = Ratelimitd::start_with_env(
        &["--config", &config, "--redis-timeout", "2s"],
        &[
            ("RATELIMITD_REDIS_URL", &url),
            ("RATELIMITD_REDIS_TLS_CA", ca),
        ],
    );
    assert_two_then_over(&server).await;
    // Without the CA: refused at startup, with the reason.
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
        &config,
        "--redis-url",
        &url,
    ]);
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(20));
    assert!(!status.success());
    let text = format!("{out}{err}");
    println!("{text}");
    assert!(
        text.contains("UnknownIssuer") && text.contains("--redis-tls-ca"),
        "{text}"
    );
}
