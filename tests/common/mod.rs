#![allow(dead_code)]

pub mod fault_load;
pub mod hostile_config;
pub mod ratelimitd;
pub mod redis_cluster;
pub mod redis_sentinel;
pub mod redis_server;
