//! The connection an RLQS call came on, as the transport numbers it.

/// The transport's number of the connection an RLQS call came on, set in the call's extensions:
/// what `--rlqs-max-streams-per-connection` counts by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Connection(pub u64);
