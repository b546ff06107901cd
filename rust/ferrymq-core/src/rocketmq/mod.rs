//! Apache RocketMQ 5 over gRPC (protocol `apache.rocketmq.v2`): the shared client layer, the
//! producer and the consumers.
//!
//! * [`client::Client`] — the cheap `Clone` handle every role shares: channels, headers and
//!   signing, telemetry, routes, isolation, heartbeats, shutdown.
//! * [`producer::Producer`] — the publishing workflow of the seed specification; its
//!   transactions are in [`transaction`].
//! * [`simple_consumer::SimpleConsumer`] and [`push::PushConsumer`] — the consumers
//!   (the push consumer's process queues, consume services and settle path are in [`push`]).

pub mod channel;
pub mod client;
pub mod connection;
pub mod consumer_rpc;
pub mod endpoints;
pub mod filter;
pub mod isolation;
pub mod listener;
pub mod message_view;
pub mod metadata;
pub mod producer;
pub mod pull;
pub mod push;
pub mod route;
pub mod settings;
pub mod simple_consumer;
pub mod telemetry;
pub mod transaction;
pub mod worker_pool;

#[cfg(test)]
mod runtime_tests;

pub use client::{check_status, deadline, Client, ClientOptions, CommandHandler, NoCommands};
pub use connection::TlsOptions;
pub use endpoints::Endpoints;
pub use message_view::MessageView;
pub use metadata::Credentials;
pub use producer::{Producer, SendReceipt, Transaction, TransactionChecker, TransactionResolution};
pub use push::{
    ConsumerCommands, ConsumerStats, PushConsumer, PushConsumerConfig, ShutdownReport,
    StatsSnapshot,
};
pub use route::TopicRoute;
pub use settings::{EffectiveSettings, RetryPolicy};
