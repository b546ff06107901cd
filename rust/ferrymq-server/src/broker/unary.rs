//! The unary calls of the `MessagingService` answered without tonic's codec: a request whose whole
//! body has arrived as one plain gRPC message is decoded with prost, handed to the handler, and
//! its answer encoded into one buffer, as tonic's server would encode it (a `content-type:
//! application/grpc` header, the message with its 5-byte gRPC prefix, `grpc-status: 0` trailers;
//! an error status as a trailers-only answer). Anything else (a compressed request, a body not yet
//! whole, a message that does not decode, trailers, more than one message) goes through tonic's
//! generated server, whose answers to such requests are thereby unchanged.
//!
//! It saves, per call, what tonic's unary path adds around the handler: the streaming decoder,
//! the answer's encoding body and its adapters, and the trailers built from a `Status`.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::{BufMut as _, Bytes, BytesMut};
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderValue};
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::service_wire::EndpointService;
use crate::proto::messaging_service_server::MessagingService as _;

/// What a unary call answers: the answer's headers and its encoded message, or an error status.
pub(crate) type Reply =
    Pin<Box<dyn Future<Output = Result<(HeaderMap, Bytes), Status>> + Send + 'static>>;

/// The path of every call of the service, up to the method name.
const PREFIX: &str = "/apache.rocketmq.v2.MessagingService/";

/// Largest request message decoded (tonic's server is given the same limit).
pub(crate) const MAX_DECODE: usize = 256 * 1024 * 1024;

const GRPC_CONTENT_TYPE: HeaderValue = HeaderValue::from_static("application/grpc");

/// Declares [`serves`] and [`start`] from the list of unary methods: each one's name on the
/// wire and its handler.
macro_rules! unary_methods {
    ($($name:literal => $method:ident),+ $(,)?) => {
        /// Whether `path` names a unary method of the service.
        pub(crate) fn serves(path: &str) -> bool {
            matches!(path.strip_prefix(PREFIX), Some($($name)|+))
        }

        /// Start the call `parts` names with the request message in `payload` (the request's
        /// whole body), or give `parts` back when the call is not one to answer here (boxed:
        /// the rare way).
        pub(crate) fn start(
            svc: &Arc<EndpointService>,
            parts: http::request::Parts,
            payload: &Bytes,
        ) -> Result<Reply, Box<http::request::Parts>> {
            let Some(message) = message_of(payload) else {
                return Err(Box::new(parts));
            };
            match parts.uri.path().strip_prefix(PREFIX) {
                $(Some($name) => {
                    let Ok(m) = prost::Message::decode(message) else {
                        return Err(Box::new(parts));
                    };
                    let request = tonic::Request::from_parts(
                        MetadataMap::from_headers(parts.headers),
                        parts.extensions,
                        m,
                    );
                    let svc = Arc::clone(svc);
                    Ok(Box::pin(async move { encode(svc.$method(request).await) }))
                })+
                _ => Err(Box::new(parts)),
            }
        }
    };
}

unary_methods!(
    "QueryRoute" => query_route,
    "Heartbeat" => heartbeat,
    "SendMessage" => send_message,
    "QueryAssignment" => query_assignment,
    "AckMessage" => ack_message,
    "ForwardMessageToDeadLetterQueue" => forward_message_to_dead_letter_queue,
    "UpdateOffset" => update_offset,
    "GetOffset" => get_offset,
    "QueryOffset" => query_offset,
    "EndTransaction" => end_transaction,
    "NotifyClientTermination" => notify_client_termination,
    "ChangeInvisibleDuration" => change_invisible_duration,
    "RecallMessage" => recall_message,
    "SyncLiteSubscription" => sync_lite_subscription,
);

/// The message of a body that is exactly one uncompressed gRPC message (flag 0, big-endian
/// length, the message) of at most [`MAX_DECODE`] bytes.
fn message_of(payload: &Bytes) -> Option<Bytes> {
    let (&flag, rest) = payload.split_first()?;
    let len = u32::from_be_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    (flag == 0 && len == rest.len() - 4 && len <= MAX_DECODE).then(|| payload.slice(5..))
}

/// A handler's answer as tonic's server encodes it: its metadata as headers, plus the gRPC
/// content type, and the message with its gRPC prefix.
fn encode<R: prost::Message>(
    answer: Result<tonic::Response<R>, Status>,
) -> Result<(HeaderMap, Bytes), Status> {
    let (metadata, message, _) = answer?.into_parts();
    let mut headers = metadata.into_headers();
    headers.insert(CONTENT_TYPE, GRPC_CONTENT_TYPE);
    let len = message.encoded_len();
    let mut buf = BytesMut::with_capacity(5 + len);
    buf.put_u8(0);
    buf.put_u32(u32::try_from(len).map_err(|_| Status::resource_exhausted("answer too large"))?);
    message.encode_raw(&mut buf);
    Ok((headers, buf.freeze()))
}

/// The trailers of an answered unary call.
pub(crate) fn ok_trailers() -> HeaderMap {
    let mut h = HeaderMap::with_capacity(1);
    h.insert("grpc-status", HeaderValue::from_static("0"));
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_one_plain_message_is_taken() {
        let framed = |flag: u8, len: u32, body: &[u8]| {
            let mut b = vec![flag];
            b.extend_from_slice(&len.to_be_bytes());
            b.extend_from_slice(body);
            Bytes::from(b)
        };
        assert_eq!(
            message_of(&framed(0, 3, b"abc")).as_deref(),
            Some(&b"abc"[..])
        );
        assert_eq!(message_of(&framed(0, 0, b"")).as_deref(), Some(&b""[..]));
        assert_eq!(message_of(&framed(1, 3, b"abc")), None, "compressed");
        assert_eq!(message_of(&framed(0, 2, b"abc")), None, "two messages");
        assert_eq!(message_of(&framed(0, 4, b"abc")), None, "cut short");
        assert_eq!(message_of(&Bytes::from_static(&[0, 0, 0])), None);
        assert_eq!(message_of(&Bytes::new()), None);
        assert!(serves("/apache.rocketmq.v2.MessagingService/SendMessage"));
        assert!(!serves(
            "/apache.rocketmq.v2.MessagingService/ReceiveMessage"
        ));
        assert!(!serves("/apache.rocketmq.v2.MessagingService/Telemetry"));
        assert!(!serves("/other.Service/SendMessage"));
    }
}
