//! The query of `GET /top`: `window=1m|5m|15m` (default `1m`), `domain=D`, `rule=PATH`, each
//! percent-decoded; anything else is refused with a message naming it.

use crate::service::query_text::{decode, pairs};

/// What `/top` is asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopQuery {
    pub window: Window,
    pub domain: Option<String>,
    pub rule: Option<String>,
}

/// The windows `/top` ranks over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
    OneMinute,
    FiveMinutes,
    FifteenMinutes,
}

impl Window {
    pub fn name(self) -> &'static str {
        match self {
            Window::OneMinute => "1m",
            Window::FiveMinutes => "5m",
            Window::FifteenMinutes => "15m",
        }
    }

    /// Whole minutes before the current one that the window covers.
    pub fn minutes(self) -> u64 {
        match self {
            Window::OneMinute => 1,
            Window::FiveMinutes => 5,
            Window::FifteenMinutes => 15,
        }
    }
}

impl TopQuery {
    /// Reads `query` (the part of the URI after `?`).
    pub fn parse(query: Option<&str>) -> Result<TopQuery, String> {
        let mut parsed = TopQuery {
            window: Window::OneMinute,
            domain: None,
            rule: None,
        };
        for (name, value) in pairs(query) {
            let value =
                decode(value).ok_or_else(|| format!("`{name}` is not percent-encoded UTF-8"))?;
            match name {
                "window" => {
                    parsed.window = match value.as_str() {
                        "1m" => Window::OneMinute,
                        "5m" => Window::FiveMinutes,
                        "15m" => Window::FifteenMinutes,
                        _ => {
                            return Err(format!(
                                "`window` takes 1m, 5m or 15m, not `{}`",
                                value.escape_debug()
                            ))
                        }
                    }
                }
                "domain" => parsed.domain = Some(value),
                "rule" => parsed.rule = Some(value),
                _ => {
                    return Err(format!(
                        "/top takes `window`, `domain` and `rule` only, not `{}`",
                        name.escape_debug()
                    ))
                }
            }
        }
        Ok(parsed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_parameter_and_names_what_is_wrong() {
        let query = TopQuery::parse(Some("window=15m&domain=edge&rule=edge.user%5Fid+x")).unwrap();
        assert_eq!(query.window, Window::FifteenMinutes);
        assert_eq!(query.domain.as_deref(), Some("edge"));
        assert_eq!(query.rule.as_deref(), Some("edge.user_id x"));
        assert_eq!(TopQuery::parse(None).unwrap().window, Window::OneMinute);
        let wrong = TopQuery::parse(Some("window=2m")).unwrap_err();
        assert!(
            wrong.contains("`window`") && wrong.contains("2m"),
            "{wrong}"
        );
        let unknown = TopQuery::parse(Some("limit=3")).unwrap_err();
        assert!(unknown.contains("`limit`"), "{unknown}");
        let bad = TopQuery::parse(Some("rule=%zz")).unwrap_err();
        assert!(bad.contains("`rule`"), "{bad}");
    }
}
