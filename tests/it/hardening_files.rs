//! Files the server is given a path to, through the real binary: a FIFO (whose plain `open`
//! blocks until a writer comes), a device or a file larger than a PEM file can be, at a TLS,
//! client CA, probe or Redis CA path, is refused at once with the flag and the path named; on a
//! TLS reload it is refused like any unusable replacement (logged, counted, the certificate in
//! use stays), and a valid certificate written afterwards is applied.

use std::path::Path;
use std::time::{Duration, Instant};

use testkit::grpc_transport::{health_status, presented_certificate, tls_channel};
use testkit::hostile_config::{mkfifo, sparse_file};
use testkit::pki::{certificate_der, Issued, Pki};
use testkit::ratelimitd::{self as rld, command, run_to_end, Ratelimitd};
use tonic_health::ServingStatus;

const SERVING: i32 = ServingStatus::Serving as i32;

/// How long a refusal may take: the files are refused before anything waits on them, so this
/// only absorbs a busy machine.
const PROMPTLY: Duration = Duration::from_secs(20);

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("files.yaml");
    std::fs::write(
        &path,
        "domain: files\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Runs `ratelimitd ARGS` to its end within [`PROMPTLY`] (a hang fails the test): exit code,
/// output, and how long it took.
fn run(args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut cmd = command();
    cmd.args(args);
    let started = Instant::now();
    let (status, out, err) = run_to_end(cmd, PROMPTLY);
    (status.code(), format!("{out}{err}"), started.elapsed())
}

/// `serve` on free ports with `args`.
fn serve(args: &[&str]) -> (Option<i32>, String, Duration) {
    let mut all = vec![
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ];
    all.extend_from_slice(args);
    run(&all)
}

async fn metric(server: &Ratelimitd, name: &str) -> u64 {
    let (code, body) = rld::http_get(server.http_addr(), "/metrics").await;
    assert_eq!(code, 200);
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Polls `check` every 100 ms until it holds, for at most 10 s.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "not within 10 s: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[test]
fn a_fifo_device_or_huge_file_at_a_tls_path_stops_startup_by_name() {
    let pki = Pki::new();
    let ca = pki.ca("files");
    let cert = ca.server("server", "ratelimitd files", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let fifo = dir.path().join("fifo.pem");
    mkfifo(&fifo);
    let huge = dir.path().join("huge.pem");
    sparse_file(&huge, 2 << 20);
    let (cert_path, key_path) = (path_str(&cert.cert), path_str(&cert.key));
    let (fifo, huge) = (path_str(&fifo), path_str(&huge));
    let cases: [(&str, [&str; 6], String); 5] = [
        (
            "a FIFO certificate",
            ["--grpc-tls-cert", fifo, "--grpc-tls-key", key_path, "", ""],
            format!("--grpc-tls-cert {fifo}: not a regular file (a FIFO)"),
        ),
        (
            "a FIFO key",
            ["--grpc-tls-cert", cert_path, "--grpc-tls-key", fifo, "", ""],
            format!("--grpc-tls-key {fifo}: not a regular file (a FIFO)"),
        ),
        (
            "a FIFO client CA",
            [
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                key_path,
                "--grpc-tls-client-ca",
                fifo,
            ],
            format!("--grpc-tls-client-ca {fifo}: not a regular file (a FIFO)"),
        ),
        (
            "a device certificate",
            [
                "--grpc-tls-cert",
                "/dev/zero",
                "--grpc-tls-key",
                key_path,
                "",
                "",
            ],
            "--grpc-tls-cert /dev/zero: not a regular file (a character device)".to_owned(),
        ),
        (
            "a 2 MiB certificate",
            ["--grpc-tls-cert", huge, "--grpc-tls-key", key_path, "", ""],
            format!("--grpc-tls-cert {huge}: file has 2097152 bytes; at most 1048576 are accepted"),
        ),
    ];
    for (what, flags, expected) in &cases {
        let mut args = vec!["--config", &config];
        args.extend(flags.iter().filter(|flag| !flag.is_empty()));
        let (code, out, took) = serve(&args);
        eprintln!("{what}: refused in {took:?}");
        assert_eq!(code, Some(1), "{what}: {out}");
        assert!(out.contains(expected.as_str()), "{what}: {out}");
        assert!(!out.contains("serving"), "{what}: never served: {out}");
    }
}

#[test]
fn a_fifo_at_a_probe_or_redis_ca_path_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let fifo = dir.path().join("fifo.pem");
    mkfifo(&fifo);
    let fifo = path_str(&fifo);
    let refused = format!("{fifo}: not a regular file (a FIFO)");

    for flag in ["--tls-ca", "--tls-cert"] {
        let mut args = vec!["health", "--grpc-addr", "127.0.0.1:1", flag, fifo];
        if flag == "--tls-cert" {
            args.extend(["--tls-key", fifo]);
        }
        let (code, out, took) = run(&args);
        eprintln!("health {flag} FIFO: refused in {took:?}");
        assert_eq!(code, Some(1), "{flag}: {out}");
        assert!(out.contains(&format!("{flag} {refused}")), "{flag}: {out}");
    }

    let (code, out, took) = serve(&[
        "--config",
        &config,
        "--redis-url",
        "rediss://127.0.0.1:1/",
        "--redis-tls-ca",
        fifo,
    ]);
    eprintln!("serve --redis-tls-ca FIFO: refused in {took:?}");
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("--redis-tls-ca {refused}")), "{out}");
}

#[tokio::test]
async fn a_fifo_at_the_certificate_path_on_reload_is_refused_and_a_later_certificate_applied() {
    let pki = Pki::new();
    let ca = pki.ca("reload");
    let first = ca.server("first", "ratelimitd first", 21);
    let second = ca.server("second", "ratelimitd second", 22);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let serving = Issued {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    std::fs::copy(&first.cert, &serving.cert).unwrap();
    std::fs::copy(&first.key, &serving.key).unwrap();
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--grpc-tls-cert",
        path_str(&serving.cert),
        "--grpc-tls-key",
        path_str(&serving.key),
    ]);
    let addr = server.grpc_addr();
    let first_der = certificate_der(&first.cert);
    assert_eq!(presented_certificate(addr, &ca.cert).await.0, first_der);

    std::fs::remove_file(&serving.cert).unwrap();
    mkfifo(&serving.cert);
    let swapped = Instant::now();
    eventually("the FIFO refused", || async {
        metric(&server, "ratelimitd_grpc_tls_reloads_rejected_total").await == 1
    })
    .await;
    eprintln!(
        "FIFO at the certificate path refused on reload in {:?}",
        swapped.elapsed()
    );
    let refusal = format!(
        "cannot be used, the certificate in use stays: --grpc-tls-cert {}: not a regular file (a FIFO)",
        serving.cert.display()
    );
    assert!(server.output().contains(&refusal), "{}", server.output());
    assert_eq!(
        presented_certificate(addr, &ca.cert).await.0,
        first_der,
        "the certificate in use stays"
    );
    let channel = tls_channel(addr, &ca.cert, None).await.unwrap();
    assert_eq!(health_status(channel).await.unwrap(), SERVING);

    // A configuration reload meanwhile is not held up by the FIFO either.
    server.signal("HUP");
    eventually("the SIGHUP reload done", || async {
        server.output().contains("trigger=\"SIGHUP\"")
    })
    .await;

    // A valid pair replaces the FIFO (each file renamed into place): it is served.
    for (from, to) in [(&second.key, &serving.key), (&second.cert, &serving.cert)] {
        let staged = to.with_extension("new");
        std::fs::copy(from, &staged).unwrap();
        std::fs::rename(&staged, to).unwrap();
    }
    let second_der = certificate_der(&second.cert);
    eventually("the new certificate served", || async {
        presented_certificate(addr, &ca.cert).await.0 == second_der
    })
    .await;
    assert_eq!(
        metric(&server, "ratelimitd_grpc_tls_reloads_total").await,
        1
    );
    assert_eq!(
        metric(&server, "ratelimitd_grpc_tls_reloads_rejected_total").await,
        1,
        "the FIFO was reported once, not every second"
    );
}
