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
    use crate::error::code_table;

    code_table! {
        /// The name of a response code.
        fn name -> "UNKNOWN";
        /// Success.
        SUCCESS = 0,
        /// An exception on the server (the remark holds its text).
        SYSTEM_ERROR = 1,
        /// Flow control: the server is overloaded.
        SYSTEM_BUSY = 2,
        /// No processor for this request code.
        REQUEST_CODE_NOT_SUPPORTED = 3,
        /// Send: stored, but the disk flush timed out.
        FLUSH_DISK_TIMEOUT = 10,
        /// Send: stored, but no slave was available.
        SLAVE_NOT_AVAILABLE = 11,
        /// Send: stored, but the slave flush timed out.
        FLUSH_SLAVE_TIMEOUT = 12,
        /// The message was refused (too large, bad properties, …).
        MESSAGE_ILLEGAL = 13,
        /// The store is not writable.
        SERVICE_NOT_AVAILABLE = 14,
        /// The request lacks a field this server needs (a proxy without `bname`).
        VERSION_NOT_SUPPORTED = 15,
        /// Permission bits or ACL refused the request.
        NO_PERMISSION = 16,
        /// The topic does not exist.
        TOPIC_NOT_EXIST = 17,
        /// Pull: no new message (after any long-poll hold).
        PULL_NOT_FOUND = 19,
        /// Pull: retry at once from `nextBeginOffset`.
        PULL_RETRY_IMMEDIATELY = 20,
        /// Pull: the offset is not valid; `nextBeginOffset` is the server's suggestion.
        PULL_OFFSET_MOVED = 21,
        /// Query consumer offset: the group never committed.
        QUERY_NOT_FOUND = 22,
        /// The subscription expression does not parse.
        SUBSCRIPTION_PARSE_FAILED = 23,
        /// No subscription registered for this group.
        SUBSCRIPTION_NOT_EXIST = 24,
        /// The registered subscription is older than the request's.
        SUBSCRIPTION_NOT_LATEST = 25,
        /// The consumer group is unknown to the broker.
        SUBSCRIPTION_GROUP_NOT_EXIST = 26,
        /// A bad parameter (queue id out of range, invalid topic name).
        INVALID_PARAMETER = 29,
        /// Flow control on pulls.
        FLOW_CONTROL = 215,
        /// The server is shutting down.
        GO_AWAY = 1500,
    }
}

pub use response::name;

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

/// Classify a response code.
pub fn classify(code: i32) -> Class {
    use response::*;
    Class {
        name: name(code),
        retriable: matches!(
            code,
            SYSTEM_BUSY | SERVICE_NOT_AVAILABLE | PULL_RETRY_IMMEDIATELY | FLOW_CONTROL | GO_AWAY
        ),
        flow_control: matches!(code, SYSTEM_BUSY | FLOW_CONTROL),
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
