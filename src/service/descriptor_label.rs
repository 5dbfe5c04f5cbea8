//! A descriptor as envoyproxy/ratelimit names it in its stats (`key_value` per entry, joined by
//! `.`), bounded in bytes: the `descriptor` label of `detailed_metric` rules, and the text `/top`
//! shows of a value.

/// Longest `descriptor` label value, in bytes; longer ones are cut (at a character boundary).
pub const DETAILED_LABEL_MAX_BYTES: usize = 256;

/// The stat suffix envoyproxy/ratelimit gives a `detailed_metric` rule's descriptor:
/// `key_value` per entry, joined by `.` (`key_` when the value is empty, as its
/// `config_impl.go` builds it), cut at [`DETAILED_LABEL_MAX_BYTES`].
pub fn detailed_label(descriptor: &crate::limiter::Descriptor) -> String {
    join_entries(descriptor, true)
}

/// The stat suffix envoyproxy/ratelimit gives a descriptor with a client override: `key_value`
/// per entry, joined by `.` (`key` alone when the value is empty, its `descriptorKey`), cut at
/// [`DETAILED_LABEL_MAX_BYTES`].
pub fn override_label(descriptor: &crate::limiter::Descriptor) -> String {
    join_entries(descriptor, false)
}

fn join_entries(descriptor: &crate::limiter::Descriptor, underscore_empty: bool) -> String {
    let mut label = String::new();
    for (i, entry) in descriptor.entries.iter().enumerate() {
        if i > 0 {
            label.push('.');
        }
        label.push_str(&entry.key);
        if underscore_empty || !entry.value.is_empty() {
            label.push('_');
            label.push_str(&entry.value);
        }
        if label.len() > DETAILED_LABEL_MAX_BYTES {
            break;
        }
    }
    let end = cut(&label, DETAILED_LABEL_MAX_BYTES).len();
    label.truncate(end);
    label
}

/// `text` cut to at most `max` bytes, at a character boundary.
pub fn cut(text: &str, max: usize) -> &str {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}
