//! Reading a statsd_exporter mapping file into a [`Mapper`]: each key as statsd_exporter's YAML
//! decoding and `InitFromYAMLString` read and check it, errors at their `line:column`.

use std::time::Duration;

use super::*;
use crate::config::yaml::{self, MapEntry, Node, Scalar, ScalarType, Value};
use crate::go_values::parse_duration;
use crate::service::go_regex;

fn at(node: &Node, message: impl std::fmt::Display) -> MapperError {
    MapperError(format!("{}:{}: {message}", node.pos.line, node.pos.column))
}

impl Mapper {
    /// Reads a mapping file's text. `unknown` receives each key statsd_exporter does not know
    /// (`line:column: key`), which it ignores too.
    pub fn parse(text: &str, unknown: &mut Vec<String>) -> Result<Mapper, MapperError> {
        let root = yaml::parse(text, MAX_ALIAS_BYTES)
            .map_err(|e| MapperError(format!("{}:{}: {}", e.pos.line, e.pos.column, e.message)))?;
        let mut defaults = Defaults {
            observer: ObserverType::Unset,
            regex: false,
            buckets: DEFAULT_BUCKETS.to_vec(),
            summary: SummaryOptions {
                quantiles: DEFAULT_QUANTILES.to_vec(),
                max_age: Duration::ZERO,
                age_buckets: 0,
            },
        };
        let mut mapping_nodes: &[Node] = &[];
        match &root.value {
            Value::Scalar(s) if s.is_null() => {}
            Value::Map(map) => {
                for entry in &map.entries {
                    match key(entry)? {
                        "defaults" => defaults = read_defaults(&entry.value, unknown)?,
                        "mappings" => match &entry.value.value {
                            Value::Seq(items) => mapping_nodes = items,
                            Value::Scalar(s) if s.is_null() => {}
                            _ => return Err(at(&entry.value, "mappings: expected a list")),
                        },
                        other => unknown.push(place(&entry.key, other)),
                    }
                }
            }
            _ => return Err(at(&root, "expected a mapping with `mappings:`")),
        }
        let mut mapper = Mapper {
            mappings: Vec::new(),
            states: vec![State::default(); StatType::ALL.len()],
            has_globs: false,
            defaults,
        };
        for node in mapping_nodes {
            let mapping = mapper.read_mapping(node, unknown)?;
            let index = mapper.mappings.len();
            if let Matcher::Glob { .. } = mapping.matcher {
                let pattern = mapping.pattern.clone();
                mapper.add_glob(&pattern, mapping.stat_type, index);
                mapper.has_globs = true;
            }
            mapper.mappings.push(mapping);
        }
        Ok(mapper)
    }

    /// Where each mapping of `match` ends in the glob tree, as statsd_exporter's `AddState`: a
    /// state created for the last field gets this mapping; every final state gets this
    /// mapping's priority (its order among globs), even one an earlier identical glob created.
    fn add_glob(&mut self, pattern: &str, stat_type: Option<StatType>, mapping: usize) {
        let roots: Vec<usize> = match stat_type {
            Some(t) => vec![t.index()],
            None => StatType::ALL.iter().map(|t| t.index()).collect(),
        };
        let fields: Vec<&str> = pattern.split('.').collect();
        let priority = self
            .mappings
            .iter()
            .filter(|m| matches!(m.matcher, Matcher::Glob { .. }))
            .count();
        for root in roots {
            let mut state = root;
            for (i, field) in fields.iter().enumerate() {
                state = match self.states[state].transitions.get(*field) {
                    Some(next) => *next,
                    None => {
                        let next = self.states.len();
                        self.states.push(State {
                            result: (i == fields.len() - 1).then_some(mapping),
                            ..State::default()
                        });
                        self.states[state]
                            .transitions
                            .insert((*field).to_string(), next);
                        next
                    }
                };
            }
            self.states[state].priority = priority;
        }
    }

    fn read_mapping(&self, node: &Node, unknown: &mut Vec<String>) -> Result<Mapping, MapperError> {
        let Value::Map(map) = &node.value else {
            return Err(at(node, "a mapping must be a map (`match:`, `name:`...)"));
        };
        let mut match_text: Option<(String, &Node)> = None;
        let mut name = String::new();
        let mut labels: Vec<(String, String)> = Vec::new();
        let mut regex: Option<bool> = None;
        let mut observer = ObserverType::Unset;
        let mut timer_type = ObserverType::Unset;
        let mut stat_type = None;
        let mut drop = false;
        let mut help = None;
        let mut legacy_buckets: Option<Vec<f64>> = None;
        let mut legacy_quantiles: Option<Vec<(f64, f64)>> = None;
        let mut histogram_buckets: Option<Vec<f64>> = None;
        let mut histogram_options = false;
        let mut summary: Option<WrittenSummary> = None;
        let mut scale = None;
        for entry in &map.entries {
            let value = &entry.value;
            match key(entry)? {
                "match" => match_text = Some((string(value, "match")?, value)),
                "name" => name = string(value, "name")?,
                "labels" => labels = read_labels(value)?,
                "honor_labels" => {
                    boolean(value, "honor_labels")?;
                }
                "observer_type" => observer = observer_type(value, "observer_type")?,
                "timer_type" => timer_type = observer_type(value, "timer_type")?,
                "buckets" => legacy_buckets = Some(floats(value, "buckets")?),
                "quantiles" => legacy_quantiles = Some(quantiles(value)?),
                "match_type" => regex = Some(match_type(value)?),
                "help" => help = Some(string(value, "help")?),
                "action" => {
                    drop = match string(value, "action")?.as_str() {
                        "drop" => true,
                        "map" | "" => false,
                        other => return Err(at(value, format!("invalid action type {other:?}"))),
                    }
                }
                "match_metric_type" => stat_type = Some(metric_type(value)?),
                "ttl" => refuse_ttl(value)?,
                "summary_options" => summary = Some(read_summary_options(value, unknown)?),
                "histogram_options" => {
                    histogram_options = true;
                    histogram_buckets = read_histogram_options(value, unknown)?;
                }
                "scale" => scale = Some(float(value, "scale")?),
                other => unknown.push(place(&entry.key, other)),
            }
        }
        if observer == ObserverType::Unset {
            observer = timer_type;
        }
        let Some((pattern, pattern_node)) = match_text else {
            return Err(at(node, "mapping has no `match`"));
        };
        for (label, _) in &labels {
            if !is_label_name(label) {
                return Err(at(node, format!("invalid label key: {label}")));
            }
        }
        if name.is_empty() {
            return Err(at(node, "metric mapping didn't set a metric name"));
        }
        if !is_mapping_name(&name) {
            return Err(at(
                node,
                format!("metric name '{name}' is not letters, digits, `_` and `$N` captures"),
            ));
        }
        let matcher = if regex.unwrap_or(self.defaults.regex) {
            Matcher::Regex(go_regex::compile(&pattern).map_err(|error| {
                at(
                    pattern_node,
                    format!("invalid regex {pattern} in mapping: {error}"),
                )
            })?)
        } else {
            if !is_glob(&pattern) {
                return Err(at(pattern_node, format!("invalid match: {pattern}")));
            }
            Matcher::Glob {
                captures: pattern.split('.').filter(|field| *field == "*").count(),
            }
        };
        if observer == ObserverType::Unset {
            observer = self.defaults.observer;
        }
        let WrittenSummary {
            quantiles: summary_quantiles,
            max_age,
            age_buckets,
        } = summary.clone().unwrap_or_default();
        if summary_quantiles.is_some() && legacy_quantiles.is_some() {
            return Err(at(node, format!("cannot use quantiles in both the top level and summary options at the same time in {pattern}")));
        }
        if histogram_buckets.is_some() && legacy_buckets.is_some() {
            return Err(at(node, format!("cannot use buckets in both the top level and histogram options at the same time in {pattern}")));
        }
        if observer == ObserverType::Histogram && summary.is_some() {
            return Err(at(
                node,
                "cannot use histogram observer and summary options at the same time",
            ));
        }
        if observer == ObserverType::Summary && histogram_options {
            return Err(at(
                node,
                "cannot use summary observer and histogram options at the same time",
            ));
        }
        let buckets = histogram_buckets
            .or(legacy_buckets)
            .filter(|buckets| !buckets.is_empty());
        if let Some(buckets) = &buckets {
            check_buckets(buckets).map_err(|error| at(node, error))?;
        }
        let summary = (summary.is_some() || legacy_quantiles.is_some()).then(|| SummaryOptions {
            quantiles: summary_quantiles
                .or(legacy_quantiles)
                .filter(|q| !q.is_empty())
                .unwrap_or_else(|| self.defaults.summary.quantiles.clone()),
            max_age: if max_age.is_zero() {
                self.defaults.summary.max_age
            } else {
                max_age
            },
            age_buckets: if age_buckets == 0 {
                self.defaults.summary.age_buckets
            } else {
                age_buckets
            },
        });
        labels.sort();
        Ok(Mapping {
            pattern,
            matcher,
            stat_type,
            name,
            labels,
            drop,
            help,
            observer,
            buckets,
            summary,
            scale,
        })
    }
}

fn place(node: &Node, key: &str) -> String {
    format!("{}:{}: {key}", node.pos.line, node.pos.column)
}

fn key(entry: &MapEntry) -> Result<&str, MapperError> {
    match &entry.key.value {
        Value::Scalar(Scalar { text, .. }) => Ok(text),
        _ => Err(at(&entry.key, "a key must be a plain word")),
    }
}

fn scalar<'n>(node: &'n Node, field: &str) -> Result<&'n Scalar, MapperError> {
    match &node.value {
        Value::Scalar(s) => Ok(s),
        _ => Err(at(
            node,
            format!("{field}: expected a value, not a list or map"),
        )),
    }
}

fn string(node: &Node, field: &str) -> Result<String, MapperError> {
    let s = scalar(node, field)?;
    Ok(if s.is_null() {
        String::new()
    } else {
        s.text.clone()
    })
}

fn boolean(node: &Node, field: &str) -> Result<bool, MapperError> {
    scalar(node, field)?
        .as_bool()
        .ok_or_else(|| at(node, format!("{field}: expected true or false")))
}

fn float(node: &Node, field: &str) -> Result<f64, MapperError> {
    let s = scalar(node, field)?;
    let text = s.text.as_str();
    let value = match (s.plain, s.resolve()) {
        (true, ScalarType::Int | ScalarType::Float) => match text {
            ".inf" | ".Inf" | ".INF" | "+.inf" | "+.Inf" | "+.INF" => Some(f64::INFINITY),
            "-.inf" | "-.Inf" | "-.INF" => Some(f64::NEG_INFINITY),
            _ => s
                .as_integer()
                .map(|i| i as f64)
                .or_else(|| text.parse::<f64>().ok()),
        },
        _ => None,
    };
    value.ok_or_else(|| at(node, format!("{field}: `{text}` is not a number")))
}

fn floats(node: &Node, field: &str) -> Result<Vec<f64>, MapperError> {
    match &node.value {
        Value::Seq(items) => items.iter().map(|item| float(item, field)).collect(),
        Value::Scalar(s) if s.is_null() => Ok(Vec::new()),
        _ => Err(at(node, format!("{field}: expected a list of numbers"))),
    }
}

fn quantiles(node: &Node) -> Result<Vec<(f64, f64)>, MapperError> {
    let items = match &node.value {
        Value::Seq(items) => items,
        Value::Scalar(s) if s.is_null() => return Ok(Vec::new()),
        _ => return Err(at(node, "quantiles: expected a list of {quantile, error}")),
    };
    items
        .iter()
        .map(|item| {
            let Value::Map(map) = &item.value else {
                return Err(at(item, "quantiles: expected {quantile: Q, error: E}"));
            };
            let (mut quantile, mut error) = (0.0, 0.0);
            for entry in &map.entries {
                match key(entry)? {
                    "quantile" => quantile = float(&entry.value, "quantile")?,
                    "error" => error = float(&entry.value, "error")?,
                    _ => {}
                }
            }
            if !(0.0..=1.0).contains(&quantile) {
                return Err(at(
                    item,
                    format!("quantile {quantile} is not between 0 and 1"),
                ));
            }
            Ok((quantile, error))
        })
        .collect()
}

fn read_labels(node: &Node) -> Result<Vec<(String, String)>, MapperError> {
    match &node.value {
        Value::Map(map) => map
            .entries
            .iter()
            .map(|entry| Ok((key(entry)?.to_string(), string(&entry.value, "labels")?)))
            .collect(),
        Value::Scalar(s) if s.is_null() => Ok(Vec::new()),
        _ => Err(at(node, "labels: expected a map of label: value")),
    }
}

fn observer_type(node: &Node, field: &str) -> Result<ObserverType, MapperError> {
    if scalar(node, field)?.is_null() {
        return Ok(ObserverType::Unset);
    }
    match string(node, field)?.as_str() {
        "histogram" => Ok(ObserverType::Histogram),
        "summary" | "" => Ok(ObserverType::Summary),
        other => Err(at(node, format!("invalid observer type '{other}'"))),
    }
}

fn match_type(node: &Node) -> Result<bool, MapperError> {
    match string(node, "match_type")?.as_str() {
        "regex" => Ok(true),
        "glob" | "" => Ok(false),
        other => Err(at(node, format!("invalid match type {other:?}"))),
    }
}

fn metric_type(node: &Node) -> Result<StatType, MapperError> {
    match string(node, "match_metric_type")?.as_str() {
        "counter" => Ok(StatType::Counter),
        "gauge" => Ok(StatType::Gauge),
        "observer" | "timer" => Ok(StatType::Observer),
        other => Err(at(node, format!("invalid metric type '{other}'"))),
    }
}

fn duration(node: &Node, field: &str) -> Result<Duration, MapperError> {
    let s = scalar(node, field)?;
    if s.is_null() {
        return Ok(Duration::ZERO);
    }
    if let Some(nanos) = s.as_integer() {
        return u64::try_from(nanos)
            .map(Duration::from_nanos)
            .map_err(|_| at(node, format!("{field}: `{}` is not a duration", s.text)));
    }
    parse_duration(&s.text).map_err(|error| at(node, format!("{field}: {error}")))
}

fn refuse_ttl(node: &Node) -> Result<(), MapperError> {
    if duration(node, "ttl")?.is_zero() {
        return Ok(());
    }
    Err(at(
        node,
        "ttl is not supported: series here never expire (a series stays once a stat has counted)",
    ))
}

fn read_summary_options(
    node: &Node,
    unknown: &mut Vec<String>,
) -> Result<WrittenSummary, MapperError> {
    let mut options = WrittenSummary::default();
    let Value::Map(map) = &node.value else {
        return Ok(options);
    };
    for entry in &map.entries {
        match key(entry)? {
            "quantiles" => options.quantiles = Some(quantiles(&entry.value)?),
            "max_age" => options.max_age = duration(&entry.value, "max_age")?,
            "age_buckets" => {
                let s = scalar(&entry.value, "age_buckets")?;
                options.age_buckets = s
                    .as_integer()
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| at(&entry.value, "age_buckets: expected a whole number"))?;
            }
            "buf_cap" => {}
            other => unknown.push(place(&entry.key, other)),
        }
    }
    Ok(options)
}

/// `histogram_options`: its buckets; the native-histogram settings change nothing in the text
/// format and are accepted.
fn read_histogram_options(
    node: &Node,
    unknown: &mut Vec<String>,
) -> Result<Option<Vec<f64>>, MapperError> {
    let mut buckets = None;
    let Value::Map(map) = &node.value else {
        return Ok(buckets);
    };
    for entry in &map.entries {
        match key(entry)? {
            "buckets" => buckets = Some(floats(&entry.value, "buckets")?).filter(|b| !b.is_empty()),
            "native_histogram_bucket_factor" | "native_histogram_max_buckets" => {}
            other => unknown.push(place(&entry.key, other)),
        }
    }
    Ok(buckets)
}

fn read_defaults(node: &Node, unknown: &mut Vec<String>) -> Result<Defaults, MapperError> {
    let mut defaults = Defaults {
        observer: ObserverType::Unset,
        regex: false,
        buckets: DEFAULT_BUCKETS.to_vec(),
        summary: SummaryOptions {
            quantiles: DEFAULT_QUANTILES.to_vec(),
            max_age: Duration::ZERO,
            age_buckets: 0,
        },
    };
    let Value::Map(map) = &node.value else {
        return Ok(defaults);
    };
    let (mut observer, mut timer_type) = (ObserverType::Unset, ObserverType::Unset);
    let (mut legacy_buckets, mut legacy_quantiles) = (None, None);
    let (mut buckets, mut summary) = (None, None);
    for entry in &map.entries {
        let value = &entry.value;
        match key(entry)? {
            "observer_type" => observer = observer_type(value, "observer_type")?,
            "timer_type" => timer_type = observer_type(value, "timer_type")?,
            "buckets" => legacy_buckets = Some(floats(value, "buckets")?),
            "quantiles" => legacy_quantiles = Some(quantiles(value)?),
            "match_type" => defaults.regex = match_type(value)?,
            "glob_disable_ordering" => {
                if boolean(value, "glob_disable_ordering")? {
                    return Err(at(
                        value,
                        "glob_disable_ordering: true is not supported: the first glob in the file wins",
                    ));
                }
            }
            "ttl" => refuse_ttl(value)?,
            "summary_options" => summary = Some(read_summary_options(value, unknown)?),
            "histogram_options" => buckets = read_histogram_options(value, unknown)?,
            other => unknown.push(place(&entry.key, other)),
        }
    }
    defaults.observer = if observer == ObserverType::Unset {
        timer_type
    } else {
        observer
    };
    if let Some(buckets) = buckets.or(legacy_buckets).filter(|b| !b.is_empty()) {
        check_buckets(&buckets).map_err(|error| at(node, error))?;
        defaults.buckets = buckets;
    }
    let summary = summary.unwrap_or_default();
    if let Some(quantiles) = summary
        .quantiles
        .or(legacy_quantiles)
        .filter(|q| !q.is_empty())
    {
        defaults.summary.quantiles = quantiles;
    }
    defaults.summary.max_age = summary.max_age;
    defaults.summary.age_buckets = summary.age_buckets;
    Ok(defaults)
}

/// Histogram bounds must increase (client_golang refuses others); a last `+Inf` is implied.
fn check_buckets(buckets: &[f64]) -> Result<(), String> {
    let finite = buckets.strip_suffix(&[f64::INFINITY]).unwrap_or(buckets);
    let increasing = finite.windows(2).all(|pair| pair[0] < pair[1]);
    if !increasing || finite.iter().any(|b| b.is_nan()) {
        return Err(format!(
            "histogram buckets must be in increasing order: {buckets:?}"
        ));
    }
    Ok(())
}

/// statsd_exporter's label name rule: `[a-zA-Z_][a-zA-Z0-9_]+` (two characters at least).
fn is_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.len() >= 2
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// statsd_exporter's rule for a mapping's name: letters, digits, `_` and `$N` / `${N}`
/// references, not starting with a digit.
fn is_mapping_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut at = 0;
    let mut first = true;
    while at < bytes.len() {
        let b = bytes[at];
        if b == b'$' {
            let braced = bytes.get(at + 1) == Some(&b'{');
            let start = at + 1 + usize::from(braced);
            let mut end = start;
            while end < bytes.len() && bytes[end].is_ascii_digit() {
                end += 1;
            }
            if end == start {
                return false;
            }
            if bytes.get(end) == Some(&b'}') {
                end += 1;
            }
            at = end;
        } else if b.is_ascii_alphabetic() || b == b'_' || (!first && b.is_ascii_digit()) {
            at += 1;
        } else {
            return false;
        }
        first = false;
    }
    !name.is_empty()
}

/// statsd_exporter's glob rule: dot-separated fields, each `*` or a word of letters, digits,
/// `_` and `-` (the first field not starting with a digit or `-`, the others not with `-`).
fn is_glob(pattern: &str) -> bool {
    pattern.split('.').enumerate().all(|(i, field)| {
        if field == "*" {
            return true;
        }
        let mut chars = field.chars();
        let Some(first) = chars.next() else {
            return false;
        };
        let first_ok =
            first.is_ascii_alphabetic() || first == '_' || (i > 0 && first.is_ascii_digit());
        first_ok && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
    })
}
