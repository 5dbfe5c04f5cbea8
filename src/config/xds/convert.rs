//! An xDS `RateLimitConfig` resource as the configuration tree a YAML file of the same content
//! parses to, so that the schema that validates files validates resources too.
//!
//! Each proto field becomes the YAML field of the same name. proto3 cannot tell a field left
//! at its default from one set to it, so defaults are left out of the tree, as a file that does
//! not mention them: an empty `value` is a key-only descriptor, `unit: UNKNOWN` is no unit
//! (an error unless `unlimited`), false booleans are absent. The one exception is
//! `requests_per_unit`, kept at 0 when the limit is not `unlimited`: `requests_per_unit: 0`
//! blocks every request, as in a file.
//!
//! Nodes are numbered in message order (the number stands in for the line): errors come out in
//! the order of the fields they name, and they are displayed by field path, not position.

use prost::Message;
use prost_types::value::Kind;

use super::super::error::{ConfigError, Origin};
use super::super::yaml::{Map, MapEntry, Node, Pos, Scalar, Value};
use crate::proto::rls_config::{
    RateLimitConfig, RateLimitDescriptor, RateLimitPolicy, RateLimitUnit,
};

/// The `type_url` of the resources: envoyproxy/ratelimit's configuration, one per domain.
pub const RATE_LIMIT_CONFIG_TYPE: &str =
    "type.googleapis.com/ratelimit.config.ratelimit.v3.RateLimitConfig";

/// Decodes every resource of a response, in order, into its name and configuration tree. A
/// resource of another type, or one that does not decode, is an error naming it (by its place
/// in the response, as its name is inside it).
pub fn resource_trees(resources: &[prost_types::Any]) -> (Vec<(Origin, Node)>, Vec<ConfigError>) {
    let mut trees = Vec::with_capacity(resources.len());
    let mut errors = Vec::new();
    for (index, resource) in resources.iter().enumerate() {
        let unnamed = || Origin::Resource(format!("#{index}"));
        if resource.type_url != RATE_LIMIT_CONFIG_TYPE {
            errors.push(resource_error(
                unnamed(),
                format!(
                    "resource of type `{}`; only `{RATE_LIMIT_CONFIG_TYPE}` is accepted",
                    resource.type_url
                ),
            ));
            continue;
        }
        match RateLimitConfig::decode(resource.value.as_slice()) {
            Ok(config) => {
                let origin = Origin::Resource(resource_name(&config, index));
                trees.push((origin, config_tree(&config)));
            }
            Err(error) => errors.push(resource_error(
                unnamed(),
                format!("not a RateLimitConfig: {error}"),
            )),
        }
    }
    (trees, errors)
}

/// The resource's name, or its domain and place when the server left the name empty.
fn resource_name(config: &RateLimitConfig, index: usize) -> String {
    if !config.name.is_empty() {
        config.name.clone()
    } else if !config.domain.is_empty() {
        format!("#{index} (domain {})", config.domain)
    } else {
        format!("#{index}")
    }
}

fn resource_error(origin: Origin, message: String) -> ConfigError {
    ConfigError {
        origin,
        line: 0,
        column: 0,
        field: "resource".to_string(),
        message,
    }
}

/// The tree a YAML file holding `config` parses to.
pub fn config_tree(config: &RateLimitConfig) -> Node {
    let mut tree = TreeBuilder::default();
    let mut root = tree.map();
    if !config.domain.is_empty() {
        tree.entry(&mut root, "domain", |tree| tree.string(&config.domain));
    }
    if !config.descriptors.is_empty() {
        tree.entry(&mut root, "descriptors", |tree| {
            tree.descriptors(&config.descriptors)
        });
    }
    tree.finish(root)
}

/// Builds nodes numbered in creation order.
#[derive(Default)]
struct TreeBuilder {
    next: usize,
}

/// A map being filled, and the position of its first node.
struct OpenMap {
    pos: Pos,
    map: Map,
}

impl TreeBuilder {
    fn pos(&mut self) -> Pos {
        self.next += 1;
        Pos {
            line: self.next,
            column: 1,
        }
    }

    fn scalar(&mut self, text: String, plain: bool) -> Node {
        Node {
            pos: self.pos(),
            value: Value::Scalar(Scalar { text, plain }),
        }
    }

    /// A string, quoted in YAML terms: never read as a number, boolean or null.
    fn string(&mut self, text: &str) -> Node {
        self.scalar(text.to_string(), false)
    }

    fn map(&mut self) -> OpenMap {
        OpenMap {
            pos: self.pos(),
            map: Map::default(),
        }
    }

    fn entry(&mut self, map: &mut OpenMap, key: &str, value: impl FnOnce(&mut Self) -> Node) {
        let key = self.scalar(key.to_string(), true);
        let value = value(self);
        map.map.entries.push(MapEntry { key, value });
    }

    fn finish(&mut self, map: OpenMap) -> Node {
        Node {
            pos: map.pos,
            value: Value::Map(map.map),
        }
    }

    fn descriptors(&mut self, descriptors: &[RateLimitDescriptor]) -> Node {
        let pos = self.pos();
        let items = descriptors
            .iter()
            .map(|descriptor| self.descriptor(descriptor))
            .collect();
        Node {
            pos,
            value: Value::Seq(items),
        }
    }

    fn descriptor(&mut self, descriptor: &RateLimitDescriptor) -> Node {
        let mut map = self.map();
        self.entry(&mut map, "key", |tree| tree.string(&descriptor.key));
        if !descriptor.value.is_empty() {
            self.entry(&mut map, "value", |tree| tree.string(&descriptor.value));
        }
        if let Some(policy) = &descriptor.rate_limit {
            self.entry(&mut map, "rate_limit", |tree| tree.policy(policy));
        }
        if !descriptor.descriptors.is_empty() {
            self.entry(&mut map, "descriptors", |tree| {
                tree.descriptors(&descriptor.descriptors)
            });
        }
        for (name, set) in [
            ("shadow_mode", descriptor.shadow_mode),
            ("detailed_metric", descriptor.detailed_metric),
            ("quota_mode", descriptor.quota_mode),
        ] {
            if set {
                self.entry(&mut map, name, |tree| tree.scalar("true".into(), true));
            }
        }
        if let Some(metadata) = &descriptor.metadata {
            self.entry(&mut map, "metadata", |tree| tree.structure(metadata));
        }
        self.finish(map)
    }

    fn policy(&mut self, policy: &RateLimitPolicy) -> Node {
        let mut map = self.map();
        match RateLimitUnit::try_from(policy.unit) {
            Ok(RateLimitUnit::Unknown) => {}
            Ok(unit) => {
                let name = unit.as_str_name().to_ascii_lowercase();
                self.entry(&mut map, "unit", |tree| tree.string(&name));
            }
            // An enum value this proto does not know: the schema names it as an unknown unit.
            Err(_) => {
                let number = policy.unit.to_string();
                self.entry(&mut map, "unit", |tree| tree.string(&number));
            }
        }
        if !policy.unlimited || policy.requests_per_unit != 0 {
            let count = policy.requests_per_unit.to_string();
            self.entry(&mut map, "requests_per_unit", |tree| {
                tree.scalar(count, true)
            });
        }
        if policy.unlimited {
            self.entry(&mut map, "unlimited", |tree| {
                tree.scalar("true".into(), true)
            });
        }
        if !policy.name.is_empty() {
            self.entry(&mut map, "name", |tree| tree.string(&policy.name));
        }
        if !policy.replaces.is_empty() {
            self.entry(&mut map, "replaces", |tree| {
                let pos = tree.pos();
                let items = policy
                    .replaces
                    .iter()
                    .map(|replace| {
                        let mut entry = tree.map();
                        if !replace.name.is_empty() {
                            tree.entry(&mut entry, "name", |tree| tree.string(&replace.name));
                        }
                        tree.finish(entry)
                    })
                    .collect();
                Node {
                    pos,
                    value: Value::Seq(items),
                }
            });
        }
        self.finish(map)
    }

    fn structure(&mut self, structure: &prost_types::Struct) -> Node {
        let mut map = self.map();
        // A protobuf map has no order; sorted keys keep the tree (and its errors) stable.
        let mut fields: Vec<_> = structure.fields.iter().collect();
        fields.sort_by(|a, b| a.0.cmp(b.0));
        for (name, value) in fields {
            self.entry(&mut map, name, |tree| tree.value(value));
        }
        self.finish(map)
    }

    fn value(&mut self, value: &prost_types::Value) -> Node {
        match &value.kind {
            None | Some(Kind::NullValue(_)) => self.scalar("null".into(), true),
            Some(Kind::BoolValue(flag)) => self.scalar(flag.to_string(), true),
            Some(Kind::NumberValue(number)) => self.scalar(number_text(*number), true),
            Some(Kind::StringValue(text)) => self.string(text),
            Some(Kind::StructValue(structure)) => self.structure(structure),
            Some(Kind::ListValue(list)) => {
                let pos = self.pos();
                let items = list.values.iter().map(|item| self.value(item)).collect();
                Node {
                    pos,
                    value: Value::Seq(items),
                }
            }
        }
    }
}

/// A number as a YAML 1.2 plain scalar that reads back as the same value.
fn number_text(number: f64) -> String {
    if number.is_nan() {
        ".nan".into()
    } else if number.is_infinite() {
        if number > 0.0 { ".inf" } else { "-.inf" }.into()
    } else if number.fract() == 0.0 && number.abs() < 9.0e15 {
        format!("{}", number as i64)
    } else {
        format!("{number:?}")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::{ConfigBounds, LoadOptions, Loader};
    use crate::limiter::{Consistency, LimitKind, Unit};
    use crate::proto::rls_config::RateLimitReplace;

    fn descriptor(key: &str, value: &str, policy: Option<RateLimitPolicy>) -> RateLimitDescriptor {
        RateLimitDescriptor {
            key: key.into(),
            value: value.into(),
            rate_limit: policy,
            ..RateLimitDescriptor::default()
        }
    }

    fn per(unit: RateLimitUnit, requests_per_unit: u32) -> Option<RateLimitPolicy> {
        Some(RateLimitPolicy {
            unit: unit as i32,
            requests_per_unit,
            ..RateLimitPolicy::default()
        })
    }

    fn resource(config: &RateLimitConfig) -> prost_types::Any {
        prost_types::Any {
            type_url: RATE_LIMIT_CONFIG_TYPE.into(),
            value: config.encode_to_vec(),
        }
    }

    fn load(configs: &[RateLimitConfig]) -> Result<crate::limiter::Rules, String> {
        let resources: Vec<_> = configs.iter().map(resource).collect();
        let (trees, errors) = resource_trees(&resources);
        Loader::new(ConfigBounds::default())
            .with_options(LoadOptions::default())
            .load_trees(trees, errors)
            .map_err(|errors| errors.to_string())
    }

    fn edge() -> RateLimitConfig {
        RateLimitConfig {
            name: "edge-config".into(),
            domain: "edge".into(),
            descriptors: vec![
                descriptor("remote_address", "", per(RateLimitUnit::Second, 10)),
                RateLimitDescriptor {
                    descriptors: vec![descriptor("path", "/a*", per(RateLimitUnit::Week, 7))],
                    shadow_mode: true,
                    ..descriptor("tenant", "acme", per(RateLimitUnit::Minute, 0))
                },
            ],
        }
    }

    #[test]
    fn a_resource_builds_the_rules_its_yaml_file_builds() {
        let from_xds = load(&[edge()]).expect("valid");
        let yaml = "domain: edge\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: second, requests_per_unit: 10}\n  - key: tenant\n    value: acme\n    rate_limit: {unit: minute, requests_per_unit: 0}\n    descriptors:\n      - key: path\n        value: /a*\n        rate_limit: {unit: week, requests_per_unit: 7}\n    shadow_mode: true\n";
        let from_file =
            crate::config::parse_domain(std::path::Path::new("edge.yaml"), yaml).expect("valid");
        assert_eq!(from_xds.domain("edge"), Some(&from_file));
    }

    #[test]
    fn a_leased_default_reaches_the_counted_rules_of_resources() {
        let resources: Vec<_> = [edge()].iter().map(resource).collect();
        let (trees, errors) = resource_trees(&resources);
        let rules = Loader::new(ConfigBounds::default())
            .with_options(LoadOptions {
                default_consistency: Consistency::Leased,
                ..LoadOptions::default()
            })
            .load_trees(trees, errors)
            .expect("valid");
        let consistencies: BTreeMap<String, Option<Consistency>> = rules
            .limits()
            .iter()
            .map(|limit| {
                let consistency = match &limit.kind {
                    LimitKind::Limited(rate) => Some(rate.consistency),
                    LimitKind::Unlimited | LimitKind::Blocked { .. } => None,
                };
                (limit.path.clone(), consistency)
            })
            .collect();
        assert_eq!(
            consistencies,
            BTreeMap::from([
                ("edge.remote_address".into(), Some(Consistency::Leased)),
                ("edge.tenant_acme".into(), None),
                (
                    "edge.tenant_acme.path_/a*".into(),
                    Some(Consistency::Leased)
                ),
            ])
        );
    }

    #[test]
    fn unlimited_without_a_count_and_zero_counts_block() {
        let config = RateLimitConfig {
            name: "r".into(),
            domain: "d".into(),
            descriptors: vec![
                descriptor(
                    "free",
                    "",
                    Some(RateLimitPolicy {
                        unlimited: true,
                        ..RateLimitPolicy::default()
                    }),
                ),
                descriptor("closed", "", per(RateLimitUnit::Hour, 0)),
            ],
        };
        let rules = load(&[config]).expect("valid");
        let kinds: BTreeMap<String, bool> = rules
            .limits()
            .iter()
            .map(|limit| {
                (
                    limit.path.clone(),
                    matches!(limit.kind, LimitKind::Unlimited),
                )
            })
            .collect();
        assert!(kinds["d.free"]);
        assert!(matches!(
            rules
                .limits()
                .iter()
                .find(|limit| limit.path == "d.closed")
                .map(|limit| &limit.kind),
            Some(LimitKind::Blocked {
                unit: Unit::Hour,
                ..
            })
        ));
    }

    #[test]
    fn errors_name_the_resource_and_the_field_path() {
        let mut bad = edge();
        bad.descriptors[1].descriptors[0].rate_limit = per(RateLimitUnit::Unknown, 5);
        bad.descriptors.push(descriptor("", "x", None));
        let errors = load(&[bad]).expect_err("no unit, no key");
        let lines: Vec<&str> = errors.lines().collect();
        assert_eq!(lines.len(), 2, "{errors}");
        assert!(
            lines[0].starts_with("resource edge-config: descriptors[1].descriptors[0].rate_limit"),
            "{errors}"
        );
        assert!(
            lines[1].starts_with("resource edge-config: descriptors[2].key: "),
            "{errors}"
        );
    }

    #[test]
    fn an_unknown_unit_number_and_replaces_go_through_the_schema() {
        let mut config = edge();
        config.descriptors[0].rate_limit = Some(RateLimitPolicy {
            unit: 42,
            requests_per_unit: 1,
            name: "own".into(),
            replaces: vec![RateLimitReplace { name: "own".into() }],
            ..RateLimitPolicy::default()
        });
        let errors = load(&[config]).expect_err("unit 42, replaces itself");
        assert!(
            errors.contains(
                "resource edge-config: descriptors[0].rate_limit.unit: unknown unit `42`"
            ),
            "{errors}"
        );
        assert!(
            errors.contains("descriptors[0].rate_limit.replaces"),
            "{errors}"
        );
    }

    #[test]
    fn one_domain_in_two_resources_names_both_and_duplicates_name_the_first_path() {
        let mut twin = edge();
        twin.name = "edge-twin".into();
        let errors = load(&[edge(), twin]).expect_err("edge twice");
        assert_eq!(
            errors,
            "resource edge-twin: domain: domain `edge` is already defined in resource \
             edge-config (--merge-domain-config merges the files of one domain)"
        );

        let mut repeated = edge();
        repeated
            .descriptors
            .push(descriptor("remote_address", "", per(RateLimitUnit::Day, 1)));
        let errors = load(&[repeated]).expect_err("remote_address twice");
        assert_eq!(
            errors,
            "resource edge-config: descriptors[2]: duplicate descriptor: key `remote_address` \
             without a value is already defined at descriptors[0]"
        );
    }

    #[test]
    fn metadata_structs_become_maps() {
        let mut config = edge();
        let fields = [
            ("team", Kind::StringValue("payments".into())),
            ("weight", Kind::NumberValue(2.0)),
            ("ratio", Kind::NumberValue(0.25)),
            ("on", Kind::BoolValue(true)),
        ]
        .into_iter()
        .map(|(name, kind)| (name.to_string(), prost_types::Value { kind: Some(kind) }))
        .collect();
        config.descriptors[0].metadata = Some(prost_types::Struct { fields });
        let rules = load(&[config]).expect("valid");
        let limit = rules
            .limits()
            .into_iter()
            .find(|limit| limit.path == "edge.remote_address")
            .expect("the limit");
        let text = format!("{:?}", limit);
        for needle in ["payments", "2.0", "0.25", "true"] {
            assert!(text.contains(needle), "{needle} in {text}");
        }
    }

    #[test]
    fn undecodable_and_foreign_resources_are_errors_naming_their_place() {
        let resources = vec![
            resource(&edge()),
            prost_types::Any {
                type_url: "type.googleapis.com/envoy.config.cluster.v3.Cluster".into(),
                value: Vec::new(),
            },
            prost_types::Any {
                type_url: RATE_LIMIT_CONFIG_TYPE.into(),
                value: vec![0xff, 0xff],
            },
        ];
        let (trees, errors) = resource_trees(&resources);
        assert_eq!(trees.len(), 1);
        let text: Vec<String> = errors.iter().map(ToString::to_string).collect();
        assert!(text[0].starts_with("resource #1: resource: resource of type `type.googleapis.com/envoy.config.cluster.v3.Cluster`"), "{text:?}");
        assert!(
            text[1].starts_with("resource #2: resource: not a RateLimitConfig"),
            "{text:?}"
        );
    }

    #[test]
    fn numbers_read_back_as_written() {
        assert_eq!(number_text(3.0), "3");
        assert_eq!(number_text(-0.5), "-0.5");
        assert_eq!(number_text(1e300), "1e300");
        assert_eq!(number_text(f64::NEG_INFINITY), "-.inf");
    }
}
