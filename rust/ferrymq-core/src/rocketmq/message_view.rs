//! [`MessageView`]: a message as the server delivers it (received by consumers, or carried by
//! telemetry commands such as orphaned-transaction checks).

use std::collections::BTreeMap;

use bytes::Bytes;

use crate::proto;

/// A message received from a broker. Read-only.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MessageView {
    /// The client-generated message id.
    pub message_id: String,
    /// Topic name (without namespace).
    pub topic: String,
    /// Payload.
    pub body: Bytes,
    /// Tag.
    pub tag: Option<String>,
    /// Business keys.
    pub keys: Vec<String>,
    /// User properties.
    pub properties: BTreeMap<String, String>,
    /// FIFO message group.
    pub message_group: Option<String>,
    /// Delivery time of a delayed message, in Unix milliseconds.
    pub delivery_timestamp_ms: Option<i64>,
    /// When the producer created the message, in Unix milliseconds.
    pub born_timestamp_ms: Option<i64>,
    /// The producer's host.
    pub born_host: String,
    /// When the broker stored it, in Unix milliseconds.
    pub store_timestamp_ms: Option<i64>,
    /// Queue id.
    pub queue_id: i32,
    /// Offset in the queue.
    pub queue_offset: Option<i64>,
    /// Delivery attempt (1-based), for received messages.
    pub delivery_attempt: Option<i32>,
    /// Receipt handle for ack / change-invisible-duration.
    pub receipt_handle: Option<String>,
    /// Priority.
    pub priority: Option<i32>,
    /// The message type the broker recorded.
    pub message_type: Option<crate::MessageKind>,
    /// Transaction id (orphaned-transaction checks).
    pub transaction_id: Option<String>,
}

/// Unix milliseconds of a protobuf timestamp.
pub fn timestamp_ms(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(t.nanos / 1_000_000))
}

/// A protobuf timestamp from Unix milliseconds.
pub fn timestamp_from_ms(ms: i64) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: ms.div_euclid(1000),
        nanos: i32::try_from(ms.rem_euclid(1000) * 1_000_000).unwrap_or(0),
    }
}

fn kind_of(t: i32) -> Option<crate::MessageKind> {
    use crate::MessageKind as K;
    match proto::MessageType::try_from(t).ok()? {
        proto::MessageType::Normal => Some(K::Normal),
        proto::MessageType::Fifo => Some(K::Fifo),
        proto::MessageType::Delay => Some(K::Delay),
        proto::MessageType::Transaction => Some(K::Transaction),
        proto::MessageType::Priority => Some(K::Priority),
        _ => None,
    }
}

impl MessageView {
    /// Decode a wire message.
    pub fn from_proto(m: proto::Message) -> Self {
        let sp = m.system_properties.unwrap_or_default();
        Self {
            message_id: sp.message_id,
            topic: m.topic.map(|t| t.name).unwrap_or_default(),
            body: m.body,
            tag: sp.tag,
            keys: sp.keys,
            properties: m.user_properties.into_iter().collect(),
            message_group: sp.message_group,
            delivery_timestamp_ms: sp.delivery_timestamp.as_ref().map(timestamp_ms),
            born_timestamp_ms: sp.born_timestamp.as_ref().map(timestamp_ms),
            born_host: sp.born_host,
            store_timestamp_ms: sp.store_timestamp.as_ref().map(timestamp_ms),
            queue_id: sp.queue_id,
            queue_offset: sp.queue_offset,
            delivery_attempt: sp.delivery_attempt,
            receipt_handle: sp.receipt_handle,
            priority: sp.priority,
            message_type: kind_of(sp.message_type),
            transaction_id: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_round_trip() {
        for ms in [0, 1, 999, 1_700_000_000_123, -1] {
            assert_eq!(timestamp_ms(&timestamp_from_ms(ms)), ms);
        }
    }

    #[test]
    fn decodes_system_properties() {
        let m = proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            }),
            user_properties: [("k".to_string(), "v".to_string())].into(),
            system_properties: Some(proto::SystemProperties {
                message_id: "01AB".into(),
                tag: Some("tg".into()),
                message_type: proto::MessageType::Fifo as i32,
                message_group: Some("g".into()),
                born_timestamp: Some(timestamp_from_ms(5000)),
                ..Default::default()
            }),
            body: bytes::Bytes::from_static(b"hi"),
        };
        let v = MessageView::from_proto(m);
        assert_eq!(v.topic, "t");
        assert_eq!(&v.body[..], b"hi");
        assert_eq!(v.message_type, Some(crate::MessageKind::Fifo));
        assert_eq!(v.born_timestamp_ms, Some(5000));
        assert_eq!(v.properties["k"], "v");
    }
}
