//! What the RLS answers when the store fails: the policy the command line names, the RPC
//! handler applies and the decision log reports.

use std::fmt;
use std::str::FromStr;

/// What to answer when the store fails (error or timeout).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum StoreErrorPolicy {
    /// gRPC `UNAVAILABLE` (the default): Envoy's `failure_mode_deny` decides.
    #[default]
    Unavailable,
    /// OK: every counted descriptor is admitted (nothing is counted).
    Allow,
    /// OVER_LIMIT: every counted non-shadow descriptor is denied.
    Deny,
}

impl StoreErrorPolicy {
    /// The name the command line and the metrics use.
    pub fn name(self) -> &'static str {
        match self {
            StoreErrorPolicy::Unavailable => "unavailable",
            StoreErrorPolicy::Allow => "allow",
            StoreErrorPolicy::Deny => "deny",
        }
    }
}

impl fmt::Display for StoreErrorPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for StoreErrorPolicy {
    type Err = String;

    fn from_str(name: &str) -> Result<StoreErrorPolicy, String> {
        [
            StoreErrorPolicy::Unavailable,
            StoreErrorPolicy::Allow,
            StoreErrorPolicy::Deny,
        ]
        .into_iter()
        .find(|policy| policy.name().eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            format!("unknown store error policy `{name}` (expected unavailable, allow or deny)")
        })
    }
}
