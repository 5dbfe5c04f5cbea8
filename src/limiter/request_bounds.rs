//! Bounds on what one request may carry, so that the memory, the matching and the store work one
//! request costs are bounded whatever a client sends.

/// The most descriptors, entries per descriptor and bytes per entry key or value one request may
/// carry. A request beyond any of them is refused whole (nothing is counted).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestBounds {
    pub max_descriptors: usize,
    pub max_entries: usize,
    pub max_entry_bytes: usize,
}

impl RequestBounds {
    /// Envoy sends one descriptor per `rate_limits` action set of the route (and of the virtual
    /// host): a handful, rarely more than ten. 64 leaves room for generated configurations while
    /// one request stays a small share of a store call.
    pub const DEFAULT_MAX_DESCRIPTORS: usize = 64;
    /// One entry per action of a `rate_limits` entry, matched one configuration level per entry;
    /// real trees are a few levels deep.
    pub const DEFAULT_MAX_ENTRIES: usize = 32;
    /// Values are header values, paths, addresses: 8 KiB is the longest request line common
    /// HTTP servers accept (nginx's `large_client_header_buffers`, Apache's `LimitRequestLine`).
    pub const DEFAULT_MAX_ENTRY_BYTES: usize = 8 << 10;
    /// The most `max_descriptors` may be set to. A request has at most one store check per
    /// descriptor, and the Redis store sizes its calls by this (`MAX_BATCH_CHECKS`), so no single
    /// request can make a script call longer than a full batch.
    pub const MAX_DESCRIPTORS_CEILING: usize = 1024;

    /// Refuses more than `max_descriptors` descriptors, and never accepts more than
    /// [`RequestBounds::MAX_DESCRIPTORS_CEILING`] whatever `max_descriptors` says.
    pub fn check_descriptors(&self, count: usize) -> Result<(), BoundExceeded> {
        let max = self
            .max_descriptors
            .min(RequestBounds::MAX_DESCRIPTORS_CEILING);
        if count > max {
            return Err(BoundExceeded::Descriptors { count, max });
        }
        Ok(())
    }

    /// Refuses more than `max_entries` entries in descriptor `descriptor`.
    pub fn check_entries(&self, descriptor: usize, count: usize) -> Result<(), BoundExceeded> {
        if count > self.max_entries {
            return Err(BoundExceeded::Entries {
                descriptor,
                count,
                max: self.max_entries,
            });
        }
        Ok(())
    }

    /// Refuses a key or a value longer than `max_entry_bytes`.
    pub fn check_entry(
        &self,
        descriptor: usize,
        entry: usize,
        key: &str,
        value: &str,
    ) -> Result<(), BoundExceeded> {
        for (part, text) in [("key", key), ("value", value)] {
            if text.len() > self.max_entry_bytes {
                return Err(BoundExceeded::EntryBytes {
                    descriptor,
                    entry,
                    part,
                    bytes: text.len(),
                    max: self.max_entry_bytes,
                });
            }
        }
        Ok(())
    }
}

impl Default for RequestBounds {
    fn default() -> RequestBounds {
        RequestBounds {
            max_descriptors: RequestBounds::DEFAULT_MAX_DESCRIPTORS,
            max_entries: RequestBounds::DEFAULT_MAX_ENTRIES,
            max_entry_bytes: RequestBounds::DEFAULT_MAX_ENTRY_BYTES,
        }
    }
}

/// A request beyond one of its [`RequestBounds`]; the message names the numbers and the flag
/// that sets the bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BoundExceeded {
    #[error("request has {count} descriptors; at most {max} are accepted (--max-descriptors)")]
    Descriptors { count: usize, max: usize },
    #[error(
        "descriptor {descriptor} has {count} entries; at most {max} are accepted \
         (--max-descriptor-entries)"
    )]
    Entries {
        descriptor: usize,
        count: usize,
        max: usize,
    },
    #[error(
        "descriptor {descriptor}: entry {entry} has a {part} of {bytes} bytes; at most {max} are \
         accepted (--max-entry-bytes)"
    )]
    EntryBytes {
        descriptor: usize,
        entry: usize,
        part: &'static str,
        bytes: usize,
        max: usize,
    },
}

/// Which of the [`RequestBounds`] a request exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestBound {
    Descriptors,
    Entries,
    EntryBytes,
}

impl RequestBound {
    pub const ALL: [RequestBound; 3] = [
        RequestBound::Descriptors,
        RequestBound::Entries,
        RequestBound::EntryBytes,
    ];

    /// The `limit` label value of the metrics.
    pub fn label(self) -> &'static str {
        match self {
            RequestBound::Descriptors => "descriptors",
            RequestBound::Entries => "entries",
            RequestBound::EntryBytes => "entry_bytes",
        }
    }
}

impl BoundExceeded {
    pub fn bound(&self) -> RequestBound {
        match self {
            BoundExceeded::Descriptors { .. } => RequestBound::Descriptors,
            BoundExceeded::Entries { .. } => RequestBound::Entries,
            BoundExceeded::EntryBytes { .. } => RequestBound::EntryBytes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_defaults_fit_under_the_ceiling() {
        let bounds = RequestBounds::default();
        assert!(bounds.max_descriptors <= RequestBounds::MAX_DESCRIPTORS_CEILING);
    }

    #[test]
    fn no_setting_accepts_more_descriptors_than_the_ceiling() {
        let bounds = RequestBounds {
            max_descriptors: usize::MAX,
            ..RequestBounds::default()
        };
        assert!(bounds.check_descriptors(1024).is_ok());
        assert_eq!(
            bounds.check_descriptors(1025).unwrap_err().to_string(),
            "request has 1025 descriptors; at most 1024 are accepted (--max-descriptors)"
        );
    }

    #[test]
    fn each_bound_is_inclusive_and_names_its_numbers_and_flag() {
        let bounds = RequestBounds {
            max_descriptors: 64,
            max_entries: 2,
            max_entry_bytes: 3,
        };
        assert!(bounds.check_descriptors(64).is_ok());
        let error = bounds.check_descriptors(100_000).unwrap_err();
        assert_eq!(
            error.to_string(),
            "request has 100000 descriptors; at most 64 are accepted (--max-descriptors)"
        );
        assert_eq!(error.bound(), RequestBound::Descriptors);

        assert!(bounds.check_entries(0, 2).is_ok());
        let error = bounds.check_entries(5, 3).unwrap_err();
        assert_eq!(
            error.to_string(),
            "descriptor 5 has 3 entries; at most 2 are accepted (--max-descriptor-entries)"
        );
        assert_eq!(error.bound(), RequestBound::Entries);

        assert!(bounds.check_entry(0, 0, "abc", "xyz").is_ok());
        let error = bounds.check_entry(1, 2, "abc", "wxyz").unwrap_err();
        assert_eq!(
            error.to_string(),
            "descriptor 1: entry 2 has a value of 4 bytes; at most 3 are accepted (--max-entry-bytes)"
        );
        let error = bounds.check_entry(0, 0, "abcd", "").unwrap_err();
        assert!(
            error.to_string().contains("has a key of 4 bytes"),
            "{error}"
        );
        assert_eq!(error.bound(), RequestBound::EntryBytes);
    }
}
