//! Wildcard descriptor values, as envoyproxy/ratelimit's `wildcardMatch` reads them: a configured
//! value containing `*` matches a request value when every `*` can stand for some run of
//! characters (possibly none) and everything else matches itself, the whole value through.

use std::fmt;

/// A configured value with at least one `*`, split once at load time so a match is a prefix
/// test, a suffix test and a left-to-right search for the literal pieces in between.
///
/// `*` may appear anywhere and any number of times (`bar*b`, `foo*bar*baz`, `*.example.com`);
/// `**` means the same as `*`. Only `*` is special: envoyproxy/ratelimit has no `?` or escapes,
/// so a value that must contain a literal `*` cannot be written as an exact value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wildcard {
    /// The value as configured, `*`s included (the rule's name in paths and shared counters).
    text: String,
    /// What comes before the first `*`.
    prefix: String,
    /// The non-empty literal pieces between consecutive `*`s, in order.
    middle: Vec<String>,
    /// What comes after the last `*`.
    suffix: String,
}

impl Wildcard {
    /// The wildcard `text` stands for, or `None` when it contains no `*` (an exact value).
    pub fn parse(text: &str) -> Option<Wildcard> {
        let mut pieces: Vec<&str> = text.split('*').collect();
        if pieces.len() < 2 {
            return None;
        }
        let suffix = pieces.pop().unwrap_or_default().to_string();
        let prefix = pieces.remove(0).to_string();
        let middle = pieces
            .into_iter()
            .filter(|piece| !piece.is_empty())
            .map(str::to_string)
            .collect();
        Some(Wildcard {
            text: text.to_string(),
            prefix,
            middle,
            suffix,
        })
    }

    /// The value as configured.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `value` matches: it starts with the prefix, ends with the suffix, and holds the
    /// middle pieces in order, without overlap, in what lies between.
    ///
    /// Taking each middle piece at its leftmost occurrence is enough: a `*` can absorb anything,
    /// so an earlier occurrence never rules out a match that a later one allows. Time is linear
    /// in the value for each piece, so a long value cannot make matching expensive.
    pub fn matches(&self, value: &str) -> bool {
        if value.len() < self.prefix.len() + self.suffix.len()
            || !value.starts_with(&self.prefix)
            || !value.ends_with(&self.suffix)
        {
            return false;
        }
        let mut rest = &value[self.prefix.len()..value.len() - self.suffix.len()];
        for piece in &self.middle {
            match rest.find(piece.as_str()) {
                Some(at) => rest = &rest[at + piece.len()..],
                None => return false,
            }
        }
        true
    }
}

impl fmt::Display for Wildcard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wildcard(text: &str) -> Wildcard {
        Wildcard::parse(text).unwrap_or_else(|| panic!("{text} has a `*`"))
    }

    #[track_caller]
    fn assert_matches(pattern: &str, yes: &[&str], no: &[&str]) {
        let w = wildcard(pattern);
        for value in yes {
            assert!(w.matches(value), "{pattern} must match {value:?}");
        }
        for value in no {
            assert!(!w.matches(value), "{pattern} must not match {value:?}");
        }
    }

    #[test]
    fn a_value_without_a_star_is_no_wildcard() {
        assert_eq!(Wildcard::parse("foo"), None);
        assert_eq!(Wildcard::parse(""), None);
        assert_eq!(wildcard("foo*").as_str(), "foo*");
        assert_eq!(wildcard("a*b").to_string(), "a*b");
    }

    #[test]
    fn trailing_star_is_a_prefix_match() {
        assert_matches(
            "foo*",
            &["foo", "foo1", "foobar", "foo*"],
            &["fo", "xfoo", "", "Foo1"],
        );
    }

    #[test]
    fn star_at_the_start_is_a_suffix_match() {
        assert_matches(
            "*.example.com",
            &[".example.com", "api.example.com", "a.b.example.com"],
            &["example.com", "api.example.org", "api.example.com.evil"],
        );
    }

    #[test]
    fn star_in_the_middle_needs_both_ends() {
        assert_matches(
            "bar*b",
            &["barb", "barxb", "bar-anything-b", "barbb"],
            &["bar", "barx", "xbarb", "barbx", "ba"],
        );
        assert_matches(
            "/api*v1",
            &["/apiv1", "/api/users/v1"],
            &["/api/v2", "/ap/v1"],
        );
    }

    #[test]
    fn prefix_and_suffix_may_not_overlap() {
        assert_matches("ab*ba", &["abba", "ab-ba", "ababa"], &["aba", "ab", "ba"]);
        assert_matches("a*a", &["aa", "aba"], &["a"]);
    }

    #[test]
    fn several_stars_match_their_pieces_in_order() {
        assert_matches(
            "foo*bar*baz",
            &[
                "foobarbaz",
                "foo1bar2baz",
                "foo-bar-bar-baz",
                "foobazbarbaz",
            ],
            &[
                "foobaz",
                "foobazbar",
                "foo1baz2bar",
                "barfoobaz",
                "foobarba",
            ],
        );
        assert_matches(
            "svc*ep*rpc",
            &["svc.orders.ep.get.rpc", "svcep rpc", "svceprpc"],
            &["svc.rpc", "svc.ep", "ep.svc.rpc"],
        );
    }

    #[test]
    fn middle_pieces_do_not_overlap_each_other_or_the_ends() {
        assert_matches("a*bb*bb*c", &["abbbbc", "axbbybbzc"], &["abbbc", "abbc"]);
        assert_matches("x*yy", &["xyy", "xayy"], &["xy"]);
    }

    #[test]
    fn empty_segments_and_double_stars_act_as_one_star() {
        for pattern in ["a**b", "a***b", "a*b"] {
            assert_matches(pattern, &["ab", "a-b", "a**b"], &["a", "b", "ba"]);
        }
        for pattern in ["*", "**", "***"] {
            assert_matches(pattern, &["", "x", "anything at all", "*"], &[]);
        }
        assert_matches("**x**", &["x", "axb", "xx"], &["", "y"]);
    }

    #[test]
    fn a_star_matches_a_literal_star_too() {
        assert_matches("a*c", &["a*c", "a**c"], &["a*"]);
    }

    #[test]
    fn non_ascii_values_match_by_their_characters() {
        assert_matches("ü*ß", &["üß", "ü—ß", "üéß"], &["uß", "ü"]);
        assert_matches("*é", &["café", "é"], &["cafe"]);
    }

    #[test]
    fn long_values_match_in_linear_time() {
        let value = "a".repeat(100_000);
        let w = wildcard("*a*a*a*a*a*a*a*a*b");
        assert!(!w.matches(&value));
        assert!(wildcard("a*a*a*a").matches(&value));
    }
}
