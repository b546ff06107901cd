//! JMQ4 result codes (`JoyQueueCode`, reference §9): names, the retry classification ferrymq
//! applies to them, and which codes make the client refresh its cluster metadata.

use crate::error::{code_table, BrokerStatus, Error, Protocol};

code_table! {
    /// The symbolic name of a JMQ4 code (`"UNKNOWN_JMQ_CODE"` for codes not in `JoyQueueCode`).
    fn name -> "UNKNOWN_JMQ_CODE";
    /// `SUCCESS`.
    SUCCESS = 0,
    /// `CN_NO_PERMISSION`: no subscription (or an app mismatch in a per-item code).
    CN_NO_PERMISSION = 1,
    /// `CN_AUTHENTICATION_ERROR`: wrong app or token on ADD_CONNECTION.
    CN_AUTHENTICATION_ERROR = 2,
    /// `CN_SERVICE_NOT_AVAILABLE`.
    CN_SERVICE_NOT_AVAILABLE = 3,
    /// `CN_UNKNOWN_ERROR`: the default code of a handler exception.
    CN_UNKNOWN_ERROR = 4,
    CN_DB_ERROR = 5,
    /// `CN_PARAM_ERROR`: e.g. messages of one topic entry on different partitions.
    CN_PARAM_ERROR = 6,
    CN_NEGATIVE_VOTE = 7,
    CN_CHECKSUM_ERROR = 8,
    CN_INIT_ERROR = 9,
    CN_CONNECTION_ERROR = 20,
    CN_CONNECTION_TIMEOUT = 21,
    CN_REQUEST_TIMEOUT = 22,
    CN_REQUEST_ERROR = 23,
    CN_REQUEST_EXCESSIVE = 24,
    CN_THREAD_INTERRUPTED = 25,
    /// `CN_THREAD_EXECUTOR_BUSY`: the request was rejected by the server's thread pool.
    CN_THREAD_EXECUTOR_BUSY = 26,
    CN_COMMAND_UNSUPPORTED = 27,
    CN_DECODE_ERROR = 28,
    CN_PLUGIN_NOT_IMPLEMENT = 29,
    CN_TRANSACTION_PREPARE_ERROR = 30,
    CN_TRANSACTION_EXECUTE_ERROR = 31,
    CN_TRANSACTION_COMMIT_ERROR = 32,
    CN_TRANSACTION_ROLLBACK_ERROR = 33,
    /// `CN_TRANSACTION_NOT_EXISTS`.
    CN_TRANSACTION_NOT_EXISTS = 34,
    CN_TRANSACTION_UNSUPPORTED = 35,
    CN_BATCH_NOT_ONE_PARTITION = 36,
    CT_NO_CLUSTER = 71,
    CT_SEQUENTIAL_BROKER_AMBIGUOUS = 72,
    CT_NO_CONSUMER_RECORD = 73,
    CT_LIMIT_REQUEST = 74,
    CT_LOW_VERSION = 75,
    CT_MESSAGE_BODY_NULL = 76,
    SE_IO_ERROR = 91,
    SE_INDEX_OVERFLOW = 92,
    SE_INDEX_UNDERFLOW = 93,
    SE_DISK_FULL = 94,
    SE_DISK_FLUSH_SLOW = 101,
    SE_SERIALIZER_ERROR = 107,
    SE_WRITE_TIMEOUT = 108,
    SE_WRITE_FAILED = 109,
    SE_READ_FAILED = 110,
    CY_REPLICATE_ENQUEUE_TIMEOUT = 111,
    CY_REPLICATE_TIMEOUT = 112,
    CY_REPLICATE_ERROR = 113,
    CY_GET_OFFSET_ERROR = 114,
    CY_FLUSH_OFFSET_ERROR = 115,
    CY_STATUS_ERROR = 116,
    CY_NOT_DEGRADE = 117,
    FW_CONNECTION_EXISTS = 131,
    /// `FW_CONNECTION_NOT_EXISTS`: no ADD_CONNECTION yet, or a wrong app in a later command.
    FW_CONNECTION_NOT_EXISTS = 132,
    /// `FW_PRODUCER_NOT_EXISTS`: PREPARE without ADD_PRODUCER.
    FW_PRODUCER_NOT_EXISTS = 134,
    /// `FW_CONSUMER_NOT_EXISTS`: FETCH_TOPIC_MESSAGE without ADD_CONSUMER.
    FW_CONSUMER_NOT_EXISTS = 136,
    FW_TRANSACTION_EXISTS = 137,
    /// `FW_TRANSACTION_NOT_EXISTS`.
    FW_TRANSACTION_NOT_EXISTS = 138,
    FW_COMMIT_ERROR = 139,
    /// `FW_CONSUMER_ACK_FAIL`.
    FW_CONSUMER_ACK_FAIL = 140,
    FW_PUT_MESSAGE_ERROR = 141,
    FW_GET_MESSAGE_ERROR = 142,
    FW_FLUSH_SEQUENTIAL_STATE_ERROR = 143,
    FW_PUT_MESSAGE_TOPIC_NOT_WRITE = 144,
    FW_GET_MESSAGE_TOPIC_NOT_READ = 145,
    FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE = 146,
    FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ = 147,
    FW_TRANSACTION_LIMIT = 148,
    FW_CONSUMER_REMOTE_ERROR = 149,
    FW_ELECTION_ERROR = 150,
    JA_COMMAND_ERROR = 151,
    JA_COMMAND_EXISTS = 152,
    TN_COMMAND_NOT_EXISTS = 161,
    TN_COMMAND_ERROR = 162,
    TN_COMMAND_FORMAT_ERROR = 163,
    TN_COMMAND_PWD_ERROR = 164,
    /// `FW_COORDINATOR_NOT_AVAILABLE`: no coordinator, or the request went to a non-coordinator.
    FW_COORDINATOR_NOT_AVAILABLE = 181,
    FW_COORDINATOR_PARTITION_ASSIGNOR_TYPE_NOT_EXIST = 182,
    FW_COORDINATOR_PARTITION_ASSIGNOR_ERROR = 183,
    /// `FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE`.
    FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE = 184,
    FW_COORDINATOR_PARTITION_ASSIGNOR_NO_PARTITIONS = 185,
    /// `FW_FETCH_TOPIC_MESSAGE_PAUSED`.
    FW_FETCH_TOPIC_MESSAGE_PAUSED = 186,
    /// `FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER`.
    FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER = 187,
    /// `FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER`.
    FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER = 188,
    /// `FW_TOPIC_NOT_EXIST`.
    FW_TOPIC_NOT_EXIST = 189,
    /// `FW_TOPIC_NO_PARTITIONGROUP`.
    FW_TOPIC_NO_PARTITIONGROUP = 190,
    FW_PARTITION_BROKER_NOT_LEADER = 191,
    FW_BROKER_NOT_READABLE = 192,
    FW_BROKER_NOT_WRITABLE = 193,
    TL_GET_INFO_NULL = 200,
    RETRY_ADD = 240,
    RETRY_GET = 241,
    RETRY_UPDATE = 242,
    RETRY_COUNT = 243,
    RETRY_DISABLED = 244,
    RETRY_TOKEN_LIMIT = 245,
    CONSUME_POSITION_NULL = 250,
    CONSUME_POSITION_UPDATE_ERROR = 251,
    CONSUME_POSITION_META_DATA_NULL = 252,
    NSR_REGISTER_ERR_BROKER_NOT_EXIST = 260,
}

/// Codes after which the cached cluster metadata of the topic is stale (reference §7.2).
pub fn refreshes_metadata(code: i32) -> bool {
    matches!(code, 132 | 187 | 188 | 189 | 190 | 191 | 192 | 193)
}

/// Codes that mean "too busy, back off".
pub fn is_flow_control(code: i32) -> bool {
    matches!(code, 24 | 26 | 74 | 101 | 148 | 245)
}

/// Whether the same request may succeed when retried (possibly on another leader, after a
/// metadata refresh).
pub fn is_retriable(code: i32) -> bool {
    is_flow_control(code)
        || matches!(
            code,
            3 | 20
                | 21
                | 22
                | 25
                | 108
                | 111
                | 112
                | 113
                | 132
                | 150
                | 181
                | 187
                | 188
                | 190
                | 191
                | 192
                | 193
        )
}

/// A core error for a non-success JMQ4 code.
pub fn error(code: i32, message: impl Into<String>) -> Error {
    let name = name(code);
    let message = message.into();
    let message = if message.is_empty() {
        format!("JMQ4 {name} ({code})")
    } else {
        format!("JMQ4 {name} ({code}): {message}")
    };
    Error::broker_status(
        BrokerStatus {
            protocol: Protocol::Jmq,
            code,
            name,
            retriable: is_retriable(code),
        },
        is_flow_control(code),
        message,
    )
}

/// `Ok(())` for [`SUCCESS`], else [`error`].
pub fn check(code: i32, what: impl FnOnce() -> String) -> crate::Result<()> {
    if code == SUCCESS {
        Ok(())
    } else {
        Err(error(code, what()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn names_are_found() {
        assert_eq!(name(188), "FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER");
        assert_eq!(name(9999), "UNKNOWN_JMQ_CODE");
    }

    #[test]
    fn classification() {
        let e = error(188, "not leader");
        assert_eq!(e.kind(), ErrorKind::Broker);
        assert!(e.is_retriable());
        assert_eq!(e.status().unwrap().code, 188);
        assert!(refreshes_metadata(188));
        let e = error(2, "");
        assert!(!e.is_retriable());
        assert!(e.message().contains("CN_AUTHENTICATION_ERROR"));
        let e = error(26, "");
        assert_eq!(e.kind(), ErrorKind::FlowControl);
        assert!(!refreshes_metadata(2));
    }
}
