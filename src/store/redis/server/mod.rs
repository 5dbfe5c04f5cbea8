//! One server's connections: the pooled connection manager ([`connection`]), the sentinels that
//! name the master ([`sentinel`]) and the version check of a fresh connection ([`version`]).

pub mod connection;
pub(super) mod sentinel;
pub(super) mod version;
