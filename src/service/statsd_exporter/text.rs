//! The Prometheus text format (0.0.4) as envoyproxy/ratelimit's Go client (client_golang, through
//! `promhttp`) writes it: families sorted by name, series of a family sorted by their number of
//! labels and then their values, numbers as Go's `strconv.FormatFloat(v, 'g', -1, 64)`
//! (`1.234567e+06`), a histogram's `le` and a summary's `quantile` label after the others.
//!
//! A family takes the type of the first series added; a series of another type under its name
//! is dropped, as statsd_exporter drops a conflicting event (so are a counter named as a
//! histogram's or summary's `_sum`, `_count` or `_bucket`, and the reverse).

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::mapper::Target;

/// One series' value.
#[derive(Debug, Clone, PartialEq)]
pub enum Sample {
    Counter(f64),
    /// Upper bounds with cumulative counts (`+Inf` not among them), sum and count.
    Histogram {
        buckets: Vec<(f64, u64)>,
        sum: f64,
        count: u64,
    },
    /// Quantiles with their values, sum and count.
    Summary {
        quantiles: Vec<(f64, f64)>,
        sum: f64,
        count: u64,
    },
}

impl Sample {
    fn kind(&self) -> &'static str {
        match self {
            Sample::Counter(_) => "counter",
            Sample::Histogram { .. } => "histogram",
            Sample::Summary { .. } => "summary",
        }
    }
}

#[derive(Debug)]
struct Family {
    help: String,
    kind: &'static str,
    /// Series by labels (sorted by name).
    series: BTreeMap<Vec<(String, String)>, Sample>,
}

/// The families of one exposition.
#[derive(Debug, Default)]
pub struct Families {
    by_name: BTreeMap<String, Family>,
}

impl Families {
    /// Adds `sample` to the series of `target`; counters of the same series add up. Returns
    /// whether it was kept (not in conflict with a family of another type).
    pub fn add(&mut self, target: &Target, sample: Sample) -> bool {
        let kind = sample.kind();
        if self.conflicts(&target.name, kind) {
            return false;
        }
        let family = self
            .by_name
            .entry(target.name.clone())
            .or_insert_with(|| Family {
                help: target.help.clone(),
                kind,
                series: BTreeMap::new(),
            });
        match family.series.get_mut(&target.labels) {
            Some(Sample::Counter(total)) => {
                if let Sample::Counter(value) = sample {
                    *total += value;
                }
            }
            Some(_) => {}
            None => {
                family.series.insert(target.labels.clone(), sample);
            }
        }
        true
    }

    fn conflicts(&self, name: &str, kind: &'static str) -> bool {
        let other_kind = |name: &str| {
            self.by_name
                .get(name)
                .is_some_and(|family| family.kind != kind)
        };
        if other_kind(name) {
            return true;
        }
        const SUFFIXES: [&str; 3] = ["_sum", "_count", "_bucket"];
        match kind {
            "counter" => SUFFIXES
                .iter()
                .filter_map(|suffix| name.strip_suffix(suffix))
                .any(other_kind),
            _ => SUFFIXES
                .iter()
                .any(|suffix| other_kind(&format!("{name}{suffix}"))),
        }
    }

    /// The text of every family.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(4096);
        for (name, family) in &self.by_name {
            let _ = writeln!(out, "# HELP {name} {}", escape(&family.help, false));
            let _ = writeln!(out, "# TYPE {name} {}", family.kind);
            let mut series: Vec<_> = family.series.iter().collect();
            // client_golang: fewer labels first, then by label values in label-name order.
            series.sort_by(|(a, _), (b, _)| {
                a.len().cmp(&b.len()).then_with(|| {
                    a.iter()
                        .map(|(_, value)| value)
                        .cmp(b.iter().map(|(_, value)| value))
                })
            });
            for (labels, sample) in series {
                write_sample(&mut out, name, labels, sample);
            }
        }
        out
    }
}

fn write_sample(out: &mut String, name: &str, labels: &[(String, String)], sample: &Sample) {
    match sample {
        Sample::Counter(value) => line(out, name, "", labels, None, *value),
        Sample::Histogram {
            buckets,
            sum,
            count,
        } => {
            for (bound, cumulative) in buckets {
                line(
                    out,
                    name,
                    "_bucket",
                    labels,
                    Some(("le", *bound)),
                    *cumulative as f64,
                );
            }
            line(
                out,
                name,
                "_bucket",
                labels,
                Some(("le", f64::INFINITY)),
                *count as f64,
            );
            line(out, name, "_sum", labels, None, *sum);
            line(out, name, "_count", labels, None, *count as f64);
        }
        Sample::Summary {
            quantiles,
            sum,
            count,
        } => {
            for (quantile, value) in quantiles {
                line(out, name, "", labels, Some(("quantile", *quantile)), *value);
            }
            line(out, name, "_sum", labels, None, *sum);
            line(out, name, "_count", labels, None, *count as f64);
        }
    }
}

fn line(
    out: &mut String,
    name: &str,
    suffix: &str,
    labels: &[(String, String)],
    extra: Option<(&str, f64)>,
    value: f64,
) {
    out.push_str(name);
    out.push_str(suffix);
    if !labels.is_empty() || extra.is_some() {
        out.push('{');
        let mut first = true;
        for (label, label_value) in labels {
            if !first {
                out.push(',');
            }
            first = false;
            let _ = write!(out, "{label}=\"{}\"", escape(label_value, true));
        }
        if let Some((label, bound)) = extra {
            if !first {
                out.push(',');
            }
            let _ = write!(out, "{label}=\"{}\"", go_float(bound));
        }
        out.push('}');
    }
    out.push(' ');
    out.push_str(&go_float(value));
    out.push('\n');
}

/// The text format's escaping: backslash and newline, and in label values the double quote.
fn escape(text: &str, quote: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' if quote => out.push_str("\\\""),
            c => out.push(c),
        }
    }
    out
}

/// A number as client_golang writes it, `strconv.FormatFloat(v, 'g', -1, 64)`: the shortest
/// digits that read back the same, in exponent form when the decimal exponent is below -4 or at
/// least 6 (`1e+06`, `1.234567e+06`, `1e-05`: two exponent digits at least); `+Inf`, `-Inf`,
/// `NaN`.
pub fn go_float(value: f64) -> String {
    if value.is_nan() {
        return "NaN".into();
    }
    if value.is_infinite() {
        return if value > 0.0 { "+Inf" } else { "-Inf" }.into();
    }
    if value == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` gives the same shortest round-trip digits: `d.ddde±x`.
    let scientific = format!("{value:e}");
    let (mantissa, exponent) = scientific
        .split_once('e')
        .unwrap_or((scientific.as_str(), "0"));
    let exponent: i32 = exponent.parse().unwrap_or(0);
    let (negative, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let mut out = String::new();
    if negative {
        out.push('-');
    }
    if !(-4..6).contains(&exponent) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let sign = if exponent < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exponent.abs());
        return out;
    }
    let point = exponent + 1;
    if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', (-point) as usize));
        out.push_str(&digits);
    } else if point as usize >= digits.len() {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
    } else {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::mapper::Observer;
    use super::*;

    #[test]
    fn numbers_as_go_formats_them() {
        for (value, text) in [
            (1.0, "1"),
            (0.0, "0"),
            (12.0, "12"),
            (100_000.0, "100000"),
            (999_999.0, "999999"),
            (1_000_000.0, "1e+06"),
            (1_234_567.0, "1.234567e+06"),
            (0.005, "0.005"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (2.5, "2.5"),
            (10.0, "10"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-3.5, "-3.5"),
            (1e21, "1e+21"),
            (123.456, "123.456"),
            (f64::INFINITY, "+Inf"),
            (f64::NAN, "NaN"),
        ] {
            assert_eq!(go_float(value), text, "{value}");
        }
    }

    fn target(name: &str, labels: &[(&str, &str)]) -> Target {
        Target {
            name: name.into(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            help: "h".into(),
            scale: None,
            observer: Observer::Histogram { buckets: vec![] },
        }
    }

    #[test]
    fn families_sorted_series_by_label_count_then_values_and_conflicts_dropped() {
        let mut families = Families::default();
        assert!(families.add(
            &target("t", &[("domain", "d"), ("key1", "b"), ("key2", "z")]),
            Sample::Counter(2.0)
        ));
        families.add(
            &target("t", &[("domain", "d"), ("key1", "b")]),
            Sample::Counter(1.0),
        );
        families.add(
            &target("t", &[("domain", "d"), ("key1", "a"), ("key2", "y")]),
            Sample::Counter(1.0),
        );
        families.add(
            &target("t", &[("domain", "d"), ("key1", "a"), ("key2", "y")]),
            Sample::Counter(2.0),
        );
        families.add(
            &target("a", &[("x", "q\"\\\n")]),
            Sample::Counter(1_000_000.0),
        );
        let hist = Sample::Histogram {
            buckets: vec![(0.005, 1), (0.01, 2)],
            sum: 0.013,
            count: 3,
        };
        assert!(families.add(&target("h", &[("m", "S")]), hist));
        assert!(!families.add(&target("h", &[]), Sample::Counter(1.0)));
        assert!(!families.add(&target("h_sum", &[]), Sample::Counter(1.0)));
        assert!(families.add(&target("c_sum", &[]), Sample::Counter(1.0)));
        assert!(!families.add(
            &target("c", &[]),
            Sample::Summary {
                quantiles: vec![],
                sum: 0.0,
                count: 0
            }
        ));
        assert_eq!(
            families.render(),
            "# HELP a h\n# TYPE a counter\na{x=\"q\\\"\\\\\\n\"} 1e+06\n\
             # HELP c_sum h\n# TYPE c_sum counter\nc_sum 1\n\
             # HELP h h\n# TYPE h histogram\n\
             h_bucket{m=\"S\",le=\"0.005\"} 1\nh_bucket{m=\"S\",le=\"0.01\"} 2\nh_bucket{m=\"S\",le=\"+Inf\"} 3\n\
             h_sum{m=\"S\"} 0.013\nh_count{m=\"S\"} 3\n\
             # HELP t h\n# TYPE t counter\n\
             t{domain=\"d\",key1=\"b\"} 1\n\
             t{domain=\"d\",key1=\"a\",key2=\"y\"} 3\n\
             t{domain=\"d\",key1=\"b\",key2=\"z\"} 2\n"
        );
    }
}
