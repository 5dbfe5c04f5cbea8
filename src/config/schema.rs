//! The configuration schema (envoyproxy/ratelimit's, plus extensions): a positioned YAML tree
//! to validated [`DomainRules`], reporting every problem with its position and field path.

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Arc;

use super::error::{ConfigError, Origin};
use super::yaml::{MapEntry, Node, Pos, ScalarType, Value};
use crate::limiter::consistency::Consistency;
use crate::limiter::metadata::Number;
use crate::limiter::{
    Algorithm, ConfiguredLimit, DomainRules, LimitKind, LimitedRate, Metadata, MetadataValue, Rate,
    RateError, RuleNode, RuleSet, Unit, Wildcard, WildcardRule,
};

const ROOT_FIELDS: &[&str] = &["domain", "descriptors"];
const DESCRIPTOR_FIELDS: &[&str] = &[
    "key",
    "value",
    "rate_limit",
    "descriptors",
    "shadow_mode",
    "detailed_metric",
    "value_to_metric",
    "quota_mode",
    "share_threshold",
    "metadata",
];
const RATE_LIMIT_FIELDS: &[&str] = &[
    "requests_per_unit",
    "unit",
    "unlimited",
    "name",
    "replaces",
    "algorithm",
    "burst",
    "unit_multiplier",
    "consistency",
];
const REPLACES_FIELDS: &[&str] = &["name"];

/// Fields that make no sense next to `unlimited: true`.
const LIMITED_ONLY_FIELDS: &[&str] = &[
    "unit",
    "requests_per_unit",
    "algorithm",
    "burst",
    "unit_multiplier",
];

/// What `requests_per_unit` accepts, as its errors say it: 0 is valid and denies every request
/// (envoyproxy/ratelimit's way to ban a value), so the errors never ask for a positive number.
const REQUESTS_PER_UNIT_ACCEPTED: &str = "a whole number from 0 (0 denies every request)";

/// Identity of a descriptor within its level: its key and, unless key-only, its value.
pub type DescriptorId = (String, Option<String>);

/// A file's validated rules and where its `domain` value and top-level descriptors are (for
/// errors that span files).
#[derive(Debug)]
pub struct ParsedDomain {
    pub rules: DomainRules,
    pub domain_pos: Pos,
    /// Position and field path of each top-level descriptor.
    pub top_level: HashMap<DescriptorId, (Pos, String)>,
}

/// Validates one file's (or resource's) tree and builds its rules; on failure returns every
/// error found, in source order, each naming `origin`. A counted limit without `consistency`
/// gets `default_consistency` where its algorithm can be leased, else `exact`.
pub fn domain_rules(
    origin: &Origin,
    root: &Node,
    default_consistency: Consistency,
) -> Result<ParsedDomain, Vec<ConfigError>> {
    let mut checker = Checker {
        origin,
        default_consistency,
        errors: Vec::new(),
    };
    let parsed = checker.root(root);
    let mut errors = checker.errors;
    match parsed {
        Some(parsed) if errors.is_empty() => Ok(parsed),
        _ => {
            errors.sort_by_key(|error| (error.line, error.column));
            Err(errors)
        }
    }
}

/// The error has been recorded; the caller only needs to stop using the value.
struct Reported;

/// The arithmetic fields of a `rate_limit`, as read.
struct RateFields {
    unit: Read<Unit>,
    requests_per_unit: Read<u32>,
    algorithm: Read<Algorithm>,
    burst: Read<u32>,
    unit_multiplier: Read<u32>,
    consistency: Read<Consistency>,
}

/// A field read from a map: absent, present and valid, or present and reported as invalid.
type Read<T> = Result<Option<T>, Reported>;

/// The descriptor-level settings that shape its `rate_limit`.
struct NodeFlags {
    shadow_mode: bool,
    quota_mode: bool,
    detailed_metric: bool,
    metadata: Option<Arc<Metadata>>,
}

struct Checker<'f> {
    origin: &'f Origin,
    /// What a counted limit that does not say gets (`--consistency`).
    default_consistency: Consistency,
    errors: Vec<ConfigError>,
}

/// The known fields of one map, each with its key and value nodes.
struct Fields<'n> {
    path: String,
    entries: Vec<(&'n str, &'n MapEntry)>,
}

impl<'n> Fields<'n> {
    fn get(&self, name: &str) -> Option<&'n MapEntry> {
        self.entries
            .iter()
            .find(|(key, _)| *key == name)
            .map(|(_, entry)| *entry)
    }

    fn field(&self, name: &str) -> String {
        join(&self.path, name)
    }
}

impl Checker<'_> {
    fn error(&mut self, pos: Pos, field: &str, message: impl Into<String>) {
        self.errors.push(ConfigError {
            origin: self.origin.clone(),
            line: pos.line,
            column: pos.column,
            field: field.to_string(),
            message: message.into(),
        });
    }

    fn root(&mut self, root: &Node) -> Option<ParsedDomain> {
        let fields = if is_null(root) {
            Fields {
                path: String::new(),
                entries: Vec::new(),
            }
        } else {
            self.fields(root, "", "the top level", ROOT_FIELDS)?
        };
        let domain = match fields.get("domain") {
            None => {
                self.error(
                    root.pos,
                    "domain",
                    "missing: every configuration file needs a non-empty `domain`",
                );
                None
            }
            Some(entry) => match self.string(entry, "domain") {
                Ok(Some(domain)) if !domain.is_empty() => Some((domain, value_pos(entry))),
                Ok(_) => {
                    self.error(value_pos(entry), "domain", "must not be empty");
                    None
                }
                Err(Reported) => None,
            },
        };
        let mut root_set = RuleSet::default();
        let prefix = domain.as_ref().map_or("", |(name, _)| name.as_str());
        let top_level = match fields.get("descriptors") {
            Some(entry) => self.descriptors(&entry.value, "descriptors", prefix, &mut root_set),
            None => HashMap::new(),
        };
        let (domain, domain_pos) = domain?;
        Some(ParsedDomain {
            rules: DomainRules {
                domain,
                root: root_set,
            },
            domain_pos,
            top_level,
        })
    }

    /// Checks that `node` is a map whose keys are unique strings from `allowed`, reporting
    /// every other key. Returns the known fields, or `None` when `node` is not a map.
    fn fields<'n>(
        &mut self,
        node: &'n Node,
        path: &str,
        what: &str,
        allowed: &[&str],
    ) -> Option<Fields<'n>> {
        let Value::Map(map) = &node.value else {
            let field = if path.is_empty() { "(root)" } else { path };
            self.error(
                node.pos,
                field,
                format!("{what} must be a map, found {}", describe(node)),
            );
            return None;
        };
        for duplicate in &map.duplicates {
            let name = scalar_text(&duplicate.key).unwrap_or("?");
            self.error(
                duplicate.key.pos,
                &join(path, name),
                format!(
                    "duplicate key `{name}` (first defined at line {})",
                    duplicate.first.line
                ),
            );
        }
        let mut entries = Vec::with_capacity(map.entries.len());
        for entry in &map.entries {
            let name = match &entry.key.value {
                Value::Scalar(scalar) if scalar.resolve() == ScalarType::Str => &scalar.text,
                _ => {
                    let (field, shown) = match scalar_text(&entry.key) {
                        Some(text) => (join(path, text), format!(" `{text}`")),
                        None => (join(path, "?"), String::new()),
                    };
                    self.error(
                        entry.key.pos,
                        &field,
                        format!(
                            "keys must be strings, found {}{shown}",
                            describe(&entry.key)
                        ),
                    );
                    continue;
                }
            };
            if allowed.contains(&name.as_str()) {
                entries.push((name.as_str(), entry));
            } else {
                let hint = match suggest(name, allowed) {
                    Some(candidate) => format!("; did you mean `{candidate}`?"),
                    None => format!("; expected one of: {}", allowed.join(", ")),
                };
                self.error(
                    entry.key.pos,
                    &join(path, name),
                    format!("unknown field `{name}`{hint}"),
                );
            }
        }
        Some(Fields {
            path: path.to_string(),
            entries,
        })
    }

    /// A string field. Any scalar is accepted as its source text (as envoyproxy/ratelimit does,
    /// so `value: 200` is the string "200"); null reads as the empty string.
    fn string(&mut self, entry: &MapEntry, field: &str) -> Read<String> {
        match &entry.value.value {
            Value::Scalar(scalar) if scalar.is_null() => Ok(Some(String::new())),
            Value::Scalar(scalar) => Ok(Some(scalar.text.clone())),
            _ => {
                self.error(
                    entry.value.pos,
                    field,
                    format!("must be a string, found {}", describe(&entry.value)),
                );
                Err(Reported)
            }
        }
    }

    fn optional_string(&mut self, fields: &Fields<'_>, name: &str) -> Read<String> {
        match fields.get(name) {
            None => Ok(None),
            Some(entry) => self.string(entry, &fields.field(name)),
        }
    }

    /// A boolean field; absent or null reads as `false`.
    fn flag(&mut self, fields: &Fields<'_>, name: &str) -> bool {
        let Some(entry) = fields.get(name) else {
            return false;
        };
        match &entry.value.value {
            Value::Scalar(scalar) if scalar.is_null() => false,
            Value::Scalar(scalar) => match scalar.as_bool() {
                Some(flag) => flag,
                None => {
                    self.error(
                        entry.value.pos,
                        &fields.field(name),
                        format!(
                            "must be true or false, found {} `{}`",
                            scalar.resolve().describe(),
                            scalar.text
                        ),
                    );
                    false
                }
            },
            _ => {
                self.error(
                    entry.value.pos,
                    &fields.field(name),
                    format!("must be true or false, found {}", describe(&entry.value)),
                );
                false
            }
        }
    }

    /// A positive integer field that fits in a `u32`.
    fn positive(&mut self, fields: &Fields<'_>, name: &str) -> Read<u32> {
        self.integer(fields, name, 1, "a positive integer")
    }

    /// Reads a `u32` field that must be at least `minimum` (0 or 1); its errors say it must be
    /// `accepted`, so a field where 0 is valid never reads as one that must be positive.
    fn integer(
        &mut self,
        fields: &Fields<'_>,
        name: &str,
        minimum: u32,
        accepted: &str,
    ) -> Read<u32> {
        let Some(entry) = fields.get(name) else {
            return Ok(None);
        };
        let field = fields.field(name);
        let pos = value_pos(entry);
        let number = match &entry.value.value {
            Value::Scalar(scalar) if scalar.resolve() == ScalarType::Int => scalar.as_integer(),
            _ => {
                let shown = scalar_text(&entry.value)
                    .filter(|text| !text.is_empty())
                    .map(|text| format!(" `{text}`"))
                    .unwrap_or_default();
                self.error(
                    pos,
                    &field,
                    format!(
                        "must be {accepted}, found {}{shown}",
                        describe(&entry.value)
                    ),
                );
                return Err(Reported);
            }
        };
        match number.map(|n| (n, u32::try_from(n))) {
            Some((_, Ok(n))) if n >= minimum => Ok(Some(n)),
            Some((n, _)) if n < i128::from(minimum) => {
                self.error(pos, &field, format!("must be {accepted}"));
                Err(Reported)
            }
            _ => {
                self.error(
                    pos,
                    &field,
                    format!("must be at most {} (fits in 32 bits)", u32::MAX),
                );
                Err(Reported)
            }
        }
    }

    /// Reads one level's list into `set`; returns where each of its descriptors is.
    fn descriptors(
        &mut self,
        node: &Node,
        path: &str,
        parent: &str,
        set: &mut RuleSet,
    ) -> HashMap<DescriptorId, (Pos, String)> {
        let mut seen = HashMap::new();
        let items = match &node.value {
            Value::Seq(items) => items,
            _ if is_null(node) => return seen,
            _ => {
                self.error(
                    node.pos,
                    path,
                    format!("must be a list of descriptors, found {}", describe(node)),
                );
                return seen;
            }
        };
        for (index, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{index}]");
            let order = u32::try_from(index).unwrap_or(u32::MAX);
            self.descriptor(item, &item_path, parent, order, set, &mut seen);
        }
        seen
    }

    fn descriptor(
        &mut self,
        item: &Node,
        path: &str,
        parent: &str,
        order: u32,
        set: &mut RuleSet,
        seen: &mut HashMap<DescriptorId, (Pos, String)>,
    ) {
        let Some(fields) = self.fields(item, path, "a descriptor", DESCRIPTOR_FIELDS) else {
            return;
        };
        let key = match fields.get("key") {
            None => {
                self.error(
                    item.pos,
                    &fields.field("key"),
                    "missing: every descriptor needs a non-empty `key`",
                );
                None
            }
            Some(entry) => match self.string(entry, &fields.field("key")) {
                Ok(Some(key)) if !key.is_empty() => Some(key),
                Ok(_) => {
                    self.error(value_pos(entry), &fields.field("key"), "must not be empty");
                    None
                }
                Err(Reported) => None,
            },
        };
        let value = self
            .optional_string(&fields, "value")
            .ok()
            .flatten()
            .filter(|value| !value.is_empty());
        let flags = NodeFlags {
            shadow_mode: self.flag(&fields, "shadow_mode"),
            quota_mode: self.flag(&fields, "quota_mode"),
            detailed_metric: self.flag(&fields, "detailed_metric"),
            metadata: fields.get("metadata").and_then(|entry| {
                self.metadata(&entry.value, &fields.field("metadata"))
                    .map(Arc::new)
            }),
        };
        self.flag(&fields, "value_to_metric");
        let share_threshold = self.flag(&fields, "share_threshold");
        if share_threshold && !value.as_deref().is_some_and(is_wildcard) {
            if let Some(entry) = fields.get("share_threshold") {
                self.error(
                    entry.key.pos,
                    &fields.field("share_threshold"),
                    "share_threshold applies only to wildcard values (containing `*`)",
                );
            }
        }

        let segment = match (&key, &value) {
            (Some(key), Some(value)) => format!("{key}_{value}"),
            (Some(key), None) => key.clone(),
            (None, _) => String::from("?"),
        };
        let limit_path = if parent.is_empty() {
            segment
        } else {
            format!("{parent}.{segment}")
        };
        let limit = match fields.get("rate_limit") {
            Some(entry) if !is_null(&entry.value) => self.rate_limit(
                &entry.value,
                &fields.field("rate_limit"),
                limit_path.clone(),
                flags,
            ),
            _ => None,
        };
        let mut node = RuleNode {
            limit: limit.map(Arc::new),
            children: RuleSet::default(),
            order,
        };
        if let Some(entry) = fields.get("descriptors") {
            self.descriptors(
                &entry.value,
                &fields.field("descriptors"),
                &limit_path,
                &mut node.children,
            );
        }

        let Some(key) = key else {
            return;
        };
        match seen.entry((key.clone(), value.clone())) {
            Entry::Occupied(first) => {
                let what = match &value {
                    Some(value) => format!("key `{key}` and value `{value}`"),
                    None => format!("key `{key}` without a value"),
                };
                let at = match self.origin {
                    Origin::File(_) => format!("line {}", first.get().0.line),
                    Origin::Resource(_) => first.get().1.clone(),
                };
                self.error(
                    item.pos,
                    path,
                    format!("duplicate descriptor: {what} is already defined at {at}"),
                );
                return;
            }
            Entry::Vacant(slot) => {
                slot.insert((item.pos, path.to_string()));
            }
        }
        match value {
            Some(value) if is_wildcard(&value) => {
                if let Some(pattern) = Wildcard::parse(&value) {
                    set.wildcards.push(WildcardRule {
                        key,
                        pattern,
                        share_threshold,
                        node,
                    });
                }
            }
            Some(value) => {
                set.exact.entry(key).or_default().insert(value, node);
            }
            None => {
                set.key_only.insert(key, node);
            }
        }
    }

    fn rate_limit(
        &mut self,
        node: &Node,
        path: &str,
        limit_path: String,
        flags: NodeFlags,
    ) -> Option<ConfiguredLimit> {
        let fields = self.fields(node, path, "a rate_limit", RATE_LIMIT_FIELDS)?;
        let unlimited = self.flag(&fields, "unlimited");
        let name = self
            .optional_string(&fields, "name")
            .ok()
            .flatten()
            .filter(|name| !name.is_empty());
        let replaces = match fields.get("replaces") {
            Some(entry) => self.replaces(&entry.value, &fields.field("replaces"), name.as_deref()),
            None => Vec::new(),
        };
        let rate = RateFields {
            unit: self.unit(&fields),
            requests_per_unit: self.integer(
                &fields,
                "requests_per_unit",
                0,
                REQUESTS_PER_UNIT_ACCEPTED,
            ),
            algorithm: self.algorithm(&fields),
            burst: self.positive(&fields, "burst"),
            unit_multiplier: self.positive(&fields, "unit_multiplier"),
            consistency: self.consistency(&fields),
        };

        let kind = if unlimited {
            for field in LIMITED_ONLY_FIELDS {
                if let Some(entry) = fields.get(field) {
                    self.error(
                        entry.key.pos,
                        &fields.field(field),
                        format!("`{field}` cannot be combined with `unlimited: true`"),
                    );
                }
            }
            LimitKind::Unlimited
        } else if let (Ok(Some(0)), Ok(Some(unit)), Ok(multiplier)) =
            (&rate.requests_per_unit, &rate.unit, &rate.unit_multiplier)
        {
            LimitKind::Blocked {
                unit: *unit,
                unit_multiplier: multiplier.unwrap_or(1),
            }
        } else {
            self.limited(node, &fields, rate).map(LimitKind::Limited)?
        };
        Some(ConfiguredLimit {
            path: limit_path,
            name,
            kind,
            replaces,
            shadow_mode: flags.shadow_mode,
            quota_mode: flags.quota_mode,
            detailed_metric: flags.detailed_metric,
            metadata: flags.metadata,
        })
    }

    /// A descriptor's `metadata`: a map (null: none) of string keys to any YAML value, read as
    /// JSON-shaped data (integers and floats as numbers; other scalars as their type says).
    fn metadata(&mut self, node: &Node, path: &str) -> Option<Metadata> {
        if is_null(node) {
            return None;
        }
        match self.metadata_value(node, path)? {
            MetadataValue::Map(map) => Some(map),
            _ => {
                self.error(
                    node.pos,
                    path,
                    format!("must be a map, found {}", describe(node)),
                );
                None
            }
        }
    }

    fn metadata_value(&mut self, node: &Node, path: &str) -> Option<MetadataValue> {
        match &node.value {
            Value::Scalar(scalar) => Some(match scalar.resolve() {
                ScalarType::Null => MetadataValue::Null,
                ScalarType::Bool => MetadataValue::Bool(scalar.as_bool().unwrap_or_default()),
                ScalarType::Int => match scalar.as_integer() {
                    Some(n) => MetadataValue::Number(Number(n as f64)),
                    None => MetadataValue::String(scalar.text.clone()),
                },
                ScalarType::Float => match float_value(&scalar.text) {
                    Some(x) => MetadataValue::Number(Number(x)),
                    None => MetadataValue::String(scalar.text.clone()),
                },
                ScalarType::Str => MetadataValue::String(scalar.text.clone()),
            }),
            Value::Seq(items) => {
                let mut list = Vec::with_capacity(items.len());
                for (index, item) in items.iter().enumerate() {
                    list.push(self.metadata_value(item, &format!("{path}[{index}]"))?);
                }
                Some(MetadataValue::List(list))
            }
            Value::Map(map) => {
                for duplicate in &map.duplicates {
                    let name = scalar_text(&duplicate.key).unwrap_or("?");
                    self.error(
                        duplicate.key.pos,
                        &join(path, name),
                        format!(
                            "duplicate key `{name}` (first defined at line {})",
                            duplicate.first.line
                        ),
                    );
                }
                let mut fields = Metadata::new();
                let mut complete = map.duplicates.is_empty();
                for entry in &map.entries {
                    let name = match &entry.key.value {
                        Value::Scalar(scalar) if !scalar.is_null() => scalar.text.clone(),
                        _ => {
                            self.error(
                                entry.key.pos,
                                &join(path, "?"),
                                format!("keys must be strings, found {}", describe(&entry.key)),
                            );
                            complete = false;
                            continue;
                        }
                    };
                    match self.metadata_value(&entry.value, &join(path, &name)) {
                        Some(value) => {
                            fields.insert(name, value);
                        }
                        None => complete = false,
                    }
                }
                complete.then_some(MetadataValue::Map(fields))
            }
        }
    }

    /// Checks that a limited `rate_limit` has what it needs and builds its rate.
    fn limited(
        &mut self,
        node: &Node,
        fields: &Fields<'_>,
        rate: RateFields,
    ) -> Option<LimitedRate> {
        let RateFields {
            unit,
            requests_per_unit,
            algorithm,
            burst,
            unit_multiplier,
            consistency,
        } = rate;
        if let Ok(None) = unit {
            self.error(
                node.pos,
                &fields.field("unit"),
                "missing: a rate_limit needs a `unit` (or `unlimited: true`)",
            );
        }
        if let (Ok(None), Ok(Some(_)) | Err(Reported)) = (&requests_per_unit, &unit) {
            self.error(
                node.pos,
                &fields.field("requests_per_unit"),
                format!(
                    "missing: a rate_limit with a unit needs a `requests_per_unit`: \
                     {REQUESTS_PER_UNIT_ACCEPTED}"
                ),
            );
        }
        let consistency = match (consistency, &algorithm) {
            (Ok(Some(Consistency::Leased)), Ok(algorithm))
                if !Consistency::can_lease(algorithm.unwrap_or_default()) =>
            {
                if let Some(entry) = fields.get("consistency") {
                    self.error(
                        value_pos(entry),
                        &fields.field("consistency"),
                        "`consistency: leased` cannot apply to sliding_window_log: a log keeps \
                         one entry per admitted request, so a lease cannot reserve a number of \
                         hits in it; use `algorithm: sliding_window_counter` to lease this limit \
                         (or `consistency: exact`)",
                    );
                }
                Err(Reported)
            }
            (consistency, _) => consistency,
        };
        if let (Ok(algorithm), Ok(Some(_)), Some(entry)) = (&algorithm, &burst, fields.get("burst"))
        {
            if !algorithm.unwrap_or_default().uses_burst() {
                self.error(
                    entry.key.pos,
                    &fields.field("burst"),
                    "burst applies only to token_bucket and gcra",
                );
                return None;
            }
        }
        let (Ok(Some(unit)), Ok(Some(requests_per_unit)), Ok(algorithm), Ok(burst)) =
            (unit, requests_per_unit, algorithm, burst)
        else {
            return None;
        };
        let (Ok(unit_multiplier), Ok(consistency)) = (unit_multiplier, consistency) else {
            return None;
        };
        let algorithm = algorithm.unwrap_or_default();
        let unit_multiplier = unit_multiplier.unwrap_or(1);
        match Rate::new(algorithm, requests_per_unit, unit, unit_multiplier, burst) {
            Ok(rate) => Some(LimitedRate {
                requests_per_unit,
                unit,
                unit_multiplier,
                rate,
                consistency: consistency
                    .unwrap_or_else(|| self.default_consistency.default_for(algorithm)),
            }),
            Err(error) => {
                let culprit = match error {
                    RateError::ZeroLimit => ["requests_per_unit", "requests_per_unit"],
                    RateError::ZeroMultiplier => ["unit_multiplier", "unit_multiplier"],
                    RateError::ZeroBurst => ["burst", "requests_per_unit"],
                    RateError::WindowTooLong { .. } => ["unit_multiplier", "unit"],
                    RateError::BurstTooLong { .. } => ["burst", "requests_per_unit"],
                };
                let (field, pos) = culprit
                    .iter()
                    .find_map(|name| fields.get(name).map(|entry| (*name, value_pos(entry))))
                    .unwrap_or(("unit", node.pos));
                self.error(pos, &fields.field(field), error.to_string());
                None
            }
        }
    }

    fn unit(&mut self, fields: &Fields<'_>) -> Read<Unit> {
        let Some(entry) = fields.get("unit") else {
            return Ok(None);
        };
        let field = fields.field("unit");
        let Some(text) = self.string(entry, &field)? else {
            return Ok(None);
        };
        if text.is_empty() {
            return Ok(None);
        }
        match Unit::parse(&text) {
            Some(unit) => Ok(Some(unit)),
            None => {
                let names: Vec<&str> = Unit::ALL.iter().map(|unit| unit.as_str()).collect();
                self.error(
                    value_pos(entry),
                    &field,
                    format!(
                        "unknown unit `{text}`; expected one of: {}",
                        names.join(", ")
                    ),
                );
                Err(Reported)
            }
        }
    }

    fn algorithm(&mut self, fields: &Fields<'_>) -> Read<Algorithm> {
        let Some(entry) = fields.get("algorithm") else {
            return Ok(None);
        };
        let field = fields.field("algorithm");
        let Some(text) = self.string(entry, &field)? else {
            return Ok(None);
        };
        match Algorithm::parse(&text.to_ascii_lowercase()) {
            Some(algorithm) => Ok(Some(algorithm)),
            None => {
                let names: Vec<&str> = Algorithm::ALL.iter().map(|a| a.as_str()).collect();
                self.error(
                    value_pos(entry),
                    &field,
                    format!(
                        "unknown algorithm `{text}`; expected one of: {}",
                        names.join(", ")
                    ),
                );
                Err(Reported)
            }
        }
    }

    fn consistency(&mut self, fields: &Fields<'_>) -> Read<Consistency> {
        let Some(entry) = fields.get("consistency") else {
            return Ok(None);
        };
        let field = fields.field("consistency");
        let Some(text) = self.string(entry, &field)? else {
            return Ok(None);
        };
        if text.is_empty() {
            return Ok(None);
        }
        match Consistency::parse(&text) {
            Some(consistency) => Ok(Some(consistency)),
            None => {
                let names: Vec<&str> = Consistency::ALL.iter().map(|c| c.as_str()).collect();
                self.error(
                    value_pos(entry),
                    &field,
                    format!(
                        "unknown consistency `{text}`; expected one of: {}",
                        names.join(", ")
                    ),
                );
                Err(Reported)
            }
        }
    }

    fn replaces(&mut self, node: &Node, path: &str, own_name: Option<&str>) -> Vec<String> {
        let items = match &node.value {
            Value::Seq(items) => items,
            _ if is_null(node) => return Vec::new(),
            _ => {
                self.error(
                    node.pos,
                    path,
                    format!(
                        "must be a list of `{{name: ...}}` maps, found {}",
                        describe(node)
                    ),
                );
                return Vec::new();
            }
        };
        let mut names = Vec::with_capacity(items.len());
        for (index, item) in items.iter().enumerate() {
            let item_path = format!("{path}[{index}]");
            let Some(fields) = self.fields(item, &item_path, "a replaces entry", REPLACES_FIELDS)
            else {
                continue;
            };
            let field = fields.field("name");
            let Some(entry) = fields.get("name") else {
                self.error(item.pos, &field, "missing: a replaces entry needs a `name`");
                continue;
            };
            match self.string(entry, &field) {
                Ok(Some(name)) if name.is_empty() => {
                    self.error(value_pos(entry), &field, "must not be empty");
                }
                Ok(Some(name)) if Some(name.as_str()) == own_name => {
                    self.error(
                        value_pos(entry),
                        &field,
                        format!("a limit cannot replace itself (`{name}` is its own name)"),
                    );
                }
                Ok(Some(name)) => names.push(name),
                Ok(None) | Err(Reported) => {}
            }
        }
        names
    }
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

/// Whether a configured value is a wildcard: any `*` makes it one, wherever it is.
fn is_wildcard(value: &str) -> bool {
    value.contains('*')
}

/// A YAML 1.2 core-schema float as a number (`.inf`, `-.inf`, `.nan` included).
fn float_value(text: &str) -> Option<f64> {
    let (negative, rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    let magnitude = match rest {
        ".inf" | ".Inf" | ".INF" => f64::INFINITY,
        ".nan" | ".NaN" | ".NAN" => return Some(f64::NAN),
        _ => rest.parse::<f64>().ok()?,
    };
    Some(if negative { -magnitude } else { magnitude })
}

fn is_null(node: &Node) -> bool {
    matches!(&node.value, Value::Scalar(scalar) if scalar.is_null())
}

fn scalar_text(node: &Node) -> Option<&str> {
    match &node.value {
        Value::Scalar(scalar) => Some(&scalar.text),
        _ => None,
    }
}

/// Where to point at a field's value: the value itself, or its key when the value is empty
/// (an empty value has no text of its own to point at).
fn value_pos(entry: &MapEntry) -> Pos {
    match &entry.value.value {
        Value::Scalar(scalar) if scalar.plain && scalar.text.is_empty() => entry.key.pos,
        _ => entry.value.pos,
    }
}

fn describe(node: &Node) -> &'static str {
    match &node.value {
        Value::Scalar(scalar) => scalar.resolve().describe(),
        Value::Seq(_) => "a list",
        Value::Map(_) => "a map",
    }
}

/// The allowed field `name` was most likely meant to be, if one is close enough.
fn suggest<'a>(name: &str, allowed: &[&'a str]) -> Option<&'a str> {
    let normalize = |s: &str| -> String {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .flat_map(char::to_lowercase)
            .collect()
    };
    let wanted = normalize(name);
    if let Some(exact) = allowed.iter().find(|field| normalize(field) == wanted) {
        return Some(exact);
    }
    allowed
        .iter()
        .map(|field| (edit_distance(&wanted, &normalize(field)), *field))
        .filter(|(distance, field)| *distance <= 2 && distance * 3 <= field.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, field)| field)
}

/// Optimal string alignment distance: insertions, deletions, substitutions and adjacent
/// transpositions each cost 1.
fn edit_distance(a: &str, b: &str) -> usize {
    let a: Vec<char> = a.chars().collect();
    let b: Vec<char> = b.chars().collect();
    let width = b.len() + 1;
    let mut d = vec![0usize; (a.len() + 1) * width];
    for i in 0..=a.len() {
        d[i * width] = i;
    }
    for (j, cell) in d.iter_mut().enumerate().take(width) {
        *cell = j;
    }
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            let cost = usize::from(a[i - 1] != b[j - 1]);
            let mut best = (d[(i - 1) * width + j] + 1)
                .min(d[i * width + j - 1] + 1)
                .min(d[(i - 1) * width + j - 1] + cost);
            if i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1] {
                best = best.min(d[(i - 2) * width + j - 2] + 1);
            }
            d[i * width + j] = best;
        }
    }
    d[a.len() * width + b.len()]
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::config::{parse_domain, LoadOptions, Loader, Origin};
    use crate::limiter::metadata::Number;
    use crate::limiter::Consistency;
    use crate::limiter::{Algorithm, DomainRules, LimitKind, MetadataValue, RuleNode, Unit};

    fn rules(text: &str) -> DomainRules {
        match parse_domain(Path::new("test.yaml"), text) {
            Ok(rules) => rules,
            Err(errors) => panic!("unexpected errors:\n{errors}"),
        }
    }

    /// Every error as (line, column, field, message).
    fn errors_of(text: &str) -> Vec<(usize, usize, String, String)> {
        match parse_domain(Path::new("test.yaml"), text) {
            Ok(rules) => panic!("expected errors, got {rules:?}"),
            Err(errors) => errors
                .into_iter()
                .map(|e| {
                    assert_eq!(e.file(), Some(Path::new("test.yaml")));
                    (e.line, e.column, e.field, e.message)
                })
                .collect(),
        }
    }

    /// Asserts that `text` fails with exactly one error, at `line`, on `field`, whose message
    /// contains `needle`.
    fn assert_one_error(text: &str, line: usize, field: &str, needle: &str) {
        let errors = errors_of(text);
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let (got_line, _, got_field, message) = &errors[0];
        assert_eq!(
            (*got_line, got_field.as_str()),
            (line, field),
            "{errors:#?}"
        );
        assert!(message.contains(needle), "{message:?} lacks {needle:?}");
    }

    #[test]
    fn nodes_keep_their_configuration_order_at_each_level() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: b\n  - key: a\n    value: x*\n  - key: a\n    value: x\n    descriptors:\n      - key: z\n      - key: y\n  - key: a\n",
        );
        let root = &rules.root;
        let x = &root.exact["a"]["x"];
        assert_eq!(
            [
                root.key_only["b"].order,
                root.wildcards[0].node.order,
                x.order,
                root.key_only["a"].order,
            ],
            [0, 1, 2, 3]
        );
        assert_eq!(
            [
                x.children.key_only["z"].order,
                x.children.key_only["y"].order
            ],
            [0, 1]
        );
    }

    #[test]
    fn zero_requests_per_unit_blocks_every_request() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: banned\n    rate_limit: {unit: hour, requests_per_unit: 0, name: ban}\n",
        );
        let node = &rules.root.key_only["banned"];
        assert_eq!(
            node.limit.as_ref().expect("a limit").kind,
            LimitKind::Blocked {
                unit: Unit::Hour,
                unit_multiplier: 1
            }
        );
    }

    fn limited(node: &RuleNode) -> &crate::limiter::LimitedRate {
        match &node.limit.as_ref().expect("a limit").kind {
            LimitKind::Limited(rate) => rate,
            LimitKind::Unlimited | LimitKind::Blocked { .. } => panic!("expected a counted limit"),
        }
    }

    const DESIGN_EXAMPLE: &str = r#"domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 1000}
  - key: api_key
    value: free
    descriptors:
      - key: path
        rate_limit:
          unit: second
          requests_per_unit: 10
          algorithm: gcra
          burst: 20
          unit_multiplier: 1
  - key: api_key
    value: internal
  - key: user_agent
    value: "curl*"
    rate_limit: {unit: minute, requests_per_unit: 5, name: curl, replaces: [{name: other}]}
  - key: debug
    rate_limit: {unlimited: true}
  - key: tenant
    shadow_mode: true
    detailed_metric: true
    rate_limit: {unit: Hour, requests_per_unit: 100, unit_multiplier: 5}
"#;

    #[test]
    fn builds_the_design_example() {
        let rules = rules(DESIGN_EXAMPLE);
        assert_eq!(rules.domain, "edge");
        let root = &rules.root;

        let remote = &root.key_only["remote_address"];
        let rate = limited(remote);
        assert_eq!((rate.requests_per_unit, rate.unit), (1000, Unit::Minute));
        assert_eq!(rate.algorithm(), Algorithm::FixedWindow);
        assert_eq!(remote.limit.as_ref().unwrap().path, "edge.remote_address");

        let free = &root.exact["api_key"]["free"];
        assert!(free.limit.is_none());
        let path = &free.children.key_only["path"];
        let limit = path.limit.as_ref().unwrap();
        assert_eq!(limit.path, "edge.api_key_free.path");
        let rate = limited(path);
        assert_eq!(rate.algorithm(), Algorithm::Gcra);
        assert_eq!(rate.rate.burst(), 20);
        assert_eq!(rate.rate.window_us(), 1_000_000);

        let internal = &root.exact["api_key"]["internal"];
        assert!(internal.limit.is_none() && internal.children == Default::default());

        assert_eq!(root.wildcards.len(), 1);
        let curl = &root.wildcards[0];
        assert_eq!(
            (curl.key.as_str(), curl.pattern.as_str()),
            ("user_agent", "curl*")
        );
        assert!(!curl.share_threshold);
        let limit = curl.node.limit.as_ref().unwrap();
        assert_eq!(limit.name.as_deref(), Some("curl"));
        assert_eq!(limit.replaces, vec!["other".to_string()]);
        assert_eq!(limit.path, "edge.user_agent_curl*");

        let debug = root.key_only["debug"].limit.as_ref().unwrap();
        assert_eq!(debug.kind, LimitKind::Unlimited);
        assert!(!debug.shadow_mode);

        let tenant = &root.key_only["tenant"];
        let limit = tenant.limit.as_ref().unwrap();
        assert!(limit.shadow_mode && limit.detailed_metric);
        let rate = limited(tenant);
        assert_eq!((rate.unit, rate.unit_multiplier), (Unit::Hour, 5));
        assert_eq!(rate.rate.window_us(), 5 * 3_600 * 1_000_000);
    }

    #[test]
    fn wildcards_keep_config_order_and_any_star_makes_one() {
        let rules = rules(
            r#"domain: d
descriptors:
  - key: k
    value: "b*"
  - key: k
    value: "a*"
  - key: k
    value: "mid*dle"
  - key: k
    value: "*"
  - key: k
    value: "*.example.com"
  - key: k
    value: "foo*bar*baz"
  - key: k
    value: plain
"#,
        );
        let patterns: Vec<&str> = rules
            .root
            .wildcards
            .iter()
            .map(|w| w.pattern.as_str())
            .collect();
        assert_eq!(
            patterns,
            ["b*", "a*", "mid*dle", "*", "*.example.com", "foo*bar*baz"]
        );
        assert_eq!(rules.root.exact["k"].len(), 1);
        assert!(rules.root.exact["k"].contains_key("plain"));
    }

    #[test]
    fn share_threshold_is_kept_on_its_wildcard() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: f\n    value: \"/api*v1\"\n    share_threshold: true\n  - key: f\n    value: \"x*\"\n",
        );
        let shared: Vec<(&str, bool)> = rules
            .root
            .wildcards
            .iter()
            .map(|w| (w.pattern.as_str(), w.share_threshold))
            .collect();
        assert_eq!(shared, [("/api*v1", true), ("x*", false)]);
    }

    #[test]
    fn quota_mode_and_metadata_reach_the_limit() {
        let rules = rules(
            r#"domain: d
descriptors:
  - key: k
    quota_mode: true
    metadata:
      name: service_1
      nested: {tier: 2, ratio: 0.5, on: true, none: ~, list: [a, 1]}
    rate_limit: {unit: second, requests_per_unit: 1}
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 1}
"#,
        );
        let limit = rules.root.key_only["k"].limit.as_ref().expect("a limit");
        assert!(limit.quota_mode && !limit.shadow_mode);
        let metadata = limit.metadata.as_deref().expect("metadata");
        let text = |s: &str| MetadataValue::String(s.into());
        assert_eq!(metadata["name"], text("service_1"));
        let MetadataValue::Map(nested) = &metadata["nested"] else {
            panic!("nested is a map: {metadata:?}");
        };
        assert_eq!(nested["tier"], MetadataValue::Number(Number(2.0)));
        assert_eq!(nested["ratio"], MetadataValue::Number(Number(0.5)));
        assert_eq!(nested["on"], MetadataValue::Bool(true));
        assert_eq!(nested["none"], MetadataValue::Null);
        assert_eq!(
            nested["list"],
            MetadataValue::List(vec![text("a"), MetadataValue::Number(Number(1.0))])
        );
        let plain = rules.root.key_only["plain"]
            .limit
            .as_ref()
            .expect("a limit");
        assert!(!plain.quota_mode && plain.metadata.is_none());
    }

    #[test]
    fn metadata_must_be_a_map_without_duplicate_keys() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    metadata: [1]\n",
            4,
            "descriptors[0].metadata",
            "must be a map, found a list",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      a: 1\n      a: 2\n",
            6,
            "descriptors[0].metadata.a",
            "duplicate key `a`",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    metadata:\n      inner:\n        ~: 1\n",
            6,
            "descriptors[0].metadata.inner.?",
            "keys must be strings",
        );
    }

    #[test]
    fn scalar_values_are_read_as_written_and_empty_value_is_key_only() {
        let rules = rules("domain: 42\ndescriptors:\n  - key: code\n    value: 200\n  - key: other\n    value: \"\"\n");
        assert_eq!(rules.domain, "42");
        assert!(rules.root.exact["code"].contains_key("200"));
        assert!(rules.root.key_only.contains_key("other"));
    }

    #[test]
    fn accepts_envoyproxy_only_fields() {
        rules(
            r#"domain: d
descriptors:
  - key: k
    value: "v*"
    value_to_metric: true
    quota_mode: false
    share_threshold: true
    metadata: {anything: [1, 2, {x: y}]}
    rate_limit: {unit: second, requests_per_unit: 1}
"#,
        );
    }

    #[test]
    fn anchors_and_merge_keys_share_settings() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: &std {unit: minute, requests_per_unit: 10}\n  - key: b\n    rate_limit:\n      <<: *std\n      requests_per_unit: 20\n  - key: c\n    rate_limit: *std\n",
        );
        let rate = |key: &str| {
            let rate = limited(&rules.root.key_only[key]);
            (rate.requests_per_unit, rate.unit)
        };
        assert_eq!(rate("a"), (10, Unit::Minute));
        assert_eq!(rate("b"), (20, Unit::Minute));
        assert_eq!(rate("c"), (10, Unit::Minute));
    }

    #[test]
    fn empty_descriptors_are_valid() {
        assert!(rules("domain: d\n").root == Default::default());
        assert!(rules("domain: d\ndescriptors:\n").root == Default::default());
        assert!(rules("domain: d\ndescriptors: []\n").root == Default::default());
    }

    #[test]
    fn unknown_field_suggests_the_closest_key() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    ratelimit: {unit: day}\n",
            4,
            "descriptors[0].ratelimit",
            "unknown field `ratelimit`; did you mean `rate_limit`?",
        );
        let errors = errors_of("domian: d\n");
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].2, "domian");
        assert!(
            errors[0].3.contains("did you mean `domain`?"),
            "{errors:#?}"
        );
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      uint: day\n      requests_per_unit: 1\n",
        );
        let found: Vec<(usize, &str)> = errors.iter().map(|e| (e.0, e.2.as_str())).collect();
        assert_eq!(
            found,
            [
                (5, "descriptors[0].rate_limit.uint"),
                (5, "descriptors[0].rate_limit.unit")
            ]
        );
        assert!(errors[0].3.contains("did you mean `unit`?"), "{errors:#?}");
    }

    #[test]
    fn unknown_field_without_a_close_match_lists_the_valid_ones() {
        let errors = errors_of("domain: d\nbanana: 1\n");
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!((errors[0].0, errors[0].2.as_str()), (2, "banana"));
        assert!(
            errors[0].3.contains("expected one of: domain, descriptors"),
            "{errors:#?}"
        );
    }

    #[test]
    fn misspelled_rate_limit_field_reports_unknown_and_missing() {
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      uint: day\n      requests_per_unit: 1\n",
        );
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(errors[0].0, 6);
        assert!(errors[0].3.contains("did you mean `unit`?"), "{errors:#?}");
    }

    #[test]
    fn wrong_types_are_reported_where_they_are() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      - unit: day\n",
            5,
            "descriptors[0].rate_limit",
            "must be a map, found a list",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - just a string\n",
            3,
            "descriptors[0]",
            "a descriptor must be a map, found a string",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  key: k\n",
            3,
            "descriptors",
            "must be a list of descriptors, found a map",
        );
        assert_one_error("- domain: d\n", 1, "(root)", "must be a map, found a list");
        assert_one_error(
            "domain: [d]\n",
            1,
            "domain",
            "must be a string, found a list",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    shadow_mode: maybe\n",
            4,
            "descriptors[0].shadow_mode",
            "must be true or false, found a string `maybe`",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: \"5\"}\n",
            4,
            "descriptors[0].rate_limit.requests_per_unit",
            "must be a whole number from 0 (0 denies every request), found a string `5`",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      replaces: other\n",
            7,
            "descriptors[0].rate_limit.replaces",
            "must be a list",
        );
    }

    #[test]
    fn non_string_keys_are_rejected() {
        let errors =
            errors_of("0.25: d\ndomain: d\ndescriptors:\n  - key: k\n    [a]: b\n    true: x\n");
        let found: Vec<(usize, &str)> = errors.iter().map(|e| (e.0, e.2.as_str())).collect();
        assert_eq!(
            found,
            [
                (1, "0.25"),
                (5, "descriptors[0].?"),
                (6, "descriptors[0].true")
            ],
            "{errors:#?}"
        );
        assert!(errors[0]
            .3
            .contains("keys must be strings, found a floating-point number"));
        assert!(errors[1].3.contains("found a list"));
        assert!(errors[2].3.contains("found a boolean"));
    }

    #[test]
    fn duplicate_yaml_keys_are_errors_naming_the_first() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    value: x\n    key: b\n",
            5,
            "descriptors[0].key",
            "duplicate key `key` (first defined at line 3)",
        );
        assert_one_error(
            "domain: a\ndomain: b\n",
            2,
            "domain",
            "first defined at line 1",
        );
    }

    #[test]
    fn missing_or_empty_domain() {
        assert_one_error("descriptors:\n  - key: k\n", 1, "domain", "missing");
        assert_one_error("domain: \"\"\n", 1, "domain", "must not be empty");
        assert_one_error(
            "domain:\ndescriptors: []\n",
            1,
            "domain",
            "must not be empty",
        );
        assert_one_error("", 1, "domain", "missing");
        assert_one_error("# nothing\n", 1, "domain", "missing");
    }

    #[test]
    fn missing_or_empty_key() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n  - value: v\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
            4,
            "descriptors[1].key",
            "missing",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: ''\n",
            5,
            "descriptors[0].descriptors[0].key",
            "must not be empty",
        );
    }

    #[test]
    fn bad_unit_lists_the_units() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 1\n      unit: fortnight\n",
            6,
            "descriptors[0].rate_limit.unit",
            "unknown unit `fortnight`; expected one of: second, minute, hour, day, week, month, year",
        );
    }

    #[test]
    fn unlimited_excludes_unit_and_requests_per_unit() {
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 5\n",
        );
        let found: Vec<(usize, &str)> = errors.iter().map(|e| (e.0, e.2.as_str())).collect();
        assert_eq!(
            found,
            [
                (6, "descriptors[0].rate_limit.unit"),
                (7, "descriptors[0].rate_limit.requests_per_unit")
            ]
        );
        assert!(errors[0]
            .3
            .contains("cannot be combined with `unlimited: true`"));
        rules("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: false, unit: day, requests_per_unit: 5}\n");
    }

    #[test]
    fn a_rate_limit_needs_a_unit_or_unlimited() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n",
            5,
            "descriptors[0].rate_limit.unit",
            "needs a `unit` (or `unlimited: true`)",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {}\n",
            4,
            "descriptors[0].rate_limit.unit",
            "needs a `unit`",
        );
    }

    #[test]
    fn null_rate_limit_means_no_limit() {
        let rules = rules("domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n");
        assert!(rules.root.key_only["a"].limit.is_none());
    }

    #[test]
    fn requests_per_unit_must_be_present_and_non_negative() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n",
            5,
            "descriptors[0].rate_limit.requests_per_unit",
            "missing: a rate_limit with a unit needs a `requests_per_unit`: a whole number from 0 \
             (0 denies every request)",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: -1\n",
            6,
            "descriptors[0].rate_limit.requests_per_unit",
            "must be a whole number from 0 (0 denies every request)",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 4294967296\n",
            6,
            "descriptors[0].rate_limit.requests_per_unit",
            "must be at most 4294967295",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1.5\n",
            6,
            "descriptors[0].rate_limit.requests_per_unit",
            "found a floating-point number `1.5`",
        );
    }

    #[test]
    fn duplicate_descriptors_name_the_first_line() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    value: v\n  - key: b\n  - key: a\n    value: v\n",
            6,
            "descriptors[2]",
            "duplicate descriptor: key `a` and value `v` is already defined at line 3",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n  - key: a\n    value: v\n  - key: a\n",
            6,
            "descriptors[2]",
            "key `a` without a value is already defined at line 3",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - {key: w, value: \"x*\"}\n      - {key: w, value: \"x*\"}\n",
            6,
            "descriptors[0].descriptors[1]",
            "already defined at line 5",
        );
        rules("domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: a\n  - key: a\n    value: b\n");
    }

    #[test]
    fn replaces_entries_need_a_name_other_than_their_own() {
        let base = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: me\n      unit: day\n      requests_per_unit: 1\n      replaces:\n";
        assert_one_error(
            &format!("{base}        - name:\n"),
            9,
            "descriptors[0].rate_limit.replaces[0].name",
            "must not be empty",
        );
        assert_one_error(
            &format!("{base}        - {{}}\n"),
            9,
            "descriptors[0].rate_limit.replaces[0].name",
            "missing",
        );
        assert_one_error(
            &format!("{base}        - name: other\n        - name: me\n"),
            10,
            "descriptors[0].rate_limit.replaces[1].name",
            "cannot replace itself",
        );
        let errors = errors_of(&format!("{base}        - nmae: other\n"));
        assert_eq!(errors.len(), 2, "{errors:#?}");
        assert_eq!(errors[0].2, "descriptors[0].rate_limit.replaces[0].nmae");
        assert!(errors[0].3.contains("did you mean `name`?"), "{errors:#?}");
        assert_eq!(errors[1].2, "descriptors[0].rate_limit.replaces[0].name");
    }

    #[test]
    fn burst_and_unit_multiplier_must_be_positive() {
        let base = "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      algorithm: token_bucket\n";
        assert_one_error(
            &format!("{base}      burst: 0\n"),
            8,
            "descriptors[0].rate_limit.burst",
            "must be a positive integer",
        );
        assert_one_error(
            &format!("{base}      burst: -3\n"),
            8,
            "descriptors[0].rate_limit.burst",
            "must be a positive integer",
        );
        assert_one_error(
            &format!("{base}      unit_multiplier: 0\n"),
            8,
            "descriptors[0].rate_limit.unit_multiplier",
            "must be a positive integer",
        );
    }

    #[test]
    fn burst_applies_only_to_token_bucket_and_gcra() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      burst: 5\n",
            7,
            "descriptors[0].rate_limit.burst",
            "burst applies only to token_bucket and gcra",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      algorithm: sliding_window_log\n      unit: day\n      requests_per_unit: 1\n      burst: 5\n",
            8,
            "descriptors[0].rate_limit.burst",
            "burst applies only to token_bucket and gcra",
        );
    }

    #[test]
    fn unknown_algorithm_lists_the_algorithms() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      algorithm: leaky_bucket\n",
            7,
            "descriptors[0].rate_limit.algorithm",
            "unknown algorithm `leaky_bucket`; expected one of: fixed_window, sliding_window_log, sliding_window_counter, token_bucket, gcra",
        );
    }

    #[test]
    fn every_algorithm_parses() {
        for algorithm in Algorithm::ALL {
            let rules = rules(&format!(
                "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {{unit: second, requests_per_unit: 3, algorithm: {algorithm}}}\n"
            ));
            let rate = limited(&rules.root.key_only["a"]);
            assert_eq!(rate.algorithm(), algorithm);
            assert_eq!(rate.rate.burst(), 3);
        }
    }

    /// `text`'s rules, loaded with `--consistency default`.
    fn rules_by_default(text: &str, default: Consistency) -> DomainRules {
        let loader = Loader::default().with_options(LoadOptions {
            default_consistency: default,
            ..LoadOptions::default()
        });
        match loader.parse_file(&Origin::File("test.yaml".into()), text) {
            Ok(parsed) => parsed.rules,
            Err(errors) => panic!("unexpected errors:\n{errors:#?}"),
        }
    }

    const CONSISTENCIES: &str = "domain: d
descriptors:
  - key: plain
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: leased
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: gcra, consistency: leased}
  - key: exact
    rate_limit: {unit: second, requests_per_unit: 3, consistency: Exact}
  - key: log
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window_log}
  - key: counter
    rate_limit: {unit: second, requests_per_unit: 3, algorithm: sliding_window_counter}
";

    #[test]
    fn consistency_is_read_and_a_rule_that_does_not_say_takes_the_default() {
        let consistencies = |default| {
            let rules = rules_by_default(CONSISTENCIES, default);
            ["plain", "leased", "exact", "log", "counter"]
                .map(|key| limited(&rules.root.key_only[key]).consistency)
        };
        use Consistency::{Exact, Leased};
        assert_eq!(consistencies(Exact), [Exact, Leased, Exact, Exact, Exact]);
        assert_eq!(
            consistencies(Leased),
            [Leased, Leased, Exact, Exact, Leased],
            "under a leased default, a log that does not say stays exact"
        );
        assert_eq!(
            limited(&rules(CONSISTENCIES).root.key_only["plain"]).consistency,
            Exact,
            "exact unless told otherwise"
        );
    }

    #[test]
    fn unknown_consistency_lists_the_accepted_ones() {
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      consistency: eventual\n",
        );
        assert_eq!(errors.len(), 1, "{errors:#?}");
        assert_eq!(
            errors[0],
            (
                7,
                20,
                "descriptors[0].rate_limit.consistency".to_string(),
                "unknown consistency `eventual`; expected one of: exact, leased".to_string()
            )
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, consistency: [leased]}\n",
            4,
            "descriptors[0].rate_limit.consistency",
            "must be a string, found a list",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, requests_per_unit: 1, consistancy: leased}\n",
            4,
            "descriptors[0].rate_limit.consistancy",
            "did you mean `consistency`?",
        );
    }

    #[test]
    fn a_sliding_window_log_cannot_be_leased_and_the_error_says_why() {
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1\n      algorithm: sliding_window_log\n      consistency: leased\n",
        );
        assert_eq!(errors.len(), 1, "{errors:#?}");
        let (line, column, field, message) = &errors[0];
        assert_eq!(
            (*line, *column, field.as_str()),
            (8, 20, "descriptors[0].rate_limit.consistency")
        );
        for needle in [
            "`consistency: leased` cannot apply to sliding_window_log",
            "one entry per admitted request",
            "cannot reserve a number of hits",
            "sliding_window_counter",
        ] {
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        let errors = errors_of(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: day, consistency: leased, algorithm: sliding_window_log, burst: 2}\n",
        );
        let fields: Vec<&str> = errors.iter().map(|e| e.2.as_str()).collect();
        assert_eq!(
            fields,
            [
                "descriptors[0].rate_limit.requests_per_unit",
                "descriptors[0].rate_limit.consistency",
                "descriptors[0].rate_limit.burst"
            ],
            "reported with the rule's other errors: {errors:#?}"
        );
    }

    #[test]
    fn leased_is_accepted_where_no_counter_is_kept() {
        let rules = rules(
            "domain: d\ndescriptors:\n  - key: free\n    rate_limit: {unlimited: true, consistency: leased}\n  - key: banned\n    rate_limit: {unit: day, requests_per_unit: 0, algorithm: sliding_window_log, consistency: leased}\n",
        );
        assert_eq!(
            rules.root.key_only["free"].limit.as_ref().unwrap().kind,
            LimitKind::Unlimited
        );
        assert!(matches!(
            rules.root.key_only["banned"].limit.as_ref().unwrap().kind,
            LimitKind::Blocked { .. }
        ));
    }

    #[test]
    fn rates_that_rate_new_rejects_are_reported_with_its_message() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 101\n",
            7,
            "descriptors[0].rate_limit.unit_multiplier",
            "longer than the supported maximum of 100 years",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      requests_per_unit: 1\n      unit_multiplier: 100\n      algorithm: gcra\n      burst: 2\n",
            9,
            "descriptors[0].rate_limit.burst",
            "burst 2 takes",
        );
    }

    #[test]
    fn share_threshold_needs_a_wildcard_value() {
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
            5,
            "descriptors[0].share_threshold",
            "only to wildcard values (containing `*`)",
        );
        assert_one_error(
            "domain: d\ndescriptors:\n  - key: a\n    share_threshold: true\n",
            4,
            "descriptors[0].share_threshold",
            "only to wildcard values",
        );
    }

    #[test]
    fn collects_every_error_in_source_order() {
        let errors = errors_of(
            r#"domain: d
descriptors:
  - key: a
    rate_limit: {unit: parsec, requests_per_unit: 1}
  - value: x
  - key: b
    descriptors:
      - key: c
        rate_limit:
          unlimited: true
          unit: day
        shadow_mod: true
  - key: a
"#,
        );
        let lines: Vec<usize> = errors.iter().map(|e| e.0).collect();
        assert_eq!(lines, [4, 5, 11, 12, 13], "{errors:#?}");
    }
}
