//! JMQ4 result codes (`JoyQueueCode`, reference §9): names, the retry classification ferrymq
//! applies to them, and which codes make the client refresh its cluster metadata.

use crate::error::{BrokerStatus, Error, Protocol};

/// `SUCCESS`.
pub const SUCCESS: i32 = 0;
/// `CN_NO_PERMISSION`: no subscription (or an app mismatch in a per-item code).
pub const CN_NO_PERMISSION: i32 = 1;
/// `CN_AUTHENTICATION_ERROR`: wrong app or token on ADD_CONNECTION.
pub const CN_AUTHENTICATION_ERROR: i32 = 2;
/// `CN_SERVICE_NOT_AVAILABLE`.
pub const CN_SERVICE_NOT_AVAILABLE: i32 = 3;
/// `CN_UNKNOWN_ERROR`: the default code of a handler exception.
pub const CN_UNKNOWN_ERROR: i32 = 4;
/// `CN_PARAM_ERROR`: e.g. messages of one topic entry on different partitions.
pub const CN_PARAM_ERROR: i32 = 6;
/// `CN_THREAD_EXECUTOR_BUSY`: the request was rejected by the server's thread pool.
pub const CN_THREAD_EXECUTOR_BUSY: i32 = 26;
/// `CN_TRANSACTION_NOT_EXISTS`.
pub const CN_TRANSACTION_NOT_EXISTS: i32 = 34;
/// `FW_CONNECTION_NOT_EXISTS`: no ADD_CONNECTION yet, or a wrong app in a later command.
pub const FW_CONNECTION_NOT_EXISTS: i32 = 132;
/// `FW_PRODUCER_NOT_EXISTS`: PREPARE without ADD_PRODUCER.
pub const FW_PRODUCER_NOT_EXISTS: i32 = 134;
/// `FW_CONSUMER_NOT_EXISTS`: FETCH_TOPIC_MESSAGE without ADD_CONSUMER.
pub const FW_CONSUMER_NOT_EXISTS: i32 = 136;
/// `FW_TRANSACTION_NOT_EXISTS`.
pub const FW_TRANSACTION_NOT_EXISTS: i32 = 138;
/// `FW_CONSUMER_ACK_FAIL`.
pub const FW_CONSUMER_ACK_FAIL: i32 = 140;
/// `FW_COORDINATOR_NOT_AVAILABLE`: no coordinator, or the request went to a non-coordinator.
pub const FW_COORDINATOR_NOT_AVAILABLE: i32 = 181;
/// `FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE`.
pub const FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE: i32 = 184;
/// `FW_FETCH_TOPIC_MESSAGE_PAUSED`.
pub const FW_FETCH_TOPIC_MESSAGE_PAUSED: i32 = 186;
/// `FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER`.
pub const FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER: i32 = 187;
/// `FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER`.
pub const FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER: i32 = 188;
/// `FW_TOPIC_NOT_EXIST`.
pub const FW_TOPIC_NOT_EXIST: i32 = 189;
/// `FW_TOPIC_NO_PARTITIONGROUP`.
pub const FW_TOPIC_NO_PARTITIONGROUP: i32 = 190;

const NAMES: &[(i32, &str)] = &[
    (0, "SUCCESS"),
    (1, "CN_NO_PERMISSION"),
    (2, "CN_AUTHENTICATION_ERROR"),
    (3, "CN_SERVICE_NOT_AVAILABLE"),
    (4, "CN_UNKNOWN_ERROR"),
    (5, "CN_DB_ERROR"),
    (6, "CN_PARAM_ERROR"),
    (7, "CN_NEGATIVE_VOTE"),
    (8, "CN_CHECKSUM_ERROR"),
    (9, "CN_INIT_ERROR"),
    (20, "CN_CONNECTION_ERROR"),
    (21, "CN_CONNECTION_TIMEOUT"),
    (22, "CN_REQUEST_TIMEOUT"),
    (23, "CN_REQUEST_ERROR"),
    (24, "CN_REQUEST_EXCESSIVE"),
    (25, "CN_THREAD_INTERRUPTED"),
    (26, "CN_THREAD_EXECUTOR_BUSY"),
    (27, "CN_COMMAND_UNSUPPORTED"),
    (28, "CN_DECODE_ERROR"),
    (29, "CN_PLUGIN_NOT_IMPLEMENT"),
    (30, "CN_TRANSACTION_PREPARE_ERROR"),
    (31, "CN_TRANSACTION_EXECUTE_ERROR"),
    (32, "CN_TRANSACTION_COMMIT_ERROR"),
    (33, "CN_TRANSACTION_ROLLBACK_ERROR"),
    (34, "CN_TRANSACTION_NOT_EXISTS"),
    (35, "CN_TRANSACTION_UNSUPPORTED"),
    (36, "CN_BATCH_NOT_ONE_PARTITION"),
    (71, "CT_NO_CLUSTER"),
    (72, "CT_SEQUENTIAL_BROKER_AMBIGUOUS"),
    (73, "CT_NO_CONSUMER_RECORD"),
    (74, "CT_LIMIT_REQUEST"),
    (75, "CT_LOW_VERSION"),
    (76, "CT_MESSAGE_BODY_NULL"),
    (91, "SE_IO_ERROR"),
    (92, "SE_INDEX_OVERFLOW"),
    (93, "SE_INDEX_UNDERFLOW"),
    (94, "SE_DISK_FULL"),
    (101, "SE_DISK_FLUSH_SLOW"),
    (107, "SE_SERIALIZER_ERROR"),
    (108, "SE_WRITE_TIMEOUT"),
    (109, "SE_WRITE_FAILED"),
    (110, "SE_READ_FAILED"),
    (111, "CY_REPLICATE_ENQUEUE_TIMEOUT"),
    (112, "CY_REPLICATE_TIMEOUT"),
    (113, "CY_REPLICATE_ERROR"),
    (114, "CY_GET_OFFSET_ERROR"),
    (115, "CY_FLUSH_OFFSET_ERROR"),
    (116, "CY_STATUS_ERROR"),
    (117, "CY_NOT_DEGRADE"),
    (131, "FW_CONNECTION_EXISTS"),
    (132, "FW_CONNECTION_NOT_EXISTS"),
    (134, "FW_PRODUCER_NOT_EXISTS"),
    (136, "FW_CONSUMER_NOT_EXISTS"),
    (137, "FW_TRANSACTION_EXISTS"),
    (138, "FW_TRANSACTION_NOT_EXISTS"),
    (139, "FW_COMMIT_ERROR"),
    (140, "FW_CONSUMER_ACK_FAIL"),
    (141, "FW_PUT_MESSAGE_ERROR"),
    (142, "FW_GET_MESSAGE_ERROR"),
    (143, "FW_FLUSH_SEQUENTIAL_STATE_ERROR"),
    (144, "FW_PUT_MESSAGE_TOPIC_NOT_WRITE"),
    (145, "FW_GET_MESSAGE_TOPIC_NOT_READ"),
    (146, "FW_PUT_MESSAGE_APP_CLIENT_IP_NOT_WRITE"),
    (147, "FW_GET_MESSAGE_APP_CLIENT_IP_NOT_READ"),
    (148, "FW_TRANSACTION_LIMIT"),
    (149, "FW_CONSUMER_REMOTE_ERROR"),
    (150, "FW_ELECTION_ERROR"),
    (151, "JA_COMMAND_ERROR"),
    (152, "JA_COMMAND_EXISTS"),
    (161, "TN_COMMAND_NOT_EXISTS"),
    (162, "TN_COMMAND_ERROR"),
    (163, "TN_COMMAND_FORMAT_ERROR"),
    (164, "TN_COMMAND_PWD_ERROR"),
    (181, "FW_COORDINATOR_NOT_AVAILABLE"),
    (182, "FW_COORDINATOR_PARTITION_ASSIGNOR_TYPE_NOT_EXIST"),
    (183, "FW_COORDINATOR_PARTITION_ASSIGNOR_ERROR"),
    (184, "FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE"),
    (185, "FW_COORDINATOR_PARTITION_ASSIGNOR_NO_PARTITIONS"),
    (186, "FW_FETCH_TOPIC_MESSAGE_PAUSED"),
    (187, "FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER"),
    (188, "FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER"),
    (189, "FW_TOPIC_NOT_EXIST"),
    (190, "FW_TOPIC_NO_PARTITIONGROUP"),
    (191, "FW_PARTITION_BROKER_NOT_LEADER"),
    (192, "FW_BROKER_NOT_READABLE"),
    (193, "FW_BROKER_NOT_WRITABLE"),
    (200, "TL_GET_INFO_NULL"),
    (240, "RETRY_ADD"),
    (241, "RETRY_GET"),
    (242, "RETRY_UPDATE"),
    (243, "RETRY_COUNT"),
    (244, "RETRY_DISABLED"),
    (245, "RETRY_TOKEN_LIMIT"),
    (250, "CONSUME_POSITION_NULL"),
    (251, "CONSUME_POSITION_UPDATE_ERROR"),
    (252, "CONSUME_POSITION_META_DATA_NULL"),
    (260, "NSR_REGISTER_ERR_BROKER_NOT_EXIST"),
];

/// The symbolic name of a JMQ4 code (`"UNKNOWN_JMQ_CODE"` for codes not in `JoyQueueCode`).
pub fn name(code: i32) -> &'static str {
    NAMES
        .binary_search_by_key(&code, |(c, _)| *c)
        .map_or("UNKNOWN_JMQ_CODE", |i| NAMES[i].1)
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
    fn names_are_sorted_and_found() {
        assert!(NAMES.windows(2).all(|w| w[0].0 < w[1].0));
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
