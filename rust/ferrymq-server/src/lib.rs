//! ferrymq-server: the servers ferrymq embeds for development, tests and benchmarks.
//!
//! | module | concept |
//! | --- | --- |
//! | [`broker`] | the embedded Apache RocketMQ 5 broker: gRPC (`apache.rocketmq.v2`) and remoting |
//! | [`jmq`] | the JMQ4 server (JoyQueue's native TCP protocol) and its topic store |
//!
//! The servers speak the protocols through the codecs, protobuf types and message types of
//! `ferrymq-core`; the core (the clients) does not depend on this crate. The core modules the
//! servers build on are imported here under their own names, so a server module names them
//! `crate::error`, `crate::proto` and so on, as it did inside the core.

pub mod broker;
pub mod jmq;

pub(crate) use ferrymq_core::{
    duration, error, message, message_id, proto, remoting, selector, status, trace_context,
};

/// Bind a listening socket on `host:port` (port 0: any free port).
pub(crate) async fn listen(host: &str, port: u16) -> error::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind((host, port))
        .await
        .map_err(|e| {
            error::Error::connection(format!("cannot listen on {host}:{port}")).with_source(e)
        })
}
