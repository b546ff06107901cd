//! Request and response codes of the remoting protocol, and how a non-zero response code maps
//! onto [`Error`].
//!
//! A response code is classified once here: its symbolic name, whether a retry of the same
//! request may succeed, and whether it is flow control (the server asks us to slow down).
//! [`status_error`] turns a reply into an [`Error::broker_status`] of
//! [`Protocol::Remoting`].

use crate::error::{BrokerStatus, Error, Protocol};

/// Request codes (`RequestCode`) used by ferrymq.
pub mod request {
    /// Send one message, long header names.
    pub const SEND_MESSAGE: i32 = 10;
    /// Pull messages from one queue.
    pub const PULL_MESSAGE: i32 = 11;
    /// Read a consumer group's committed offset.
    pub const QUERY_CONSUMER_OFFSET: i32 = 14;
    /// Commit a consumer group's offset.
    pub const UPDATE_CONSUMER_OFFSET: i32 = 15;
    /// Create or update a topic on a broker (admin).
    pub const UPDATE_AND_CREATE_TOPIC: i32 = 17;
    /// Offset of a queue by store time.
    pub const SEARCH_OFFSET_BY_TIMESTAMP: i32 = 29;
    /// Exclusive end offset of a queue.
    pub const GET_MAX_OFFSET: i32 = 30;
    /// First offset still stored in a queue.
    pub const GET_MIN_OFFSET: i32 = 31;
    /// Store time of the oldest message of a queue.
    pub const GET_EARLIEST_MSG_STORETIME: i32 = 32;
    /// Client heartbeat.
    pub const HEART_BEAT: i32 = 34;
    /// Server to client: the consumers of a group changed.
    pub const NOTIFY_CONSUMER_IDS_CHANGED: i32 = 40;
    /// Topic route from a name server.
    pub const GET_ROUTEINFO_BY_TOPIC: i32 = 105;
    /// Send one message, short header names `a`..`n`.
    pub const SEND_MESSAGE_V2: i32 = 310;
    /// Send a batch, short header names `a`..`n`.
    pub const SEND_BATCH_MESSAGE: i32 = 320;
    /// Pull as the Java lite pull consumer does (same processor as 11).
    pub const LITE_PULL_MESSAGE: i32 = 361;
}

/// Response codes (`ResponseCode`, `RemotingSysResponseCode`).
pub mod response {
    /// Success.
    pub const SUCCESS: i32 = 0;
    /// An exception on the server (the remark holds its text).
    pub const SYSTEM_ERROR: i32 = 1;
    /// Flow control: the server is overloaded.
    pub const SYSTEM_BUSY: i32 = 2;
    /// No processor for this request code.
    pub const REQUEST_CODE_NOT_SUPPORTED: i32 = 3;
    /// Send: stored, but the disk flush timed out.
    pub const FLUSH_DISK_TIMEOUT: i32 = 10;
    /// Send: stored, but no slave was available.
    pub const SLAVE_NOT_AVAILABLE: i32 = 11;
    /// Send: stored, but the slave flush timed out.
    pub const FLUSH_SLAVE_TIMEOUT: i32 = 12;
    /// The message was refused (too large, bad properties, …).
    pub const MESSAGE_ILLEGAL: i32 = 13;
    /// The store is not writable.
    pub const SERVICE_NOT_AVAILABLE: i32 = 14;
    /// The request lacks a field this server needs (a proxy without `bname`).
    pub const VERSION_NOT_SUPPORTED: i32 = 15;
    /// Permission bits or ACL refused the request.
    pub const NO_PERMISSION: i32 = 16;
    /// The topic does not exist.
    pub const TOPIC_NOT_EXIST: i32 = 17;
    /// Pull: no new message (after any long-poll hold).
    pub const PULL_NOT_FOUND: i32 = 19;
    /// Pull: retry at once from `nextBeginOffset`.
    pub const PULL_RETRY_IMMEDIATELY: i32 = 20;
    /// Pull: the offset is not valid; `nextBeginOffset` is the server's suggestion.
    pub const PULL_OFFSET_MOVED: i32 = 21;
    /// Query consumer offset: the group never committed.
    pub const QUERY_NOT_FOUND: i32 = 22;
    /// The subscription expression does not parse.
    pub const SUBSCRIPTION_PARSE_FAILED: i32 = 23;
    /// No subscription registered for this group.
    pub const SUBSCRIPTION_NOT_EXIST: i32 = 24;
    /// The registered subscription is older than the request's.
    pub const SUBSCRIPTION_NOT_LATEST: i32 = 25;
    /// The consumer group is unknown to the broker.
    pub const SUBSCRIPTION_GROUP_NOT_EXIST: i32 = 26;
    /// A bad parameter (queue id out of range, invalid topic name).
    pub const INVALID_PARAMETER: i32 = 29;
    /// Flow control on pulls.
    pub const FLOW_CONTROL: i32 = 215;
    /// The server is shutting down.
    pub const GO_AWAY: i32 = 1500;
}

/// How a response code is treated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Class {
    /// Symbolic name.
    pub name: &'static str,
    /// Whether the same request may succeed when retried (possibly elsewhere).
    pub retriable: bool,
    /// Whether the server throttles us.
    pub flow_control: bool,
}

/// The name of a response code.
pub fn name(code: i32) -> &'static str {
    classify(code).name
}

/// Classify a response code.
pub fn classify(code: i32) -> Class {
    use response::*;
    let (name, retriable, flow_control) = match code {
        SUCCESS => ("SUCCESS", false, false),
        SYSTEM_ERROR => ("SYSTEM_ERROR", false, false),
        SYSTEM_BUSY => ("SYSTEM_BUSY", true, true),
        REQUEST_CODE_NOT_SUPPORTED => ("REQUEST_CODE_NOT_SUPPORTED", false, false),
        FLUSH_DISK_TIMEOUT => ("FLUSH_DISK_TIMEOUT", false, false),
        SLAVE_NOT_AVAILABLE => ("SLAVE_NOT_AVAILABLE", false, false),
        FLUSH_SLAVE_TIMEOUT => ("FLUSH_SLAVE_TIMEOUT", false, false),
        MESSAGE_ILLEGAL => ("MESSAGE_ILLEGAL", false, false),
        SERVICE_NOT_AVAILABLE => ("SERVICE_NOT_AVAILABLE", true, false),
        VERSION_NOT_SUPPORTED => ("VERSION_NOT_SUPPORTED", false, false),
        NO_PERMISSION => ("NO_PERMISSION", false, false),
        TOPIC_NOT_EXIST => ("TOPIC_NOT_EXIST", false, false),
        PULL_NOT_FOUND => ("PULL_NOT_FOUND", false, false),
        PULL_RETRY_IMMEDIATELY => ("PULL_RETRY_IMMEDIATELY", true, false),
        PULL_OFFSET_MOVED => ("PULL_OFFSET_MOVED", false, false),
        QUERY_NOT_FOUND => ("QUERY_NOT_FOUND", false, false),
        SUBSCRIPTION_PARSE_FAILED => ("SUBSCRIPTION_PARSE_FAILED", false, false),
        SUBSCRIPTION_NOT_EXIST => ("SUBSCRIPTION_NOT_EXIST", false, false),
        SUBSCRIPTION_NOT_LATEST => ("SUBSCRIPTION_NOT_LATEST", false, false),
        SUBSCRIPTION_GROUP_NOT_EXIST => ("SUBSCRIPTION_GROUP_NOT_EXIST", false, false),
        INVALID_PARAMETER => ("INVALID_PARAMETER", false, false),
        FLOW_CONTROL => ("FLOW_CONTROL", true, true),
        GO_AWAY => ("GO_AWAY", true, false),
        _ => ("UNKNOWN", false, false),
    };
    Class {
        name,
        retriable,
        flow_control,
    }
}

/// The error for a reply with a non-success `code` and `remark`.
pub fn status_error(code: i32, remark: Option<&str>) -> Error {
    let c = classify(code);
    let remark = remark.map(str::trim).filter(|r| !r.is_empty());
    let message = match remark {
        // Server remarks can carry whole Java stack traces; keep the first line.
        Some(r) => format!(
            "{} ({code}): {}",
            c.name,
            r.lines().next().unwrap_or_default()
        ),
        None => format!("{} ({code})", c.name),
    };
    Error::broker_status(
        BrokerStatus {
            protocol: Protocol::Remoting,
            code,
            name: c.name,
            retriable: c.retriable,
        },
        c.flow_control,
        message,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    #[test]
    fn classification() {
        for code in [2, 215] {
            let e = status_error(code, Some("slow down"));
            assert_eq!(e.kind(), ErrorKind::FlowControl);
            assert!(e.is_retriable());
        }
        for code in [14, 1500] {
            let e = status_error(code, None);
            assert_eq!(e.kind(), ErrorKind::Broker);
            assert!(e.is_retriable(), "{code}");
        }
        let e = status_error(17, Some("No topic route info in name server\nat x.y"));
        assert!(!e.is_retriable());
        let s = e.status().unwrap();
        assert_eq!(
            (s.protocol, s.code, s.name),
            (Protocol::Remoting, 17, "TOPIC_NOT_EXIST")
        );
        assert_eq!(
            e.message(),
            "TOPIC_NOT_EXIST (17): No topic route info in name server"
        );
        assert_eq!(name(4242), "UNKNOWN");
    }
}
