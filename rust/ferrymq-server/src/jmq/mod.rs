//! The embedded JMQ4 server and its topic store (the clients, codec and command payloads are
//! `ferrymq_core::jmq`; reference `jmq4.md`).
//!
//! | module | concept |
//! | --- | --- |
//! | [`store`] | the embedded server's topic store (partitions, acks, occupation, transactions) |
//! | [`server`] | the embedded JMQ4 TCP server with fault injection |
//! | `handle` | the server's answer to each request, per connection |

mod handle;
pub mod server;
pub mod store;

// The protocol modules of the core the server and the store are written against.
pub(crate) use ferrymq_core::jmq::{codec, codes, command, message, random_u64};
