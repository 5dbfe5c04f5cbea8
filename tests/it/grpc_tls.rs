//! TLS on the gRPC port through the real binary: `--grpc-tls-cert/--grpc-tls-key` (TLS, ALPN
//! h2), `--grpc-tls-client-ca` (mutual TLS), `--grpc-tls-client-san` (one client identity), the
//! reload of changed files without a restart, `ratelimitd health` against such a server, and
//! the flag errors. Certificates come from the `openssl` CLI (testkit/src/pki.rs); clients use
//! tonic's own TLS.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::grpc_transport::{health_status, presented_certificate, rls, tls_channel};
use testkit::pki::{certificate_der, Ca, Issued, Pki};
use testkit::ratelimitd::{self as rld, command, request, run_to_end, should, Client, Ratelimitd};
use tonic::transport::Endpoint;
use tonic_health::ServingStatus;

const SERVING: i32 = ServingStatus::Serving as i32;

/// A configuration of domain `tls`: key `k` admits 2 per hour.
fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("tls.yaml");
    std::fs::write(
        &path,
        "domain: tls\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Three requests on one value: admitted, admitted, over the limit.
async fn two_then_over(client: &mut Client, value: &str) {
    let mut codes = Vec::new();
    for _ in 0..3 {
        let resp = should(client, request("tls", &[&[("k", value)]], 1)).await;
        codes.push(rld::overall(&resp));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

/// `serve` arguments of a TLS port with `server`'s certificate and key.
fn tls_args<'a>(config: &'a str, server: &'a Issued) -> Vec<&'a str> {
    vec![
        "--config",
        config,
        "--grpc-tls-cert",
        path_str(&server.cert),
        "--grpc-tls-key",
        path_str(&server.key),
    ]
}

/// The overall health over a new TLS connection that trusts `ca` and presents `identity`, or
/// why it failed (connection or call).
async fn health_over_tls(
    server: &Ratelimitd,
    ca: &Path,
    identity: Option<&Issued>,
) -> Result<i32, String> {
    let channel = tls_channel(server.grpc_addr(), ca, identity)
        .await
        .map_err(|e| format!("connect: {e:?}"))?;
    health_status(channel)
        .await
        .map_err(|status| format!("call: {status:?}"))
}

/// A counter or gauge of `/metrics` (0 when absent).
async fn metric(server: &Ratelimitd, name: &str) -> u64 {
    let (code, body) = rld::http_get(server.http_addr(), "/metrics").await;
    assert_eq!(code, 200);
    body.lines()
        .find_map(|line| line.strip_prefix(&format!("{name} ")))
        .map_or(0, |value| value.trim().parse().unwrap())
}

/// Polls `what` every 100 ms until it holds, for at most `timeout`.
async fn eventually<F, Fut>(timeout: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + timeout;
    while !check().await {
        assert!(Instant::now() < deadline, "not within {timeout:?}: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Runs `ratelimitd health ARGS`; returns (exit code, stdout + stderr).
fn probe(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = command();
    cmd.arg("health").args(args);
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(20));
    (status.code(), format!("{out}{err}"))
}

#[tokio::test]
async fn tls_serves_rls_and_health_and_refuses_plaintext() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let other_ca = pki.ca("b");
    let cert = ca.server("server", "ratelimitd tls", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let server = Ratelimitd::start(&tls_args(&config, &cert));
    assert!(
        server.output().contains("gRPC port speaks TLS"),
        "{}",
        server.output()
    );
    let addr = server.grpc_addr();

    let channel = tls_channel(addr, &ca.cert, None)
        .await
        .expect("TLS connect");
    assert_eq!(health_status(channel.clone()).await.unwrap(), SERVING);
    two_then_over(&mut rls(channel), "over-tls").await;
    let (presented, alpn) = presented_certificate(addr, &ca.cert).await;
    assert_eq!(presented, certificate_der(&cert.cert));
    assert_eq!(alpn.as_deref(), Some(&b"h2"[..]), "ALPN h2");

    // A plaintext HTTP/2 client gets no answer, and neither does one that trusts another CA.
    let plaintext = async {
        let channel = Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(5))
            .connect()
            .await
            .map_err(|e| format!("{e:?}"))?;
        health_status(channel).await.map_err(|e| format!("{e:?}"))
    };
    let refused = plaintext.await;
    assert!(refused.is_err(), "plaintext answered: {refused:?}");
    let untrusted = health_over_tls(&server, &other_ca.cert, None).await;
    assert!(
        untrusted
            .as_ref()
            .is_err_and(|e| e.contains("UnknownIssuer")),
        "{untrusted:?}"
    );
    eventually(
        Duration::from_secs(5),
        "handshake failures counted",
        || async { metric(&server, "ratelimitd_grpc_tls_handshake_failures_total").await >= 1 },
    )
    .await;
    eventually(Duration::from_secs(5), "the plaintext client named", || async {
        server
            .output()
            .contains("gRPC TLS handshake failed error=received corrupt message of type InvalidContentType (not TLS: a plaintext client?)")
    })
    .await;

    // The health probe, as a container HEALTHCHECK runs it.
    let grpc_addr = addr.to_string();
    let (code, out) = probe(&["--grpc-addr", &grpc_addr, "--tls-ca", path_str(&ca.cert)]);
    assert_eq!((code, out.trim()), (Some(0), "SERVING"), "{out}");
    let (code, out) = probe(&["--grpc-addr", &grpc_addr]);
    assert_eq!(code, Some(1), "plaintext probe: {out}");
    let (code, out) = probe(&[
        "--grpc-addr",
        &grpc_addr,
        "--tls-ca",
        path_str(&other_ca.cert),
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("UnknownIssuer"), "the probe says why: {out}");
    let (code, out) = probe(&[
        "--grpc-addr",
        &grpc_addr,
        "--tls-ca",
        path_str(&ca.cert),
        "--tls-server-name",
        "elsewhere.example",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("not valid for name"), "{out}");
}

#[tokio::test]
async fn mutual_tls_requires_a_client_certificate_of_the_ca() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let other_ca = pki.ca("b");
    let cert = ca.server("server", "ratelimitd mtls", 2);
    let client = ca.client("envoy", "DNS:envoy.client.test");
    let stranger = other_ca.client("stranger", "DNS:envoy.client.test");
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    // The client CA from its environment variable.
    let server = Ratelimitd::start_with_env(
        &tls_args(&config, &cert),
        &[("RATELIMITD_GRPC_TLS_CLIENT_CA", path_str(&ca.cert))],
    );

    let anonymous = health_over_tls(&server, &ca.cert, None).await;
    assert!(anonymous.is_err(), "no client certificate: {anonymous:?}");
    let foreign = health_over_tls(&server, &ca.cert, Some(&stranger)).await;
    assert!(foreign.is_err(), "another CA's client: {foreign:?}");
    assert_eq!(
        health_over_tls(&server, &ca.cert, Some(&client)).await,
        Ok(SERVING)
    );
    let channel = tls_channel(server.grpc_addr(), &ca.cert, Some(&client))
        .await
        .unwrap();
    two_then_over(&mut rls(channel), "mtls").await;
    eventually(Duration::from_secs(5), "both refusals counted", || async {
        metric(&server, "ratelimitd_grpc_tls_handshake_failures_total").await >= 2
    })
    .await;

    let grpc_addr = server.grpc_addr().to_string();
    let ca_path = path_str(&ca.cert);
    let (code, out) = probe(&[
        "--grpc-addr",
        &grpc_addr,
        "--tls-ca",
        ca_path,
        "--tls-cert",
        path_str(&client.cert),
        "--tls-key",
        path_str(&client.key),
    ]);
    assert_eq!((code, out.trim()), (Some(0), "SERVING"), "{out}");
    let (code, out) = probe(&["--grpc-addr", &grpc_addr, "--tls-ca", ca_path]);
    assert_eq!(code, Some(1), "a probe without a client certificate: {out}");
}

/// Starts a mutual-TLS server whose client certificates must carry `san`.
fn start_with_client_san(config: &str, ca: &Ca, cert: &Issued, san: &str) -> Ratelimitd {
    let mut args = tls_args(config, cert);
    args.extend([
        "--grpc-tls-client-ca",
        path_str(&ca.cert),
        "--grpc-tls-client-san",
        san,
    ]);
    Ratelimitd::start(&args)
}

#[tokio::test]
async fn the_client_san_pins_the_client_identity() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd san", 2);
    let envoy = ca.client("envoy", "DNS:envoy.client.test");
    let other = ca.client("other", "DNS:other.client.test");
    let wildcard = ca.client("wildcard", "DNS:*.client.test");
    let spiffe = ca.client("spiffe", "URI:spiffe://mesh.test/ns/edge/sa/envoy");
    let spiffe_other = ca.client(
        "spiffe-other",
        "URI:spiffe://mesh.test/ns/edge/sa/other, DNS:envoy.client.test",
    );
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);

    // A DNS name, checked as envoyproxy/ratelimit checks GRPC_CLIENT_TLS_SAN (wildcards in the
    // certificate match one label).
    let server = start_with_client_san(&config, &ca, &cert, "envoy.client.test");
    assert_eq!(
        health_over_tls(&server, &ca.cert, Some(&envoy)).await,
        Ok(SERVING)
    );
    assert_eq!(
        health_over_tls(&server, &ca.cert, Some(&wildcard)).await,
        Ok(SERVING)
    );
    for refused in [&other, &spiffe] {
        let answer = health_over_tls(&server, &ca.cert, Some(refused)).await;
        assert!(answer.is_err(), "{refused:?}: {answer:?}");
    }
    let channel = tls_channel(server.grpc_addr(), &ca.cert, Some(&envoy))
        .await
        .unwrap();
    two_then_over(&mut rls(channel), "san").await;
    eventually(Duration::from_secs(5), "the refusal logged", || async {
        server.output().contains("NotValidForName")
    })
    .await;

    // A URI (SPIFFE ID), compared exactly.
    let server = start_with_client_san(&config, &ca, &cert, "spiffe://mesh.test/ns/edge/sa/envoy");
    assert_eq!(
        health_over_tls(&server, &ca.cert, Some(&spiffe)).await,
        Ok(SERVING)
    );
    for refused in [&spiffe_other, &envoy] {
        let answer = health_over_tls(&server, &ca.cert, Some(refused)).await;
        assert!(answer.is_err(), "{refused:?}: {answer:?}");
    }
}

/// A pin matches SANs of its own type only: the same text as a URI SAN does not satisfy a DNS
/// pin, nor a DNS or URI SAN an IP pin; `dns:`, `ip:` and `uri:` name the type outright.
#[tokio::test]
async fn the_client_san_pin_matches_the_sans_type_and_value() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd san type", 2);
    let dns = ca.client("dns", "DNS:envoy.mesh.test");
    let uri_lookalike = ca.client("uri-lookalike", "URI:envoy.mesh.test");
    let ip = ca.client("ip", "IP:10.0.0.7");
    let ip_lookalikes = ca.client("ip-lookalikes", "DNS:10.0.0.7, URI:10.0.0.7");
    let dns_scheme_uri = ca.client("dns-scheme-uri", "URI:dns:envoy.mesh.test");
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);

    let cases: [(&str, &[&Issued], &[&Issued]); 6] = [
        (
            "envoy.mesh.test",
            &[&dns],
            &[&uri_lookalike, &dns_scheme_uri],
        ),
        (
            "dns:envoy.mesh.test",
            &[&dns],
            &[&uri_lookalike, &dns_scheme_uri],
        ),
        ("uri:envoy.mesh.test", &[&uri_lookalike], &[&dns]),
        ("10.0.0.7", &[&ip], &[&ip_lookalikes]),
        ("ip:10.0.0.7", &[&ip], &[&ip_lookalikes]),
        (
            "uri:dns:envoy.mesh.test",
            &[&dns_scheme_uri],
            &[&dns, &uri_lookalike],
        ),
    ];
    for (pin, accepted, refused) in cases {
        let server = start_with_client_san(&config, &ca, &cert, pin);
        for client in accepted {
            assert_eq!(
                health_over_tls(&server, &ca.cert, Some(client)).await,
                Ok(SERVING),
                "pin {pin}: {client:?}"
            );
        }
        for client in refused {
            let answer = health_over_tls(&server, &ca.cert, Some(client)).await;
            assert!(answer.is_err(), "pin {pin}: {client:?}: {answer:?}");
        }
    }
}

/// RFC 5280 4.2.1.12: a client certificate that has an extended key usage must list
/// `clientAuth`; one without the extension is not restricted and passes (as Go's crypto/tls,
/// hence envoyproxy/ratelimit, accepts it).
#[tokio::test]
async fn a_client_certificate_with_an_extended_key_usage_must_allow_client_auth() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd eku", 2);
    let sans = "DNS:envoy.client.test";
    let client_auth = ca.client_with_usage("client-auth", Some("clientAuth"), sans);
    let both = ca.client_with_usage("both", Some("serverAuth, clientAuth"), sans);
    let none = ca.client_with_usage("no-eku", None, sans);
    let server_auth = ca.client_with_usage("server-auth", Some("serverAuth"), sans);
    let code_signing = ca.client_with_usage("code-signing", Some("codeSigning"), sans);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);

    for pin in [None, Some("envoy.client.test")] {
        let mut args = tls_args(&config, &cert);
        args.extend(["--grpc-tls-client-ca", path_str(&ca.cert)]);
        if let Some(pin) = pin {
            args.extend(["--grpc-tls-client-san", pin]);
        }
        let server = Ratelimitd::start(&args);
        for client in [&client_auth, &both, &none] {
            assert_eq!(
                health_over_tls(&server, &ca.cert, Some(client)).await,
                Ok(SERVING),
                "pin {pin:?}: {client:?}"
            );
        }
        for client in [&server_auth, &code_signing] {
            let answer = health_over_tls(&server, &ca.cert, Some(client)).await;
            assert!(answer.is_err(), "pin {pin:?}: {client:?}: {answer:?}");
        }
        eventually(Duration::from_secs(5), "the refusals counted", || async {
            metric(&server, "ratelimitd_grpc_tls_handshake_failures_total").await >= 2
        })
        .await;
    }
}

/// Copies `from` over `to` in place (the way a careless writer replaces a file: truncate, write).
fn overwrite(from: &Path, to: &Path) {
    std::fs::write(to, std::fs::read(from).unwrap()).unwrap();
}

#[tokio::test]
async fn changed_certificates_are_served_without_a_restart() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let first = ca.server("first", "ratelimitd first", 11);
    let second = ca.server("second", "ratelimitd second", 12);
    let third = ca.server("third", "ratelimitd third", 13);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let serving = Issued {
        cert: dir.path().join("tls.crt"),
        key: dir.path().join("tls.key"),
    };
    overwrite(&first.cert, &serving.cert);
    overwrite(&first.key, &serving.key);
    let server = Ratelimitd::start(&tls_args(&config, &serving));
    let addr = server.grpc_addr();
    assert_eq!(
        presented_certificate(addr, &ca.cert).await.0,
        certificate_der(&first.cert)
    );
    let kept = tls_channel(addr, &ca.cert, None).await.unwrap();
    assert_eq!(health_status(kept.clone()).await.unwrap(), SERVING);

    // The certificate first, the key a moment later, as certificate tools write them.
    overwrite(&second.cert, &serving.cert);
    tokio::time::sleep(Duration::from_millis(30)).await;
    overwrite(&second.key, &serving.key);
    let second_der = certificate_der(&second.cert);
    eventually(
        Duration::from_secs(10),
        "the new certificate served",
        || async { presented_certificate(addr, &ca.cert).await.0 == second_der },
    )
    .await;
    assert_eq!(
        health_status(kept.clone()).await.unwrap(),
        SERVING,
        "a connection made before the change keeps working"
    );
    let fresh = tls_channel(addr, &ca.cert, None).await.unwrap();
    two_then_over(&mut rls(fresh), "after-reload").await;
    assert!(server
        .output()
        .contains("new handshakes use the new certificate"));
    assert_eq!(
        metric(&server, "ratelimitd_grpc_tls_reloads_total").await,
        1
    );

    // Not a certificate: logged, and the second one stays. (A slow writer's half-done pair may
    // have been refused already: count from here.)
    let rejected = metric(&server, "ratelimitd_grpc_tls_reloads_rejected_total").await;
    std::fs::write(
        &serving.cert,
        "-----BEGIN CERTIFICATE-----\nnot base64 at all\n",
    )
    .unwrap();
    eventually(
        Duration::from_secs(10),
        "the broken file refused",
        || async {
            metric(&server, "ratelimitd_grpc_tls_reloads_rejected_total").await == rejected + 1
        },
    )
    .await;
    assert_eq!(presented_certificate(addr, &ca.cert).await.0, second_der);
    // A certificate whose key is not the one beside it: refused too.
    overwrite(&third.cert, &serving.cert);
    eventually(
        Duration::from_secs(10),
        "the mismatched pair refused",
        || async {
            metric(&server, "ratelimitd_grpc_tls_reloads_rejected_total").await == rejected + 2
        },
    )
    .await;
    assert_eq!(presented_certificate(addr, &ca.cert).await.0, second_der);
    let output = server.output();
    assert!(
        output.contains("cannot be used, the certificate in use stays")
            && output.contains("--grpc-tls-cert")
            && output.contains("is not the private key of the certificate"),
        "{output}"
    );
    let fresh = tls_channel(addr, &ca.cert, None).await.unwrap();
    assert_eq!(health_status(fresh).await.unwrap(), SERVING);
    // Its key arrives: the pair is whole again and served.
    overwrite(&third.key, &serving.key);
    let third_der = certificate_der(&third.cert);
    eventually(
        Duration::from_secs(10),
        "the third certificate served",
        || async { presented_certificate(addr, &ca.cert).await.0 == third_der },
    )
    .await;
    assert_eq!(
        metric(&server, "ratelimitd_grpc_tls_reloads_total").await,
        2
    );
}

#[tokio::test]
async fn a_changed_client_ca_applies_to_new_handshakes() {
    let pki = Pki::new();
    let old_ca = pki.ca("old");
    let new_ca = pki.ca("new");
    let cert = old_ca.server("server", "ratelimitd ca reload", 2);
    let old_client = old_ca.client("old-client", "DNS:envoy.client.test");
    let new_client = new_ca.client("new-client", "DNS:envoy.client.test");
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let client_ca: PathBuf = dir.path().join("client-ca.crt");
    overwrite(&old_ca.cert, &client_ca);
    let mut args = tls_args(&config, &cert);
    args.extend(["--grpc-tls-client-ca", path_str(&client_ca)]);
    let server = Ratelimitd::start(&args);
    let trust = &old_ca.cert;
    assert_eq!(
        health_over_tls(&server, trust, Some(&old_client)).await,
        Ok(SERVING)
    );
    assert!(health_over_tls(&server, trust, Some(&new_client))
        .await
        .is_err());

    overwrite(&new_ca.cert, &client_ca);
    eventually(
        Duration::from_secs(10),
        "the new CA's client admitted",
        || async { health_over_tls(&server, trust, Some(&new_client)).await == Ok(SERVING) },
    )
    .await;
    assert!(health_over_tls(&server, trust, Some(&old_client))
        .await
        .is_err());
}

/// Runs `serve ARGS` (on free ports) to its end: (exit code, output).
fn serve_to_end(args: &[&str], envs: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
    ])
    .args(args);
    for (name, value) in envs {
        cmd.env(name, value);
    }
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(30));
    (status.code(), format!("{out}{err}"))
}

#[test]
fn flag_errors_name_the_flag_and_the_file() {
    let pki = Pki::new();
    let ca = pki.ca("a");
    let cert = ca.server("server", "ratelimitd flags", 2);
    let other = ca.server("other", "ratelimitd other", 3);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a PEM file\n").unwrap();
    let missing = dir.path().join("missing.pem");
    let (cert_path, key_path) = (path_str(&cert.cert), path_str(&cert.key));
    let (garbage, missing) = (path_str(&garbage), path_str(&missing));
    let missing_cert = format!("--grpc-tls-cert {missing}: cannot read");
    let garbage_cert = format!("--grpc-tls-cert {garbage}: holds no PEM certificate");
    let garbage_key = format!("--grpc-tls-key {garbage}: holds no unencrypted PEM private key");
    let mismatch = format!(
        "--grpc-tls-key {} is not the private key of the certificate in --grpc-tls-cert {cert_path}",
        path_str(&other.key)
    );
    let garbage_ca = format!("--grpc-tls-client-ca {garbage}: holds no PEM certificate");
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--grpc-tls-cert", cert_path],
            "--grpc-tls-cert needs --grpc-tls-key",
        ),
        (
            vec!["--grpc-tls-key", key_path],
            "--grpc-tls-key needs --grpc-tls-cert",
        ),
        (
            vec![
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                key_path,
                "--grpc-tls-client-san",
                "envoy",
            ],
            "--grpc-tls-client-san needs --grpc-tls-client-ca",
        ),
        (
            vec!["--grpc-tls-client-ca", path_str(&ca.cert)],
            "--grpc-tls-client-ca needs --grpc-tls-cert and --grpc-tls-key",
        ),
        (
            vec!["--grpc-tls-cert", missing, "--grpc-tls-key", key_path],
            &missing_cert,
        ),
        (
            vec!["--grpc-tls-cert", garbage, "--grpc-tls-key", key_path],
            &garbage_cert,
        ),
        (
            vec!["--grpc-tls-cert", cert_path, "--grpc-tls-key", garbage],
            &garbage_key,
        ),
        (
            vec![
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                path_str(&other.key),
            ],
            &mismatch,
        ),
        (
            vec![
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                key_path,
                "--grpc-tls-client-ca",
                garbage,
            ],
            &garbage_ca,
        ),
        (
            vec![
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                key_path,
                "--grpc-tls-client-ca",
                path_str(&ca.cert),
                "--grpc-tls-client-san",
                "ip:envoy.mesh",
            ],
            "--grpc-tls-client-san ip:envoy.mesh: `envoy.mesh` after `ip:` is not an IP address",
        ),
        (
            vec![
                "--grpc-tls-cert",
                cert_path,
                "--grpc-tls-key",
                key_path,
                "--grpc-tls-client-ca",
                path_str(&ca.cert),
                "--grpc-tls-client-san",
                "dns:not a name",
            ],
            "--grpc-tls-client-san dns:not a name: `not a name` is not a DNS name",
        ),
        (
            vec!["--grpc-max-connection-age-grace", "1m"],
            "--grpc-max-connection-age-grace needs --grpc-max-connection-age",
        ),
    ];
    for (flags, message) in cases {
        let mut args = vec!["--config", config.as_str()];
        args.extend(&flags);
        let (code, out) = serve_to_end(&args, &[]);
        assert_eq!(code, Some(1), "{flags:?}: {out}");
        assert!(
            out.contains(message),
            "{flags:?}: expected `{message}` in:\n{out}"
        );
        assert!(!out.contains("panicked"), "{out}");
    }
    // The same from the environment.
    let (code, out) = serve_to_end(
        &["--config", &config],
        &[("RATELIMITD_GRPC_TLS_CERT", cert_path)],
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--grpc-tls-cert needs --grpc-tls-key"),
        "{out}"
    );

    let (code, out) = probe(&["--tls-cert", cert_path]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("--tls-cert and --tls-key go together"),
        "{out}"
    );
    let (code, out) = probe(&["--tls-ca", missing]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("--tls-ca {missing}")), "{out}");
}
