//! Generated types and gRPC stubs of `apache.rocketmq.v2` (RocketMQ 5, protocol v2).
//!
//! Generated at build time by `build.rs` from `proto/apache/rocketmq/v2/*.proto`.

#![allow(missing_docs, clippy::all, clippy::pedantic, rust_2018_idioms)]

tonic::include_proto!("apache.rocketmq.v2");
