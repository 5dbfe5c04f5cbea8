//! The text of a URI query's components: `application/x-www-form-urlencoded` as browsers and
//! `curl --data-urlencode` write it.

/// The `name=value` pairs of `query` (the URI's part after `?`), still encoded, empty ones
/// skipped; a pair without `=` has an empty value.
pub fn pairs(query: Option<&str>) -> impl Iterator<Item = (&str, &str)> {
    query
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| pair.split_once('=').unwrap_or((pair, "")))
}

/// `+` as a space and `%XX` as that byte; `None` for a bad escape or bytes that are not UTF-8.
pub fn decode(text: &str) -> Option<String> {
    let mut bytes = Vec::with_capacity(text.len());
    let mut rest = text.as_bytes();
    while let Some((&byte, tail)) = rest.split_first() {
        match byte {
            b'+' => bytes.push(b' '),
            b'%' => {
                let hex = tail
                    .get(..2)
                    .filter(|hex| hex.iter().all(u8::is_ascii_hexdigit))?;
                let hex = std::str::from_utf8(hex).ok()?;
                bytes.push(u8::from_str_radix(hex, 16).ok()?);
                rest = &tail[2..];
                continue;
            }
            other => bytes.push(other),
        }
        rest = tail;
    }
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_escapes_and_plus_and_refuses_what_is_not_utf8() {
        assert_eq!(decode("a+b%2Cc%3D").as_deref(), Some("a b,c="));
        assert_eq!(decode("%e2%82%AC").as_deref(), Some("€"));
        assert_eq!(decode("%zz"), None);
        assert_eq!(decode("%4"), None);
        assert_eq!(decode("%+1"), None, "two hex digits, no sign");
        assert_eq!(decode("%ff"), None);
        assert_eq!(decode("").as_deref(), Some(""));
    }

    #[test]
    fn pairs_split_at_ampersands_and_the_first_equals_sign() {
        let split: Vec<_> = pairs(Some("a=1&&b&c=x=y")).collect();
        assert_eq!(split, [("a", "1"), ("b", ""), ("c", "x=y")]);
        assert_eq!(pairs(None).count(), 0);
    }
}
