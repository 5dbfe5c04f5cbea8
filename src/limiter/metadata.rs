//! Free-form data attached to a descriptor node (`metadata:` in the configuration), returned to
//! the caller in the response's dynamic metadata. JSON-shaped so that it maps one to one onto a
//! `google.protobuf.Struct` at the gRPC edge.

use std::collections::BTreeMap;

/// A map of named values: a `google.protobuf.Struct` in domain terms.
pub type Metadata = BTreeMap<String, MetadataValue>;

/// One value of [`Metadata`]: what a `google.protobuf.Value` can hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataValue {
    Null,
    Bool(bool),
    Number(Number),
    String(String),
    List(Vec<MetadataValue>),
    Map(Metadata),
}

/// A number as `google.protobuf.Value` carries it (a double). Equal when bit-for-bit equal, so
/// that configurations compare exactly (a reload that changes nothing changes nothing).
#[derive(Debug, Clone, Copy)]
pub struct Number(pub f64);

impl PartialEq for Number {
    fn eq(&self, other: &Number) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Number {}

/// Merges `from` into `into` as envoyproxy/ratelimit merges the metadata of a response's
/// descriptors: a key `into` lacks is added; where both hold a map, the maps are merged the same
/// way; any other value already in `into` stays (the first descriptor's value wins).
pub fn merge(into: &mut Metadata, from: &Metadata) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (None, _) => {
                into.insert(key.clone(), value.clone());
            }
            (Some(MetadataValue::Map(inner)), MetadataValue::Map(more)) => merge(inner, more),
            (Some(_), _) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(value: &str) -> MetadataValue {
        MetadataValue::String(value.into())
    }

    fn map(entries: &[(&str, MetadataValue)]) -> Metadata {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn merge_adds_missing_keys_recurses_into_maps_and_keeps_the_first_value() {
        let mut into = map(&[
            ("name", text("first")),
            ("quota", MetadataValue::Map(map(&[("tier", text("gold"))]))),
        ]);
        let from = map(&[
            ("name", text("second")),
            ("owner", text("team")),
            (
                "quota",
                MetadataValue::Map(map(&[("tier", text("bronze")), ("region", text("eu"))])),
            ),
        ]);
        merge(&mut into, &from);
        assert_eq!(
            into,
            map(&[
                ("name", text("first")),
                ("owner", text("team")),
                (
                    "quota",
                    MetadataValue::Map(map(&[("region", text("eu")), ("tier", text("gold"))]))
                ),
            ])
        );
    }

    #[test]
    fn a_map_does_not_replace_a_scalar_nor_the_reverse() {
        let mut into = map(&[("a", text("x")), ("b", MetadataValue::Map(Metadata::new()))]);
        merge(
            &mut into,
            &map(&[
                ("a", MetadataValue::Map(map(&[("y", text("z"))]))),
                ("b", text("w")),
            ]),
        );
        assert_eq!(into["a"], text("x"));
        assert_eq!(into["b"], MetadataValue::Map(Metadata::new()));
    }

    #[test]
    fn numbers_compare_bit_for_bit() {
        assert_eq!(Number(1.5), Number(1.5));
        assert_ne!(Number(0.0), Number(-0.0));
        assert_eq!(Number(f64::NAN), Number(f64::NAN));
    }
}
