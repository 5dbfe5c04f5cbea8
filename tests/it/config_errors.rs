//! `config::load` on real files and directories: every error kind with its file and line,
//! directory walking (sorting, hidden entries, symlinks) and domains across files.

use std::fs;
use std::path::{Path, PathBuf};

use ratelimitd::config::{load, ConfigError};
use ratelimitd::limiter::LimitKind;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    fs::write(&path, text).expect("writing a test file");
    path
}

fn load_errors(paths: &[PathBuf]) -> Vec<ConfigError> {
    match load(paths) {
        Ok(rules) => panic!("expected errors, loaded {rules:?}"),
        Err(errors) => errors.0,
    }
}

const RATE: &str = "rate_limit:\n      unit: second\n      requests_per_unit: 1\n";

/// One file per error kind: (file name, text, line, field, message fragment).
fn error_cases() -> Vec<(&'static str, String, usize, &'static str, &'static str)> {
    let head = "domain: d\ndescriptors:\n  - key: k\n";
    vec![
        (
            "syntax.yaml",
            "domain: d\nfoo: a: b\n".to_string(),
            2,
            "yaml",
            "invalid YAML",
        ),
        (
            "duplicate_yaml_key.yaml",
            "domain: d\ndescriptors: []\ndomain: e\n".to_string(),
            3,
            "domain",
            "duplicate key `domain` (first defined at line 1)",
        ),
        (
            "unknown_field.yaml",
            format!("{head}    shadowmode: true\n"),
            4,
            "descriptors[0].shadowmode",
            "unknown field `shadowmode`; did you mean `shadow_mode`?",
        ),
        (
            "wrong_type.yaml",
            format!("{head}    rate_limit:\n      - unit: second\n"),
            5,
            "descriptors[0].rate_limit",
            "must be a map, found a list",
        ),
        (
            "non_string_key.yaml",
            format!("{head}    7: x\n"),
            4,
            "descriptors[0].7",
            "keys must be strings, found an integer",
        ),
        (
            "missing_domain.yaml",
            "# no domain\ndescriptors: []\n".to_string(),
            2,
            "domain",
            "missing",
        ),
        (
            "empty_domain.yaml",
            "descriptors: []\ndomain: ''\n".to_string(),
            2,
            "domain",
            "must not be empty",
        ),
        (
            "missing_key.yaml",
            "domain: d\ndescriptors:\n  - value: v\n".to_string(),
            3,
            "descriptors[0].key",
            "missing",
        ),
        (
            "empty_key.yaml",
            "domain: d\ndescriptors:\n  - value: v\n    key:\n".to_string(),
            4,
            "descriptors[0].key",
            "must not be empty",
        ),
        (
            "bad_unit.yaml",
            format!("{head}    rate_limit:\n      requests_per_unit: 1\n      unit: seconds\n"),
            6,
            "descriptors[0].rate_limit.unit",
            "unknown unit `seconds`",
        ),
        (
            "unlimited_with_unit.yaml",
            format!("{head}    rate_limit:\n      unlimited: true\n      unit: second\n"),
            6,
            "descriptors[0].rate_limit.unit",
            "cannot be combined with `unlimited: true`",
        ),
        (
            "no_unit.yaml",
            format!("{head}    rate_limit:\n      name: x\n"),
            5,
            "descriptors[0].rate_limit.unit",
            "needs a `unit` (or `unlimited: true`)",
        ),
        (
            "missing_requests_per_unit.yaml",
            format!("{head}    rate_limit:\n      unit: second\n"),
            5,
            "descriptors[0].rate_limit.requests_per_unit",
            "missing",
        ),
        (
            "negative_requests_per_unit.yaml",
            format!("{head}    rate_limit:\n      unit: second\n      requests_per_unit: -3\n"),
            6,
            "descriptors[0].rate_limit.requests_per_unit",
            "must be a whole number from 0 (0 denies every request)",
        ),
        (
            "duplicate_descriptor.yaml",
            format!("{head}    value: v\n  - key: other\n  - key: k\n    value: v\n"),
            6,
            "descriptors[2]",
            "already defined at line 3",
        ),
        (
            "replaces_empty.yaml",
            format!("{head}    {RATE}      replaces:\n        - name: ''\n"),
            8,
            "descriptors[0].rate_limit.replaces[0].name",
            "must not be empty",
        ),
        (
            "replaces_self.yaml",
            format!("{head}    {RATE}      name: me\n      replaces:\n        - name: me\n"),
            9,
            "descriptors[0].rate_limit.replaces[0].name",
            "cannot replace itself",
        ),
        (
            "zero_burst.yaml",
            format!("{head}    {RATE}      algorithm: gcra\n      burst: 0\n"),
            8,
            "descriptors[0].rate_limit.burst",
            "must be a positive integer",
        ),
        (
            "burst_without_bucket.yaml",
            format!("{head}    {RATE}      burst: 5\n"),
            7,
            "descriptors[0].rate_limit.burst",
            "burst applies only to token_bucket and gcra",
        ),
        (
            "zero_unit_multiplier.yaml",
            format!("{head}    {RATE}      unit_multiplier: 0\n"),
            7,
            "descriptors[0].rate_limit.unit_multiplier",
            "must be a positive integer",
        ),
        (
            "unknown_algorithm.yaml",
            format!("{head}    {RATE}      algorithm: leaky_bucket\n"),
            7,
            "descriptors[0].rate_limit.algorithm",
            "unknown algorithm `leaky_bucket`",
        ),
        (
            "window_too_long.yaml",
            format!("{head}    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 200\n"),
            7,
            "descriptors[0].rate_limit.unit_multiplier",
            "longer than the supported maximum of 100 years",
        ),
    ]
}

#[test]
fn every_error_kind_is_reported_with_its_file_and_line() {
    let dir = tempfile::tempdir().expect("temp dir");
    let cases = error_cases();
    for (name, text, ..) in &cases {
        write(dir.path(), name, text);
    }
    let errors = load_errors(&[dir.path().to_path_buf()]);
    for (name, _, line, field, fragment) in &cases {
        let file = dir.path().join(name);
        let found: Vec<&ConfigError> = errors.iter().filter(|e| e.file() == Some(&*file)).collect();
        assert_eq!(found.len(), 1, "{name}: {found:#?}");
        let error = found[0];
        assert_eq!(
            (error.line, error.field.as_str()),
            (*line, *field),
            "{name}: {error}"
        );
        assert!(error.column >= 1, "{name}: {error}");
        assert!(error.message.contains(fragment), "{name}: {error}");
    }
    assert_eq!(errors.len(), cases.len());
    let files: Vec<Option<&std::path::Path>> = errors.iter().map(|e| e.file()).collect();
    let mut sorted = files.clone();
    sorted.sort();
    assert_eq!(files, sorted, "errors come in file-name order");
}

#[test]
fn every_error_of_a_file_is_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let file = write(
        dir.path(),
        "many.yaml",
        "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: parsec, requests_per_unit: 1}\n  - value: x\n  - key: b\n    colour: red\n",
    );
    let lines: Vec<usize> = load_errors(&[file]).iter().map(|e| e.line).collect();
    assert_eq!(lines, [4, 5, 7]);
}

#[test]
fn a_directory_with_two_valid_files_loads_both_domains() {
    let dir = tempfile::tempdir().expect("temp dir");
    write(
        dir.path(),
        "b.yml",
        &format!("domain: beta\ndescriptors:\n  - key: k\n    {RATE}"),
    );
    write(
        dir.path(),
        "a.yaml",
        "domain: alpha\ndescriptors:\n  - key: k\n    rate_limit: {unlimited: true}\n",
    );
    write(dir.path(), "notes.txt", "not: [yaml");
    fs::create_dir(dir.path().join("nested")).expect("mkdir");
    write(&dir.path().join("nested"), "c.yaml", "not: [yaml");
    let rules = load(&[dir.path().to_path_buf()]).unwrap_or_else(|e| panic!("{e}"));
    let mut domains: Vec<&str> = rules.domains.keys().map(String::as_str).collect();
    domains.sort();
    assert_eq!(domains, ["alpha", "beta"]);
    let alpha = &rules.domain("alpha").expect("alpha").root.key_only["k"];
    assert_eq!(
        alpha.limit.as_ref().map(|l| &l.kind),
        Some(&LimitKind::Unlimited)
    );
}

#[test]
fn files_and_directories_can_be_mixed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let sub = dir.path().join("rules");
    fs::create_dir(&sub).expect("mkdir");
    write(&sub, "one.yaml", "domain: one\n");
    let file = write(dir.path(), "two.yaml", "domain: two\n");
    let rules = load(&[sub, file]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(rules.domains.len(), 2);
}

#[test]
fn an_empty_directory_loads_no_domains() {
    let dir = tempfile::tempdir().expect("temp dir");
    let rules = load(&[dir.path().to_path_buf()]).unwrap_or_else(|e| panic!("{e}"));
    assert!(rules.domains.is_empty());
}

#[test]
fn the_same_domain_in_two_files_names_both() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = write(dir.path(), "a.yaml", "# first\ndomain: edge\n");
    let second = write(dir.path(), "b.yaml", "descriptors: []\n\ndomain: edge\n");
    let errors = load_errors(&[dir.path().to_path_buf()]);
    assert_eq!(errors.len(), 1, "{errors:#?}");
    let error = &errors[0];
    assert_eq!((error.file(), error.line), (Some(second.as_path()), 3));
    assert_eq!(error.field, "domain");
    assert!(
        error
            .message
            .contains(&format!("already defined in {}:2", first.display())),
        "{error}"
    );
}

#[test]
fn errors_in_several_files_are_all_reported() {
    let dir = tempfile::tempdir().expect("temp dir");
    let a = write(dir.path(), "a.yaml", "domain: a\nbogus: 1\n");
    let b = write(dir.path(), "b.yaml", "domain: ''\n");
    write(dir.path(), "c.yaml", "domain: c\n");
    let errors = load_errors(&[dir.path().to_path_buf()]);
    let found: Vec<(Option<&std::path::Path>, usize)> =
        errors.iter().map(|e| (e.file(), e.line)).collect();
    assert_eq!(found, [(Some(a.as_path()), 2), (Some(b.as_path()), 1)]);
}

#[test]
fn a_missing_path_is_an_error_naming_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let missing = dir.path().join("nope.yaml");
    let errors = load_errors(std::slice::from_ref(&missing));
    assert_eq!(errors.len(), 1);
    assert_eq!(errors[0].file(), Some(missing.as_path()));
    assert_eq!(errors[0].line, 0);
}

#[cfg(unix)]
#[test]
fn kubernetes_configmap_layout_skips_hidden_entries_and_follows_symlinks() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    let version = root.join("..2024_01_01_00_00_00.000000001");
    fs::create_dir(&version).expect("mkdir");
    write(&version, "edge.yaml", "domain: edge\n");
    write(&version, "broken.yaml", "not: [yaml");
    symlink("..2024_01_01_00_00_00.000000001", root.join("..data")).expect("symlink");
    symlink("..data/edge.yaml", root.join("edge.yaml")).expect("symlink");
    write(root, ".hidden.yaml", "not: [yaml");
    let rules = load(&[root.to_path_buf()]).unwrap_or_else(|e| panic!("{e}"));
    let domains: Vec<&str> = rules.domains.keys().map(String::as_str).collect();
    assert_eq!(domains, ["edge"]);
}

#[cfg(unix)]
#[test]
fn a_symlinked_file_is_followed_and_named_by_its_link() {
    use std::os::unix::fs::symlink;

    let dir = tempfile::tempdir().expect("temp dir");
    let elsewhere = tempfile::tempdir().expect("temp dir");
    write(elsewhere.path(), "real.txt", "domain: linked\nbogus: 1\n");
    let link = dir.path().join("linked.yaml");
    symlink(elsewhere.path().join("real.txt"), &link).expect("symlink");
    let errors = load_errors(&[dir.path().to_path_buf()]);
    assert_eq!(errors.len(), 1);
    assert_eq!(
        (errors[0].file(), errors[0].line),
        (Some(link.as_path()), 2)
    );

    write(elsewhere.path(), "real.txt", "domain: linked\n");
    let rules = load(&[link]).unwrap_or_else(|e| panic!("{e}"));
    assert!(rules.domain("linked").is_some());
}
