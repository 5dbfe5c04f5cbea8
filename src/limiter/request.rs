//! A rate-limit request in domain terms, after the gRPC edge has validated and converted it.

use super::rate::Unit;

/// One `key`/`value` pair of a descriptor.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Entry {
    pub key: String,
    pub value: String,
}

/// A client-supplied limit that replaces the configured rate and unit for one descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LimitOverride {
    pub requests_per_unit: u32,
    pub unit: Unit,
    pub unit_multiplier: u32,
}

/// One request descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    pub entries: Vec<Entry>,
    pub limit_override: Option<LimitOverride>,
    /// The descriptor's own `hits_addend` when the client set it (0 = check without consuming).
    pub hits_addend: Option<u64>,
}

/// A whole request: every descriptor is decided together, all or nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub domain: String,
    pub descriptors: Vec<Descriptor>,
    /// The request-level `hits_addend`; 0 means "not set" (proto3 cannot tell them apart).
    pub hits_addend: u32,
}

impl Request {
    /// Hits charged to `descriptor`: its own `hits_addend` when present, else the request's when
    /// non-zero, else 1.
    pub fn hits_for(&self, descriptor: &Descriptor) -> u64 {
        match descriptor.hits_addend {
            Some(hits) => hits,
            None if self.hits_addend != 0 => u64::from(self.hits_addend),
            None => 1,
        }
    }
}
