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
//! * [`codes`]: request and response codes, and their mapping onto [`crate::Error`].

pub mod codec;
pub mod codes;

pub use codec::{decode_frame, RemotingCommand};
