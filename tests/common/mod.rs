#![allow(dead_code)]

pub mod ratelimitd;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
