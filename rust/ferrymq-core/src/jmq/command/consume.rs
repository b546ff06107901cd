//! Consume commands: partition assignment, fetches, COMMIT_ACK / COMMIT_ACK_INDEX and
//! FETCH_INDEX.

use bytes::{BufMut, BytesMut};

use super::payload::{Payload, Request};
use crate::error::{Error, Result};
use crate::jmq::codec::{command_type as ct, put_count, Reader};
use crate::jmq::message::WireMessage;
use crate::jmq::wire::{wire, Layout, Wire};

wire! {
    /// FETCH_ASSIGNED_PARTITION (21), sent to the coordinator.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchAssignedPartition [ct::FETCH_ASSIGNED_PARTITION => FetchAssignedPartitionResponse] {
        /// (topic, session timeout ms, nearby).
        pub topics: Vec<(String, i32, bool)>,
        /// App.
        pub app: String,
    }
}

wire! {
    /// FETCH_ASSIGNED_PARTITION response (-21).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchAssignedPartitionResponse [-ct::FETCH_ASSIGNED_PARTITION] {
        /// (topic, partitions, code).
        pub data: Vec<(String, Vec<i16>, i32)>,
    }
}

wire! {
    /// FETCH_TOPIC_MESSAGE (30): the server picks partition and index.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchTopicMessage [ct::FETCH_TOPIC_MESSAGE => FetchTopicMessageResponse] {
        /// (topic, count).
        pub topics: Vec<(String, i16)>,
        /// App.
        pub app: String,
        /// How long the fetched partition stays occupied without an ack, ms.
        pub ack_timeout: i32,
        /// Long-poll wait, ms (0: no long poll).
        pub long_poll_timeout: i32,
    }
}

wire! {
    /// Messages of one topic in a FETCH_TOPIC_MESSAGE response.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct TopicMessages {
        /// Topic.
        pub topic: String,
        /// Messages.
        pub messages: Vec<WireMessage>,
        /// Per-topic code (DOC omits it).
        pub code: i32,
    }
}

wire! {
    /// FETCH_TOPIC_MESSAGE response (-30).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchTopicMessageResponse [-ct::FETCH_TOPIC_MESSAGE] {
        /// Per topic.
        pub data: Vec<TopicMessages>,
    }
}

wire! {
    /// One partition of a FETCH_PARTITION_MESSAGE request.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct PartitionFetch {
        /// Partition.
        pub partition: i16,
        /// Messages to fetch.
        pub count: i32,
        /// Start index; -1 means "from the ack index".
        pub index: i64,
    }
}

wire! {
    /// FETCH_PARTITION_MESSAGE (31): the client names partition and index.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchPartitionMessage [ct::FETCH_PARTITION_MESSAGE => FetchPartitionMessageResponse] {
        /// (topic, partitions).
        pub topics: Vec<(String, Vec<PartitionFetch>)>,
        /// App.
        pub app: String,
    }
}

wire! {
    /// Messages of one partition in a FETCH_PARTITION_MESSAGE response.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PartitionMessages {
        /// Partition.
        pub partition: i16,
        /// Messages.
        pub messages: Vec<WireMessage>,
        /// Per-partition code (184: index out of range).
        pub code: i32,
    }
}

wire! {
    /// FETCH_PARTITION_MESSAGE response (-31).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchPartitionMessageResponse [-ct::FETCH_PARTITION_MESSAGE] {
        /// (topic, partitions).
        pub data: Vec<(String, Vec<PartitionMessages>)>,
    }
}

/// COMMIT_ACK retry types: anything but `NONE` sends the message to the retry queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum RetryType {
    /// Consumed: no retry.
    #[default]
    None = 0,
    /// Consumption timed out.
    Timeout = 1,
    /// Consumption threw.
    Exception = 2,
    /// Any other failure.
    Other = 3,
}

impl RetryType {
    /// From the wire byte (unknown values read as `Other`, which still retries).
    pub fn from_byte(b: u8) -> RetryType {
        match b {
            0 => RetryType::None,
            1 => RetryType::Timeout,
            2 => RetryType::Exception,
            _ => RetryType::Other,
        }
    }

    /// Parse a user-facing name.
    pub fn parse(s: &str) -> Result<RetryType> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(RetryType::None),
            "timeout" => Ok(RetryType::Timeout),
            "exception" => Ok(RetryType::Exception),
            "other" => Ok(RetryType::Other),
            other => Err(Error::invalid(
                "retry_type",
                format!("{other:?} is not one of none, timeout, exception, other"),
            )),
        }
    }
}

/// One BYTE.
impl Wire for RetryType {
    const MIN_LEN: usize = 1;
    fn put(&self, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
        d.put_u8(*self as u8);
        Ok(())
    }
    fn get(r: &mut Reader, _: u8) -> Result<Self> {
        Ok(RetryType::from_byte(r.u8()?))
    }
}

wire! {
    /// One acknowledged message.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct AckItem {
        /// Partition.
        pub partition: i16,
        /// Index.
        pub index: i64,
        /// Retry type.
        pub retry_type: RetryType,
    }
}

/// The acks of one topic: (partition, items).
pub type PartitionAcks = Vec<(i16, Vec<AckItem>)>;

wire! {
    /// COMMIT_ACK (32).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitAck [ct::COMMIT_ACK => CommitAckResponse<{ -ct::COMMIT_ACK }>] {
        /// (topic, (partition, items)).
        pub topics: Vec<(String, PartitionAcks)>,
        /// App.
        pub app: String,
    }
}

wire! {
    /// COMMIT_ACK_INDEX (33): set the ack index of partitions.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitAckIndex [ct::COMMIT_ACK_INDEX => CommitAckResponse<{ -ct::COMMIT_ACK_INDEX }>] {
        /// (topic, (partition, index)).
        pub topics: Vec<(String, Vec<(i16, i64)>)>,
        /// App.
        pub app: String,
    }
}

/// (topic, (partition, code)) per topic, with the server bug of §8.1: the topic count written
/// is the number of (topic, partition) cells. When read the count is an upper bound: reading
/// stops when the payload runs out.
pub struct CellCount;

impl Layout<Vec<(String, Vec<(i16, i32)>)>> for CellCount {
    const MIN_LEN: usize = 2;
    fn put(
        x: &Vec<(String, Vec<(i16, i32)>)>,
        d: &mut BytesMut,
        field: &'static str,
        v: u8,
    ) -> Result<()> {
        let cells: usize = x.iter().map(|(_, p)| p.len()).sum();
        // The bug: `Table.size()` (cells), not the number of topics.
        put_count(d, field, cells.max(x.len()))?;
        for topic in x {
            topic.put(d, field, v)?;
        }
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Vec<(String, Vec<(i16, i32)>)>> {
        let n = r.count()?;
        let mut data = Vec::new();
        for _ in 0..n {
            if r.remaining() == 0 {
                break;
            }
            data.push(Wire::get(r, v)?);
        }
        Ok(data)
    }
}

wire! {
    /// COMMIT_ACK (-32) / COMMIT_ACK_INDEX (-33) response: (topic, (partition, code)), its
    /// count [`CellCount`].
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CommitAckResponse<const T: i8> [T] {
        /// (topic, (partition, code)).
        pub data: Vec<(String, Vec<(i16, i32)>)> [as CellCount],
    }
}

wire! {
    /// FETCH_INDEX (35).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchIndex [ct::FETCH_INDEX => FetchIndexResponse] {
        /// (topic, partitions).
        pub topics: Vec<(String, Vec<i16>)>,
        /// App.
        pub app: String,
    }
}

wire! {
    /// The ack index of one partition.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct IndexEntry {
        /// Partition.
        pub partition: i16,
        /// The ack index (next message to consume).
        pub index: i64,
        /// Code.
        pub code: i32,
        /// Smallest index in the partition (version ≥ 3).
        pub left_index: i64 [since 3, else -1],
        /// Next index to be written (version ≥ 3).
        pub right_index: i64 [since 3, else -1],
    }
}

wire! {
    /// FETCH_INDEX response (-35).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchIndexResponse [-ct::FETCH_INDEX] {
        /// (topic, entries).
        pub data: Vec<(String, Vec<IndexEntry>)>,
    }
}
