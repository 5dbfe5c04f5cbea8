//! docs/migration.md answers every envoyproxy/ratelimit variable that ratelimitd reads: one row
//! each in its table, and no row for a variable ratelimitd does not know.

use std::collections::BTreeSet;

use ratelimitd::envoyproxy_env::VARIABLES;

#[test]
fn the_migration_table_has_one_row_per_upstream_variable() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/migration.md");
    let text = std::fs::read_to_string(path).expect("docs/migration.md");
    let mut rows = Vec::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("| `") else {
            continue;
        };
        let (name, rest) = rest
            .split_once("` |")
            .expect("a row: | `NAME` | default | answer |");
        let answer = rest.rsplit('|').nth(1).unwrap_or("").trim();
        assert!(!answer.is_empty(), "{name} has no answer");
        rows.push(name.to_string());
    }
    let documented: BTreeSet<&str> = rows.iter().map(String::as_str).collect();
    assert_eq!(documented.len(), rows.len(), "a variable has two rows");
    let known: BTreeSet<&str> = VARIABLES.iter().copied().collect();
    let missing: Vec<_> = known.difference(&documented).collect();
    let unknown: Vec<_> = documented.difference(&known).collect();
    assert!(missing.is_empty(), "variables without a row: {missing:?}");
    assert!(
        unknown.is_empty(),
        "rows for unknown variables: {unknown:?}"
    );
}
