//! The YAML configuration loader on arbitrary text: it answers rules or file:line errors, and
//! never panics, however deep, large or malformed the document.
#![no_main]

use std::path::Path;

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    match ratelimitd::config::parse_domain(Path::new("fuzz.yaml"), text) {
        Ok(rules) => assert!(!rules.domain.is_empty(), "a domain without a name loaded"),
        Err(errors) => {
            assert!(!errors.0.is_empty(), "a rejected file without an error");
            for error in &errors.0 {
                assert!(error.line >= 1, "an error without a line: {error}");
            }
        }
    }
});
