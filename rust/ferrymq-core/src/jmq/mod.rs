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
//! | [`producer`] | PRODUCE_MESSAGE, batches, retries |
//! | [`transaction`] | PREPARE / COMMIT / ROLLBACK, and expired transactions resolved by a checker |
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
pub mod transaction;
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

/// A random number for load balancing choices (not for anything secret); the embedded JMQ4
/// server balances with it too.
#[doc(hidden)]
pub fn random_u64() -> u64 {
    fastrand::u64(..)
}

/// Run every JMQ4 decoder over arbitrary bytes: frames, request and response payloads,
/// messages, batch bodies and compressed bodies. Used by the `decode_frame` fuzz target and by
/// the decoder fuzz test (`tests/fuzz_decoders.rs`); it must never panic, whatever the input.
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
