//! In-process store.
pub struct MemoryStore;
