//! YAML configuration: files and directories to validated [`limiter::Rules`], with every error
//! reported as `file:line:column: field: message`.
//!
//! [`yaml`] builds a positioned YAML tree, [`schema`] validates it into one domain's rules, and
//! this module finds the files and assembles the domains.

mod error;
mod limits;
pub mod reload;
mod schema;
mod yaml;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::limiter;

pub use error::{ConfigError, ConfigErrors};
pub use limits::Limits;

use yaml::Pos;

/// Loads every path: a file, or a directory whose top-level `*.yaml`/`*.yml` files are loaded
/// (sorted by name; names starting with `.` are skipped so Kubernetes ConfigMap `..data`
/// directories are ignored; symlinks are followed).
///
/// Collects all errors from all files (does not stop at the first). One domain per file; the
/// same domain in two files is an error naming both files. A directory without configuration
/// files contributes no domains.
pub fn load(paths: &[PathBuf]) -> Result<limiter::Rules, ConfigErrors> {
    let mut errors = Vec::new();
    let mut rules = limiter::Rules::default();
    let mut origins: HashMap<String, (PathBuf, Pos)> = HashMap::new();
    for file in config_files(paths, &mut errors) {
        let text = match fs::read_to_string(&file) {
            Ok(text) => text,
            Err(error) => {
                errors.push(file_error(&file, format!("cannot read file: {error}")));
                continue;
            }
        };
        let parsed = match parse_file(&file, &text, Limits::DEFAULT_MAX_ALIAS_BYTES) {
            Ok(parsed) => parsed,
            Err(file_errors) => {
                errors.extend(file_errors);
                continue;
            }
        };
        let domain = parsed.rules.domain.clone();
        if let Some((first_file, first_pos)) = origins.get(&domain) {
            errors.push(ConfigError {
                file: file.clone(),
                line: parsed.domain_pos.line,
                column: parsed.domain_pos.column,
                field: "domain".to_string(),
                message: format!(
                    "domain `{domain}` is already defined in {}:{}",
                    first_file.display(),
                    first_pos.line
                ),
            });
            continue;
        }
        origins.insert(domain.clone(), (file, parsed.domain_pos));
        rules.domains.insert(domain, parsed.rules);
    }
    if errors.is_empty() {
        Ok(rules)
    } else {
        Err(ConfigErrors(errors))
    }
}

/// Parses one file's text (used by [`load`] and by tests). `origin` is the file name used in
/// errors. Returns every error found in the file, in source order.
pub fn parse_domain(origin: &Path, text: &str) -> Result<limiter::DomainRules, ConfigErrors> {
    parse_file(origin, text, Limits::DEFAULT_MAX_ALIAS_BYTES)
        .map(|parsed| parsed.rules)
        .map_err(ConfigErrors)
}

fn parse_file(
    origin: &Path,
    text: &str,
    max_alias_bytes: u64,
) -> Result<schema::ParsedDomain, Vec<ConfigError>> {
    let root =
        yaml::parse(text, max_alias_bytes).map_err(|error| vec![yaml_error(origin, error)])?;
    schema::domain_rules(origin, &root)
}

/// A YAML error as a configuration error. The alias budget's message stands alone; others are
/// the parser's, marked as such.
fn yaml_error(origin: &Path, error: yaml::SyntaxError) -> ConfigError {
    let message = if error.alias_budget {
        error.message
    } else {
        format!("invalid YAML: {}", error.message)
    };
    ConfigError {
        file: origin.to_path_buf(),
        line: error.pos.line,
        column: error.pos.column,
        field: "yaml".to_string(),
        message,
    }
}

/// The files named by `paths`, in order, each directory expanded to its configuration files
/// sorted by name. Paths that do not exist or cannot be listed are reported in `errors`.
fn config_files(paths: &[PathBuf], errors: &mut Vec<ConfigError>) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for path in paths {
        let metadata = match fs::metadata(path) {
            Ok(metadata) => metadata,
            Err(error) => {
                errors.push(file_error(
                    path,
                    format!("cannot read configuration: {error}"),
                ));
                continue;
            }
        };
        if !metadata.is_dir() {
            files.push(path.clone());
            continue;
        }
        let entries = match fs::read_dir(path) {
            Ok(entries) => entries,
            Err(error) => {
                errors.push(file_error(path, format!("cannot list directory: {error}")));
                continue;
            }
        };
        let mut found = Vec::new();
        for entry in entries {
            let entry = match entry {
                Ok(entry) => entry,
                Err(error) => {
                    errors.push(file_error(path, format!("cannot list directory: {error}")));
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
                continue;
            }
            let file = entry.path();
            match fs::metadata(&file) {
                Ok(metadata) if metadata.is_dir() => {}
                Ok(_) => found.push(file),
                Err(error) => errors.push(file_error(&file, format!("cannot read file: {error}"))),
            }
        }
        found.sort();
        files.extend(found);
    }
    files
}

fn file_error(path: &Path, message: String) -> ConfigError {
    ConfigError {
        file: path.to_path_buf(),
        line: 0,
        column: 0,
        field: "file".to_string(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_errors_name_the_file_and_the_parser_position() {
        let origin = Path::new("rules/edge.yaml");
        let errors = parse_domain(
            origin,
            "domain: edge\ndescriptors:\n  - key: a\n   value: b\n",
        )
        .expect_err("bad indentation");
        assert_eq!(errors.len(), 1, "{errors}");
        let error = &errors.0[0];
        assert_eq!((error.file.as_path(), error.line), (origin, 4), "{error}");
        assert_eq!(error.field, "yaml");
        assert!(error.message.starts_with("invalid YAML: "), "{error}");
        assert!(
            error.to_string().starts_with("rules/edge.yaml:4:"),
            "{error}"
        );
    }

    #[test]
    fn an_unterminated_quote_is_a_syntax_error() {
        let errors = parse_domain(Path::new("q.yaml"), "'''\n").expect_err("unterminated");
        assert_eq!(errors.0[0].field, "yaml");
        assert!(errors.0[0].line >= 1);
    }

    #[test]
    fn schema_errors_name_the_origin() {
        let errors = parse_domain(Path::new("x.yaml"), "domain: d\nbogus: 1\n").expect_err("bogus");
        assert_eq!(
            errors.to_string(),
            "x.yaml:2:1: bogus: unknown field `bogus`; expected one of: domain, descriptors"
        );
    }
}
