//! Apache RocketMQ 5 over gRPC (protocol v2).

pub mod consume_service;
pub mod consumer_rpc;
pub mod filter;
pub mod listener;
pub mod message_view;
pub mod process_queue;
pub mod push_consumer;
pub mod retry_policy;
pub mod settle;
