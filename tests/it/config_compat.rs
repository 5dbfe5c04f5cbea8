//! Configurations in envoyproxy/ratelimit's schema (`tests/fixtures/compat/`), one for each kind
//! of file in envoyproxy/ratelimit's own fixtures: the valid files must load with the limits that
//! schema gives them, the invalid ones must be rejected with a position and a reason.
//! `scripts/compat-check.sh` runs the same checks on envoyproxy/ratelimit's files themselves.

use std::fs;
use std::path::{Path, PathBuf};

use ratelimitd::config::{
    load, load_with, parse_domain, ConfigErrors, DirectoryLayout, LoadOptions,
};
use ratelimitd::limiter::matcher::find_limit;
use ratelimitd::limiter::{
    ConfiguredLimit, Consistency, DomainRules, Entry, LimitKind, MetadataValue, RuleSet, Unit,
};

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compat")
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

/// The limit a request descriptor gets, as the server's matcher walks the tree (per level exact
/// value, then wildcards in config order, then key only; a limit applies only when the walk ends
/// on the last entry).
fn lookup<'r>(rules: &'r DomainRules, entries: &[(&str, &str)]) -> Option<&'r ConfiguredLimit> {
    let entries: Vec<Entry> = entries
        .iter()
        .map(|(key, value)| Entry {
            key: key.to_string(),
            value: value.to_string(),
        })
        .collect();
    find_limit(rules, &entries).map(|limit| limit.as_ref())
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
fn nested_limits() {
    let rules = valid("nested_limits.yaml");
    assert_eq!(rules.domain, "storefront");
    assert_eq!(
        rate(lookup(&rules, &[("region", "eu"), ("shop", "x")])),
        (8, Unit::Second)
    );
    assert_eq!(
        rate(lookup(&rules, &[("region", "eu"), ("shop", "flagship")])),
        (12, Unit::Second)
    );
    assert!(lookup(&rules, &[("region", "eu")]).is_none());
    assert!(lookup(&rules, &[("region", "us"), ("shop", "x")]).is_none());
    assert_eq!(
        rate(lookup(&rules, &[("client", "any")])),
        (40, Unit::Minute)
    );
    assert_eq!(
        rate(lookup(&rules, &[("client", "partner")])),
        (90, Unit::Minute)
    );
    assert!(lookup(&rules, &[("client", "monitoring")]).is_none());
    let whitelisted = &rules.root.exact["client"]["monitoring"];
    assert!(whitelisted.limit.is_none() && whitelisted.children == RuleSet::default());
    assert_eq!(rate(lookup(&rules, &[("login", "x")])), (2, Unit::Hour));
    let export = lookup(&rules, &[("export", "x")]);
    assert_eq!(rate(export), (3, Unit::Day));
    assert_eq!(
        export.and_then(|limit| limit.name.as_deref()),
        Some("nightly_export")
    );
    assert_eq!(
        rate(lookup(&rules, &[("coupon", "spring")])),
        (40, Unit::Day)
    );
    assert_eq!(
        rate(lookup(&rules, &[("coupon", "spring"), ("customer", "vip")])),
        (60, Unit::Day)
    );
    let healthcheck = lookup(&rules, &[("healthcheck", "x")]).expect("healthcheck has a limit");
    assert_eq!(healthcheck.kind, LimitKind::Unlimited);
    let search = lookup(&rules, &[("search", "x")]).expect("search has a limit");
    assert_eq!(rate(Some(search)), (45, Unit::Minute));
    assert!(search.detailed_metric && !search.shadow_mode);
    assert_eq!(
        lookup(&rules, &[("region", "eu"), ("shop", "flagship")]).map(|l| l.path.as_str()),
        Some("storefront.region_eu.shop_flagship")
    );
    assert_eq!(
        lookup(&rules, &[("client", "any")]).map(|l| l.path.as_str()),
        Some("storefront.client")
    );
}

#[test]
fn shadow_mode_flags_the_nodes_that_set_it() {
    let rules = valid("shadow_mode.yaml");
    let shadow = |entries: &[(&str, &str)]| lookup(&rules, entries).map(|limit| limit.shadow_mode);
    assert_eq!(shadow(&[("team", "payments"), ("job", "x")]), Some(false));
    assert_eq!(
        shadow(&[("team", "payments"), ("job", "reconcile")]),
        Some(true)
    );
    assert_eq!(shadow(&[("endpoint", "x")]), Some(true));
    assert_eq!(shadow(&[("endpoint", "upload")]), Some(false));
}

#[test]
fn wildcards_match_stars_anywhere() {
    let rules = valid("wildcards.yaml");
    let limit = |entries: &[(&str, &str)]| lookup(&rules, entries).map(|l| rate(Some(l)).0);
    assert_eq!(limit(&[("object", "img")]), Some(30));
    assert_eq!(limit(&[("object", "img_logo")]), Some(30));
    assert_eq!(limit(&[("object", "im")]), None);
    assert_eq!(limit(&[("plain", "img")]), Some(32));
    assert_eq!(limit(&[("plain", "img_logo")]), None);
    assert_eq!(limit(&[("anyvalue", "x")]), Some(34));
    assert_eq!(limit(&[("infix", "img_v2")]), Some(36));
    assert_eq!(limit(&[("infix", "imgv2")]), Some(36));
    assert_eq!(limit(&[("infix", "img*v2")]), Some(36));
    assert_eq!(limit(&[("infix", "img_v2_beta")]), None);
    assert_eq!(limit(&[("infix", "pre_img_v2")]), None);
    assert_eq!(limit(&[("multi", "a1b2c")]), Some(38));
    assert_eq!(limit(&[("multi", "abc")]), Some(38));
    assert_eq!(limit(&[("multi", "acb")]), None);
    assert_eq!(limit(&[("multi", "a1b2")]), None);
    assert_eq!(limit(&[("host", "img.cdn.example")]), Some(42));
    assert_eq!(limit(&[("host", ".cdn.example")]), Some(42));
    assert_eq!(limit(&[("host", "cdn.example")]), None);
    assert_eq!(limit(&[("host", "edge.cdn.example")]), Some(44));
    assert_eq!(
        limit(&[("tenant", "acme"), ("object", "thumb_small")]),
        Some(40)
    );
    assert_eq!(
        limit(&[("tenant", "acme"), ("object", "thumb-2x-small")]),
        Some(40)
    );
    assert_eq!(
        limit(&[("tenant", "acme"), ("object", "thumb_large")]),
        None
    );
    assert_eq!(limit(&[("tenant", "acme"), ("object", "img_logo")]), None);
    let patterns: Vec<&str> = rules
        .root
        .wildcards
        .iter()
        .map(|w| w.pattern.as_str())
        .collect();
    assert_eq!(patterns, ["img*", "img*v2", "a*b**c", "*.cdn.example"]);
}

#[test]
fn two_values_limits() {
    let rules = valid("two_values.yaml");
    assert_eq!(rules.domain, "sql_qps");
    assert_eq!(
        rate(lookup(&rules, &[("table", "orders")])),
        (250, Unit::Second)
    );
    assert_eq!(
        rate(lookup(&rules, &[("table", "invoices")])),
        (250, Unit::Second)
    );
    assert!(lookup(&rules, &[("table", "other")]).is_none());
}

/// Every invalid fixture with the line and a fragment of the reason it must be rejected for.
const INVALID: &[(&str, usize, &str)] = &[
    ("broken_yaml.yaml", 2, "invalid YAML"),
    ("descriptors_not_maps.yaml", 6, "must be a map"),
    ("duplicate_descriptor.yaml", 15, "duplicate descriptor"),
    ("integer_key.yaml", 5, "keys must be strings"),
    ("missing_domain.yaml", 2, "`domain`"),
    ("missing_key.yaml", 7, "`key`"),
    (
        "misspelled_rate_limit.yaml",
        6,
        "unknown field `rate_limits`",
    ),
    (
        "misspelled_requests_per_unit.yaml",
        8,
        "unknown field `request_per_unit`",
    ),
    ("replaces_own_name.yaml", 10, "cannot replace itself"),
    ("replaces_without_name.yaml", 11, "must not be empty"),
    ("unknown_unit.yaml", 7, "unknown unit `decade`"),
    (
        "unlimited_with_rate.yaml",
        6,
        "cannot be combined with `unlimited: true`",
    ),
];

#[test]
fn every_invalid_fixture_is_rejected_with_line_and_reason() {
    let files = fixtures("invalid");
    let mut failures: Vec<String> = INVALID
        .iter()
        .filter(|entry| !files.iter().any(|path| name(path) == entry.0))
        .map(|entry| format!("{}: listed in INVALID but missing", entry.0))
        .collect();
    for path in files {
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
                    .all(|error| error.line > 0 && error.file() == Some(&*path)));
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

fn later(file: &str) -> DomainRules {
    let path = compat_dir("later").join(file);
    parse(&path).unwrap_or_else(|errors| panic!("later/{file} must load:\n{errors}"))
}

fn compat_dir(dir: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/compat")
        .join(dir)
}

const MERGE: LoadOptions = LoadOptions {
    merge_domains: true,
    layout: DirectoryLayout::YamlFiles,
    default_consistency: Consistency::Exact,
};

#[test]
fn every_later_fixture_loads_alone() {
    let failures: Vec<String> = fixtures("later")
        .iter()
        .filter_map(|path| {
            parse(path)
                .err()
                .map(|errors| format!("{}:\n{errors}", name(path)))
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn share_threshold_marks_its_wildcards() {
    let rules = later("share_threshold.yaml");
    let shared = |set: &RuleSet| -> Vec<(String, bool)> {
        set.wildcards
            .iter()
            .map(|w| (w.pattern.to_string(), w.share_threshold))
            .collect()
    };
    assert_eq!(
        shared(&rules.root),
        [
            ("logs-*".to_string(), true),
            ("tmp-*".to_string(), false),
            ("20*-full".to_string(), true),
            ("eu-*".to_string(), true),
        ]
    );
    assert_eq!(
        shared(&rules.root.exact["project"]["alpha"].children),
        [("cache-*".to_string(), true)]
    );
    assert_eq!(
        rate(lookup(&rules, &[("archive", "2031-full")])),
        (5, Unit::Hour)
    );
    assert!(lookup(&rules, &[("archive", "2031-delta")]).is_none());
    assert_eq!(
        rate(lookup(&rules, &[("bucket", "logs-audit")])),
        (2, Unit::Hour)
    );
    assert_eq!(
        rate(lookup(
            &rules,
            &[("region", "eu-west"), ("bucket", "b-raw")]
        )),
        (2, Unit::Hour)
    );
}

#[test]
fn quota_mode_and_metadata_reach_their_limits() {
    let rules = later("quota_mode.yaml");
    let free = lookup(&rules, &[("plan", "free")]).expect("plan=free");
    assert!(free.quota_mode && !free.shadow_mode);
    let paid = lookup(&rules, &[("plan", "paid")]).expect("plan=paid");
    assert!(!paid.quota_mode);
    let trial = lookup(&rules, &[("trial", "x")]).expect("trial");
    assert!(trial.quota_mode && trial.shadow_mode);
    let metadata = paid.metadata.as_deref().expect("paid has metadata");
    assert_eq!(metadata["owner"], MetadataValue::String("sales".into()));

    let rules = later("metadata.yaml");
    let listing = lookup(&rules, &[("listing", "x")]).expect("listing");
    let metadata = listing.metadata.as_deref().expect("listing has metadata");
    let MetadataValue::Map(quota) = &metadata["quota"] else {
        panic!("quota is a map: {metadata:?}");
    };
    assert_eq!(quota["tier"], MetadataValue::String("bronze".into()));
    assert_eq!(
        metadata["tags"],
        MetadataValue::List(vec![
            MetadataValue::String("new".into()),
            MetadataValue::String("featured".into())
        ])
    );
    let sku = lookup(&rules, &[("brand", "acme"), ("sku", "1")]).expect("sku");
    assert!(sku.metadata.is_some());
}

#[test]
fn one_domain_in_several_files_is_refused_naming_both_unless_merged() {
    let dir = compat_dir("later");
    let errors = load(std::slice::from_ref(&dir)).expect_err("warehouse is in three files");
    assert_eq!(errors.len(), 2, "{errors}");
    let first = dir.join("domain_without_descriptors.yaml");
    for (error, (file, line)) in errors
        .iter()
        .zip([("merge_part_one.yaml", 4), ("merge_part_two.yaml", 3)])
    {
        assert_eq!(error.file(), Some(dir.join(file).as_path()), "{error}");
        assert_eq!(
            (error.line, error.field.as_str()),
            (line, "domain"),
            "{error}"
        );
        assert!(
            error
                .message
                .contains(&format!("already defined in {}:3", first.display())),
            "{error}"
        );
    }

    let rules = load_with(std::slice::from_ref(&dir), MERGE).expect("merged");
    let warehouse = rules.domain("warehouse").expect("warehouse");
    assert_eq!(
        rate(lookup(warehouse, &[("dock", "north")])),
        (14, Unit::Minute)
    );
    assert_eq!(
        rate(lookup(warehouse, &[("dock", "south")])),
        (16, Unit::Minute)
    );
    assert_eq!(
        rate(lookup(warehouse, &[("gate", "g12")])),
        (18, Unit::Minute),
        "g* (first file) before g1* (second file)"
    );
    assert!(rules.domain("uploads").is_some() && rules.domain("catalog").is_some());
}

#[test]
fn a_descriptor_in_two_merged_files_is_refused_naming_both() {
    let dir = compat_dir("merge_clash");
    let errors = load_with(std::slice::from_ref(&dir), MERGE).expect_err("dock=north twice");
    assert_eq!(errors.len(), 1, "{errors}");
    let error = &errors.0[0];
    assert_eq!(
        (
            error.file().map(|file| file.to_path_buf()),
            error.line,
            error.field.as_str()
        ),
        (Some(dir.join("two.yaml")), 4, "descriptors[0]")
    );
    assert!(
        error.message.contains(&format!(
            "key `dock` and value `north` is already defined at {}:10",
            dir.join("one.yaml").display()
        )),
        "{error}"
    );
}
