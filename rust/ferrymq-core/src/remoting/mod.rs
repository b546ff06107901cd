//! The classic RocketMQ "remoting" protocol over TCP: name servers (port 9876) and brokers
//! (port 10911) of Apache RocketMQ 4.x and 5.x, and a 5.x proxy's remoting port in cluster
//! mode.
//!
//! Every exchange is one framed [`RemotingCommand`]: a request code, a string map of header
//! fields (`extFields`) and an optional body; the answer carries the request's `opaque` and a
//! response code. ferrymq uses it for offset-addressed reads (routes, min/max offsets, pulls,
//! committed offsets) and for batch sends in which every message keeps its own keys, tag,
//! properties and unique id.
//!
//! Layers, bottom up:
//! * [`codec`]: framing and the JSON / binary command header;
//! * [`codes`]: request and response codes, and their mapping onto [`crate::Error`];
//! * [`stored`]: stored messages (pull bodies), batch records, properties, unique ids;
//! * [`acl`]: request signing;
//! * [`connection`]: one lazily opened, reconnecting socket with request correlation;
//! * [`route`]: topic routes from the name servers and their cache;
//! * [`client`]: [`RemotingClient`]: routes, offsets, pulls, commits;
//! * [`send`]: single and batch sends of [`RemotingClient`];
//! * [`reader`]: [`RemotingReader`], exact `[start, end)` reads with the API of the gRPC
//!   [`crate::rocketmq::pull::PullReader`];
//! * [`consumer`]: [`OffsetConsumer`], assign / seek / poll / commit (Kafka's consumer API).

pub mod acl;
pub mod client;
pub mod codec;
pub mod codes;
pub mod connection;
pub mod consumer;
pub mod reader;
pub mod route;
pub mod send;
pub mod stored;

pub use client::{PullOutcome, PullStatus, RemotingClient, RemotingOptions, TagFilter};
pub use codec::{decode_frame, RemotingCommand};
pub use connection::Connection;
pub use consumer::{OffsetConsumer, OffsetReset, Polled, TopicQueue};
pub use reader::RemotingReader;
pub use route::{RouteCache, TopicRoute};
pub use send::BatchReceipt;
pub use stored::StoredMessage;

/// Run every remoting decoder over `data`; used by the decoder fuzz test.
/// Errors are expected, panics are bugs.
pub fn fuzz_decode(data: &[u8]) {
    let mut buf = bytes::BytesMut::from(data);
    while let Ok(Some(cmd)) = codec::decode_frame(&mut buf, 1 << 20) {
        let _ = stored::decode_stored(&cmd.body);
    }
    let body = bytes::Bytes::copy_from_slice(data);
    let _ = stored::decode_stored(&body);
    let _ = stored::decode_batch(&body);
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = stored::decode_properties(s);
    }
}
