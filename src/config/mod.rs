//! YAML configuration: files and directories to validated [`limiter::Rules`], with every error
//! reported as `file:line:column: field: message`.
//!
//! [`file`] reads one file within the [`Limits`], [`yaml`] builds a positioned YAML tree,
//! [`schema`] validates it into one domain's rules, and this module finds the files and assembles
//! the domains. [`reload`] watches them.

mod error;
mod file;
mod fingerprint;
mod limits;
pub mod reload;
mod schema;
mod stats;
mod yaml;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::limiter;

pub use error::{ConfigError, ConfigErrors};
pub use limits::Limits;
pub use stats::{ConfigLimit, LoadStats};

use yaml::Pos;

/// Loads every path with the default [`Limits`] (see [`Loader::load`]).
pub fn load(paths: &[PathBuf]) -> Result<limiter::Rules, ConfigErrors> {
    Loader::new(Limits::default()).load(paths)
}

/// Loads configurations within its [`Limits`], counting what it does in its [`LoadStats`].
#[derive(Debug, Default)]
pub struct Loader {
    limits: Limits,
    stats: LoadStats,
}

impl Loader {
    pub fn new(limits: Limits) -> Loader {
        Loader {
            limits,
            stats: LoadStats::default(),
        }
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// What this loader (and the change checks using it) did so far.
    pub fn stats(&self) -> &LoadStats {
        &self.stats
    }

    /// Loads every path: a file, or a directory whose top-level `*.yaml`/`*.yml` files are
    /// loaded (sorted by name; names starting with `.` are skipped so Kubernetes ConfigMap
    /// `..data` directories are ignored; symlinks are followed; subdirectories are not read).
    ///
    /// Collects all errors from all files (does not stop at the first). One domain per file; the
    /// same domain in two files is an error naming both files. A directory without configuration
    /// files contributes no domains. A configuration file that is not a regular file (a FIFO, a
    /// device, a socket, or a symlink to one), or is larger than [`Limits::max_file_bytes`], is an
    /// error naming it, like an unreadable file: it may hold limits the operator expects, so the
    /// configuration is not loaded without it. Neither is ever opened.
    pub fn load(&self, paths: &[PathBuf]) -> Result<limiter::Rules, ConfigErrors> {
        let mut errors = Vec::new();
        let mut rules = limiter::Rules::default();
        let mut origins: HashMap<String, (PathBuf, Pos)> = HashMap::new();
        for file in config_files(paths, &mut errors) {
            let text = match self.read_text(&file) {
                Ok(text) => text,
                Err(error) => {
                    errors.push(file_error(&file, error.to_string()));
                    continue;
                }
            };
            let parsed = match self.parse_file(&file, &text) {
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

    fn read_text(&self, path: &Path) -> Result<String, file::FileError> {
        let result = file::read_text(path, self.limits.max_file_bytes);
        match &result {
            Ok(_) | Err(file::FileError::NotUtf8) => self.stats.record_read(),
            Err(error) => {
                if let Some(limit) = error.limit() {
                    self.stats.record_rejection(limit.into());
                }
            }
        }
        result
    }

    fn parse_file(
        &self,
        origin: &Path,
        text: &str,
    ) -> Result<schema::ParsedDomain, Vec<ConfigError>> {
        self.stats.record_parse();
        let root = yaml::parse(text, self.limits.max_alias_bytes).map_err(|error| {
            if error.alias_budget {
                self.stats.record_rejection(ConfigLimit::AliasBytes);
            }
            vec![yaml_error(origin, error)]
        })?;
        schema::domain_rules(origin, &root)
    }
}

/// Parses one file's text with the default [`Limits`] (for tests and benchmarks). `origin` is the
/// file name used in errors. Returns every error found in the file, in source order.
pub fn parse_domain(origin: &Path, text: &str) -> Result<limiter::DomainRules, ConfigErrors> {
    Loader::default()
        .parse_file(origin, text)
        .map(|parsed| parsed.rules)
        .map_err(ConfigErrors)
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
