//! The image of an envoyproxy/ratelimit Deployment swapped for ratelimitd's, with its
//! environment unchanged, as a rolling update does it: old pods (a model of envoyproxy/ratelimit's
//! Redis writes, `testkit/src/upstream_model.rs`) and new pods (the real binary in drop-in mode)
//! serve one counter at once; Redis goes down and health stays as upstream's; Redis comes up
//! after the pods; the start is not silent at upstream's log level; what still differs is said.

use std::fs;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ratelimitd::proto::rls::rate_limit_response::Code;
use testkit::ratelimitd::{
    command, hammer, http_get, overall, request, run_to_end, should, wait_for_window_room,
    Ratelimitd,
};
use testkit::redis_server::{free_port, RedisServer};
use testkit::upstream_model::{upstream_do_limit, LimitedDescriptor, HOUR};
use tonic_health::pb::health_check_response::ServingStatus;

/// The model's requests: domain `domain`, descriptor `user=alice`, 40 per hour.
const CONFIG: &str = "domain: domain\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 40}\n";

/// An upstream runtime tree, `RUNTIME_ROOT/ratelimit/config/config.yaml`.
fn runtime_tree() -> tempfile::TempDir {
    let root = tempfile::tempdir().unwrap();
    let config = root.path().join("ratelimit/config");
    fs::create_dir_all(&config).unwrap();
    fs::write(config.join("config.yaml"), CONFIG).unwrap();
    root
}

/// An upstream Deployment's environment: the runtime tree, Redis over TCP, statsd off, loopback
/// ports the kernel picks, `LOG_LEVEL=info` so the harness reads them.
fn upstream_env(root: &Path, redis_port: u16) -> Vec<(&'static str, String)> {
    let mut env: Vec<(&'static str, String)> = vec![
        ("RUNTIME_ROOT", root.display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{redis_port}")),
        ("LOG_LEVEL", "info".into()),
    ];
    env.extend(
        testkit::ratelimitd::UPSTREAM_LOOPBACK
            .iter()
            .map(|(name, value)| (*name, (*value).to_owned())),
    );
    env
}

/// The bare binary (no arguments) with `env` only.
fn drop_in(env: &[(&str, String)]) -> Command {
    let mut cmd = command();
    for (name, value) in env {
        cmd.env(name, value);
    }
    cmd
}

async fn health(server: &Ratelimitd) -> ServingStatus {
    testkit::ratelimitd::serving_status(server.grpc_addr()).await
}

/// `ratelimitd health` against `server`: its exit code.
fn health_command(server: &Ratelimitd) -> Option<i32> {
    let mut cmd = command();
    cmd.args(["health", "--grpc-addr", &server.grpc_addr().to_string()]);
    let (status, _, _) = run_to_end(cmd, Duration::from_secs(10));
    status.code()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_swap_keeps_upstreams_counters_while_old_and_new_pods_serve_together() {
    let redis = RedisServer::start();
    let root = runtime_tree();
    wait_for_window_room(HOUR, 120);
    let alice = [LimitedDescriptor::hourly("user", "alice", 40)];

    // Before the swap: the old pods alone have admitted 15 of the hour's 40.
    let mut connection = redis.connection();
    for _ in 0..15 {
        assert!(!upstream_do_limit(&mut connection, "", &alice, 1, 300, false)[0]);
    }

    // During the swap: two old pods keep serving while the new one starts and serves.
    let stop = Arc::new(AtomicBool::new(false));
    let old_admitted = Arc::new(AtomicUsize::new(0));
    let old_requests = Arc::new(AtomicUsize::new(0));
    let old_pods: Vec<_> = (0..2)
        .map(|_| {
            let mut connection = redis.connection();
            let (stop, admitted, requests) =
                (stop.clone(), old_admitted.clone(), old_requests.clone());
            let alice = alice.clone();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    if !upstream_do_limit(&mut connection, "", &alice, 1, 300, false)[0] {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                    requests.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    let new_pod = Ratelimitd::spawn(drop_in(&upstream_env(root.path(), redis.port())));
    let responses = hammer(&[new_pod.grpc_addr()], 4, 60, |_| {
        request("domain", &[&[("user", "alice")]], 1)
    })
    .await;
    stop.store(true, Ordering::Relaxed);
    for pod in old_pods {
        pod.join().expect("old pod");
    }
    let new_admitted = responses.iter().filter(|r| overall(r) == Code::Ok).count();
    let old_admitted = old_admitted.load(Ordering::Relaxed);
    assert!(old_requests.load(Ordering::Relaxed) > 0);
    assert_eq!(
        15 + old_admitted + new_admitted,
        40,
        "before the swap 15, old pods {old_admitted}, new pod {new_admitted}: one count of 40"
    );

    // One key, upstream's, whose TTL is upstream's window plus at most its 300 s of jitter.
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("*")
        .query(&mut connection)
        .expect("KEYS");
    assert_eq!(keys, vec![alice[0].key()], "only upstream's key is written");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&keys[0])
        .query(&mut connection)
        .unwrap();
    assert!((1..=3600 + 300).contains(&ttl), "TTL {ttl}");
    let log = new_pod.output();
    assert!(
        log.contains("RATELIMITD_KEY_FORMAT=envoyproxy"),
        "the key format is said: {log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ignores_redis_as_upstreams_unless_the_active_connection_check_is_on() {
    let mut redis = RedisServer::start();
    let root = runtime_tree();
    let env = upstream_env(root.path(), redis.port());
    let mut active = env.clone();
    active.push(("REDIS_HEALTH_CHECK_ACTIVE_CONNECTION", "true".into()));
    let default = Ratelimitd::spawn(drop_in(&env));
    let checked = Ratelimitd::spawn(drop_in(&active));
    assert_eq!(health(&default).await, ServingStatus::Serving);
    assert_eq!(health(&checked).await, ServingStatus::Serving);

    redis.kill();
    let mut client = default.client().await;
    let status = client
        .should_rate_limit(request("domain", &[&[("user", "bob")]], 1))
        .await
        .expect_err("no Redis, no decision");
    assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");

    // The checked instance turns NOT_SERVING (its probe runs every second); the default one
    // has seen the same outage and stays SERVING on every health surface.
    let deadline = Instant::now() + Duration::from_secs(10);
    while health(&checked).await != ServingStatus::NotServing {
        assert!(Instant::now() < deadline, "{}", checked.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(health(&default).await, ServingStatus::Serving);
    assert_eq!(http_get(default.http_addr(), "/healthcheck").await.0, 200);
    assert_eq!(http_get(checked.http_addr(), "/healthcheck").await.0, 503);
    assert_eq!(health_command(&default), Some(0));
    assert_eq!(health_command(&checked), Some(1));

    redis.restart();
    let deadline = Instant::now() + Duration::from_secs(10);
    while health(&checked).await != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "{}", checked.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let response = should(&mut client, request("domain", &[&[("user", "bob")]], 1)).await;
    assert_eq!(overall(&response), Code::Ok);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn startup_waits_for_a_redis_that_comes_up_late() {
    let mut redis = RedisServer::start();
    redis.kill();
    let root = runtime_tree();
    let mut env = upstream_env(root.path(), redis.port());
    env.push(("REDIS_STARTUP_INITIAL_INTERVAL", "200ms".into()));
    env.push(("REDIS_STARTUP_MAX_INTERVAL", "500ms".into()));
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut waiting = spawn_logging_to(drop_in(&env), log.path());
    let address = format!("127.0.0.1:{}", redis.port());
    wait_for_line(&mut waiting, log.path(), "redis not reachable at startup");
    std::thread::sleep(Duration::from_secs(2));
    assert!(
        waiting.try_wait().unwrap().is_none(),
        "still waiting, not exited: {}",
        read(log.path())
    );
    let text = read(log.path());
    assert!(text.contains(&address), "the address is named: {text}");
    let _ = waiting.kill();
    let _ = waiting.wait();

    // The same deployment, Redis up two seconds after the pod: it turns ready and serves once
    // Redis answers.
    let late = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(2));
        redis.restart();
        redis
    });
    let server = Ratelimitd::spawn(drop_in(&env));
    let _redis = late.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while testkit::ratelimitd::serving_status(server.grpc_addr()).await != ServingStatus::Serving {
        assert!(Instant::now() < deadline, "not ready: {}", server.output());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut client = server.client().await;
    let response = should(&mut client, request("domain", &[&[("user", "carol")]], 1)).await;
    assert_eq!(overall(&response), Code::Ok);
    assert!(server.output().contains("redis reachable; starting"));
}

#[test]
fn outside_drop_in_mode_an_unreachable_redis_stops_startup_naming_its_address() {
    let port = free_port();
    let mut cmd = command();
    let url = format!("redis://:s3cret@127.0.0.1:{port}");
    cmd.args([
        "serve",
        "--config",
        testkit::ratelimitd::fixture("serve/matching.yaml")
            .to_str()
            .unwrap(),
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--redis-url",
        &url,
    ]);
    let started = Instant::now();
    let (status, stdout, stderr) = run_to_end(cmd, Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{stdout}{stderr}");
    let output = format!("{stdout}{stderr}");
    assert!(
        output.contains(&format!("redis://:***@127.0.0.1:{port}")),
        "{output}"
    );
    assert!(!output.contains("s3cret"), "{output}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

#[test]
fn the_start_is_said_at_upstreams_level_with_what_still_differs() {
    let redis = RedisServer::start();
    let root = runtime_tree();
    let (grpc, http, debug) = (free_port(), free_port(), free_port());
    let env: Vec<(&str, String)> = vec![
        ("RUNTIME_ROOT", root.path().display().to_string()),
        ("RUNTIME_SUBDIRECTORY", "ratelimit".into()),
        ("REDIS_SOCKET_TYPE", "tcp".into()),
        ("REDIS_URL", format!("127.0.0.1:{}", redis.port())),
        ("REDIS_PERSECOND", "true".into()),
        ("USE_STATSD", "false".into()),
        ("GRPC_PORT", grpc.to_string()),
        ("PORT", http.to_string()),
        ("DEBUG_PORT", debug.to_string()),
    ];
    let log = tempfile::NamedTempFile::new().unwrap();
    let mut server = spawn_logging_to(drop_in(&env), log.path());
    wait_for_line(&mut server, log.path(), "Listening for gRPC on");
    std::thread::sleep(Duration::from_millis(300));
    let _ = server.kill();
    let _ = server.wait();
    let text = read(log.path());
    for expected in [
        format!("Listening for HTTP on '0.0.0.0:{http}'"),
        format!("Listening for debug on '0.0.0.0:{debug}'"),
        format!("Listening for gRPC on '0.0.0.0:{grpc}'"),
        "drop-in mode: configured by envoyproxy/ratelimit's environment (".into(),
        "REDIS_SOCKET_TYPE, REDIS_URL".into(),
        "differs from envoyproxy/ratelimit: REDIS_PERSECOND=true".into(),
    ] {
        assert!(text.contains(&expected), "no `{expected}` in:\n{text}");
    }
    assert!(
        !text.contains(" INFO "),
        "warn level shows no INFO:\n{text}"
    );
    for line in text.lines() {
        assert!(line.contains(" WARN "), "one record per line: {line}");
    }
}

fn spawn_logging_to(mut cmd: Command, log: &Path) -> Child {
    let file = fs::File::create(log).unwrap();
    cmd.stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file);
    cmd.spawn().expect("spawn ratelimitd")
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

fn wait_for_line(child: &mut Child, log: &Path, needle: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !read(log).contains(needle) {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("exited with {status} before `{needle}`:\n{}", read(log));
        }
        assert!(
            Instant::now() < deadline,
            "no `{needle}` within 20 s:\n{}",
            read(log)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
