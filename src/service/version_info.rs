//! How an xDS `version_info` is shown in `/rlconfig` and `/metrics`: the control plane chooses it,
//! so it may be of any length and hold any character. Shown, it is at most
//! [`SHOWN_VERSION_MAX_BYTES`] (cut at a character boundary, `...` appended) and every control
//! character is escaped as `\u{..}` (a backslash as `\\`), so that it stays one line: a newline
//! in it can neither add a line to `/rlconfig` nor a sample to `/metrics`.

use std::fmt::Write as _;

/// The longest `version_info` shown whole, in bytes.
pub const SHOWN_VERSION_MAX_BYTES: usize = 128;

/// `version` as `/rlconfig` and `/metrics` show it.
pub fn shown(version: &str) -> String {
    let mut end = version.len().min(SHOWN_VERSION_MAX_BYTES);
    while !version.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = String::with_capacity(end + 3);
    for c in version[..end].chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    if end < version.len() {
        out.push_str("...");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_is_one_bounded_line() {
        assert_eq!(
            shown("2026-12-03T10:00:00Z-abc"),
            "2026-12-03T10:00:00Z-abc"
        );
        assert_eq!(
            shown("1\nedge.fake: unit=SECOND requests_per_unit=1"),
            "1\\u{a}edge.fake: unit=SECOND requests_per_unit=1"
        );
        assert_eq!(shown("a\\b\r\t"), "a\\\\b\\u{d}\\u{9}");
        let long = "é".repeat(1 << 20);
        let cut = shown(&long);
        assert!(cut.len() <= SHOWN_VERSION_MAX_BYTES + 3, "{}", cut.len());
        assert!(cut.ends_with("..."));
    }
}
