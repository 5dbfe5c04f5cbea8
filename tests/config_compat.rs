//! envoyproxy/ratelimit's own configuration fixtures (`../shared/compat/envoyproxy-ratelimit/`):
//! its valid files must load with the same limits, its invalid ones must be rejected with a
//! position and a reason.

use std::fs;
use std::path::{Path, PathBuf};

use ratelimitd::config::{parse_domain, ConfigErrors};
use ratelimitd::limiter::{ConfiguredLimit, DomainRules, LimitKind, RuleSet, Unit};

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../shared/compat/envoyproxy-ratelimit")
        .join(dir);
    let entries = fs::read_dir(&dir)
        .unwrap_or_else(|error| panic!("fixture directory {} is missing: {error}", dir.display()));
    let mut files: Vec<PathBuf> = entries
        .map(|entry| entry.expect("listing fixtures").path())
        .filter(|path| {
            matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yaml" | "yml")
            )
        })
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no fixtures in {}", dir.display());
    files
}

fn name(path: &Path) -> &str {
    path.file_name()
        .and_then(|name| name.to_str())
        .expect("fixture names are UTF-8")
}

fn parse(path: &Path) -> Result<DomainRules, ConfigErrors> {
    let text = fs::read_to_string(path).expect("reading fixture");
    parse_domain(path, &text)
}

fn valid(file: &str) -> DomainRules {
    let path = fixtures("valid")
        .into_iter()
        .find(|path| name(path) == file)
        .unwrap_or_else(|| panic!("valid/{file} is missing"));
    parse(&path).unwrap_or_else(|errors| panic!("valid/{file} must load:\n{errors}"))
}

/// The limit a request descriptor gets, walking the tree as envoyproxy/ratelimit does: per
/// level exact value, then wildcards in config order, then key only; a limit applies only when
/// the walk ends on the last entry.
fn lookup<'r>(rules: &'r DomainRules, entries: &[(&str, &str)]) -> Option<&'r ConfiguredLimit> {
    let mut level: &RuleSet = &rules.root;
    for (index, (key, value)) in entries.iter().enumerate() {
        let node = level
            .exact
            .get(*key)
            .and_then(|values| values.get(*value))
            .or_else(|| {
                level
                    .wildcards
                    .iter()
                    .find(|w| w.key == *key && value.starts_with(w.prefix.as_str()))
                    .map(|w| &w.node)
            })
            .or_else(|| level.key_only.get(*key))?;
        if index + 1 == entries.len() {
            return node.limit.as_deref();
        }
        level = &node.children;
    }
    None
}

fn rate(limit: Option<&ConfiguredLimit>) -> (u32, Unit) {
    match limit.map(|limit| &limit.kind) {
        Some(LimitKind::Limited(rate)) => (rate.requests_per_unit, rate.unit),
        other => panic!("expected a counted limit, got {other:?}"),
    }
}

/// Valid fixtures that ratelimitd knowingly rejects: (file, line, field, message fragment).
/// Each must fail with exactly this one error; when support arrives, remove the entry.
const KNOWN_GAPS: &[(&str, usize, &str, &str)] = &[];

#[test]
fn every_valid_fixture_loads() {
    let mut failures = Vec::new();
    for path in fixtures("valid") {
        let gap = KNOWN_GAPS.iter().find(|gap| gap.0 == name(&path));
        match (parse(&path), gap) {
            (Ok(_), None) => {}
            (Err(errors), Some(&(_, line, field, fragment))) => {
                let matches = errors.len() == 1
                    && errors.0[0].line == line
                    && errors.0[0].field == field
                    && errors.0[0].message.contains(fragment);
                if !matches {
                    failures.push(format!("{}: unexpected errors:\n{errors}", name(&path)));
                }
            }
            (Err(errors), None) => failures.push(format!("{}:\n{errors}", name(&path))),
            (Ok(_), Some(_)) => failures.push(format!(
                "{} now loads: remove it from KNOWN_GAPS",
                name(&path)
            )),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn basic_config_limits() {
    let rules = valid("basic_config.yaml");
    assert_eq!(rules.domain, "test-domain");
    assert_eq!(
        rate(lookup(&rules, &[("key1", "value1"), ("subkey1", "x")])),
        (5, Unit::Second)
    );
    assert_eq!(
        rate(lookup(
            &rules,
            &[("key1", "value1"), ("subkey1", "subvalue1")]
        )),
        (10, Unit::Second)
    );
    assert!(lookup(&rules, &[("key1", "value1")]).is_none());
    assert!(lookup(&rules, &[("key1", "other"), ("subkey1", "x")]).is_none());
    assert_eq!(rate(lookup(&rules, &[("key2", "any")])), (20, Unit::Minute));
    assert_eq!(
        rate(lookup(&rules, &[("key2", "value2")])),
        (30, Unit::Minute)
    );
    assert!(lookup(&rules, &[("key2", "value3")]).is_none());
    let whitelisted = &rules.root.exact["key2"]["value3"];
    assert!(whitelisted.limit.is_none() && whitelisted.children == RuleSet::default());
    assert_eq!(rate(lookup(&rules, &[("key3", "x")])), (1, Unit::Hour));
    let key4 = lookup(&rules, &[("key4", "x")]);
    assert_eq!(rate(key4), (1, Unit::Day));
    assert_eq!(
        key4.and_then(|limit| limit.name.as_deref()),
        Some("key4_rate_limit")
    );
    assert_eq!(rate(lookup(&rules, &[("key5", "value5")])), (15, Unit::Day));
    assert_eq!(
        rate(lookup(
            &rules,
            &[("key5", "value5"), ("subkey5", "subvalue5")]
        )),
        (25, Unit::Day)
    );
    let key6 = lookup(&rules, &[("key6", "x")]).expect("key6 has a limit");
    assert_eq!(key6.kind, LimitKind::Unlimited);
    let key7 = lookup(&rules, &[("key7", "x")]).expect("key7 has a limit");
    assert_eq!(rate(Some(key7)), (70, Unit::Minute));
    assert!(key7.detailed_metric && !key7.shadow_mode);
    assert_eq!(
        lookup(&rules, &[("key1", "value1"), ("subkey1", "subvalue1")]).map(|l| l.path.as_str()),
        Some("test-domain.key1_value1.subkey1_subvalue1")
    );
    assert_eq!(
        lookup(&rules, &[("key2", "any")]).map(|l| l.path.as_str()),
        Some("test-domain.key2")
    );
}

#[test]
fn shadowmode_config_flags_the_nodes_that_set_it() {
    let rules = valid("shadowmode_config.yaml");
    let shadow = |entries: &[(&str, &str)]| lookup(&rules, entries).map(|limit| limit.shadow_mode);
    assert_eq!(shadow(&[("key1", "value1"), ("subkey1", "x")]), Some(false));
    assert_eq!(
        shadow(&[("key1", "value1"), ("subkey1", "subvalue1")]),
        Some(true)
    );
    assert_eq!(shadow(&[("key2", "x")]), Some(true));
    assert_eq!(shadow(&[("key2", "value2")]), Some(false));
}

#[test]
fn wildcard_config_prefix_matches_only_trailing_stars() {
    let rules = valid("wildcard.yaml");
    assert_eq!(rate(lookup(&rules, &[("wild", "foo")])), (20, Unit::Minute));
    assert_eq!(
        rate(lookup(&rules, &[("wild", "foobar")])),
        (20, Unit::Minute)
    );
    assert!(lookup(&rules, &[("wild", "fo")]).is_none());
    assert_eq!(
        rate(lookup(&rules, &[("noWild", "foo")])),
        (20, Unit::Minute)
    );
    assert!(lookup(&rules, &[("noWild", "foobar")]).is_none());
    assert_eq!(rate(lookup(&rules, &[("noVal", "x")])), (20, Unit::Minute));
    assert!(lookup(&rules, &[("midWild", "barab")]).is_none());
    assert_eq!(
        rate(lookup(&rules, &[("midWild", "bar*b")])),
        (20, Unit::Minute)
    );
    assert!(lookup(&rules, &[("multiWild", "foo1bar2baz")]).is_none());
    assert_eq!(
        rate(lookup(&rules, &[("nestedWild", "val1"), ("wild", "goose")])),
        (20, Unit::Minute)
    );
    assert!(lookup(&rules, &[("nestedWild", "val1"), ("wild", "foo")]).is_none());
}

#[test]
fn config_yaml_limits() {
    let rules = valid("config.yaml");
    assert_eq!(rules.domain, "mongo_cps");
    assert_eq!(
        rate(lookup(&rules, &[("database", "users")])),
        (500, Unit::Second)
    );
    assert_eq!(
        rate(lookup(&rules, &[("database", "default")])),
        (500, Unit::Second)
    );
    assert!(lookup(&rules, &[("database", "other")]).is_none());
}

/// Every invalid fixture with the line and a fragment of the reason it must be rejected for.
const INVALID: &[(&str, usize, &str)] = &[
    ("bad_limit_unit.yaml", 6, "unknown unit `foo`"),
    ("bad_yaml.yaml", 1, "invalid YAML"),
    ("duplicate_key.yaml", 6, "duplicate descriptor"),
    ("empty_domain.yaml", 1, "`domain`"),
    ("empty_key.yaml", 3, "`key`"),
    ("misspelled_key.yaml", 5, "unknown field `ratelimit`"),
    ("misspelled_key2.yaml", 7, "unknown field `requestsperunit`"),
    ("non_map_list.yaml", 3, "must be a map"),
    ("non_string_key.yaml", 1, "keys must be strings"),
    ("replaces_empty.yaml", 10, "must not be empty"),
    ("replaces_self.yaml", 10, "cannot replace itself"),
    (
        "unlimited_with_unit.yaml",
        6,
        "cannot be combined with `unlimited: true`",
    ),
];

#[test]
fn every_invalid_fixture_is_rejected_with_line_and_reason() {
    let mut failures = Vec::new();
    for path in fixtures("invalid") {
        let file = name(&path);
        let Some(&(_, line, reason)) = INVALID.iter().find(|entry| entry.0 == file) else {
            failures.push(format!(
                "{file}: new fixture, add its expected error to INVALID"
            ));
            continue;
        };
        match parse(&path) {
            Ok(rules) => failures.push(format!("{file}: accepted as {rules:?}")),
            Err(errors) => {
                assert!(errors
                    .iter()
                    .all(|error| error.line > 0 && error.file == path));
                if !errors
                    .iter()
                    .any(|error| error.line == line && error.message.contains(reason))
                {
                    failures.push(format!(
                        "{file}: expected line {line} mentioning {reason:?}, got:\n{errors}"
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Not required yet: reports which `later/` fixtures load (run with `--nocapture` to see).
#[test]
fn later_fixtures_report() {
    for path in fixtures("later") {
        match parse(&path) {
            Ok(rules) => println!("later/{}: loads (domain {})", name(&path), rules.domain),
            Err(errors) => println!("later/{}: rejected:\n{errors}", name(&path)),
        }
    }
}
