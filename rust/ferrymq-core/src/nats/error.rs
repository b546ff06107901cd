//! NATS / JetStream failures mapped onto [`crate::Error`].
//!
//! JetStream API errors keep their `err_code` (10xxx) as a [`BrokerStatus`] with
//! [`Protocol::Nats`]; "no responders" (no stream listens on the subject, or JetStream is not
//! enabled) is reported as status 503, the NATS status code the server sends.

use std::fmt::{Debug, Display};

use async_nats::jetstream;
use async_nats::jetstream::context::{
    CreateStreamErrorKind, GetStreamErrorKind, PublishErrorKind, RequestErrorKind,
};
use async_nats::jetstream::stream::ConsumerErrorKind;

use crate::error::{code_table, BrokerStatus, Error, ErrorKind, Protocol};

code_table! {
    /// The symbolic name of a JetStream error code (`"JETSTREAM_ERROR"` when not in the table).
    fn code_name -> "JETSTREAM_ERROR";
    /// "No responders": nothing listens on the subject (no stream, or JetStream disabled).
    NO_RESPONDERS = 503,
    BAD_REQUEST = 10003,
    CLUSTER_NOT_AVAILABLE = 10008,
    CONSUMER_CREATE = 10012,
    CONSUMER_NAME_EXIST = 10013,
    CONSUMER_NOT_FOUND = 10014,
    INSUFFICIENT_RESOURCES = 10023,
    INVALID_JSON = 10025,
    MEMORY_RESOURCES_EXCEEDED = 10028,
    NO_MESSAGE_FOUND = 10037,
    JETSTREAM_NOT_ENABLED_FOR_ACCOUNT = 10039,
    SEQUENCE_NOT_FOUND = 10043,
    STORAGE_RESOURCES_EXCEEDED = 10047,
    STREAM_INVALID_CONFIG = 10052,
    STREAM_LIMITS = 10053,
    STREAM_MESSAGE_EXCEEDS_MAXIMUM = 10054,
    STREAM_MISMATCH = 10056,
    STREAM_NAME_EXIST = 10058,
    STREAM_NOT_FOUND = 10059,
    STREAM_NOT_MATCH = 10060,
    STREAM_SUBJECT_OVERLAP = 10065,
    STREAM_WRONG_LAST_MESSAGE_ID = 10070,
    STREAM_WRONG_LAST_SEQUENCE = 10071,
    JETSTREAM_NOT_ENABLED = 10076,
    STREAM_STORE_FAILED = 10077,
    CONSUMER_PULL_REQUIRES_ACK = 10084,
    CONSUMER_FILTER_NOT_SUBSET = 10093,
    CONSUMER_EXISTING_ACTIVE = 10105,
}

/// Whether retrying after this JetStream code may succeed: no responders (the stream may be
/// created, or the server may come back) and a temporarily unavailable cluster. Expectation
/// failures (10060, 10070, 10071) and every caller error are final.
pub fn code_retriable(code: i32) -> bool {
    matches!(code, 503 | 10008)
}

/// A broker error with a JetStream (or NATS status) code.
pub fn status_error(code: i32, what: impl Display, detail: impl Display) -> Error {
    let name = code_name(code);
    Error::broker_status(
        BrokerStatus {
            protocol: Protocol::Nats,
            code,
            name,
            retriable: code_retriable(code),
        },
        false,
        format!("{what}: {name} ({code}): {detail}"),
    )
}

/// The error of a JetStream API reply (`{"error": {"code", "err_code", "description"}}`).
pub(crate) fn api_error(what: &str, e: &jetstream::Error) -> Error {
    let code = i32::try_from(e.error_code().0).unwrap_or(i32::MAX);
    // Errors without an err_code carry the HTTP-like code (e.g. 503).
    let code = if code == 0 {
        i32::try_from(e.code()).unwrap_or(i32::MAX)
    } else {
        code
    };
    status_error(code, what, e)
}

/// "No responders" (status 503): retriable.
pub(crate) fn no_responders(what: &str) -> Error {
    status_error(
        NO_RESPONDERS,
        what,
        "no responders (no stream listens on this subject, or JetStream is not enabled)",
    )
}

/// How one async-nats error kind maps onto ours.
pub(crate) enum Class<'a> {
    Api(&'a jetstream::Error),
    NoResponders,
    Timeout,
    Connection,
    Invalid(&'static str),
    Protocol,
    Other,
}

/// Error kinds of async-nats that ferrymq maps.
pub(crate) trait Classify {
    fn class(&self) -> Class<'_>;
}

impl Classify for PublishErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            PublishErrorKind::StreamNotFound => Class::NoResponders,
            PublishErrorKind::TimedOut => Class::Timeout,
            PublishErrorKind::BrokenPipe => Class::Connection,
            PublishErrorKind::MaxPayloadExceeded => Class::Invalid("body"),
            _ => Class::Other,
        }
    }
}

impl Classify for async_nats::client::PublishErrorKind {
    fn class(&self) -> Class<'_> {
        use async_nats::client::PublishErrorKind as K;
        match self {
            K::MaxPayloadExceeded => Class::Invalid("body"),
            K::InvalidSubject => Class::Invalid("subject"),
            K::Send => Class::Connection,
        }
    }
}

impl Classify for async_nats::client::SubscribeErrorKind {
    fn class(&self) -> Class<'_> {
        Class::Connection
    }
}

impl Classify for CreateStreamErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            CreateStreamErrorKind::JetStream(e) => Class::Api(e),
            CreateStreamErrorKind::JetStreamUnavailable => Class::NoResponders,
            CreateStreamErrorKind::TimedOut => Class::Timeout,
            CreateStreamErrorKind::EmptyStreamName | CreateStreamErrorKind::InvalidStreamName => {
                Class::Invalid("name")
            }
            CreateStreamErrorKind::ResponseParse => Class::Protocol,
            _ => Class::Other,
        }
    }
}

impl Classify for GetStreamErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            GetStreamErrorKind::JetStream(e) => Class::Api(e),
            GetStreamErrorKind::EmptyName | GetStreamErrorKind::InvalidStreamName => {
                Class::Invalid("stream")
            }
            _ => Class::Other,
        }
    }
}

impl Classify for ConsumerErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            ConsumerErrorKind::JetStream(e) => Class::Api(e),
            ConsumerErrorKind::TimedOut => Class::Timeout,
            ConsumerErrorKind::InvalidName => Class::Invalid("durable"),
            _ => Class::Other,
        }
    }
}

impl Classify for RequestErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            RequestErrorKind::NoResponders => Class::NoResponders,
            RequestErrorKind::TimedOut => Class::Timeout,
            RequestErrorKind::InvalidSubject => Class::Invalid("subject"),
            RequestErrorKind::Other => Class::Other,
        }
    }
}

impl Classify for async_nats::jetstream::consumer::pull::BatchErrorKind {
    fn class(&self) -> Class<'_> {
        Class::Connection
    }
}

impl Classify for async_nats::jetstream::consumer::StreamErrorKind {
    fn class(&self) -> Class<'_> {
        match self {
            async_nats::jetstream::consumer::StreamErrorKind::TimedOut => Class::Timeout,
            _ => Class::Other,
        }
    }
}

impl Classify for async_nats::ConnectErrorKind {
    fn class(&self) -> Class<'_> {
        use async_nats::ConnectErrorKind as K;
        match self {
            K::TimedOut => Class::Timeout,
            K::ServerParse => Class::Invalid("endpoints"),
            K::Authentication | K::AuthorizationViolation => Class::Other,
            _ => Class::Connection,
        }
    }
}

impl Classify for async_nats::client::FlushErrorKind {
    fn class(&self) -> Class<'_> {
        Class::Connection
    }
}

/// Find a JetStream API error anywhere in a source chain.
fn api_in_chain<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a jetstream::Error> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(api) = err.downcast_ref::<jetstream::Error>() {
            return Some(api);
        }
        cur = err.source();
    }
    None
}

/// Map an async-nats error of an operation described by `what`.
pub(crate) fn map<K>(what: &str, e: async_nats::error::Error<K>) -> Error
where
    K: Classify + Clone + Debug + Display + PartialEq + Send + Sync + 'static,
{
    let kind = e.kind();
    let detail = e.to_string();
    let class = kind.class();
    if let Class::Api(api) = class {
        return api_error(what, api);
    }
    if let Some(api) = std::error::Error::source(&e).and_then(api_in_chain) {
        return api_error(what, api);
    }
    match class {
        Class::Api(_) => unreachable!("handled above"),
        Class::NoResponders => no_responders(what),
        Class::Timeout => Error::timeout(format!("{what}: {detail}")),
        Class::Connection => Error::connection(format!("{what}: {detail}")),
        Class::Invalid(field) => Error::invalid(field, format!("{what}: {detail}")),
        Class::Protocol => Error::protocol(format!("{what}: {detail}")),
        Class::Other => Error::new(ErrorKind::Broker, format!("{what}: {detail}")),
    }
}

/// Map a boxed async-nats error (acks and other untyped results).
pub(crate) fn map_boxed(what: &str, e: &async_nats::Error) -> Error {
    if let Some(api) = api_in_chain(e.as_ref()) {
        return api_error(what, api);
    }
    Error::connection(format!("{what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_found() {
        assert_eq!(code_name(10071), "STREAM_WRONG_LAST_SEQUENCE");
        assert_eq!(code_name(1), "JETSTREAM_ERROR");
    }

    #[test]
    fn no_responders_is_retriable_expectations_are_not() {
        let e = map(
            "publish",
            async_nats::error::Error::new(PublishErrorKind::StreamNotFound),
        );
        assert_eq!(e.status().map(|s| s.code), Some(503));
        assert!(e.is_retriable());
        let e = status_error(10071, "publish", "wrong last sequence: 3");
        assert!(!e.is_retriable());
        assert!(crate::publisher::is_expectation_failure(&e));
        assert_eq!(e.status().unwrap().protocol, Protocol::Nats);
    }
}
