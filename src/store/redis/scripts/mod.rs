//! The Lua scripts the store calls and the keys they write: every entry point ([`script`]) and the
//! Functions library that holds them all ([`library`]), the request script's call ([`request`])
//! and its reply ([`reply`]), the refund script's call ([`refund`]), the side scripts ([`side`]),
//! ratelimitd's own keys ([`keys`]), envoyproxy/ratelimit's ([`envoyproxy_key`]) and the layout
//! that chooses between them and says how their counters count ([`key_layout`]).

pub mod envoyproxy_key;
pub mod key_layout;
pub mod keys;
pub mod library;
pub mod refund;
pub mod reply;
pub mod request;
pub mod script;
pub mod side;
