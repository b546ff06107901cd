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

/// Run every remoting decoder over `data`; used by the fuzz target and the never-panic test.
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

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;

    /// A deterministic stand-in for `cargo fuzz`: random and mutated frames and pull bodies
    /// through every decoder, asserting only that nothing panics.
    #[test]
    fn decoders_never_panic_on_random_or_mutated_input() {
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut corpus: Vec<Vec<u8>> = Vec::new();
        let mut body = stored::tests::record(5, b"hello", "KEYS\u{1}a\u{2}TAGS\u{1}t\u{2}", 0);
        body.extend(stored::tests::record(6, b"world", "UNIQ_KEY\u{1}X\u{2}", 0));
        corpus.push(body.clone());
        let mut f = BytesMut::new();
        RemotingCommand::response(0, 3, Some("FOUND".into()))
            .with_ext("nextBeginOffset", 7)
            .with_body(body.clone())
            .encode(&mut f);
        corpus.push(f.to_vec());
        let mut f = BytesMut::new();
        RemotingCommand::response(0, 3, None)
            .with_ext("nextBeginOffset", 7)
            .with_body(body)
            .encode_binary(&mut f);
        corpus.push(f.to_vec());
        let m = crate::Message::builder("t", "b").tag("x").build().unwrap();
        corpus.push(
            stored::encode_batch(&[m.clone(), m], &["A".into(), "B".into()])
                .unwrap()
                .to_vec(),
        );
        for case in 0..4000u32 {
            let input: Vec<u8> = if case % 2 == 0 {
                let len = (next() % 300) as usize;
                (0..len).map(|_| next() as u8).collect()
            } else {
                let mut v = corpus[(case as usize / 2) % corpus.len()].clone();
                for _ in 0..=(next() % 8) {
                    let i = (next() as usize) % v.len();
                    match next() % 4 {
                        0 => v[i] = next() as u8,
                        1 => v[i] ^= 0x80,
                        2 => v.truncate(i.max(1)),
                        _ => v.insert(i, next() as u8),
                    }
                }
                v
            };
            fuzz_decode(&input);
        }
    }
}
