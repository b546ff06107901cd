//! JMQ4, the native TCP protocol of JoyQueue: codec, client, producer, consumer and an embedded
//! server that reproduces the broker's behaviour (reference `jmq4.md`; the public protocol
//! document is wrong in the places listed in its §13, and the code follows the reference).
//!
//! | module | concept |
//! | --- | --- |
//! | [`codec`] | framing, header, primitives (S1/S2 strings, arrays, BYTES) |
//! | [`command`] | request and response payloads of every command |
//! | [`message`] | the MESSAGE store format, sysCode bits, batch bodies, properties text |
//! | [`compress`] | zlib, framed snappy and zip bodies |
//! | [`codes`] | result codes, names, retry and refresh classification |
//! | [`client`] | one connection: a cheap handle + a connection task correlating by request id |
//! | [`cluster`] | the session: connections per broker, the FETCH_CLUSTER cache, health, weights |
//! | [`producer`] | PRODUCE_MESSAGE, batches, retries, transactions and feedback |
//! | [`consumer`] | server-balanced, coordinator and broadcast consumption, acks, indices |
//! | [`store`] | the embedded server's topic store (partitions, acks, occupation, transactions) |
//! | [`server`] | the embedded JMQ4 TCP server with fault injection |

pub mod client;
pub mod cluster;
pub mod codec;
pub mod codes;
pub mod command;
pub mod compress;
pub mod consumer;
pub mod message;
pub mod producer;
pub mod server;
pub mod store;

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
pub(crate) fn random_u64() -> u64 {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints() {
        assert_eq!(parse_endpoint("jmq://127.0.0.1:1234").unwrap(), "127.0.0.1:1234");
        assert_eq!(parse_endpoint("JMQ://h").unwrap(), "h:50088");
        assert_eq!(parse_endpoint("h:1").unwrap(), "h:1");
        assert_eq!(parse_endpoint("jmq://[::1]:5").unwrap(), "[::1]:5");
        assert!(parse_endpoint("http://h:1").is_err());
        assert!(parse_endpoint("jmq://h:99999").is_err());
        assert!(parse_endpoint("jmq://").is_err());
    }
}
