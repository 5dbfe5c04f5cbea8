//! Configuration limits on real files, through `config::Loader` and `ratelimitd check`: an alias
//! bomb fails fast naming the alias's file:line, a file above the size cap is refused with its
//! size and the cap before it is read, and FIFOs, devices and sockets named `*.yaml` are refused
//! by name instead of being opened (which would block, or read `/dev/zero` forever). The flags
//! and their environment variables set the limits.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use ratelimitd::config::{ConfigBound, ConfigBounds, ConfigError, Loader};
use testkit::hostile_config::*;
use testkit::ratelimitd::*;

/// `check` must answer well within this, whatever the files hold.
const FAST: Duration = Duration::from_secs(5);

const VALID: &str =
    "domain: ok\ndescriptors:\n  - key: k\n    rate_limit: {unit: hour, requests_per_unit: 5}\n";

fn check(args: &[&str], envs: &[(&str, &str)]) -> (ExitStatus, String, String, Duration) {
    let mut cmd = command();
    cmd.arg("check").args(args);
    for (name, value) in envs {
        cmd.env(name, value);
    }
    let started = Instant::now();
    let (status, out, err) = run_to_end(cmd, Duration::from_secs(30));
    (status, out, err, started.elapsed())
}

fn errors(loader: &Loader, paths: &[PathBuf]) -> Vec<ConfigError> {
    match loader.load(paths) {
        Ok(rules) => panic!("expected errors, loaded {rules:?}"),
        Err(errors) => errors.0,
    }
}

fn path_str(path: &Path) -> &str {
    path.to_str().expect("a UTF-8 temporary path")
}

#[test]
fn an_alias_bomb_fails_check_fast_at_the_alias_that_passes_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let bomb = dir.path().join("bomb.yaml");
    fs::write(&bomb, alias_bomb()).unwrap();
    let (status, _, stderr, took) = check(&["--config", path_str(&bomb)], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(took < FAST, "check took {took:?}");
    let (line, column) = ALIAS_BOMB_POSITION;
    assert_eq!(
        stderr.trim(),
        format!(
            "{}:{line}:{column}: yaml: this alias expands to 1048576 bytes of scalars, which would \
             bring the document's alias expansions to 9437184 bytes; at most 8388608 are accepted \
             (--max-config-alias-bytes)",
            bomb.display()
        )
    );

    // With a 10 MiB budget the ten copies of line 3 fit; the first alias of line 4 (ten more)
    // does not.
    let loader = Loader::new(ConfigBounds {
        max_alias_bytes: 10 << 20,
        ..ConfigBounds::default()
    });
    let found = errors(&loader, std::slice::from_ref(&bomb));
    assert_eq!((found[0].line, found[0].column), (4, 10), "{}", found[0]);
    assert_eq!(loader.stats().rejected(ConfigBound::AliasBytes), 1);
    assert_eq!(loader.stats().files_parsed(), 1);
}

#[test]
fn the_alias_budget_flag_and_variable_set_the_budget() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("aliases.yaml");
    // Each alias copies 26 bytes of scalars (`unit`, `hour`, `requests_per_unit`, `5`).
    fs::write(
        &file,
        "domain: aliases\ndescriptors:\n  - key: a\n    rate_limit: &l {unit: hour, requests_per_unit: 5}\n  - key: b\n    rate_limit: *l\n  - key: c\n    rate_limit: *l\n",
    )
    .unwrap();
    let (status, _, stderr, _) = check(&["--config", path_str(&file)], &[]);
    assert!(status.success(), "{stderr}");
    let (status, _, stderr, _) = check(
        &[
            "--config",
            path_str(&file),
            "--max-config-alias-bytes",
            "51",
        ],
        &[],
    );
    assert_eq!(status.code(), Some(1));
    assert!(
        stderr.contains(&format!(
            "{}:8:17: yaml: this alias expands to 26 bytes",
            file.display()
        )),
        "{stderr}"
    );
    let (status, _, stderr, _) = check(
        &["--config", path_str(&file)],
        &[("RATELIMITD_MAX_CONFIG_ALIAS_BYTES", "25")],
    );
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains(":6:17: yaml:"), "{stderr}");
}

#[test]
fn a_file_above_the_size_cap_is_refused_with_its_size_and_the_cap_unread() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.yaml");
    // 100 MB: sparse, so the test writes nothing; were it read, it would be 100 MB of NULs.
    sparse_file(&big, 100_000_000);
    fs::write(dir.path().join("ok.yaml"), VALID).unwrap();
    let loader = Loader::new(ConfigBounds::default());
    let found = errors(&loader, &[dir.path().to_path_buf()]);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(
        found[0].to_string(),
        format!(
            "{}:0:0: file: file has 100000000 bytes; at most 8388608 are accepted (--max-config-file-bytes)",
            big.display()
        )
    );
    assert_eq!(loader.stats().rejected(ConfigBound::FileBytes), 1);
    assert_eq!(loader.stats().files_read(), 1, "only ok.yaml was read");

    let (status, _, stderr, took) = check(&["--config", path_str(dir.path())], &[]);
    assert_eq!(status.code(), Some(1));
    assert!(took < FAST, "check took {took:?}");
    assert!(
        stderr
            .contains("big.yaml:0:0: file: file has 100000000 bytes; at most 8388608 are accepted"),
        "{stderr}"
    );

    // The cap is a flag and a variable; a file at the cap is accepted.
    let ok = dir.path().join("ok.yaml");
    let size = VALID.len().to_string();
    let (status, ..) = check(
        &["--config", path_str(&ok), "--max-config-file-bytes", &size],
        &[],
    );
    assert!(status.success());
    let smaller = (VALID.len() - 1).to_string();
    let (status, _, stderr, _) = check(
        &["--config", path_str(&ok)],
        &[("RATELIMITD_MAX_CONFIG_FILE_BYTES", &smaller)],
    );
    assert_eq!(status.code(), Some(1));
    assert!(
        stderr.contains(&format!(
            "file has {} bytes; at most {smaller} are accepted",
            VALID.len()
        )),
        "{stderr}"
    );
}

#[test]
fn a_fifo_named_yaml_is_refused_by_name_without_blocking_check() {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("ok.yaml"), VALID).unwrap();
    let fifo = dir.path().join("x.yaml");
    mkfifo(&fifo);
    let (status, _, stderr, took) = check(&["--config", path_str(dir.path())], &[]);
    assert_eq!(status.code(), Some(1), "{stderr}");
    assert!(took < FAST, "check took {took:?}");
    assert_eq!(
        stderr.trim(),
        format!(
            "{}:0:0: file: not a regular file (a FIFO); only regular files and symlinks to regular files are read",
            fifo.display()
        )
    );
    // Named directly, too.
    let (status, _, stderr, _) = check(&["--config", path_str(&fifo)], &[]);
    assert_eq!(status.code(), Some(1));
    assert!(stderr.contains("not a regular file (a FIFO)"), "{stderr}");
}

#[test]
fn symlinks_to_devices_and_sockets_are_refused_and_symlinks_to_files_followed() {
    let dir = tempfile::tempdir().unwrap();
    let zero = dir.path().join("zero.yaml");
    symlink("/dev/zero", &zero).unwrap();
    let socket_path = dir.path().join("socket.yml");
    let _socket = std::os::unix::net::UnixListener::bind(&socket_path).unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    fs::write(elsewhere.path().join("real.txt"), VALID).unwrap();
    symlink(
        elsewhere.path().join("real.txt"),
        dir.path().join("linked.yaml"),
    )
    .unwrap();
    // A directory named like a file is not read, as every subdirectory.
    fs::create_dir(dir.path().join("nested.yaml")).unwrap();

    let loader = Loader::new(ConfigBounds::default());
    let found = errors(&loader, &[dir.path().to_path_buf()]);
    let messages: Vec<String> = found.iter().map(ToString::to_string).collect();
    assert_eq!(
        messages,
        [
            format!(
                "{}:0:0: file: not a regular file (a socket); only regular files and symlinks to regular files are read",
                socket_path.display()
            ),
            format!(
                "{}:0:0: file: not a regular file (a character device); only regular files and symlinks to regular files are read",
                zero.display()
            ),
        ]
    );
    assert_eq!(loader.stats().rejected(ConfigBound::FileType), 2);
    assert_eq!(loader.stats().files_read(), 1, "only linked.yaml was read");

    let (status, _, stderr, took) = check(&["--config", path_str(dir.path())], &[]);
    assert_eq!(status.code(), Some(1));
    assert!(took < FAST, "check took {took:?}");
    assert!(stderr.contains("zero.yaml:0:0: file: not a regular file (a character device)"));

    fs::remove_file(&zero).unwrap();
    fs::remove_file(&socket_path).unwrap();
    let (status, stdout, stderr, _) = check(&["--config", path_str(dir.path())], &[]);
    assert!(status.success(), "{stderr}");
    assert!(stdout.contains("1 domain(s)"), "{stdout}");
}
