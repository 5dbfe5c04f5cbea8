//! A small YAML tree in which every node carries its source position, built from
//! saphyr-parser's event stream.
//!
//! Scalars keep their source text and whether they were plain (unquoted); the schema decides
//! how to read them. Duplicate mapping keys are not merged: the first occurrence stays in the
//! map and every repetition is recorded in [`Map::duplicates`]. Aliases are expanded and merge
//! keys (`<<: *defaults`) applied, as envoyproxy/ratelimit's YAML parser does.

use std::collections::HashMap;

use saphyr_parser::{Event, Marker, Parser, ScalarStyle, ScanError, Span, Tag};

/// Nesting deeper than this (maps and lists inside each other) is rejected, so that walking,
/// cloning and dropping a tree never exhausts the stack.
pub const MAX_DEPTH: usize = 128;

/// A document may hold at most this many nodes, counting every expansion of an alias, so that
/// alias bombs ("billion laughs") cannot exhaust memory with many small nodes. Large scalars
/// copied by aliases are bounded by the alias byte budget of [`parse`].
pub const MAX_NODES: usize = 1_000_000;

/// A 1-based line and column in the source text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

impl Pos {
    fn from_marker(marker: Marker) -> Pos {
        Pos {
            line: marker.line().max(1),
            column: marker.col() + 1,
        }
    }
}

/// A YAML node and where it starts.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub pos: Pos,
    pub value: Value,
}

/// The content of a node.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Scalar(Scalar),
    Seq(Vec<Node>),
    Map(Map),
}

/// A scalar as written: its text and whether it was plain (unquoted, untagged as `!!str`).
/// Only plain scalars can be null, booleans or numbers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalar {
    pub text: String,
    pub plain: bool,
}

/// A mapping in source order. Each key appears once in `entries`; later occurrences of a key
/// are in `duplicates`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Map {
    pub entries: Vec<MapEntry>,
    pub duplicates: Vec<DuplicateKey>,
}

/// One `key: value` pair of a mapping.
#[derive(Debug, Clone, PartialEq)]
pub struct MapEntry {
    pub key: Node,
    pub value: Node,
}

/// A repeated mapping key: the repetition and where the key first appeared.
#[derive(Debug, Clone, PartialEq)]
pub struct DuplicateKey {
    pub key: Node,
    pub first: Pos,
}

/// A document that is not well-formed YAML (or exceeds [`MAX_DEPTH`], [`MAX_NODES`] or the alias
/// byte budget).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyntaxError {
    pub pos: Pos,
    pub message: String,
    /// Whether the alias byte budget, rather than the syntax, refused the document.
    pub alias_budget: bool,
}

/// What a plain scalar means under the YAML 1.2 core schema. Quoted scalars are always `Str`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScalarType {
    Null,
    Bool,
    Int,
    Float,
    Str,
}

impl ScalarType {
    /// The type as named in error messages ("a string", "an integer", ...).
    pub fn describe(self) -> &'static str {
        match self {
            ScalarType::Null => "nothing (null)",
            ScalarType::Bool => "a boolean",
            ScalarType::Int => "an integer",
            ScalarType::Float => "a floating-point number",
            ScalarType::Str => "a string",
        }
    }
}

impl Scalar {
    /// The scalar's type under the YAML 1.2 core schema.
    pub fn resolve(&self) -> ScalarType {
        if !self.plain {
            return ScalarType::Str;
        }
        let text = self.text.as_str();
        if matches!(text, "" | "~" | "null" | "Null" | "NULL") {
            ScalarType::Null
        } else if matches!(text, "true" | "True" | "TRUE" | "false" | "False" | "FALSE") {
            ScalarType::Bool
        } else if is_integer(text) {
            ScalarType::Int
        } else if is_float(text) {
            ScalarType::Float
        } else {
            ScalarType::Str
        }
    }

    /// Whether the scalar is null (`~`, `null` or nothing at all).
    pub fn is_null(&self) -> bool {
        self.resolve() == ScalarType::Null
    }

    /// The scalar as a boolean. Besides `true`/`false` this accepts the YAML 1.1 words
    /// (`yes`/`no`/`on`/`off`/`y`/`n`) that envoyproxy/ratelimit's parser reads as booleans.
    pub fn as_bool(&self) -> Option<bool> {
        if !self.plain {
            return None;
        }
        match self.text.as_str() {
            "true" | "True" | "TRUE" | "yes" | "Yes" | "YES" | "on" | "On" | "ON" | "y" | "Y" => {
                Some(true)
            }
            "false" | "False" | "FALSE" | "no" | "No" | "NO" | "off" | "Off" | "OFF" | "n"
            | "N" => Some(false),
            _ => None,
        }
    }

    /// The scalar as an integer (decimal, `0x` hexadecimal or `0o` octal, optionally signed);
    /// `None` when it is not an integer or does not fit in an `i128`.
    pub fn as_integer(&self) -> Option<i128> {
        if !self.plain {
            return None;
        }
        parse_integer(&self.text)
    }
}

fn split_sign(text: &str) -> (bool, &str) {
    match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    }
}

fn is_integer(text: &str) -> bool {
    let (_, digits) = split_sign(text);
    if let Some(hex) = digits.strip_prefix("0x") {
        return !hex.is_empty() && hex.bytes().all(|b| b.is_ascii_hexdigit());
    }
    if let Some(octal) = digits.strip_prefix("0o") {
        return !octal.is_empty() && octal.bytes().all(|b| (b'0'..=b'7').contains(&b));
    }
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

fn parse_integer(text: &str) -> Option<i128> {
    if !is_integer(text) {
        return None;
    }
    let (negative, digits) = split_sign(text);
    let magnitude = if let Some(hex) = digits.strip_prefix("0x") {
        i128::from_str_radix(hex, 16).ok()?
    } else if let Some(octal) = digits.strip_prefix("0o") {
        i128::from_str_radix(octal, 8).ok()?
    } else {
        digits.parse::<i128>().ok()?
    };
    Some(if negative { -magnitude } else { magnitude })
}

fn is_float(text: &str) -> bool {
    let (_, rest) = split_sign(text);
    if matches!(rest, ".inf" | ".Inf" | ".INF") || matches!(text, ".nan" | ".NaN" | ".NAN") {
        return true;
    }
    let (mantissa, exponent) = match rest.find(['e', 'E']) {
        Some(at) => (&rest[..at], Some(&rest[at + 1..])),
        None => (rest, None),
    };
    let (int_part, frac_part) = match mantissa.split_once('.') {
        Some((int_part, frac_part)) => (int_part, Some(frac_part)),
        None => (mantissa, None),
    };
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    let mantissa_ok = match frac_part {
        Some(frac) => {
            all_digits(int_part) && all_digits(frac) && !(int_part.is_empty() && frac.is_empty())
        }
        None => !int_part.is_empty() && all_digits(int_part),
    };
    let exponent_ok = match exponent {
        Some(exp) => {
            let (_, exp_digits) = split_sign(exp);
            !exp_digits.is_empty() && all_digits(exp_digits)
        }
        None => true,
    };
    mantissa_ok && exponent_ok
}

/// Identity of a scalar mapping key, for duplicate detection: `1`, `0x1` and `+1` are the same
/// key; `"1"` and `1` are not.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum KeyId {
    Null,
    Bool(bool),
    Int(i128),
    Text(ScalarType, String),
}

fn key_id(node: &Node) -> Option<KeyId> {
    let Value::Scalar(scalar) = &node.value else {
        return None;
    };
    Some(match scalar.resolve() {
        ScalarType::Null => KeyId::Null,
        ScalarType::Bool => KeyId::Bool(scalar.as_bool().unwrap_or(false)),
        ScalarType::Int => match scalar.as_integer() {
            Some(value) => KeyId::Int(value),
            None => KeyId::Text(ScalarType::Int, scalar.text.clone()),
        },
        other => KeyId::Text(other, scalar.text.clone()),
    })
}

/// Parses the first document of `text` into a positioned tree.
///
/// An empty text (or an empty document) gives a null scalar at 1:1. Further documents after
/// the first are an error unless they are empty.
///
/// The aliases of the document may add at most `max_alias_bytes` bytes of scalar text (keys and
/// values of the copies they expand to): an alias that would pass the budget is an error at its
/// own position, raised before it is copied, so memory stays bounded by the text plus the budget.
pub fn parse(text: &str, max_alias_bytes: u64) -> Result<Node, SyntaxError> {
    let mut builder = Builder {
        max_alias_bytes,
        ..Builder::default()
    };
    for event in Parser::new_from_str(text) {
        let (event, span) = event.map_err(scan_error)?;
        builder.event(event, span)?;
    }
    builder.finish()
}

fn scan_error(error: ScanError) -> SyntaxError {
    SyntaxError {
        pos: Pos::from_marker(*error.marker()),
        message: error.info().to_string(),
        alias_budget: false,
    }
}

#[derive(Default)]
struct Builder {
    stack: Vec<Frame>,
    documents: Vec<Node>,
    anchors: HashMap<usize, Anchored>,
    nodes: usize,
    /// Scalar bytes added by alias expansions so far, and the most allowed.
    alias_bytes: u64,
    max_alias_bytes: u64,
}

/// An anchored node and what one copy of it costs.
struct Anchored {
    node: Node,
    size: Size,
}

/// Nodes in a tree and bytes of its scalars' text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size {
    nodes: usize,
    bytes: u64,
}

struct Frame {
    pos: Pos,
    anchor: usize,
    kind: FrameKind,
}

enum FrameKind {
    Seq(Vec<Node>),
    Map {
        map: Map,
        seen: HashMap<KeyId, Pos>,
        pending_key: Option<Node>,
        merges: Vec<Node>,
    },
}

impl Builder {
    fn event(&mut self, event: Event<'_>, span: Span) -> Result<(), SyntaxError> {
        let pos = Pos::from_marker(span.start);
        match event {
            Event::Nothing
            | Event::StreamStart
            | Event::StreamEnd
            | Event::DocumentStart(_)
            | Event::DocumentEnd => Ok(()),
            Event::Scalar(text, style, anchor, tag) => {
                let plain = style == ScalarStyle::Plain && !is_str_tag(tag.as_deref());
                let node = Node {
                    pos,
                    value: Value::Scalar(Scalar {
                        text: text.into_owned(),
                        plain,
                    }),
                };
                self.count(1, pos)?;
                self.complete(node, anchor)
            }
            Event::SequenceStart(anchor, _) => self.open(pos, anchor, FrameKind::Seq(Vec::new())),
            Event::MappingStart(anchor, _) => self.open(
                pos,
                anchor,
                FrameKind::Map {
                    map: Map::default(),
                    seen: HashMap::new(),
                    pending_key: None,
                    merges: Vec::new(),
                },
            ),
            Event::SequenceEnd | Event::MappingEnd => {
                let Some(frame) = self.stack.pop() else {
                    return Err(SyntaxError {
                        pos,
                        message: "unbalanced end of a collection".to_string(),
                        alias_budget: false,
                    });
                };
                let value = match frame.kind {
                    FrameKind::Seq(items) => Value::Seq(items),
                    FrameKind::Map {
                        mut map,
                        mut seen,
                        merges,
                        ..
                    } => {
                        merge(&mut map, &mut seen, merges)?;
                        Value::Map(map)
                    }
                };
                let node = Node {
                    pos: frame.pos,
                    value,
                };
                self.complete(node, frame.anchor)
            }
            Event::Alias(id) => {
                let unknown = || SyntaxError {
                    pos,
                    message: "alias to an unknown anchor".to_string(),
                    alias_budget: false,
                };
                let size = self.anchors.get(&id).ok_or_else(unknown)?.size;
                self.count(size.nodes, pos)?;
                self.count_alias_bytes(size.bytes, pos)?;
                let mut node = self.anchors.get(&id).ok_or_else(unknown)?.node.clone();
                node.pos = pos;
                self.complete(node, 0)
            }
        }
    }

    fn count(&mut self, nodes: usize, pos: Pos) -> Result<(), SyntaxError> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > MAX_NODES {
            return Err(SyntaxError {
                pos,
                message: format!("document has more than {MAX_NODES} nodes (counting aliases)"),
                alias_budget: false,
            });
        }
        Ok(())
    }

    fn count_alias_bytes(&mut self, bytes: u64, pos: Pos) -> Result<(), SyntaxError> {
        let total = self.alias_bytes.saturating_add(bytes);
        if total > self.max_alias_bytes {
            return Err(SyntaxError {
                pos,
                message: format!(
                    "this alias expands to {bytes} bytes of scalars, which would bring the \
                     document's alias expansions to {total} bytes; at most {} are accepted \
                     (--max-config-alias-bytes)",
                    self.max_alias_bytes
                ),
                alias_budget: true,
            });
        }
        self.alias_bytes = total;
        Ok(())
    }

    fn open(&mut self, pos: Pos, anchor: usize, kind: FrameKind) -> Result<(), SyntaxError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(SyntaxError {
                pos,
                message: format!("nesting deeper than {MAX_DEPTH} levels"),
                alias_budget: false,
            });
        }
        self.count(1, pos)?;
        self.stack.push(Frame { pos, anchor, kind });
        Ok(())
    }

    fn complete(&mut self, node: Node, anchor: usize) -> Result<(), SyntaxError> {
        if anchor > 0 {
            let size = size_of(&node);
            self.anchors.insert(
                anchor,
                Anchored {
                    node: node.clone(),
                    size,
                },
            );
        }
        let Some(frame) = self.stack.last_mut() else {
            self.documents.push(node);
            return Ok(());
        };
        match &mut frame.kind {
            FrameKind::Seq(items) => items.push(node),
            FrameKind::Map {
                map,
                seen,
                pending_key,
                merges,
            } => match pending_key.take() {
                None => *pending_key = Some(node),
                Some(key) if is_merge_key(&key) => merges.push(node),
                Some(key) => {
                    let first = key_id(&key).and_then(|id| match seen.get(&id) {
                        Some(first) => Some(*first),
                        None => {
                            seen.insert(id, key.pos);
                            None
                        }
                    });
                    match first {
                        Some(first) => map.duplicates.push(DuplicateKey { key, first }),
                        None => map.entries.push(MapEntry { key, value: node }),
                    }
                }
            },
        }
        Ok(())
    }

    fn finish(self) -> Result<Node, SyntaxError> {
        let mut documents = self.documents.into_iter();
        let first = documents.next().unwrap_or(Node {
            pos: Pos { line: 1, column: 1 },
            value: Value::Scalar(Scalar {
                text: String::new(),
                plain: true,
            }),
        });
        for extra in documents {
            let empty = matches!(&extra.value, Value::Scalar(scalar) if scalar.is_null());
            if !empty {
                return Err(SyntaxError {
                    pos: extra.pos,
                    message:
                        "a configuration file holds a single YAML document; another one starts here"
                            .to_string(),
                    alias_budget: false,
                });
            }
        }
        Ok(first)
    }
}

fn is_merge_key(key: &Node) -> bool {
    matches!(&key.value, Value::Scalar(scalar) if scalar.plain && scalar.text == "<<")
}

/// Applies YAML merge keys (`<<: *defaults` or `<<: [*a, *b]`): entries of the merged maps are
/// added unless the map already has the key; among merged maps the earlier one wins.
fn merge(
    map: &mut Map,
    seen: &mut HashMap<KeyId, Pos>,
    merges: Vec<Node>,
) -> Result<(), SyntaxError> {
    for source in merges {
        let sources = match source.value {
            Value::Map(source_map) => vec![source_map],
            Value::Seq(items) => items
                .into_iter()
                .map(|item| match item.value {
                    Value::Map(source_map) => Ok(source_map),
                    _ => Err(item.pos),
                })
                .collect::<Result<Vec<Map>, Pos>>()
                .map_err(|pos| SyntaxError {
                    pos,
                    message: "a merge key `<<` takes a map or a list of maps".to_string(),
                    alias_budget: false,
                })?,
            Value::Scalar(_) => {
                return Err(SyntaxError {
                    pos: source.pos,
                    message: "a merge key `<<` takes a map or a list of maps".to_string(),
                    alias_budget: false,
                })
            }
        };
        for entry in sources
            .into_iter()
            .flat_map(|source_map| source_map.entries)
        {
            match key_id(&entry.key) {
                Some(id) if seen.contains_key(&id) => {}
                Some(id) => {
                    seen.insert(id, entry.key.pos);
                    map.entries.push(entry);
                }
                None => map.entries.push(entry),
            }
        }
    }
    Ok(())
}

fn is_str_tag(tag: Option<&Tag>) -> bool {
    tag.is_some_and(|tag| tag.is_yaml_core_schema() && tag.suffix == "str")
}

fn size_of(node: &Node) -> Size {
    let add = |a: Size, b: Size| Size {
        nodes: a.nodes.saturating_add(b.nodes),
        bytes: a.bytes.saturating_add(b.bytes),
    };
    let one = Size { nodes: 1, bytes: 0 };
    match &node.value {
        Value::Scalar(scalar) => Size {
            nodes: 1,
            bytes: scalar.text.len() as u64,
        },
        Value::Seq(items) => items.iter().map(size_of).fold(one, add),
        Value::Map(map) => map
            .entries
            .iter()
            .map(|entry| add(size_of(&entry.key), size_of(&entry.value)))
            .fold(one, add),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_default(text: &str) -> Result<Node, SyntaxError> {
        parse(
            text,
            crate::config::bounds::ConfigBounds::DEFAULT_MAX_ALIAS_BYTES,
        )
    }

    fn map(node: &Node) -> &Map {
        match &node.value {
            Value::Map(map) => map,
            other => panic!("expected a map, got {other:?}"),
        }
    }

    fn scalar(node: &Node) -> &Scalar {
        match &node.value {
            Value::Scalar(scalar) => scalar,
            other => panic!("expected a scalar, got {other:?}"),
        }
    }

    #[test]
    fn nodes_carry_one_based_positions() {
        let root = parse_default("domain: edge\ndescriptors:\n  - key: a\n    value: b\n").unwrap();
        assert_eq!(root.pos, Pos { line: 1, column: 1 });
        let entries = &map(&root).entries;
        assert_eq!(entries[0].key.pos, Pos { line: 1, column: 1 });
        assert_eq!(entries[0].value.pos, Pos { line: 1, column: 9 });
        let Value::Seq(items) = &entries[1].value.value else {
            panic!("expected a list");
        };
        assert_eq!(items[0].pos, Pos { line: 3, column: 5 });
        let value = &map(&items[0]).entries[1];
        assert_eq!(value.key.pos, Pos { line: 4, column: 5 });
        assert_eq!(scalar(&value.value).text, "b");
    }

    #[test]
    fn duplicate_keys_are_kept_apart_not_merged() {
        let root = parse_default("a: 1\nb: 2\na: 3\n").unwrap();
        let map = map(&root);
        assert_eq!(map.entries.len(), 2);
        assert_eq!(scalar(&map.entries[0].value).text, "1");
        assert_eq!(map.duplicates.len(), 1);
        assert_eq!(map.duplicates[0].key.pos, Pos { line: 3, column: 1 });
        assert_eq!(map.duplicates[0].first, Pos { line: 1, column: 1 });
    }

    #[test]
    fn duplicate_keys_compare_by_value_not_spelling() {
        assert_eq!(
            map(&parse_default("1: a\n0x1: b\n").unwrap())
                .duplicates
                .len(),
            1
        );
        assert_eq!(
            map(&parse_default("1: a\n'1': b\n").unwrap())
                .duplicates
                .len(),
            0
        );
        assert_eq!(
            map(&parse_default("a: 1\n\"a\": 2\n").unwrap())
                .duplicates
                .len(),
            1
        );
    }

    #[test]
    fn syntax_errors_carry_the_parser_position() {
        let error = parse_default("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(error.pos.line >= 1, "{error:?}");
        let error = parse_default("a: 1\nb: c: d\n").unwrap_err();
        assert_eq!(error.pos, Pos { line: 2, column: 5 }, "{error:?}");
    }

    #[test]
    fn scalars_resolve_like_the_core_schema() {
        let plain = |text: &str| Scalar {
            text: text.to_string(),
            plain: true,
        };
        assert_eq!(plain("").resolve(), ScalarType::Null);
        assert_eq!(plain("~").resolve(), ScalarType::Null);
        assert_eq!(plain("True").resolve(), ScalarType::Bool);
        assert_eq!(plain("-12").resolve(), ScalarType::Int);
        assert_eq!(plain("0x1F").as_integer(), Some(31));
        assert_eq!(plain("0o17").as_integer(), Some(15));
        assert_eq!(plain("0.25").resolve(), ScalarType::Float);
        assert_eq!(plain("1e3").resolve(), ScalarType::Float);
        assert_eq!(plain(".inf").resolve(), ScalarType::Float);
        assert_eq!(plain("1.2.3").resolve(), ScalarType::Str);
        assert_eq!(plain("yes").resolve(), ScalarType::Str);
        assert_eq!(plain("yes").as_bool(), Some(true));
        let quoted = Scalar {
            text: "5".to_string(),
            plain: false,
        };
        assert_eq!(quoted.resolve(), ScalarType::Str);
        assert_eq!(quoted.as_integer(), None);
    }

    #[test]
    fn str_tag_makes_a_string() {
        let root = parse_default("a: !!str 5\n").unwrap();
        assert_eq!(
            scalar(&map(&root).entries[0].value).resolve(),
            ScalarType::Str
        );
    }

    #[test]
    fn aliases_expand_to_a_copy_at_the_alias_position() {
        let root = parse_default("a: &x {k: v}\nb: *x\n").unwrap();
        let entries = &map(&root).entries;
        assert_eq!(entries[1].value.pos.line, 2);
        assert_eq!(
            map(&entries[1].value).entries,
            map(&entries[0].value).entries
        );
    }

    #[test]
    fn merge_keys_add_missing_entries() {
        let root = parse_default(
            "defaults: &d {unit: second, requests_per_unit: 5}\nother: &o {name: x, unit: day}\nlimit:\n  <<: [*d, *o]\n  requests_per_unit: 7\n",
        )
        .unwrap();
        let limit = &map(&root).entries[2].value;
        let entries: Vec<(&str, &str)> = map(limit)
            .entries
            .iter()
            .map(|e| (scalar(&e.key).text.as_str(), scalar(&e.value).text.as_str()))
            .collect();
        assert_eq!(
            entries,
            [
                ("requests_per_unit", "7"),
                ("unit", "second"),
                ("name", "x")
            ]
        );
        assert!(map(limit).duplicates.is_empty());
        assert!(parse_default("a:\n  <<: 5\n").is_err());
    }

    #[test]
    fn alias_bombs_are_rejected() {
        let mut text = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
        for level in 1..8 {
            let prev = level - 1;
            text.push_str(&format!(
                "a{level}: &a{level} [*a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}, *a{prev}]\n"
            ));
        }
        let error = parse_default(&text).unwrap_err();
        assert!(error.message.contains("nodes"), "{error:?}");
    }

    /// One anchored scalar of `scalar_bytes` bytes, then `levels` levels of lists of ten aliases
    /// to the level below: 10^levels copies of the scalar.
    fn alias_tree(scalar_bytes: usize, levels: usize) -> String {
        let mut text = format!("s0: &s0 {}\n", "x".repeat(scalar_bytes));
        for level in 1..=levels {
            let below = format!("*s{}", level - 1);
            let list = [below.as_str(); 10].join(", ");
            text.push_str(&format!("s{level}: &s{level} [{list}]\n"));
        }
        text
    }

    #[test]
    fn a_large_scalar_copied_by_aliases_is_rejected_at_the_alias_that_passes_the_budget() {
        // About 12 000 nodes counting aliases, far below MAX_NODES, but over 10 GiB expanded.
        let text = alias_tree(1 << 20, 4);
        let budget = 8 << 20;
        let error = parse(&text, budget).unwrap_err();
        assert!(error.alias_budget);
        // The ninth copy (the ninth alias of line 2) is the first one past 8 MiB.
        assert_eq!(error.pos.line, 2, "{error:?}");
        assert_eq!(error.pos.column, 10 + 5 * 8, "{error:?}");
        assert!(
            error.message.contains(&format!(
                "expands to {} bytes of scalars, which would bring the document's alias expansions to {} bytes; at most {budget} are accepted (--max-config-alias-bytes)",
                1 << 20,
                9 << 20
            )),
            "{error:?}"
        );
    }

    #[test]
    fn the_alias_budget_counts_every_scalar_of_an_expanded_collection() {
        // Each alias of `b` copies `{k: v}`: 2 bytes of scalars.
        let text = "a: &a {k: v}\nb: [*a, *a, *a]\n";
        assert!(parse(text, 6).is_ok());
        let error = parse(text, 5).unwrap_err();
        assert_eq!(
            error.pos,
            Pos {
                line: 2,
                column: 13
            },
            "{error:?}"
        );
        // The anchored text itself is not charged, only its copies.
        assert!(parse("a: &a {k: v}\n", 0).is_ok());
    }

    #[test]
    fn deep_nesting_is_rejected() {
        let text = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        let error = parse_default(&text).unwrap_err();
        assert!(error.message.contains("nesting"), "{error:?}");
    }

    #[test]
    fn empty_text_is_a_null_document() {
        let root = parse_default("").unwrap();
        assert!(scalar(&root).is_null());
        assert_eq!(root.pos, Pos { line: 1, column: 1 });
    }

    #[test]
    fn a_second_non_empty_document_is_an_error() {
        let error = parse_default("a: 1\n---\nb: 2\n").unwrap_err();
        assert_eq!(error.pos.line, 3);
        assert!(parse_default("---\na: 1\n...\n").is_ok());
    }
}
