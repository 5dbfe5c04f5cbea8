//! Go regular expressions (RE2 syntax, Go's `regexp`) compiled with the `regex` crate so they
//! match what they match in Go: envoyproxy/ratelimit's DogStatsD mogrifier patterns and the
//! `match_type: regex` mappings of its Prometheus mapper are written for Go.
//!
//! The two syntaxes agree except where this translates: Go's Perl classes (`\d`, `\s`, `\w` and
//! their negations) and word boundaries (`\b`, `\B`) are ASCII-only where the crate's are
//! Unicode; `\Q...\E` quotes a literal (the crate has no such form); inside a bracketed class
//! Go reads `[` (other than `[:name:]`), `&`, `~` and `-` runs literally, where the crate nests
//! classes and takes `&&`, `~~` and `--` as set operations.

use regex::Regex;

/// Compiles `pattern` as Go would read it (unanchored, leftmost-first, as Go's
/// `FindStringSubmatch`). The error is the crate's, about the translated pattern.
pub fn compile(pattern: &str) -> Result<Regex, String> {
    Regex::new(&translate(pattern)).map_err(|error| error.to_string())
}

/// `pattern` in the crate's syntax.
fn translate(pattern: &str) -> String {
    let chars: Vec<char> = pattern.chars().collect();
    let mut out = String::with_capacity(pattern.len() + 8);
    let mut at = 0;
    // Inside a bracketed class: where it opened (the index after `[` and an optional `^`).
    let mut class_start: Option<usize> = None;
    while at < chars.len() {
        let c = chars[at];
        match (c, class_start) {
            ('\\', _) if at + 1 < chars.len() => {
                let next = chars[at + 1];
                at += 2;
                if next == 'Q' {
                    let rest: String = chars[at..].iter().collect();
                    let (quoted, after) = match rest.find("\\E") {
                        Some(end) => (&rest[..end], end + 2),
                        None => (rest.as_str(), rest.len()),
                    };
                    for q in quoted.chars() {
                        if class_start.is_some() {
                            out.push_str(&class_literal(q));
                        } else {
                            out.push_str(&regex::escape(&q.to_string()));
                        }
                    }
                    at += rest[..after].chars().count();
                    continue;
                }
                out.push_str(&perl_class(next, class_start.is_some()));
            }
            ('[', None) => {
                out.push('[');
                at += 1;
                if chars.get(at) == Some(&'^') {
                    out.push('^');
                    at += 1;
                }
                if chars.get(at) == Some(&']') {
                    out.push_str("\\]");
                    at += 1;
                }
                class_start = Some(at);
            }
            ('[', Some(_)) if chars.get(at + 1) == Some(&':') => {
                // `[:name:]` (or `[:^name:]`): copied through to its `:]`.
                let rest: String = chars[at..].iter().collect();
                let end = rest.find(":]").map_or(1, |end| end + 2);
                out.push_str(&rest[..end]);
                at += rest[..end].chars().count();
            }
            (']', Some(_)) => {
                out.push(']');
                class_start = None;
                at += 1;
            }
            ('-', Some(start)) => {
                // A range's dash stays; a dash that cannot make a range (first, last, or after
                // another dash) is literal, as in Go.
                let after_dash = at > start && chars[at - 1] == '-';
                let last = chars.get(at + 1) == Some(&']');
                if at == start || last || after_dash || chars.get(at + 1) == Some(&'-') {
                    out.push_str("\\-");
                } else {
                    out.push('-');
                }
                at += 1;
            }
            (c, Some(_)) => {
                out.push_str(&class_literal(c));
                at += 1;
            }
            (c, None) => {
                out.push(c);
                at += 1;
            }
        }
    }
    out
}

/// A character inside a class, escaped where the crate would read it as class syntax.
fn class_literal(c: char) -> String {
    match c {
        '[' | '&' | '~' | '-' | '\\' | ']' | '^' => format!("\\{c}"),
        c => c.to_string(),
    }
}

/// The escape `\c`, in or out of a class: Go's ASCII meaning for Perl classes and word
/// boundaries, anything else as written.
fn perl_class(c: char, in_class: bool) -> String {
    const DIGIT: &str = "0-9";
    const SPACE: &str = "\\t\\n\\f\\r ";
    const WORD: &str = "0-9A-Za-z_";
    let (set, negated) = match c {
        'd' => (DIGIT, false),
        'D' => (DIGIT, true),
        's' => (SPACE, false),
        'S' => (SPACE, true),
        'w' => (WORD, false),
        'W' => (WORD, true),
        'b' if !in_class => return "(?-u:\\b)".into(),
        'B' if !in_class => return "(?-u:\\B)".into(),
        c => return format!("\\{c}"),
    };
    match (in_class, negated) {
        (true, false) => set.to_string(),
        (_, true) => format!("[^{set}]"),
        (false, false) => format!("[{set}]"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(pattern: &str, text: &str) -> bool {
        compile(pattern)
            .unwrap_or_else(|e| panic!("{pattern}: {e}"))
            .is_match(text)
    }

    #[test]
    fn perl_classes_and_boundaries_are_ascii_as_in_go() {
        assert!(matches(r"^\d+$", "123"));
        assert!(
            !matches(r"^\d+$", "١٢٣"),
            "Arabic-Indic digits are no \\d in Go"
        );
        assert!(!matches(r"^\w+$", "é"));
        assert!(matches(r"^\W$", "é"));
        assert!(!matches(r"^\s$", "\u{0b}"), "Go's \\s has no vertical tab");
        assert!(matches(r"^[\d_]+$", "1_2"));
        assert!(matches(r"^[^\D]$", "7"));
        assert!(matches(r"\bab\b", "x ab y"));
        assert!(matches(r"^[\w.]+$", "a.b_c"));
    }

    #[test]
    fn class_syntax_go_reads_literally() {
        assert!(matches(r"^[a[]+$", "a[a"));
        assert!(matches(r"^[a&&b]+$", "a&b"));
        assert!(matches(r"^[~~]$", "~"));
        assert!(matches(r"^[]a]+$", "]a"));
        assert!(matches(r"^[^]a]$", "b"));
        assert!(matches(r"^[a-c-]+$", "b-"));
        assert!(matches(r"^[[:alpha:]]+$", "abc"));
        assert!(matches(r"^[[:^digit:]x]$", "y"));
    }

    #[test]
    fn quoted_literals() {
        assert!(matches(r"^\Qa.b*\E$", "a.b*"));
        assert!(!matches(r"^\Qa.b\E$", "axb"));
        assert!(matches(r"^[\Q]-\E]+$", "]-"));
    }

    #[test]
    fn upstreams_patterns_compile_and_capture_as_in_go() {
        let mapper = compile(
            r"ratelimit\.service\.rate_limit\.([^\.]*)\.([^\.]*)\.([^\.]*)(\..*)?\.total_hits",
        )
        .unwrap();
        let caps = mapper
            .captures("ratelimit.service.rate_limit.d.k1.k2.k3.total_hits")
            .unwrap();
        assert_eq!((&caps[1], &caps[2], &caps[3]), ("d", "k1", "k2"));
        let hits = compile(r"^ratelimit\.service\.rate_limit\.([^.]+)\.(.*)\.([^.]+)$").unwrap();
        let caps = hits
            .captures("ratelimit.service.rate_limit.edge.client_a.total_hits")
            .unwrap();
        assert_eq!(
            (&caps[1], &caps[2], &caps[3]),
            ("edge", "client_a", "total_hits")
        );
    }
}
