//! RocketMQ 5 over gRPC (protocol `apache.rocketmq.v2`): the shared client layer and the
//! producer.
//!
//! * [`client::Client`] — the cheap `Clone` handle every role shares: channels, headers and
//!   signing, telemetry, routes, isolation, heartbeats, shutdown.
//! * [`producer::Producer`] — the publishing workflow of the seed specification.

pub mod client;
pub mod connection;
pub mod endpoints;
pub mod isolation;
pub mod message_view;
pub mod metadata;
pub mod producer;
pub mod pull;
pub mod route;
pub mod settings;
pub mod telemetry;

pub use client::{check_status, deadline, Client, ClientOptions};
pub use connection::TlsOptions;
pub use endpoints::Endpoints;
pub use message_view::MessageView;
pub use metadata::Credentials;
pub use producer::{Producer, SendReceipt, Transaction, TransactionChecker, TransactionResolution};
pub use route::TopicRoute;
pub use settings::{EffectiveSettings, RetryPolicy};
pub use telemetry::{CommandHandler, NoCommands};
