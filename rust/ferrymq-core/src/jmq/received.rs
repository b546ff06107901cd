//! What a JMQ4 consumer hands out: [`ReceivedMessage`] (a fetched message, unpacked from its
//! store entry) and the [`AckRef`] a COMMIT_ACK names to settle it.

use std::collections::BTreeMap;

use bytes::Bytes;

use super::message::{parse_properties, WireMessage, RETRY_PARTITION};
use super::producer::TAG_ATTRIBUTE;
use crate::error::Result;

/// A consumed message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReceivedMessage {
    /// Topic.
    pub topic: String,
    /// Partition (32767: delivered from the retry queue).
    pub partition: i16,
    /// Index in the partition (the retry id for retry deliveries).
    pub index: i64,
    /// Body, decompressed.
    pub body: Bytes,
    /// businessId.
    pub business_id: Option<String>,
    /// Attributes (without the tag).
    pub properties: BTreeMap<String, String>,
    /// Tag (attribute `TAGS`).
    pub tag: Option<String>,
    /// User flag.
    pub flag: i16,
    /// Priority.
    pub priority: i8,
    /// Producer's send time, epoch ms.
    pub send_time: i64,
    /// Store time, epoch ms.
    pub store_time: i64,
    /// Producing app.
    pub app: Option<String>,
    /// Broker that served it (acks go there).
    pub broker_id: i32,
    /// Whether the message was part of a batch.
    pub batched: bool,
}

impl ReceivedMessage {
    /// Whether it came from the retry queue.
    pub fn is_retry(&self) -> bool {
        self.partition == RETRY_PARTITION
    }

    /// `topic/partition/index`.
    pub fn message_id(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.index)
    }

    /// What a COMMIT_ACK names to settle this message.
    pub fn ack_ref(&self) -> AckRef {
        AckRef {
            topic: self.topic.clone(),
            broker_id: self.broker_id,
            partition: self.partition,
            index: self.index,
        }
    }
}

/// What a COMMIT_ACK names to settle one consumed message: the broker that served it, its
/// topic, partition (32767: the retry queue) and index (the retry id for retry deliveries).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AckRef {
    /// Topic.
    pub topic: String,
    /// Broker that served the message (the COMMIT_ACK goes there).
    pub broker_id: i32,
    /// Partition.
    pub partition: i16,
    /// Index in the partition.
    pub index: i64,
}

/// Unpack a fetched MESSAGE into what the user sees.
pub fn unpack(
    topic: &str,
    broker_id: i32,
    m: &WireMessage,
    max_body: usize,
) -> Result<Vec<ReceivedMessage>> {
    let items = m.unpack(max_body)?;
    let batched = m.sys_code.batch;
    Ok(items
        .into_iter()
        .enumerate()
        .map(|(i, it)| {
            let mut properties = it
                .attributes
                .as_deref()
                .map(parse_properties)
                .unwrap_or_default();
            let tag = properties.remove(TAG_ATTRIBUTE);
            ReceivedMessage {
                topic: topic.to_string(),
                partition: m.partition,
                index: if m.partition == RETRY_PARTITION {
                    m.index
                } else {
                    m.index + i as i64
                },
                body: it.body,
                business_id: it.business_id,
                properties,
                tag,
                flag: it.flag,
                priority: it.priority,
                send_time: m.send_time,
                store_time: m.send_time + i64::from(m.store_time),
                app: m.app.clone(),
                broker_id,
                batched,
            }
        })
        .collect())
}
