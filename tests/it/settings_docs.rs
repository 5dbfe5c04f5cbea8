//! The documentation's tables of settings say what the settings table (`ratelimitd::settings`)
//! declares, both ways:
//!
//! - every setting has a row in a table of docs/ naming its flag and its variable, and that
//!   row shows its default (`on`/`off` stand for `true`/`false`; an empty default shows none);
//! - every flag named in docs/operations/command-line.md's table is a setting, and each of its
//!   rows names the variables of the flags it names (or elides them with `...` after the first);
//! - docs/migration.md's row of every upstream variable a setting copies names that setting's
//!   flag (that every upstream variable has a row is `docs_migration::`'s check).
//!
//! (That every flag and `RATELIMITD_*` variable named anywhere exists is `docs::`'s check.)

use ratelimitd::settings::{self, Upstream};
use testkit::repo_root;

/// Every Markdown table row of docs/ and the README, with its file.
fn table_rows() -> Vec<(String, String)> {
    let root = repo_root();
    let mut files = vec![root.join("README.md")];
    let mut directories = vec![root.join("docs")];
    while let Some(directory) = directories.pop() {
        for entry in std::fs::read_dir(&directory).expect("docs/") {
            let path = entry.expect("an entry").path();
            if path.is_dir() {
                directories.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    let mut rows = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).expect("a Markdown file");
        let name = file
            .strip_prefix(&root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for line in text.lines().filter(|line| line.starts_with('|')) {
            rows.push((name.clone(), line.to_owned()));
        }
    }
    rows
}

/// Whether `row` names `--flag` in code (`` `--flag` ``, `` `--flag[=BOOL]` ``, `` `--flag N` ``).
fn names_flag(row: &str, flag: &str) -> bool {
    let code = format!("`--{flag}");
    row.match_indices(&code).any(|(at, _)| {
        let after = &row[at + code.len()..];
        after.starts_with('`')
            || after.starts_with("[=")
            || after.starts_with('=')
            || after.starts_with(' ')
    })
}

fn shows_default(row: &str, default: &str) -> bool {
    match default {
        "" => true,
        "true" => row.contains("`true`") || row.contains(" on"),
        "false" => row.contains("`false`") || row.contains("off"),
        default => row.contains(&format!("`{default}`")),
    }
}

#[test]
fn every_setting_has_a_row_with_its_flag_variable_and_default() {
    let rows = table_rows();
    let mut problems = Vec::new();
    for setting in settings::all() {
        let rows: Vec<&(String, String)> = rows
            .iter()
            .filter(|(_, row)| names_flag(row, setting.flag) && row.contains(setting.variable))
            .collect();
        if rows.is_empty() {
            problems.push(format!(
                "--{}: no table row names it with {}",
                setting.flag, setting.variable
            ));
            continue;
        }
        let Some(default) = setting.default.text() else {
            continue;
        };
        if !rows.iter().any(|(_, row)| shows_default(row, &default)) {
            let files: Vec<&str> = rows.iter().map(|(file, _)| file.as_str()).collect();
            problems.push(format!(
                "--{}: its rows ({files:?}) do not show its default `{default}`",
                setting.flag
            ));
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_command_line_table_names_only_settings_with_their_variables() {
    let rows = table_rows();
    let mut problems = Vec::new();
    for (_, row) in rows
        .iter()
        .filter(|(file, _)| file.ends_with("command-line.md"))
    {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(flags), Some(variables)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let flags = flags
            .split('`')
            .skip(1)
            .step_by(2)
            .filter_map(|code| code.strip_prefix("--"))
            .map(|flag| flag.split(['[', ' ', '=']).next().unwrap_or(flag))
            // `--tracing-...`: the flags of the page the row links to.
            .filter(|flag| !flag.ends_with("..."));
        for flag in flags {
            // `--no-X` turns the setting `--X` off.
            let setting = settings::by_flag(flag)
                .or_else(|| flag.strip_prefix("no-").and_then(settings::by_flag));
            match setting {
                None => problems.push(format!("--{flag} is no setting: {row}")),
                Some(setting) if setting.flag == flag && !variables.contains(setting.variable) => {
                    problems.push(format!("--{flag}'s row does not name {}", setting.variable))
                }
                Some(_) => {}
            }
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}

#[test]
fn the_migration_table_names_the_flag_of_every_variable_a_setting_copies() {
    let text = std::fs::read_to_string(repo_root().join("docs/migration.md")).expect("migration");
    let row_of = |variable: &str| {
        let start = format!("| `{variable}` |");
        text.lines()
            .find(|line| line.starts_with(&start))
            .map(str::to_owned)
    };
    let mut problems = Vec::new();
    for setting in settings::all() {
        let Upstream::Variable(variable, _) = setting.upstream else {
            continue;
        };
        match row_of(variable) {
            Some(row) if names_flag(&row, setting.flag) => {}
            Some(_) => problems.push(format!("{variable}'s row does not name --{}", setting.flag)),
            None => problems.push(format!("{variable} has no row")),
        }
    }
    assert!(problems.is_empty(), "{problems:#?}");
}
