//! Request and response payloads of every JMQ4 command (reference §5), both directions.
//!
//! Each payload implements [`Payload`]: `encode` appends it to a frame buffer, `decode` reads it
//! from a [`Reader`] positioned at the start of the payload. Layouts that depend on the header
//! version take it as an argument (the version *sent in the request*, §2.1).
//!
//! A layout is stated once: every payload with fields is declared with [`wire!`](super::wire),
//! its fields in wire order, each written and read through its type's [`Wire`] layout (S2
//! strings, SHORT-counted arrays, big-endian numbers), a [`Layout`] named with `[as L]` (S1
//! strings, presence flags) or only from a header version on (`[since N, else D]`). The few
//! one-off layouts (the language check, the deleted policy flag, the coordinator sentinel,
//! untrusted produce lengths, the COMMIT_ACK count bug) implement [`Layout`] below, next to the
//! type that uses them. [`AnyRequest`] is declared from the list of request types.
//!
//! | module | commands |
//! | --- | --- |
//! | [`payload`] | the [`Payload`] and [`Request`] traits, [`BooleanAck`] |
//! | [`session`] | connections, heartbeat, health, consumer/producer registration, cluster metadata, coordinator |
//! | [`consume`] | assignment, fetches, acks, ack indices |
//! | [`produce`] | PRODUCE_MESSAGE and transactions |

use crate::error::{Error, Result};
use crate::jmq::codec::{command_type as ct, Reader};

pub mod consume;
pub mod payload;
pub mod produce;
pub mod session;

pub use consume::*;
pub use payload::*;
pub use produce::*;
pub use session::*;

/// Declare [`AnyRequest`], one variant per request named after its payload type (the empty
/// payloads as variants without data), its decoder and the app it names.
macro_rules! any_request {
    (empty: $($e:ident),*; payload: $($p:ident),* $(,)?) => {
        /// Any request, as the server decodes it.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum AnyRequest {
            $($e,)*
            $($p($p),)*
        }

        impl AnyRequest {
            /// Decode the payload of a request of `command_type`. Unknown types and payloads
            /// that do not consume the frame exactly are protocol errors (the server closes the
            /// connection).
            pub fn decode(
                command_type: i8,
                version: u8,
                payload: bytes::Bytes,
            ) -> Result<AnyRequest> {
                let mut r = Reader::new(payload);
                let req = match command_type {
                    $(<$e as Payload>::TYPE => AnyRequest::$e,)*
                    $(<$p as Payload>::TYPE => AnyRequest::$p($p::decode(&mut r, version)?),)*
                    other => {
                        return Err(Error::protocol(format!(
                            "no decoder for JMQ4 command type {other} ({})",
                            ct::name(other)
                        )))
                    }
                };
                r.finish(ct::name(command_type))?;
                Ok(req)
            }

            /// The app the request names (every request with a payload names one).
            pub fn app(&self) -> Option<&str> {
                match self {
                    $(AnyRequest::$e => None,)*
                    $(AnyRequest::$p(r) => Some(&r.app),)*
                }
            }
        }
    };
}

any_request! {
    empty: RemoveConnection, Heartbeat, FetchHealth;
    payload: AddConnection, AddConsumer, RemoveConsumer, AddProducer, RemoveProducer, FetchCluster,
    FindCoordinator, FetchAssignedPartition, FetchTopicMessage, FetchPartitionMessage, CommitAck,
    CommitAckIndex, FetchIndex, ProduceMessage, Prepare, Commit, Rollback, FetchProduceFeedback,
}
