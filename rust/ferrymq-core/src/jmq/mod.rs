//! JMQ4, the native TCP protocol of JoyQueue: codec, client, producer and consumer (reference
//! `jmq4.md`; the public protocol document is wrong in the places listed in its §13, and the code
//! follows the reference). The embedded JMQ4 server is in the `ferrymq-server` crate.
//!
//! | module | concept |
//! | --- | --- |
//! | [`codec`] | framing, header, primitives (S1/S2 strings, arrays, BYTES) |
//! | [`command`] | request and response payloads of every command, each layout stated once |
//! | [`wire`] | the `Wire` layout of each field type and the `wire!` field-list macro |
//! | [`message`] | the MESSAGE store format, sysCode bits, batch bodies, properties text |
//! | [`compress`] | zlib, framed snappy and zip bodies |
//! | [`codes`] | result codes, names, retry and refresh classification |
//! | [`client`] | one connection: a cheap handle + a connection task correlating by request id |
//! | [`cluster`] | the session: connections per broker, the FETCH_CLUSTER cache, health, weights |
//! | [`producer`] | PRODUCE_MESSAGE, batches, retries, transactions and feedback |
//! | [`consumer`] | server-balanced, coordinator and broadcast consumption, acks, indices |
//! | [`consumer_rpc`] | the push engine's `ConsumerRpc` over a consumer: one queue per topic, fetches settled whole |
//! | [`received`] | a fetched message unpacked for the user, and what its COMMIT_ACK names |
//! | [`range`] | index-range reads of partitions (FETCH_INDEX bounds, FETCH_PARTITION_MESSAGE) for Spark |

pub mod client;
pub mod cluster;
pub mod codec;
pub mod codes;
pub mod command;
pub mod compress;
pub mod consumer;
pub mod consumer_rpc;
pub mod message;
pub mod producer;
pub mod range;
pub mod received;
pub mod wire;

#[cfg(test)]
mod command_tests;

use crate::error::{Error, Result};

/// The default JoyQueue client port.
pub const DEFAULT_PORT: u16 = 50088;

/// Parse `jmq://host[:port]` (or a bare `host:port`) into `host:port`.
pub fn parse_endpoint(endpoint: &str) -> Result<String> {
    let rest = match endpoint.split_once("://") {
        Some((scheme, rest)) => {
            if !scheme.eq_ignore_ascii_case("jmq") {
                return Err(Error::invalid(
                    "endpoint",
                    format!("scheme {scheme:?} is not jmq (expected jmq://host:port)"),
                ));
            }
            rest
        }
        None => endpoint,
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains('/') || rest.contains('?') {
        return Err(Error::invalid(
            "endpoint",
            format!("{endpoint:?} is not of the form jmq://host:port"),
        ));
    }
    let has_port = if let Some(v6) = rest.strip_prefix('[') {
        v6.contains("]:")
    } else {
        rest.contains(':')
    };
    if has_port {
        let port = rest.rsplit(':').next().unwrap_or("");
        if port.parse::<u16>().is_err() {
            return Err(Error::invalid(
                "endpoint",
                format!("{port:?} is not a valid port in {endpoint:?}"),
            ));
        }
        Ok(rest.to_string())
    } else {
        Ok(format!("{rest}:{DEFAULT_PORT}"))
    }
}

/// A small xorshift generator for load balancing choices (not for anything secret).
#[doc(hidden)]
pub fn random_u64() -> u64 {
    use std::cell::Cell;
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let t = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0x9E37_79B9, |d| d.as_nanos() as u64);
            let addr = &t as *const u64 as u64;
            (t ^ addr.rotate_left(32)) | 1
        });
    }
    STATE.with(|s| {
        let mut x = s.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        s.set(x);
        x
    })
}

/// Run every JMQ4 decoder over arbitrary bytes: frames, request and response payloads,
/// messages, batch bodies and compressed bodies. Used by the `decode_frame` fuzz target and by
/// the randomized unit test; it must never panic, whatever the input.
#[doc(hidden)]
pub fn fuzz_decode(data: &[u8]) {
    use bytes::{Bytes, BytesMut};
    use codec::{decode_frame, sniff, Reader};
    use command::*;

    fn responses(payload: &Bytes, version: u8) {
        macro_rules! each {
            ($($t:ty),* $(,)?) => {$(
                let _ = <$t as Payload>::decode(&mut Reader::new(payload.clone()), version);
            )*};
        }
        each!(
            AddConnectionResponse,
            FetchHealthResponse,
            ClientIdsResponse<-3>,
            FetchClusterResponse,
            FindCoordinatorResponse,
            FetchAssignedPartitionResponse,
            FetchTopicMessageResponse,
            FetchPartitionMessageResponse,
            CommitAckResponse<-32>,
            FetchIndexResponse,
            ProduceMessageResponse,
            PrepareResponse,
            CommitResponse,
            FetchProduceFeedbackResponse,
        );
    }

    let _ = sniff(data);
    let mut buf = BytesMut::from(data);
    for _ in 0..64 {
        match decode_frame(&mut buf, 1 << 20) {
            Ok(Some(f)) => {
                let _ =
                    AnyRequest::decode(f.header.command_type, f.header.version, f.payload.clone());
                responses(&f.payload, f.header.version);
            }
            Ok(None) | Err(_) => break,
        }
    }
    let raw = Bytes::copy_from_slice(data);
    for &t in codec::command_type::KNOWN {
        let _ = AnyRequest::decode(t, 3, raw.clone());
    }
    for v in [1, 2, 3, 4] {
        responses(&raw, v);
    }
    for trust in [true, false] {
        if let Ok(m) = message::WireMessage::decode(&mut Reader::new(raw.clone()), trust) {
            let _ = m.unpack(1 << 20);
        }
    }
    let _ = message::decode_batch(raw.clone());
    for c in [
        compress::Compression::Zip,
        compress::Compression::Zlib,
        compress::Compression::Snappy,
    ] {
        let _ = compress::decompress(c, data, 1 << 20);
    }
    if let Ok(s) = std::str::from_utf8(data) {
        let _ = message::parse_properties(s);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic stand-in for `cargo fuzz` (which needs nightly): thousands of random and
    /// mutated inputs through every decoder, asserting only that nothing panics.
    #[test]
    fn decoders_never_panic_on_random_or_mutated_input() {
        use bytes::BytesMut;
        let mut seed = 0x2545_F491_4F6C_DD1Du64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        // Valid frames to mutate: a produce request with a compressed batch, and a fetch answer.
        let mut corpus: Vec<Vec<u8>> = Vec::new();
        {
            use codec::*;
            use command::*;
            let items = vec![
                message::BatchItem {
                    body: bytes::Bytes::from(vec![7u8; 300]),
                    attributes: Some("a=b".into()),
                    ..Default::default()
                };
                3
            ];
            let mut body = BytesMut::new();
            message::encode_batch(&items, &mut body).unwrap();
            let mut m = message::WireMessage {
                sys_code: message::SysCode {
                    batch: true,
                    compressed: true,
                    compression: compress::Compression::Zlib,
                    ..Default::default()
                },
                flag: 3,
                ..Default::default()
            };
            m.set_body(
                compress::compress(compress::Compression::Zlib, &body)
                    .unwrap()
                    .into(),
            );
            let req = ProduceMessage {
                topics: vec![ProduceTopic {
                    topic: "t".into(),
                    messages: vec![m.clone()],
                    ..Default::default()
                }],
                app: "a".into(),
            };
            let mut f = BytesMut::new();
            encode_frame_with(&Header::request(50, 1, QosLevel::Receive), &mut f, |d| {
                req.encode(3, d)
            })
            .unwrap();
            corpus.push(f.to_vec());
            let resp = FetchTopicMessageResponse {
                data: vec![TopicMessages {
                    topic: "t".into(),
                    messages: vec![m],
                    code: 0,
                }],
            };
            let mut f = BytesMut::new();
            let h = Header::response_to(&Header::request(30, 2, QosLevel::Receive), -30, 0, None);
            encode_frame_with(&h, &mut f, |d| resp.encode(3, d)).unwrap();
            corpus.push(f.to_vec());
            let mut f = BytesMut::new();
            encode_frame_with(&Header::request(10, 3, QosLevel::Receive), &mut f, |d| {
                FetchCluster {
                    topics: vec!["x".into()],
                    app: "a".into(),
                }
                .encode(3, d)
            })
            .unwrap();
            corpus.push(f.to_vec());
        }
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

    #[test]
    fn endpoints() {
        assert_eq!(
            parse_endpoint("jmq://127.0.0.1:1234").unwrap(),
            "127.0.0.1:1234"
        );
        assert_eq!(parse_endpoint("JMQ://h").unwrap(), "h:50088");
        assert_eq!(parse_endpoint("h:1").unwrap(), "h:1");
        assert_eq!(parse_endpoint("jmq://[::1]:5").unwrap(), "[::1]:5");
        assert!(parse_endpoint("http://h:1").is_err());
        assert!(parse_endpoint("jmq://h:99999").is_err());
        assert!(parse_endpoint("jmq://").is_err());
    }
}
