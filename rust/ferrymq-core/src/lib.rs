//! ferrymq-core: the pure-Rust half of ferrymq.
//!
//! Everything that touches the network, a codec or a cache lives here and is tested with plain
//! `cargo test`; the PyO3 binding crate (`ferrymq-python`) only converts values and releases the
//! GIL. The embedded servers (RocketMQ broker, JMQ4 server) are the `ferrymq-server` crate. See `docs/architecture.md` for how the modules fit together.

pub mod columnar;
pub mod consumer_backend;
pub mod duration;
pub mod error;
pub mod histogram;
pub mod jmq;
pub mod message;
pub mod message_id;
pub mod metrics;
pub mod nats;
pub mod produce;
pub mod proto;
pub mod publisher;
pub mod range;
pub mod remoting;
pub mod rocketmq;
pub mod selector;
pub mod status;
#[cfg(test)]
mod test_support;
pub mod trace_context;

pub use error::{Error, ErrorKind, Result};
pub use message::{Message, MessageBuilder, MessageKind};

/// The version of the ferrymq core, reported to brokers in `x-mq-client-version` style headers.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
