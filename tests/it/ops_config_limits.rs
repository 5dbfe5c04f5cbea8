//! Hostile configuration files against a running server: an alias bomb, a FIFO, a symlink to
//! `/dev/zero` and a 100 MB file swapped into the watched directory are each rejected (logged
//! with the path, counted by limit) while the running rules keep serving and memory stays
//! bounded; a FIFO blocks neither reloads nor shutdown; a rejected file is neither read nor
//! parsed again until it changes.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::time::Duration;

use ratelimitd::proto::rls::RateLimitRequest;
use testkit::hostile_config::*;
use testkit::ops_support::*;
use testkit::ratelimitd::*;
use tonic_health::pb::health_check_response::ServingStatus;

/// How long a reload may take to be tried (the check runs every second).
const WITHIN: Duration = Duration::from_secs(10);

/// Most the peak resident memory may grow while a hostile file is rejected. The alias budget
/// (8 MiB) and the file cap (8 MiB) bound what one parse holds; without them the alias bomb
/// took the process past 16 GiB and `/dev/zero` until allocation failed.
const MEMORY_GROWTH_KIB: u64 = 64 << 10;

fn config(limit: u32) -> String {
    format!(
        "domain: hard\ndescriptors:\n  - key: a\n    rate_limit: {{unit: hour, requests_per_unit: {limit}}}\n"
    )
}

/// Replaces `path` atomically (write a sibling, rename over), as editors and tools do.
fn replace(path: &Path, content: &str) {
    let temporary = path.with_extension("tmp~");
    fs::write(&temporary, content).unwrap();
    fs::rename(&temporary, path).unwrap();
}

/// `requests_per_unit` of `a=x` in domain `domain` (0 when no limit applies), without consuming.
async fn limit_of(server: &Ratelimitd, domain: &str) -> u32 {
    let mut d = descriptor(&[("a", "x")]);
    d.hits_addend = Some(0);
    let mut c = server.client().await;
    let resp = should(
        &mut c,
        RateLimitRequest {
            domain: domain.into(),
            descriptors: vec![d],
            hits_addend: 0,
        },
    )
    .await;
    resp.statuses[0]
        .current_limit
        .as_ref()
        .map_or(0, |l| l.requests_per_unit)
}

async fn counter(server: &Ratelimitd, name: &str, labels: &str) -> f64 {
    value(&metrics(server.http_addr()).await, name, labels)
}

async fn failures(server: &Ratelimitd) -> f64 {
    counter(
        server,
        "ratelimitd_config_reloads_total",
        "result=\"failure\"",
    )
    .await
}

async fn wait_failures(server: &Ratelimitd, count: f64) {
    eventually(WITHIN, &format!("{count} rejected reloads"), || async {
        (failures(server).await == count).then_some(())
    })
    .await;
}

async fn wait_logged(server: &Ratelimitd, text: &str) {
    eventually(WITHIN, &format!("`{text}` in the log"), || async {
        server.output().contains(text).then_some(())
    })
    .await;
}

async fn assert_serving_old_rules(server: &Ratelimitd, limit: u32) {
    assert_eq!(
        limit_of(server, "hard").await,
        limit,
        "the running rules stay"
    );
    let mut health = server.health_client().await;
    assert_eq!(
        overall_health(&mut health).await,
        ServingStatus::Serving as i32
    );
}

/// Starts a server on `dir` holding `hard.yaml` (limit 3) and returns it with its peak memory.
async fn start(dir: &Path) -> (Ratelimitd, u64) {
    replace(&dir.join("hard.yaml"), &config(3));
    let server = Ratelimitd::start(&["--config", dir.to_str().unwrap()]);
    assert_eq!(limit_of(&server, "hard").await, 3);
    let (_, peak) = memory_kib(server.pid());
    (server, peak)
}

fn assert_memory_bounded(server: &Ratelimitd, peak_before: u64, what: &str) {
    let (rss, peak) = memory_kib(server.pid());
    eprintln!("{what}: VmRSS {rss} KiB, VmHWM {peak} KiB (VmHWM before: {peak_before} KiB)");
    assert!(
        peak < peak_before + MEMORY_GROWTH_KIB,
        "{what}: peak memory grew from {peak_before} to {peak} KiB"
    );
}

#[tokio::test]
async fn an_alias_bomb_swapped_in_is_rejected_and_the_old_rules_keep_serving() {
    let dir = tempfile::tempdir().unwrap();
    let (server, peak_before) = start(dir.path()).await;

    let bomb = dir.path().join("bomb.yaml");
    replace(&bomb, &alias_bomb());
    wait_failures(&server, 1.0).await;
    let (line, column) = ALIAS_BOMB_POSITION;
    wait_logged(
        &server,
        &format!(
            "{}:{line}:{column}: yaml: this alias expands to 1048576 bytes",
            bomb.display()
        ),
    )
    .await;
    assert!(server.output().contains("(--max-config-alias-bytes)"));
    assert_eq!(
        counter(
            &server,
            "ratelimitd_config_limit_rejections_total",
            "limit=\"alias_bytes\""
        )
        .await,
        1.0
    );
    assert_serving_old_rules(&server, 3).await;
    assert_memory_bounded(&server, peak_before, "after the alias bomb");

    // Defused, the same file loads.
    replace(&bomb, "domain: bomb\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 9}\n");
    eventually(WITHIN, "the fixed file applies", || async {
        (limit_of(&server, "bomb").await == 9).then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_fifo_in_the_config_dir_blocks_neither_reloads_nor_shutdown() {
    let dir = tempfile::tempdir().unwrap();
    let (mut server, _) = start(dir.path()).await;
    let fifo = dir.path().join("x.yaml");
    let refused = format!("{}:0:0: file: not a regular file (a FIFO)", fifo.display());

    mkfifo(&fifo);
    wait_failures(&server, 1.0).await;
    wait_logged(&server, &refused).await;
    assert_eq!(
        counter(
            &server,
            "ratelimitd_config_limit_rejections_total",
            "limit=\"file_type\""
        )
        .await,
        1.0
    );
    // The reload thread is free: an edit of another file is tried (and refused while the FIFO
    // is there, since the configuration cannot be loaded whole), and so is SIGHUP.
    replace(&dir.path().join("hard.yaml"), &config(5));
    wait_failures(&server, 2.0).await;
    server.signal("HUP");
    wait_failures(&server, 3.0).await;
    assert_serving_old_rules(&server, 3).await;

    // Without the FIFO, the edit applies.
    fs::remove_file(&fifo).unwrap();
    eventually(WITHIN, "the edit applies", || async {
        (limit_of(&server, "hard").await == 5).then_some(())
    })
    .await;

    // With a FIFO there again, SIGTERM still ends the process at once, with status 0.
    mkfifo(&fifo);
    wait_failures(&server, 4.0).await;
    server.terminate();
    let status = server.exited(Duration::from_secs(5)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exit {status:?} after SIGTERM; output:\n{}",
        server.output()
    );
}

#[tokio::test]
async fn serve_refuses_to_start_on_a_directory_holding_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    replace(&dir.path().join("hard.yaml"), &config(3));
    mkfifo(&dir.path().join("x.yaml"));
    let mut cmd = command();
    cmd.args([
        "serve",
        "--grpc-addr",
        "127.0.0.1:0",
        "--http-addr",
        "127.0.0.1:0",
        "--config",
        dir.path().to_str().unwrap(),
    ]);
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(10));
    assert_eq!(status.code(), Some(1), "{out}{err}");
    assert!(
        format!("{out}{err}").contains("x.yaml:0:0: file: not a regular file (a FIFO)"),
        "{out}{err}"
    );
}

#[tokio::test]
async fn a_symlink_to_dev_zero_is_rejected_without_being_read() {
    let dir = tempfile::tempdir().unwrap();
    let (server, peak_before) = start(dir.path()).await;
    let zero = dir.path().join("zero.yaml");
    symlink("/dev/zero", &zero).unwrap();
    wait_failures(&server, 1.0).await;
    wait_logged(
        &server,
        &format!(
            "{}:0:0: file: not a regular file (a character device)",
            zero.display()
        ),
    )
    .await;
    assert_serving_old_rules(&server, 3).await;
    assert_memory_bounded(&server, peak_before, "after the /dev/zero symlink");
}

#[tokio::test]
async fn a_rejected_file_is_neither_read_nor_parsed_again_until_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let (server, peak_before) = start(dir.path()).await;
    let reads = || counter(&server, "ratelimitd_config_file_reads_total", "");
    let parses = || counter(&server, "ratelimitd_config_file_parses_total", "");
    // hard.yaml, just written, is read at each check until its timestamps are old enough to be
    // trusted (2 s); then only its stamp is looked at.
    tokio::time::sleep(Duration::from_millis(3500)).await;

    // 100 MB (sparse), renamed into place whole.
    let big = dir.path().join("big.yaml");
    let staged = dir.path().join("big.staged");
    sparse_file(&staged, 100_000_000);
    fs::rename(&staged, &big).unwrap();
    wait_failures(&server, 1.0).await;
    wait_logged(
        &server,
        &format!(
            "{}:0:0: file: file has 100000000 bytes; at most 8388608 are accepted (--max-config-file-bytes)",
            big.display()
        ),
    )
    .await;
    assert_eq!(
        counter(
            &server,
            "ratelimitd_config_limit_rejections_total",
            "limit=\"file_bytes\""
        )
        .await,
        1.0
    );
    let (read_before, parsed_before) = (reads().await, parses().await);
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(reads().await, read_before, "nothing read in 3 checks");
    assert_eq!(parses().await, parsed_before, "nothing parsed in 3 checks");
    assert_eq!(failures(&server).await, 1.0, "rejected once");
    assert_memory_bounded(&server, peak_before, "after the 100 MB file");

    // A small broken file: parsed once; read again only until its timestamps are old enough to
    // be trusted (2 s), then not at all.
    fs::remove_file(&big).unwrap();
    replace(
        &dir.path().join("broken.yaml"),
        "domain: broken\nbogus: 1\n",
    );
    wait_failures(&server, 2.0).await;
    let parsed_once = parses().await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    let read_settled = reads().await;
    tokio::time::sleep(Duration::from_millis(3500)).await;
    assert_eq!(reads().await, read_settled, "a settled file is not read");
    assert_eq!(
        parses().await,
        parsed_once,
        "a rejected file is not parsed again"
    );
    assert_eq!(failures(&server).await, 2.0);

    // Changed, it is read, parsed and applied.
    replace(
        &dir.path().join("broken.yaml"),
        "domain: broken\ndescriptors:\n  - key: a\n    rate_limit: {unit: hour, requests_per_unit: 4}\n",
    );
    eventually(WITHIN, "the fixed file applies", || async {
        (limit_of(&server, "broken").await == 4).then_some(())
    })
    .await;
    assert!(parses().await > parsed_once);
}
