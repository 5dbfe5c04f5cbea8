//! Configuration errors: each names the file, the position and the field it concerns.

use std::fmt;
use std::path::PathBuf;

/// One problem in a configuration file.
///
/// `line` and `column` are 1-based and point at the offending YAML node; both are 0 only when
/// the error concerns a whole file or path (it cannot be read, it does not exist).
/// `field` is the dotted path of the offending field, e.g. `descriptors[0].rate_limit.unit`
/// (`yaml` for syntax errors, `file` for unreadable files).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{}:{}: {}: {}", file.display(), line, column, field, message)]
pub struct ConfigError {
    pub file: PathBuf,
    pub line: usize,
    pub column: usize,
    pub field: String,
    pub message: String,
}

/// Every problem found while loading a configuration, in file order and, within a file, in
/// source order. Displayed one error per line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigErrors(pub Vec<ConfigError>);

impl ConfigErrors {
    /// The errors, in file and source order.
    pub fn iter(&self) -> std::slice::Iter<'_, ConfigError> {
        self.0.iter()
    }

    /// Number of errors.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no errors (never the case for a returned `Err`).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

impl<'a> IntoIterator for &'a ConfigErrors {
    type Item = &'a ConfigError;
    type IntoIter = std::slice::Iter<'a, ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl IntoIterator for ConfigErrors {
    type Item = ConfigError;
    type IntoIter = std::vec::IntoIter<ConfigError>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(line: usize, message: &str) -> ConfigError {
        ConfigError {
            file: PathBuf::from("rules/edge.yaml"),
            line,
            column: 3,
            field: "descriptors[0].key".to_string(),
            message: message.to_string(),
        }
    }

    #[test]
    fn displays_file_line_column_field_and_message() {
        assert_eq!(
            error(4, "must not be empty").to_string(),
            "rules/edge.yaml:4:3: descriptors[0].key: must not be empty"
        );
    }

    #[test]
    fn displays_one_error_per_line() {
        let errors = ConfigErrors(vec![error(1, "a"), error(2, "b")]);
        assert_eq!(
            errors.to_string(),
            "rules/edge.yaml:1:3: descriptors[0].key: a\nrules/edge.yaml:2:3: descriptors[0].key: b"
        );
    }
}
