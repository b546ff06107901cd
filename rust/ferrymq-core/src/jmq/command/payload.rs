//! What every command payload is: [`Payload`] (encode/decode) and [`Request`] (a request and
//! its success response), and the `-128` [`BooleanAck`] of requests answered by a status alone.

use bytes::BytesMut;

use crate::error::Result;
use crate::jmq::codec::{Reader, BOOLEAN_ACK};

/// A command payload.
pub trait Payload: Sized {
    /// The command type (negative for responses).
    const TYPE: i8;
    /// Append the payload.
    fn encode(&self, version: u8, dst: &mut BytesMut) -> Result<()>;
    /// Read the payload.
    fn decode(r: &mut Reader, version: u8) -> Result<Self>;
}

/// A request payload and the payload of its success response.
pub trait Request: Payload {
    /// The typed response (or [`BooleanAck`]).
    type Response: Payload;
}

macro_rules! empty_payload {
    ($(#[$m:meta])* $name:ident, $t:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl Payload for $name {
            const TYPE: i8 = $t;
            fn encode(&self, _: u8, _: &mut BytesMut) -> Result<()> {
                Ok(())
            }
            fn decode(_: &mut Reader, _: u8) -> Result<Self> {
                Ok($name)
            }
        }
    };
}
pub(crate) use empty_payload;

empty_payload!(
    /// The `-128` response: no payload, the result is in the header status.
    BooleanAck,
    BOOLEAN_ACK
);
