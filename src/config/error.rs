//! Configuration errors: each names where it is (a file and position, or an xDS resource) and
//! the field it concerns.

use std::fmt;
use std::path::{Path, PathBuf};

/// Where a configuration came from: the origin every error of it names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Origin {
    /// A configuration file; its errors carry a line and column.
    File(PathBuf),
    /// A resource pushed by an xDS server, by its name; its errors carry the field path only
    /// (a protobuf message has no lines).
    Resource(String),
}

impl Origin {
    /// The file, when the origin is one.
    pub fn file(&self) -> Option<&Path> {
        match self {
            Origin::File(path) => Some(path),
            Origin::Resource(_) => None,
        }
    }

    /// This origin at `line`, as messages that point at another definition name it:
    /// `path:line` for a file, `resource name` for a resource.
    pub fn at_line(&self, line: usize) -> String {
        match self {
            Origin::File(path) => format!("{}:{line}", path.display()),
            Origin::Resource(name) => format!("resource {name}"),
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Origin::File(path) => write!(f, "{}", path.display()),
            Origin::Resource(name) => write!(f, "resource {name}"),
        }
    }
}

/// One problem in a configuration file or resource.
///
/// `line` and `column` are 1-based and point at the offending YAML node; both are 0 only when
/// the error concerns a whole file or path (it cannot be read, it does not exist). For a
/// [`Origin::Resource`] they only order the errors (the resource's fields in message order) and
/// are not displayed.
/// `field` is the dotted path of the offending field, e.g. `descriptors[0].rate_limit.unit`
/// (`yaml` for syntax errors, `file` for unreadable files, `resource` for undecodable resources).
///
/// Displayed `file:line:column: field: message`, or `resource name: field: message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub origin: Origin,
    pub line: usize,
    pub column: usize,
    pub field: String,
    pub message: String,
}

impl ConfigError {
    /// The file the error is in, when it is in a file.
    pub fn file(&self) -> Option<&Path> {
        self.origin.file()
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.origin {
            Origin::File(path) => write!(
                f,
                "{}:{}:{}: {}: {}",
                path.display(),
                self.line,
                self.column,
                self.field,
                self.message
            ),
            Origin::Resource(name) => {
                write!(f, "resource {name}: {}: {}", self.field, self.message)
            }
        }
    }
}

impl std::error::Error for ConfigError {}

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

    /// The errors on one line, `; ` between them: how a log record carries them, one record
    /// per line (the `Display` of `ConfigErrors` puts one error per line, for `check`).
    pub fn one_line(&self) -> OneLine<'_> {
        OneLine(self)
    }

    fn write_joined(&self, f: &mut fmt::Formatter<'_>, separator: &str) -> fmt::Result {
        for (i, error) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(separator)?;
            }
            write!(f, "{error}")?;
        }
        Ok(())
    }
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.write_joined(f, "\n")
    }
}

/// [`ConfigErrors::one_line`].
pub struct OneLine<'a>(&'a ConfigErrors);

impl fmt::Display for OneLine<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.write_joined(f, "; ")
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
            origin: Origin::File(PathBuf::from("rules/edge.yaml")),
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
    fn a_resource_error_names_the_resource_and_field_path_without_a_position() {
        let error = ConfigError {
            origin: Origin::Resource("edge".to_string()),
            ..error(4, "must not be empty")
        };
        assert_eq!(
            error.to_string(),
            "resource edge: descriptors[0].key: must not be empty"
        );
        assert_eq!(error.file(), None);
    }

    #[test]
    fn displays_one_error_per_line() {
        let errors = ConfigErrors(vec![error(1, "a"), error(2, "b")]);
        assert_eq!(
            errors.to_string(),
            "rules/edge.yaml:1:3: descriptors[0].key: a\nrules/edge.yaml:2:3: descriptors[0].key: b"
        );
        assert_eq!(
            errors.one_line().to_string(),
            "rules/edge.yaml:1:3: descriptors[0].key: a; rules/edge.yaml:2:3: descriptors[0].key: b"
        );
    }
}
