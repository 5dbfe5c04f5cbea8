//! `--statsd-extra-tags`: tags added to every stat, in envoyproxy/ratelimit's `EXTRA_TAGS`
//! format, and how its statsd library (lyft/gostats) puts them on the wire.

/// Tags in key order, each key once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExtraTags(Vec<(String, String)>);

impl ExtraTags {
    /// Parses `K:V[,K:V...]` as envoyproxy/ratelimit reads `EXTRA_TAGS` (a Go map through
    /// envconfig): items split on `,`, each exactly one `:`; a key given twice keeps its last
    /// value; an empty text is no tags. Refused, where gostats would silently drop the tag or
    /// write a name that no longer parses: an empty key or value, a key with `.`, `|`, `=` or
    /// whitespace, and control characters anywhere.
    pub fn parse(text: &str) -> Result<ExtraTags, String> {
        let mut tags: Vec<(String, String)> = Vec::new();
        if text.trim().is_empty() {
            return Ok(ExtraTags(tags));
        }
        for item in text.split(',') {
            let mut parts = item.split(':');
            let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("`{item}` is not KEY:VALUE (exactly one `:`)"));
            };
            if key.is_empty() || value.is_empty() {
                return Err(format!("`{item}` has an empty key or value"));
            }
            if let Some(bad) = key
                .chars()
                .find(|c| matches!(c, '.' | '|' | '=') || c.is_whitespace() || c.is_control())
            {
                return Err(format!("tag key `{key}` may not contain {bad:?}"));
            }
            if value.chars().any(char::is_control) {
                return Err(format!("tag value of `{key}` has a control character"));
            }
            tags.retain(|(k, _)| k != key);
            tags.push((key.to_string(), value.to_string()));
        }
        tags.sort();
        Ok(ExtraTags(tags))
    }

    /// What gostats appends to every stat name: `.__key=value` per tag, in key order, the
    /// value's `.`, `:` and `|` replaced by `_` (gostats' `SerializeTags` and `ReplaceChars`).
    pub fn suffix(&self) -> String {
        let mut suffix = String::new();
        for (key, value) in &self.0 {
            suffix.push_str(".__");
            suffix.push_str(key);
            suffix.push('=');
            suffix.extend(
                value
                    .chars()
                    .map(|c| if matches!(c, '.' | ':' | '|') { '_' } else { c }),
            );
        }
        suffix
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_by_key_with_dots_in_values_replaced() {
        let tags = ExtraTags::parse("zone:eu-west-1.a,env:prod,zone:us.b").unwrap();
        assert_eq!(tags.suffix(), ".__env=prod.__zone=us_b");
        assert_eq!(ExtraTags::parse("").unwrap().suffix(), "");
        assert_eq!(ExtraTags::parse("a:b|c").unwrap().suffix(), ".__a=b_c");
    }

    #[test]
    fn malformed_items_are_refused() {
        for bad in [
            "env",
            "env:prod:eu",
            ":prod",
            "env:",
            "a.b:c",
            "a=b:c",
            "a b:c",
            "a:b\nc",
            "env:prod,",
        ] {
            assert!(ExtraTags::parse(bad).is_err(), "{bad:?}");
        }
    }
}
