//! RocketMQ v2 status codes (`apache.rocketmq.v2.Code`): names and the retry classification
//! ferrymq applies to them.

use crate::proto::Code;

/// gRPC status codes that carry no RocketMQ code are reported as `GRPC_BASE + grpc_code`.
pub const GRPC_BASE: i32 = 1_000_000;

/// `OK`.
pub const OK: i32 = 20000;
/// `MULTIPLE_RESULTS`: inspect each entry.
pub const MULTIPLE_RESULTS: i32 = 30000;
/// `BAD_REQUEST`.
pub const BAD_REQUEST: i32 = 40000;
/// `ILLEGAL_TOPIC`.
pub const ILLEGAL_TOPIC: i32 = 40002;
/// `ILLEGAL_CONSUMER_GROUP`.
pub const ILLEGAL_CONSUMER_GROUP: i32 = 40003;
/// `ILLEGAL_MESSAGE_GROUP`.
pub const ILLEGAL_MESSAGE_GROUP: i32 = 40006;
/// `INVALID_TRANSACTION_ID`.
pub const INVALID_TRANSACTION_ID: i32 = 40008;
/// `ILLEGAL_MESSAGE_ID`.
pub const ILLEGAL_MESSAGE_ID: i32 = 40009;
/// `ILLEGAL_FILTER_EXPRESSION`.
pub const ILLEGAL_FILTER_EXPRESSION: i32 = 40010;
/// `ILLEGAL_INVISIBLE_TIME`.
pub const ILLEGAL_INVISIBLE_TIME: i32 = 40011;
/// `ILLEGAL_DELIVERY_TIME`.
pub const ILLEGAL_DELIVERY_TIME: i32 = 40012;
/// `INVALID_RECEIPT_HANDLE`: never retried.
pub const INVALID_RECEIPT_HANDLE: i32 = 40013;
/// `MESSAGE_PROPERTY_CONFLICT_WITH_TYPE`.
pub const MESSAGE_PROPERTY_CONFLICT_WITH_TYPE: i32 = 40014;
/// `UNRECOGNIZED_CLIENT_TYPE`: the server holds no settings for this client.
pub const UNRECOGNIZED_CLIENT_TYPE: i32 = 40015;
/// `CLIENT_ID_REQUIRED`.
pub const CLIENT_ID_REQUIRED: i32 = 40017;
/// `ILLEGAL_POLLING_TIME`.
pub const ILLEGAL_POLLING_TIME: i32 = 40018;
/// `ILLEGAL_OFFSET`.
pub const ILLEGAL_OFFSET: i32 = 40019;
/// `UNAUTHORIZED`.
pub const UNAUTHORIZED: i32 = 40100;
/// `FORBIDDEN`.
pub const FORBIDDEN: i32 = 40300;
/// `MESSAGE_NOT_FOUND`: an empty receive.
pub const MESSAGE_NOT_FOUND: i32 = 40401;
/// `TOPIC_NOT_FOUND`.
pub const TOPIC_NOT_FOUND: i32 = 40402;
/// `CONSUMER_GROUP_NOT_FOUND`.
pub const CONSUMER_GROUP_NOT_FOUND: i32 = 40403;
/// `OFFSET_NOT_FOUND`.
pub const OFFSET_NOT_FOUND: i32 = 40404;
/// `MESSAGE_BODY_TOO_LARGE`.
pub const MESSAGE_BODY_TOO_LARGE: i32 = 41301;
/// `MESSAGE_BODY_EMPTY`.
pub const MESSAGE_BODY_EMPTY: i32 = 41302;
/// `TOO_MANY_REQUESTS`: throttled, back off.
pub const TOO_MANY_REQUESTS: i32 = 42900;
/// `MESSAGE_PROPERTIES_TOO_LARGE`.
pub const MESSAGE_PROPERTIES_TOO_LARGE: i32 = 43101;
/// `INTERNAL_SERVER_ERROR`.
pub const INTERNAL_SERVER_ERROR: i32 = 50001;
/// `HA_NOT_AVAILABLE`.
pub const HA_NOT_AVAILABLE: i32 = 50002;
/// `NOT_IMPLEMENTED`.
pub const NOT_IMPLEMENTED: i32 = 50100;
/// `PROXY_TIMEOUT`.
pub const PROXY_TIMEOUT: i32 = 50400;

/// The symbolic name of a code, as the protocol's `Code` enum spells it (`"UNKNOWN"` when
/// the code is not in the protocol).
pub fn name(code: i32) -> &'static str {
    Code::try_from(code).map_or("UNKNOWN", |c| c.as_str_name())
}

/// How ferrymq treats a status code (rocketmq-v2 reference, §4.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// `OK`.
    Success,
    /// `MULTIPLE_RESULTS`: decide per entry.
    PerEntry,
    /// `TOO_MANY_REQUESTS`: retry after the server's back-off.
    Throttled,
    /// A transient server-side failure: retry now on another endpoint.
    Transient,
    /// The server lost this client's settings: re-send them, then retry.
    SettingsLost,
    /// `MESSAGE_NOT_FOUND` on receive: an empty result.
    Empty,
    /// `INVALID_RECEIPT_HANDLE`: never retry.
    StaleHandle,
    /// Topic / group / offset not found.
    NotFound,
    /// The caller sent something invalid.
    CallerError,
    /// Authentication or authorisation failure.
    Auth,
    /// The server does not implement this.
    Capability,
    /// A quota was exceeded.
    Quota,
}

impl Class {
    /// Whether a request failing with this class may succeed when retried.
    pub fn retriable(self) -> bool {
        matches!(
            self,
            Class::Throttled | Class::Transient | Class::SettingsLost
        )
    }
}

/// Classify a RocketMQ v2 status code.
pub fn classify(code: i32) -> Class {
    match code {
        20000 => Class::Success,
        30000 => Class::PerEntry,
        42900 => Class::Throttled,
        40800 | 50000 | 50001 | 50002 | 50400 | 50401 | 50402 => Class::Transient,
        40015 => Class::SettingsLost,
        40401 => Class::Empty,
        40013 => Class::StaleHandle,
        40400 | 40402 | 40403 | 40404 => Class::NotFound,
        40100 | 40200 | 40300 => Class::Auth,
        50100 | 50500 | 50501 | 50502 => Class::Capability,
        42901 | 42902 => Class::Quota,
        c if c >= GRPC_BASE => Class::Capability,
        _ => Class::CallerError,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_protocol() {
        assert_eq!(name(0), "CODE_UNSPECIFIED");
        assert_eq!(name(40013), "INVALID_RECEIPT_HANDLE");
        assert_eq!(name(12345), "UNKNOWN");
    }

    #[test]
    fn classification_matches_reference() {
        assert_eq!(classify(TOO_MANY_REQUESTS), Class::Throttled);
        assert_eq!(classify(PROXY_TIMEOUT), Class::Transient);
        assert_eq!(classify(INVALID_RECEIPT_HANDLE), Class::StaleHandle);
        assert_eq!(classify(MESSAGE_NOT_FOUND), Class::Empty);
        assert_eq!(classify(TOPIC_NOT_FOUND), Class::NotFound);
        assert_eq!(
            classify(MESSAGE_PROPERTY_CONFLICT_WITH_TYPE),
            Class::CallerError
        );
        assert!(classify(UNRECOGNIZED_CLIENT_TYPE).retriable());
        assert!(!classify(FORBIDDEN).retriable());
    }
}
