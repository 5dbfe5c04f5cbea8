//! `--grpc-uds`: gRPC (RLS, health) on a unix domain socket instead of the TCP address, through
//! the real binary and a tonic channel over a `UnixStream`: the startup line names the socket, a
//! leftover socket is replaced while any other file is left alone, a live socket whose listener
//! does not accept is refused at once, the socket file gets `--grpc-uds-mode` whatever the
//! umask and is removed on exit, TLS works over it, and `ratelimitd health --grpc-uds` probes
//! it.

use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::grpc_transport::{health_status, rls, uds_channel};
use testkit::pki::Pki;
use testkit::ratelimitd::{self as rld, command, request, run_to_end, should, Ratelimitd};
use tonic_health::ServingStatus;

const SERVING: i32 = ServingStatus::Serving as i32;

fn config(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("uds.yaml");
    std::fs::write(
        &path,
        "domain: uds\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 2}\n",
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn path_str(path: &Path) -> &str {
    path.to_str().unwrap()
}

fn is_socket(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_socket())
}

/// Runs `ratelimitd ARGS` to its end: (exit code, stdout + stderr).
fn run(args: &[&str]) -> (Option<i32>, String) {
    let mut cmd = command();
    cmd.args(args);
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(30));
    (status.code(), format!("{out}{err}"))
}

#[tokio::test]
async fn rls_and_health_over_a_unix_socket() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let socket = dir.path().join("ratelimitd.sock");
    let mut server = Ratelimitd::start(&["--config", &config, "--grpc-uds", path_str(&socket)]);
    assert_eq!(
        server.grpc_uds(),
        socket,
        "the startup line names the socket"
    );
    assert!(is_socket(&socket));
    let output = server.output();
    assert!(!output.contains("grpc_addr="), "no TCP gRPC port: {output}");

    let channel = uds_channel(&socket).await;
    assert_eq!(health_status(channel.clone()).await.unwrap(), SERVING);
    let mut client = rls(channel);
    let mut codes = Vec::new();
    for _ in 0..3 {
        let resp = should(&mut client, request("uds", &[&[("k", "v")]], 1)).await;
        codes.push(rld::overall(&resp));
    }
    assert_eq!(codes, [Code::Ok, Code::Ok, Code::OverLimit]);

    let (code, out) = run(&["health", "--grpc-uds", path_str(&socket)]);
    assert_eq!((code, out.trim()), (Some(0), "SERVING"), "{out}");
    let (_, metrics) = rld::http_get(server.http_addr(), "/metrics").await;
    assert!(
        metrics.contains("ratelimitd_grpc_connections_accepted_total 2"),
        "the test's connection and the probe's: {metrics}"
    );

    drop(client);
    server.terminate();
    let status = server.exited(Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(!socket.exists(), "the socket file is removed on exit");
    let (code, out) = run(&["health", "--grpc-uds", path_str(&socket)]);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains(&format!("unix:{}", socket.display())), "{out}");
}

#[tokio::test]
async fn a_leftover_socket_is_replaced_and_other_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let socket = dir.path().join("left.sock");
    // A killed server leaves its socket file behind: nobody listens on it.
    drop(std::os::unix::net::UnixListener::bind(&socket).unwrap());
    assert!(is_socket(&socket));
    let server = Ratelimitd::start(&["--config", &config, "--grpc-uds", path_str(&socket)]);
    assert_eq!(
        health_status(uds_channel(&socket).await).await.unwrap(),
        SERVING
    );

    // A second server on the same path is refused, and leaves the first one's socket alone.
    let serve = |path: &Path| {
        run(&[
            "serve",
            "--http-addr",
            "127.0.0.1:0",
            "--config",
            &config,
            "--grpc-uds",
            path_str(path),
        ])
    };
    let (code, out) = serve(&socket);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "--grpc-uds {}: another process serves on this socket",
            socket.display()
        )),
        "{out}"
    );
    assert_eq!(
        health_status(uds_channel(&socket).await).await.unwrap(),
        SERVING
    );
    drop(server);

    let file = dir.path().join("not-a-socket");
    std::fs::write(&file, "keep me").unwrap();
    let (code, out) = serve(&file);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "--grpc-uds {}: exists and is not a socket",
            file.display()
        )),
        "{out}"
    );
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me");
}

#[tokio::test]
async fn tls_over_a_unix_socket_and_its_probe() {
    let pki = Pki::new();
    let ca = pki.ca("uds");
    let cert = ca.server("server", "ratelimitd uds", 2);
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let socket = dir.path().join("tls.sock");
    let server = Ratelimitd::start(&[
        "--config",
        &config,
        "--grpc-uds",
        path_str(&socket),
        "--grpc-tls-cert",
        path_str(&cert.cert),
        "--grpc-tls-key",
        path_str(&cert.key),
    ]);
    assert_eq!(server.grpc_uds(), socket);
    let (code, out) = run(&[
        "health",
        "--grpc-uds",
        path_str(&socket),
        "--tls-ca",
        path_str(&ca.cert),
    ]);
    assert_eq!((code, out.trim()), (Some(0), "SERVING"), "{out}");
    let (code, out) = run(&["health", "--grpc-uds", path_str(&socket)]);
    assert_eq!(code, Some(1), "plaintext to a TLS socket: {out}");
    // The socket's path from the environment, as serve reads it too.
    let mut cmd = command();
    cmd.args(["health", "--tls-ca", path_str(&ca.cert)])
        .env("RATELIMITD_GRPC_UDS", &socket);
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(20));
    assert!(status.success(), "{out}{err}");
}

/// A listener at `path` that never accepts, its backlog full: as an instance stopped with
/// SIGSTOP ends up once clients have queued up on it. Returns the listener and the queued
/// connections (kept open).
fn listening_but_full(path: &Path) -> (socket2::Socket, Vec<socket2::Socket>) {
    use socket2::{Domain, SockAddr, Socket, Type};
    let address = SockAddr::unix(path).unwrap();
    let listener = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
    listener.bind(&address).unwrap();
    listener.listen(0).unwrap();
    let mut queued = Vec::new();
    loop {
        let client = Socket::new(Domain::UNIX, Type::STREAM, None).unwrap();
        client.set_nonblocking(true).unwrap();
        match client.connect(&address) {
            Ok(()) => queued.push(client),
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(error) => panic!("connect {}: {error}", path.display()),
        }
        assert!(queued.len() < 64, "the backlog never filled");
    }
    (listener, queued)
}

#[test]
fn a_live_socket_whose_listener_does_not_accept_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let socket = dir.path().join("stuck.sock");
    let (_listener, _queued) = listening_but_full(&socket);
    let started = Instant::now();
    let (code, out) = run(&[
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
        &config,
        "--grpc-uds",
        path_str(&socket),
    ]);
    eprintln!("a full backlog refused in {:?}", started.elapsed());
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains(&format!(
            "--grpc-uds {}: a process listens on this socket but does not accept connections",
            socket.display()
        )),
        "{out}"
    );
    assert!(
        is_socket(&socket),
        "the other process's socket is left alone"
    );
}

/// Starts `serve` on a unix socket under umask 000, with `args` and `envs` added.
fn start_under_umask_000(
    config: &str,
    socket: &Path,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Ratelimitd {
    let mut cmd = command();
    cmd.args([
        "serve",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
        config,
        "--grpc-uds",
    ])
    .arg(socket)
    .args(args);
    for (name, value) in envs {
        cmd.env(name, value);
    }
    // SAFETY: umask is async-signal-safe and touches nothing but the child's own mask.
    unsafe {
        cmd.pre_exec(|| {
            libc::umask(0);
            Ok(())
        });
    }
    Ratelimitd::spawn(cmd)
}

/// One way of giving the mode: its name, the extra flags and variables, and the mode it gives.
struct ModeCase {
    what: &'static str,
    args: &'static [&'static str],
    envs: &'static [(&'static str, &'static str)],
    mode: u32,
}

fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o7777
}

#[tokio::test]
async fn the_socket_mode_is_set_whatever_the_umask() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(&dir);
    let cases = [
        ModeCase {
            what: "default",
            args: &[],
            envs: &[],
            mode: 0o660,
        },
        ModeCase {
            what: "flag",
            args: &["--grpc-uds-mode", "0600"],
            envs: &[],
            mode: 0o600,
        },
        ModeCase {
            what: "env",
            args: &[],
            envs: &[("RATELIMITD_GRPC_UDS_MODE", "666")],
            mode: 0o666,
        },
    ];
    for ModeCase {
        what,
        args,
        envs,
        mode,
    } in cases
    {
        let socket = dir.path().join(format!("{what}.sock"));
        let server = start_under_umask_000(&config, &socket, args, envs);
        assert_eq!(
            format!("{:04o}", mode_of(&socket)),
            format!("{mode:04o}"),
            "{what}"
        );
        assert_eq!(
            health_status(uds_channel(&socket).await).await.unwrap(),
            SERVING,
            "{what}"
        );
        drop(server);
    }

    let (code, out) = run(&[
        "serve",
        "--config",
        &config,
        "--grpc-uds",
        path_str(&dir.path().join("bad.sock")),
        "--grpc-uds-mode",
        "4770",
    ]);
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("`4770` is not a permission mode between 0000 and 0777"),
        "{out}"
    );
}
