//! The page itself: one HTML document, its style and script inline (`page.html`, `page.css`,
//! `page.js`, embedded at build time), served with a Content-Security-Policy that allows exactly
//! that style and that script by their SHA-256 (no `'unsafe-inline'`), data from this origin
//! only, and no framing. The hashes are computed once from the very text put in the document.

use std::sync::OnceLock;

use base64::Engine as _;
use bytes::Bytes;
use sha2::{Digest, Sha256};

const TEMPLATE: &str = include_str!("page.html");
const STYLE: &str = include_str!("page.css");
const SCRIPT: &str = include_str!("page.js");

/// The document and the policy that goes with it.
pub struct Document {
    pub html: Bytes,
    /// The `Content-Security-Policy` header's value.
    pub policy: String,
}

/// `'sha256-…'` of `text`, as a CSP source names an inline element's content.
pub fn csp_hash(text: &str) -> String {
    let digest = Sha256::digest(text.as_bytes());
    format!(
        "'sha256-{}'",
        base64::engine::general_purpose::STANDARD.encode(digest)
    )
}

/// The page, built once.
pub fn document() -> &'static Document {
    static DOCUMENT: OnceLock<Document> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let html = TEMPLATE
            .replacen("{{style}}", STYLE, 1)
            .replacen("{{script}}", SCRIPT, 1);
        let policy = format!(
            "default-src 'none'; script-src {}; style-src {}; connect-src 'self'; \
             img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
            csp_hash(SCRIPT),
            csp_hash(STYLE)
        );
        Document {
            html: Bytes::from(html),
            policy,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_policy_allows_exactly_the_inline_style_and_script() {
        let document = document();
        let html = std::str::from_utf8(&document.html).unwrap();
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(html.matches("<style").count(), 1);
        assert!(!html.contains("{{"), "a placeholder is left");
        let inner = |open: &str, close: &str| {
            let start = html.find(open).unwrap() + open.len();
            let end = html.find(close).unwrap();
            html[start..end].to_owned()
        };
        let script = inner("<script>", "</script>");
        let style = inner("<style>", "</style>");
        assert!(document.policy.contains(&csp_hash(&script)));
        assert!(document.policy.contains(&csp_hash(&style)));
        assert!(!document.policy.contains("unsafe"));
        assert!(
            !SCRIPT.contains("innerHTML"),
            "the script builds the DOM with textContent"
        );
        assert!(!SCRIPT.contains("</script"));
    }
}
