//! Redis store.
pub struct RedisStore;
