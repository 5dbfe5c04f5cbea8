//! YAML configuration: files and directories to validated [`limiter::Rules`], with every error
//! reported as `file:line:column: field: message`.
//!
//! [`crate::regular_file`] reads one file within the [`ConfigBounds`], [`yaml`] builds a positioned YAML tree,
//! [`schema`] validates it into one domain's rules, and this module finds the files and assembles
//! the domains. [`reload`] watches them.

mod bounds;
mod error;
mod fingerprint;
pub mod reload;
mod schema;
mod stats;
pub mod xds;
pub(crate) mod yaml;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

use crate::limiter;
use crate::regular_file as file;

pub use bounds::ConfigBounds;
pub use error::{ConfigError, ConfigErrors, Origin};
pub use stats::{ConfigBound, LoadStats};

use schema::DescriptorId;
use yaml::{Node, Pos};

/// How configuration files come together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Files that name the same domain are merged into one domain (envoyproxy/ratelimit's
    /// `MERGE_DOMAIN_CONFIG`): their top-level descriptors are put side by side, in file order,
    /// and a top-level descriptor defined in two of them is an error naming both. Off, the same
    /// domain in two files is an error naming both.
    pub merge_domains: bool,
    /// Which files of a configuration directory are configuration files.
    pub layout: DirectoryLayout,
    /// The consistency of a counted limit whose `rate_limit` does not say (`--consistency`):
    /// files, xDS resources and drop-in files alike. An algorithm that cannot be leased
    /// (`sliding_window_log`) stays exact under a `leased` default, without an error.
    pub default_consistency: limiter::Consistency,
}

/// Which files of a configuration directory are loaded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum DirectoryLayout {
    /// The directory's own `*.yaml` / `*.yml` files, sorted by name; names starting with `.` are
    /// skipped (so a Kubernetes ConfigMap's `..data` is not read twice); subdirectories are not
    /// read.
    #[default]
    YamlFiles,
    /// envoyproxy/ratelimit's runtime directory (`$RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/
    /// $RUNTIME_APPDIRECTORY`), read as its runtime loader reads it: every file whatever its
    /// name, in subdirectories too, sorted by path. Directory symlinks are not followed (file
    /// symlinks are), and names starting with `.` are read unless `ignore_dotfiles`
    /// (`RUNTIME_IGNOREDOTFILES`) skips them and everything beneath them.
    RuntimeTree { ignore_dotfiles: bool },
}

/// Loads every path with the default [`ConfigBounds`] and [`LoadOptions`] (see [`Loader::load`]).
pub fn load(paths: &[PathBuf]) -> Result<limiter::Rules, ConfigErrors> {
    Loader::new(ConfigBounds::default()).load(paths)
}

/// [`load`], with the same domain in several files merged or refused as `options` says.
pub fn load_with(paths: &[PathBuf], options: LoadOptions) -> Result<limiter::Rules, ConfigErrors> {
    Loader::new(ConfigBounds::default())
        .with_options(options)
        .load(paths)
}

/// Loads configurations within its [`ConfigBounds`], counting what it does in its [`LoadStats`].
#[derive(Debug, Default)]
pub struct Loader {
    bounds: ConfigBounds,
    options: LoadOptions,
    stats: LoadStats,
}

impl Loader {
    pub fn new(bounds: ConfigBounds) -> Loader {
        Loader {
            bounds,
            options: LoadOptions::default(),
            stats: LoadStats::default(),
        }
    }

    /// This loader, bringing files together as `options` says.
    pub fn with_options(mut self, options: LoadOptions) -> Loader {
        self.options = options;
        self
    }

    pub fn bounds(&self) -> ConfigBounds {
        self.bounds
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
    /// same domain in two files is an error naming both files, unless
    /// [`LoadOptions::merge_domains`] merges them. A directory without configuration
    /// files contributes no domains. A configuration file that is not a regular file (a FIFO, a
    /// device, a socket, or a symlink to one), or is larger than [`ConfigBounds::max_file_bytes`], is an
    /// error naming it, like an unreadable file: it may hold limits the operator expects, so the
    /// configuration is not loaded without it. Neither is ever opened.
    pub fn load(&self, paths: &[PathBuf]) -> Result<limiter::Rules, ConfigErrors> {
        let mut errors = Vec::new();
        let files = config_files(paths, self.options.layout, &mut errors);
        let mut assembly = Assembly::new(self.options, errors);
        for file in files {
            let text = match self.read_text(&file) {
                Ok(text) => text,
                Err(error) => {
                    assembly
                        .errors
                        .push(file_error(&file, bounds::file_refusal(&error)));
                    continue;
                }
            };
            let origin = Origin::File(file);
            match self.parse_file(&origin, &text) {
                Ok(parsed) => assembly.add(origin, parsed),
                Err(file_errors) => assembly.errors.extend(file_errors),
            }
        }
        assembly.finish()
    }

    /// Validates configuration trees that did not come from files (xDS resources, one domain
    /// each, in order) and assembles them exactly as [`Loader::load`] assembles files: the same
    /// schema, the same rule for a domain in two of them ([`LoadOptions::merge_domains`]).
    /// `errors` (problems found before the trees, e.g. undecodable resources) come first.
    pub(crate) fn load_trees(
        &self,
        trees: Vec<(Origin, Node)>,
        errors: Vec<ConfigError>,
    ) -> Result<limiter::Rules, ConfigErrors> {
        let mut assembly = Assembly::new(self.options, errors);
        for (origin, root) in trees {
            self.stats.record_parse();
            match schema::domain_rules(&origin, &root, self.options.default_consistency) {
                Ok(parsed) => assembly.add(origin, parsed),
                Err(tree_errors) => assembly.errors.extend(tree_errors),
            }
        }
        assembly.finish()
    }

    fn read_text(&self, path: &Path) -> Result<String, file::FileError> {
        let result = file::read_text(path, self.bounds.max_file_bytes);
        match &result {
            Ok(_) | Err(file::FileError::NotUtf8) => self.stats.record_read(),
            Err(error) => {
                if let Some(bound) = error.bound() {
                    self.stats.record_rejection(bound.into());
                }
            }
        }
        result
    }

    fn parse_file(
        &self,
        origin: &Origin,
        text: &str,
    ) -> Result<schema::ParsedDomain, Vec<ConfigError>> {
        self.stats.record_parse();
        let root = yaml::parse(text, self.bounds.max_alias_bytes).map_err(|error| {
            if error.alias_budget {
                self.stats.record_rejection(ConfigBound::AliasBytes);
            }
            vec![yaml_error(origin, error)]
        })?;
        schema::domain_rules(origin, &root, self.options.default_consistency)
    }
}

/// Domains being put together from files or resources, and every error found so far.
struct Assembly {
    options: LoadOptions,
    rules: limiter::Rules,
    origins: HashMap<String, DomainOrigin>,
    errors: Vec<ConfigError>,
}

impl Assembly {
    fn new(options: LoadOptions, errors: Vec<ConfigError>) -> Assembly {
        Assembly {
            options,
            rules: limiter::Rules::default(),
            origins: HashMap::new(),
            errors,
        }
    }

    /// Adds one validated domain: new, merged into the same domain seen before, or refused.
    fn add(&mut self, origin: Origin, parsed: schema::ParsedDomain) {
        let domain = parsed.rules.domain.clone();
        let Some(first) = self.origins.get_mut(&domain) else {
            self.origins.insert(
                domain.clone(),
                DomainOrigin {
                    domain_pos: parsed.domain_pos,
                    top_level: parsed
                        .top_level
                        .into_iter()
                        .map(|(id, (pos, _))| (id, (origin.clone(), pos)))
                        .collect(),
                    origin,
                },
            );
            self.rules.domains.insert(domain, parsed.rules);
            return;
        };
        if !self.options.merge_domains {
            self.errors.push(ConfigError {
                origin,
                line: parsed.domain_pos.line,
                column: parsed.domain_pos.column,
                field: "domain".to_string(),
                message: format!(
                    "domain `{domain}` is already defined in {} (--merge-domain-config \
                     merges the files of one domain)",
                    first.origin.at_line(first.domain_pos.line)
                ),
            });
            return;
        }
        let clashes = merge_clashes(&origin, &parsed.top_level, &first.top_level);
        if !clashes.is_empty() {
            self.errors.extend(clashes);
            return;
        }
        first.top_level.extend(
            parsed
                .top_level
                .into_iter()
                .map(|(id, (pos, _))| (id, (origin.clone(), pos))),
        );
        if let Some(merged) = self.rules.domains.get_mut(&domain) {
            merge_level(&mut merged.root, parsed.rules.root);
        }
    }

    fn finish(self) -> Result<limiter::Rules, ConfigErrors> {
        if self.errors.is_empty() {
            Ok(self.rules)
        } else {
            Err(ConfigErrors(self.errors))
        }
    }
}

/// Where a domain was first defined, and where each of its top-level descriptors is.
struct DomainOrigin {
    origin: Origin,
    domain_pos: Pos,
    top_level: HashMap<DescriptorId, (Origin, Pos)>,
}

/// The errors for `origin`'s top-level descriptors that another file of the domain already has,
/// in `origin`'s source order.
fn merge_clashes(
    origin: &Origin,
    incoming: &HashMap<DescriptorId, (Pos, String)>,
    existing: &HashMap<DescriptorId, (Origin, Pos)>,
) -> Vec<ConfigError> {
    let mut clashes: Vec<ConfigError> = incoming
        .iter()
        .filter_map(|(id, (pos, field))| {
            let (first_origin, first_pos) = existing.get(id)?;
            let what = match &id.1 {
                Some(value) => format!("key `{}` and value `{value}`", id.0),
                None => format!("key `{}` without a value", id.0),
            };
            Some(ConfigError {
                origin: origin.clone(),
                line: pos.line,
                column: pos.column,
                field: field.clone(),
                message: format!(
                    "duplicate descriptor in merged domain: {what} is already defined at {}",
                    first_origin.at_line(first_pos.line)
                ),
            })
        })
        .collect();
    clashes.sort_by_key(|error| (error.line, error.column));
    clashes
}

/// Puts the top-level nodes of `more` beside those of `into` (which has none of the same
/// identity), after them in configuration order: wildcards keep file order after those already
/// there, and every node of `more` is numbered after those of `into`.
fn merge_level(into: &mut limiter::RuleSet, mut more: limiter::RuleSet) {
    let after = into
        .nodes()
        .map(|node| node.order.saturating_add(1))
        .max()
        .unwrap_or(0);
    for node in more.nodes_mut() {
        node.order = node.order.saturating_add(after);
    }
    for (key, values) in more.exact {
        into.exact.entry(key).or_default().extend(values);
    }
    into.wildcards.extend(more.wildcards);
    into.key_only.extend(more.key_only);
}

/// Parses one file's text with the default [`ConfigBounds`] (for tests and benchmarks). `origin` is the
/// file name used in errors. Returns every error found in the file, in source order.
pub fn parse_domain(origin: &Path, text: &str) -> Result<limiter::DomainRules, ConfigErrors> {
    Loader::default()
        .parse_file(&Origin::File(origin.to_path_buf()), text)
        .map(|parsed| parsed.rules)
        .map_err(ConfigErrors)
}

/// A YAML error as a configuration error. The alias budget's message stands alone; others are
/// the parser's, marked as such.
fn yaml_error(origin: &Origin, error: yaml::SyntaxError) -> ConfigError {
    let message = if error.alias_budget {
        error.message
    } else {
        format!("invalid YAML: {}", error.message)
    };
    ConfigError {
        origin: origin.clone(),
        line: error.pos.line,
        column: error.pos.column,
        field: "yaml".to_string(),
        message,
    }
}

/// The files named by `paths`, in order, each directory expanded to its configuration files
/// sorted by name. Paths that do not exist or cannot be listed are reported in `errors`.
fn config_files(
    paths: &[PathBuf],
    layout: DirectoryLayout,
    errors: &mut Vec<ConfigError>,
) -> Vec<PathBuf> {
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
        let mut found = Vec::new();
        match layout {
            DirectoryLayout::YamlFiles => yaml_files(path, &mut found, errors),
            DirectoryLayout::RuntimeTree { ignore_dotfiles } => runtime_tree(
                path,
                ignore_dotfiles,
                MAX_RUNTIME_TREE_DEPTH,
                &mut found,
                errors,
            ),
        }
        found.sort();
        files.extend(found);
    }
    files
}

/// How deep [`DirectoryLayout::RuntimeTree`] descends below the configuration directory.
const MAX_RUNTIME_TREE_DEPTH: usize = 16;

/// The names in `dir`, each with its path; listing errors are reported against `dir`.
fn directory_entries(dir: &Path, errors: &mut Vec<ConfigError>) -> Vec<(String, PathBuf)> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(error) => {
            errors.push(file_error(dir, format!("cannot list directory: {error}")));
            return Vec::new();
        }
    };
    let mut named = Vec::new();
    for entry in entries {
        match entry {
            Ok(entry) => {
                if let Some(name) = entry.file_name().to_str() {
                    named.push((name.to_owned(), entry.path()));
                }
            }
            Err(error) => errors.push(file_error(dir, format!("cannot list directory: {error}"))),
        }
    }
    named
}

fn yaml_files(dir: &Path, found: &mut Vec<PathBuf>, errors: &mut Vec<ConfigError>) {
    for (name, file) in directory_entries(dir, errors) {
        if name.starts_with('.') || !(name.ends_with(".yaml") || name.ends_with(".yml")) {
            continue;
        }
        match fs::metadata(&file) {
            Ok(metadata) if metadata.is_dir() => {}
            Ok(_) => found.push(file),
            Err(error) => errors.push(file_error(&file, format!("cannot read file: {error}"))),
        }
    }
}

fn runtime_tree(
    dir: &Path,
    ignore_dotfiles: bool,
    depth_left: usize,
    found: &mut Vec<PathBuf>,
    errors: &mut Vec<ConfigError>,
) {
    for (name, path) in directory_entries(dir, errors) {
        if ignore_dotfiles && name.starts_with('.') {
            continue;
        }
        let is_real_directory = match fs::symlink_metadata(&path) {
            Ok(metadata) => metadata.is_dir(),
            Err(error) => {
                errors.push(file_error(&path, format!("cannot read file: {error}")));
                continue;
            }
        };
        if !is_real_directory {
            match fs::metadata(&path) {
                Ok(metadata) if metadata.is_dir() => {}
                Ok(_) => found.push(path),
                Err(error) => errors.push(file_error(&path, format!("cannot read file: {error}"))),
            }
        } else if depth_left == 0 {
            errors.push(file_error(
                &path,
                format!(
                    "directory nested deeper than {MAX_RUNTIME_TREE_DEPTH} levels below the \
                     configuration directory"
                ),
            ));
        } else {
            runtime_tree(&path, ignore_dotfiles, depth_left - 1, found, errors);
        }
    }
}

fn file_error(path: &Path, message: String) -> ConfigError {
    ConfigError {
        origin: Origin::File(path.to_path_buf()),
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
        assert_eq!((error.file(), error.line), (Some(origin), 4), "{error}");
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

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let file = dir.join(name);
        fs::write(&file, text).expect("write a configuration file");
        file
    }

    const PART_A: &str = "domain: shop\ndescriptors:\n  - key: cart\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: path\n    value: \"/a*\"\n    rate_limit: {unit: second, requests_per_unit: 2}\n";
    const PART_B: &str = "# the other half\ndomain: shop\ndescriptors:\n  - key: path\n    value: \"/b*\"\n    rate_limit: {unit: second, requests_per_unit: 3}\n  - key: checkout\n    value: fast\n    rate_limit: {unit: second, requests_per_unit: 4}\n";

    #[test]
    fn one_domain_in_two_files_is_an_error_naming_both_unless_merged() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write(dir.path(), "a.yaml", PART_A);
        let b = write(dir.path(), "b.yaml", PART_B);
        let paths = vec![dir.path().to_path_buf()];
        let errors = load(&paths).expect_err("same domain twice");
        assert_eq!(errors.len(), 1, "{errors}");
        let error = &errors.0[0];
        assert_eq!((error.file(), error.line), (Some(b.as_path()), 2));
        assert!(
            error
                .message
                .contains(&format!("already defined in {}:1", a.display())),
            "{error}"
        );
        assert!(error.message.contains("--merge-domain-config"), "{error}");

        let merged = load_with(
            &paths,
            LoadOptions {
                merge_domains: true,
                ..LoadOptions::default()
            },
        )
        .expect("merged");
        let shop = merged.domain("shop").expect("domain shop");
        assert!(shop.root.key_only.contains_key("cart"));
        assert!(shop.root.exact["checkout"].contains_key("fast"));
        let patterns: Vec<&str> = shop
            .root
            .wildcards
            .iter()
            .map(|w| w.pattern.as_str())
            .collect();
        assert_eq!(patterns, ["/a*", "/b*"], "wildcards keep file order");
        let orders = [
            shop.root.key_only["cart"].order,
            shop.root.wildcards[0].node.order,
            shop.root.wildcards[1].node.order,
            shop.root.exact["checkout"]["fast"].order,
        ];
        assert!(
            orders.windows(2).all(|pair| pair[0] < pair[1]),
            "configuration order runs through both files: {orders:?}"
        );
        assert_eq!(merged.limits().len(), 4);
    }

    #[test]
    fn a_top_level_descriptor_in_two_merged_files_names_both() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = write(dir.path(), "a.yaml", PART_A);
        let clash = "domain: shop\ndescriptors:\n  - key: other\n  - key: path\n    value: \"/a*\"\n    descriptors:\n      - key: cart\n        rate_limit: {unit: second, requests_per_unit: 9}\n";
        let b = write(dir.path(), "b.yaml", clash);
        let errors = load_with(
            &[dir.path().to_path_buf()],
            LoadOptions {
                merge_domains: true,
                ..LoadOptions::default()
            },
        )
        .expect_err("path=/a* twice");
        assert_eq!(errors.len(), 1, "{errors}");
        let error = &errors.0[0];
        assert_eq!((error.file(), error.line), (Some(b.as_path()), 4));
        assert_eq!(error.field, "descriptors[1]");
        assert!(
            error.message.contains(&format!(
                "key `path` and value `/a*` is already defined at {}:5",
                a.display()
            )),
            "{error}"
        );
    }

    #[test]
    fn merged_files_may_share_keys_below_the_top_level_and_empty_halves() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(dir.path(), "a.yaml", "domain: shop\ndescriptors:\n  - key: tenant\n    value: x\n    descriptors:\n      - key: cart\n        rate_limit: {unit: second, requests_per_unit: 1}\n");
        write(dir.path(), "b.yaml", "domain: shop\ndescriptors:\n  - key: tenant\n    value: y\n    descriptors:\n      - key: cart\n        rate_limit: {unit: second, requests_per_unit: 2}\n");
        write(dir.path(), "c.yaml", "domain: shop\ndescriptors:\n");
        let merged = load_with(
            &[dir.path().to_path_buf()],
            LoadOptions {
                merge_domains: true,
                ..LoadOptions::default()
            },
        )
        .expect("merged");
        assert_eq!(merged.limits().len(), 2);
    }
}
