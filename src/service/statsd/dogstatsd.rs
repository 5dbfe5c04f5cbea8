//! DogStatsD, as envoyproxy/ratelimit's `godogstats` sink sends its stats through datadog-go
//! (v5, client-side aggregation off): the tags gostats writes into a name (`.__key=value`)
//! become DogStatsD tags (`|#key:value`), mogrifiers may turn parts of a name into tags, and
//! datadog-go adds the tags of `DD_ENTITY_ID`, `DD_ENV`, `DD_SERVICE` and `DD_VERSION`.
//!
//! On the wire: `name:value|c|#tags` for counters, `name:ms.000000|ms|#tags` for timers (a
//! duration in milliseconds with six decimals, datadog-go's `Timing`), `|#` left out when there
//! is no tag.

use std::fmt::Write as _;

use regex::Regex;

use super::datagrams::Datagrams;
use crate::service::go_regex;

/// datadog-go's global tags: each variable set (not empty) adds `tag:value`, in this order.
const ENVIRONMENT_TAGS: [(&str, &str); 4] = [
    ("DD_ENTITY_ID", "dd.internal.entity_id"),
    ("DD_ENV", "env"),
    ("DD_SERVICE", "service"),
    ("DD_VERSION", "version"),
];

/// How stat names become DogStatsD names and tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DogStatsd {
    mogrifiers: Mogrifiers,
    /// datadog-go's tags from the environment, first on every line.
    global_tags: Vec<String>,
}

impl DogStatsd {
    /// With `mogrifiers`, and datadog-go's global tags read through `variable` (the process
    /// environment in the server).
    pub fn new(mogrifiers: Mogrifiers, variable: impl Fn(&str) -> Option<String>) -> DogStatsd {
        let global_tags = ENVIRONMENT_TAGS
            .iter()
            .filter_map(|(name, tag)| {
                let value = variable(name).filter(|value| !value.is_empty())?;
                Some(format!("{tag}:{value}"))
            })
            .collect();
        DogStatsd {
            mogrifiers,
            global_tags,
        }
    }

    /// A counter's delta: `name:value|c` and its tags.
    pub fn counter(&self, out: &mut Datagrams, gostats_name: &str, value: u64) {
        let (name, tags) = self.tagged(gostats_name);
        out.line(|line| {
            let _ = write!(line, "{name}:{value}|c{tags}");
        });
    }

    /// The timer named `gostats_name`, its name and tags worked out once for all its lines.
    pub fn timer(&self, gostats_name: &str) -> DogTimer {
        let (name, tags) = self.tagged(gostats_name);
        DogTimer { name, tags }
    }

    /// The DogStatsD name of a gostats name, and its tags as written after the value (`|#a:b,c:d`,
    /// or nothing): the global tags, the tags gostats wrote into the name, then those of the
    /// first mogrifier whose pattern matches the name without them.
    fn tagged(&self, gostats_name: &str) -> (String, String) {
        let (short, mut tags) = separate_tags(gostats_name);
        let name = match self.mogrifiers.mogrify(short) {
            Some((name, mogrified)) => {
                tags.extend(mogrified);
                name
            }
            None => short.to_string(),
        };
        let all: Vec<&str> = self
            .global_tags
            .iter()
            .chain(&tags)
            .map(String::as_str)
            .collect();
        if all.is_empty() {
            return (name, String::new());
        }
        // datadog-go drops newlines from tags.
        let joined: String = all.join(",").chars().filter(|c| *c != '\n').collect();
        (name, format!("|#{joined}"))
    }
}

/// A timer's DogStatsD name and tags.
pub struct DogTimer {
    name: String,
    tags: String,
}

impl DogTimer {
    /// One timing of `ms` milliseconds, with `|@rate` when it stands for `1/rate` timings.
    pub fn write(&self, out: &mut Datagrams, ms: u64, sample_rate: Option<f64>) {
        let (name, tags) = (&self.name, &self.tags);
        out.line(|line| {
            let _ = match sample_rate {
                Some(rate) => write!(line, "{name}:{ms}.000000|ms|@{rate}{tags}"),
                None => write!(line, "{name}:{ms}.000000|ms{tags}"),
            };
        });
    }
}

/// A gostats name split as upstream's `separateTags` does: the name before the first `.__`, and
/// each `.__key=value` after it as `key:value` (one without `=` is dropped).
fn separate_tags(name: &str) -> (&str, Vec<String>) {
    let Some((short, tags)) = name.split_once(".__") else {
        return (name, Vec::new());
    };
    let tags = tags
        .split(".__")
        .filter_map(|pair| pair.split_once('='))
        .map(|(key, value)| format!("{key}:{value}"))
        .collect();
    (short, tags)
}

/// envoyproxy/ratelimit's DogStatsD mogrifiers (`USE_DOG_STATSD_MOGRIFIERS`), in order: the
/// first whose pattern matches a name renames it and adds its tags.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mogrifiers(Vec<Mogrifier>);

/// One mogrifier: `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN`, `_NAME` and `_TAGS`.
#[derive(Debug, Clone)]
struct Mogrifier {
    pattern: Regex,
    name: String,
    /// Tag key and value template, sorted by key.
    tags: Vec<(String, String)>,
}

impl PartialEq for Mogrifier {
    fn eq(&self, other: &Mogrifier) -> bool {
        self.pattern.as_str() == other.pattern.as_str()
            && self.name == other.name
            && self.tags == other.tags
    }
}

impl Eq for Mogrifier {}

impl Mogrifiers {
    /// The mogrifiers named in `list` (`NAME[,NAME...]`, as `USE_DOG_STATSD_MOGRIFIERS`), each
    /// defined by `DOG_STATSD_MOGRIFIER_<NAME>_PATTERN` (a Go regular expression), `_NAME` (the
    /// new name) and `_TAGS` (`key:value,...`), read through `variable`; `$N` in the name and
    /// tag values stands for the pattern's group N. Errors name the variable at fault, as
    /// upstream refuses them at startup.
    pub fn from_env(
        list: &str,
        variable: impl Fn(&str) -> Option<String>,
    ) -> Result<Mogrifiers, String> {
        let mut mogrifiers = Vec::new();
        if list.trim().is_empty() {
            return Ok(Mogrifiers(mogrifiers));
        }
        let keys: Vec<&str> = list.split(',').collect();
        if let Some(bad) = keys.iter().find(|key| {
            key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        }) {
            return Err(format!(
                "`{bad}` is not a mogrifier name (letters, digits and `_`, separated by `,`)"
            ));
        }
        for key in keys {
            let prefix = format!("DOG_STATSD_MOGRIFIER_{}", key.to_ascii_uppercase());
            let read = |suffix: &str| {
                let name = format!("{prefix}_{suffix}");
                let value = variable(&name).unwrap_or_default();
                (name, value)
            };
            let (pattern_variable, pattern) = read("PATTERN");
            if pattern.is_empty() {
                return Err(format!(
                    "{pattern_variable} is not set: mogrifier `{key}` needs a pattern"
                ));
            }
            let pattern = go_regex::compile(&pattern).map_err(|error| {
                format!("{pattern_variable}: `{pattern}` is not a regular expression: {error}")
            })?;
            let (name_variable, name) = read("NAME");
            if name.is_empty() {
                return Err(format!(
                    "{name_variable} is not set: mogrifier `{key}` needs a metric name"
                ));
            }
            let (tags_variable, tags_text) = read("TAGS");
            let tags =
                parse_tags(&tags_text).map_err(|error| format!("{tags_variable}: {error}"))?;
            mogrifiers.push(Mogrifier {
                pattern,
                name,
                tags,
            });
        }
        Ok(Mogrifiers(mogrifiers))
    }

    /// The new name and tags of `name`, from the first mogrifier whose pattern matches it
    /// (anywhere in it, as Go's `FindStringSubmatch`).
    fn mogrify(&self, name: &str) -> Option<(String, Vec<String>)> {
        self.0.iter().find_map(|mogrifier| {
            let captures = mogrifier.pattern.captures(name)?;
            let groups: Vec<&str> = captures
                .iter()
                .map(|group| group.map_or("", |g| g.as_str()))
                .collect();
            let tags = mogrifier
                .tags
                .iter()
                .map(|(key, value)| format!("{key}:{}", expand(value, &groups)))
                .collect();
            Some((expand(&mogrifier.name, &groups), tags))
        })
    }
}

/// `key:value,...` as envconfig reads a Go map: items split on `,`, each exactly one `:`; an
/// empty key or value is refused (as upstream's mogrifier loader does); a key given twice keeps
/// its last value. Sorted by key.
fn parse_tags(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut tags: Vec<(String, String)> = Vec::new();
    if text.trim().is_empty() {
        return Ok(tags);
    }
    for item in text.split(',') {
        let mut parts = item.split(':');
        let (Some(key), Some(value), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(format!("`{item}` is not KEY:VALUE (exactly one `:`)"));
        };
        if key.is_empty() || value.is_empty() {
            return Err(format!("`{item}` has an empty key or value"));
        }
        tags.retain(|(k, _)| k != key);
        tags.push((key.to_string(), value.to_string()));
    }
    tags.sort();
    Ok(tags)
}

/// `template` with each `$N` (digits, as many as follow) replaced by group N of the match; a
/// group the pattern does not have leaves `$N` as written (upstream's `makePatternHandler`).
fn expand(template: &str, groups: &[&str]) -> String {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(dollar) = rest.find('$') {
        out.push_str(&rest[..dollar]);
        let after = &rest[dollar + 1..];
        let digits = after.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            out.push('$');
            rest = after;
            continue;
        }
        match after[..digits]
            .parse::<usize>()
            .ok()
            .and_then(|i| groups.get(i))
        {
            Some(group) => out.push_str(group),
            None => out.push_str(&rest[dollar..dollar + 1 + digits]),
        }
        rest = &after[digits..];
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| map.get(name).cloned()
    }

    fn lines(dog: &DogStatsd, write: impl FnOnce(&DogStatsd, &mut Datagrams)) -> String {
        let mut datagrams = Datagrams::default();
        write(dog, &mut datagrams);
        let (sent, _) = datagrams.finish();
        sent.iter()
            .map(|d| String::from_utf8(d.clone()).unwrap())
            .collect()
    }

    #[test]
    fn gostats_tags_become_dogstatsd_tags_after_the_global_ones() {
        let dog = DogStatsd::new(
            Mogrifiers::default(),
            env(&[("DD_ENV", "prod"), ("DD_SERVICE", "rl"), ("DD_VERSION", "")]),
        );
        let text = lines(&dog, |dog, out| {
            dog.counter(
                out,
                "ratelimit.service.rate_limit.edge.client.total_hits.__zone=eu_1.__team=a",
                3,
            );
            dog.counter(out, "ratelimit.service.config_load_success", 1);
            dog.timer("ratelimit_server.ShouldRateLimit.response_time")
                .write(out, 2, None);
            dog.timer("t").write(out, 0, Some(0.25));
        });
        assert_eq!(
            text,
            "ratelimit.service.rate_limit.edge.client.total_hits:3|c|#env:prod,service:rl,zone:eu_1,team:a\n\
             ratelimit.service.config_load_success:1|c|#env:prod,service:rl\n\
             ratelimit_server.ShouldRateLimit.response_time:2.000000|ms|#env:prod,service:rl\n\
             t:0.000000|ms|@0.25|#env:prod,service:rl\n"
        );
        let bare = DogStatsd::new(Mogrifiers::default(), env(&[]));
        assert_eq!(
            lines(&bare, |dog, out| dog.counter(out, "a.b", 1)),
            "a.b:1|c\n"
        );
        assert_eq!(
            separate_tags("a.__bad.__k=v"),
            ("a", vec!["k:v".to_string()])
        );
    }

    #[test]
    fn mogrifiers_apply_in_order_as_upstreams_readme_example() {
        // envoyproxy/ratelimit README, "DogStatsD": DOMAIN, then HITS.
        let mogrifiers = Mogrifiers::from_env(
            "DOMAIN,hits",
            env(&[
                (
                    "DOG_STATSD_MOGRIFIER_DOMAIN_PATTERN",
                    r"^some\.original\.metric\.(.*)$",
                ),
                ("DOG_STATSD_MOGRIFIER_DOMAIN_NAME", "some.original.metric"),
                ("DOG_STATSD_MOGRIFIER_DOMAIN_TAGS", "domain:$1"),
                (
                    "DOG_STATSD_MOGRIFIER_HITS_PATTERN",
                    r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$",
                ),
                (
                    "DOG_STATSD_MOGRIFIER_HITS_NAME",
                    "ratelimit.service.rate_limit.$3",
                ),
                ("DOG_STATSD_MOGRIFIER_HITS_TAGS", "domain:$1,descriptor:$2"),
            ]),
        )
        .unwrap();
        let dog = DogStatsd::new(mogrifiers, env(&[]));
        let text = lines(&dog, |dog, out| {
            dog.counter(out, "some.original.metric.TAG", 1);
            dog.counter(
                out,
                "ratelimit.service.rate_limit.edge.key_a.sub_b.over_limit.__env=x",
                2,
            );
            dog.counter(out, "ratelimit.service.config_load_success", 1);
        });
        assert_eq!(
            text,
            "some.original.metric:1|c|#domain:TAG\n\
             ratelimit.service.rate_limit.over_limit:2|c|#env:x,descriptor:key_a.sub_b,domain:edge\n\
             ratelimit.service.config_load_success:1|c\n"
        );
    }

    #[test]
    fn templates_leave_missing_groups_as_written() {
        assert_eq!(expand("a.$1.$2.$9.$$.$", &["all", "x", ""]), "a.x..$9.$$.$");
        assert_eq!(expand("$01$10", &["z", "one"]), "one$10");
    }

    #[test]
    fn bad_definitions_name_the_variable() {
        type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], &'a str);
        let cases: [Case; 6] = [
            ("A", &[], "DOG_STATSD_MOGRIFIER_A_PATTERN is not set"),
            (
                "A",
                &[("DOG_STATSD_MOGRIFIER_A_PATTERN", "(")],
                "DOG_STATSD_MOGRIFIER_A_PATTERN: `(` is not a regular expression",
            ),
            (
                "A",
                &[("DOG_STATSD_MOGRIFIER_A_PATTERN", "x")],
                "DOG_STATSD_MOGRIFIER_A_NAME is not set",
            ),
            (
                "A",
                &[
                    ("DOG_STATSD_MOGRIFIER_A_PATTERN", "x"),
                    ("DOG_STATSD_MOGRIFIER_A_NAME", "y"),
                    ("DOG_STATSD_MOGRIFIER_A_TAGS", "a:b:c"),
                ],
                "DOG_STATSD_MOGRIFIER_A_TAGS: `a:b:c` is not KEY:VALUE",
            ),
            (
                "A",
                &[
                    ("DOG_STATSD_MOGRIFIER_A_PATTERN", "x"),
                    ("DOG_STATSD_MOGRIFIER_A_NAME", "y"),
                    ("DOG_STATSD_MOGRIFIER_A_TAGS", "a:"),
                ],
                "DOG_STATSD_MOGRIFIER_A_TAGS: `a:` has an empty key or value",
            ),
            ("A, B", &[], "` B` is not a mogrifier name"),
        ];
        for (list, pairs, expected) in cases {
            let error = Mogrifiers::from_env(list, env(pairs)).unwrap_err();
            assert!(error.starts_with(expected), "{list}: {error}");
        }
        assert_eq!(
            Mogrifiers::from_env(" ", env(&[])).unwrap(),
            Mogrifiers::default()
        );
    }
}
