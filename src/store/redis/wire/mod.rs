//! The wire: the RESP2 codec of the script-call hot path ([`resp`]), the store's own pipelined
//! connection over plain TCP ([`pipe`]) and the one connection type over either transport
//! ([`link`]).

pub(super) mod link;
pub(super) mod pipe;
pub mod resp;
