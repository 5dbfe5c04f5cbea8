//! How a counted limit is decided when several replicas share one store.

use std::fmt;

/// `exact` (the default) decides every request in the store; `leased` lets a replica decide
/// requests locally from hits it reserved in the store beforehand (a lease), never admitting more
/// than `exact` would. Only the store-backed deployment distinguishes them: the memory store
/// decides everything exactly whatever a rule says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Consistency {
    #[default]
    Exact,
    Leased,
}

impl Consistency {
    /// The configuration name (`exact`, `leased`).
    pub fn as_str(self) -> &'static str {
        match self {
            Consistency::Exact => "exact",
            Consistency::Leased => "leased",
        }
    }

    /// Parses a configuration name, case-insensitively.
    pub fn parse(name: &str) -> Option<Consistency> {
        [Consistency::Exact, Consistency::Leased]
            .into_iter()
            .find(|c| c.as_str().eq_ignore_ascii_case(name))
    }
}

impl fmt::Display for Consistency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
