//! The push consumer: assignments, process queues, consumption, settling and shutdown.
//!
//! Imports between these modules run one way, from the bottom of the table up:
//!
//! | module | concept | imports from `push` |
//! | --- | --- | --- |
//! | [`stats`] | [`ConsumerStats`], [`StatsSnapshot`] | nothing |
//! | [`process_queue`] | [`ProcessQueue`]: the per-queue message cache | `stats` |
//! | [`settle_events`] | [`SettleEvent`]: settle attempts reported to observers (interceptors) | nothing |
//! | [`context`] | [`PushConsumerConfig`], the shared `Context`, the settle channel | `stats`, `process_queue`, `settle_events` |
//! | [`settle`] | the settler task: coalesced acks, nacks, DLQ forwards, retries | `context` |
//! | [`consume_service`] | standard and FIFO consumption | `context`, `process_queue`, `settle` |
//! | [`receive`] | the receive loop of a process queue | `context`, `process_queue`, `consume_service` |
//! | [`consumer`] | [`PushConsumer`]: start, assignment scan, shutdown, telemetry commands | all of the above |
//!
//! This file only declares the modules and re-exports the public names; none of them imports it.

pub mod consume_service;
pub mod consumer;
pub mod context;
pub mod process_queue;
pub mod receive;
pub mod settle;
pub mod settle_events;
pub mod stats;

#[cfg(test)]
mod fifo_order_tests;

pub use consumer::{ConsumerCommands, PushConsumer, ShutdownReport};
pub use context::{
    PushConsumerConfig, DEFAULT_ASSIGNMENT_INTERVAL, DEFAULT_MAX_CACHE_BYTES,
    DEFAULT_MAX_CACHE_MESSAGES, DEFAULT_MAX_CONCURRENT_RECEIVES,
};
pub use process_queue::ProcessQueue;
pub use settle_events::{SettleEvent, SettleOp};
pub use stats::{ConsumerStats, StatsSnapshot};
