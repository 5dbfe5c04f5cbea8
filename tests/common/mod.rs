#![allow(dead_code)]

pub mod hostile_config;
pub mod ratelimitd;
pub mod redis_server;
