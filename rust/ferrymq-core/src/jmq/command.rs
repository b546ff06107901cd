//! Request and response payloads of every JMQ4 command (reference §5), both directions.
//!
//! Each payload implements [`Payload`]: `encode` appends it to a frame buffer, `decode` reads it
//! from a [`Reader`] positioned at the start of the payload. Layouts that depend on the header
//! version take it as an argument (the version *sent in the request*, §2.1).
//!
//! A layout is stated once: every payload with fields is declared with [`wire!`](super::wire),
//! its fields in wire order, each written and read through its type's [`Wire`] layout (S2
//! strings, SHORT-counted arrays, big-endian numbers), a [`Layout`] named with `[as L]` (S1
//! strings, presence flags) or only from a header version on (`[since N, else D]`). The few
//! one-off layouts (the language check, the deleted policy flag, the coordinator sentinel,
//! untrusted produce lengths, the COMMIT_ACK count bug) implement [`Layout`] below, next to the
//! type that uses them. [`AnyRequest`] is declared from the list of request types.

use bytes::{BufMut, BytesMut};

use super::codec::{command_type as ct, put_bool, put_count, Reader, BOOLEAN_ACK};
use super::message::WireMessage;
use super::wire::{wire, Layout, Present, Wire, S1};
use crate::error::{Error, Result};

/// A command payload.
pub trait Payload: Sized {
    /// The command type (negative for responses).
    const TYPE: i8;
    /// Append the payload.
    fn encode(&self, version: u8, dst: &mut BytesMut) -> Result<()>;
    /// Read the payload.
    fn decode(r: &mut Reader, version: u8) -> Result<Self>;
}

/// A request payload and the payload of its success response.
pub trait Request: Payload {
    /// The typed response (or [`BooleanAck`]).
    type Response: Payload;
}

macro_rules! empty_payload {
    ($(#[$m:meta])* $name:ident, $t:expr) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
        pub struct $name;
        impl Payload for $name {
            const TYPE: i8 = $t;
            fn encode(&self, _: u8, _: &mut BytesMut) -> Result<()> {
                Ok(())
            }
            fn decode(_: &mut Reader, _: u8) -> Result<Self> {
                Ok($name)
            }
        }
    };
}

empty_payload!(
    /// The `-128` response: no payload, the result is in the header status.
    BooleanAck,
    BOOLEAN_ACK
);
empty_payload!(
    /// REMOVE_CONNECTION (2), sent before closing.
    RemoveConnection,
    ct::REMOVE_CONNECTION
);
empty_payload!(
    /// HEARTBEAT (7).
    Heartbeat,
    ct::HEARTBEAT
);
empty_payload!(
    /// FETCH_HEALTH (8).
    FetchHealth,
    ct::FETCH_HEALTH
);

impl Request for RemoveConnection {
    type Response = BooleanAck;
}
impl Request for Heartbeat {
    type Response = BooleanAck;
}
impl Request for FetchHealth {
    type Response = FetchHealthResponse;
}

/// Client language codes of ADD_CONNECTION (`Language`); 9 and above close the connection.
pub mod language {
    /// Java.
    pub const JAVA: u8 = 0;
    /// Python: what ferrymq sends.
    pub const PYTHON: u8 = 3;
    /// Other.
    pub const OTHER: u8 = 8;
}

/// A [`language`] code BYTE; 9 and above are refused.
pub struct LanguageCode;

impl Layout<u8> for LanguageCode {
    const MIN_LEN: usize = 1;
    fn put(x: &u8, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
        d.put_u8(*x);
        Ok(())
    }
    fn get(r: &mut Reader, _: u8) -> Result<u8> {
        let language = r.u8()?;
        if language >= 9 {
            return Err(Error::protocol(format!(
                "unknown client language {language}"
            )));
        }
        Ok(language)
    }
}

wire! {
    /// ADD_CONNECTION (1): all strings S1, with a `language` byte after namespace.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AddConnection [ct::ADD_CONNECTION => AddConnectionResponse] {
        /// Reserved.
        pub username: Option<String> [as S1],
        /// Reserved.
        pub password: Option<String> [as S1],
        /// The app (consumer/producer group).
        pub app: String [as S1],
        /// The app's token.
        pub token: String [as S1],
        /// Region of the client, for nearby routing.
        pub region: Option<String> [as S1],
        /// Namespace.
        pub namespace: Option<String> [as S1],
        /// [`language`] code.
        pub language: u8 [as LanguageCode],
        /// Free-form client version.
        pub client_version: String [as S1],
        /// Client IP text.
        pub ip: String [as S1],
        /// Connect time, epoch ms.
        pub time: i64,
        /// Connection sequence number of this client.
        pub sequence: i64,
    }
}

wire! {
    /// ADD_CONNECTION response (-1): connectionId S1, notification S2.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct AddConnectionResponse [-ct::ADD_CONNECTION] {
        /// Opaque id.
        pub connection_id: Option<String> [as S1],
        /// A notice for the user (logged).
        pub notification: Option<String>,
    }
}

wire! {
    /// FETCH_HEALTH response (-8).
    #[derive(Debug, Clone, Copy, PartialEq, Default)]
    pub struct FetchHealthResponse [-ct::FETCH_HEALTH] {
        /// Health score (the real server always sends 0; ferrymq treats it as a penalty).
        pub point: f64,
    }
}

macro_rules! topics_app {
    ($(#[$m:meta])* $name:ident, $t:expr, $resp:ty) => {
        wire! {
            $(#[$m])*
            #[derive(Debug, Clone, PartialEq, Eq, Default)]
            pub struct $name [$t => $resp] {
                /// Topics (S2).
                pub topics: Vec<String>,
                /// The app (S2).
                pub app: String,
            }
        }
    };
}

topics_app!(
    /// REMOVE_CONSUMER (4), answered with a BooleanAck.
    RemoveConsumer,
    ct::REMOVE_CONSUMER,
    BooleanAck
);
topics_app!(
    /// REMOVE_PRODUCER (6), answered with a BooleanAck.
    RemoveProducer,
    ct::REMOVE_PRODUCER,
    BooleanAck
);
topics_app!(
    /// FETCH_CLUSTER (10).
    FetchCluster,
    ct::FETCH_CLUSTER,
    FetchClusterResponse
);
topics_app!(
    /// FIND_COORDINATOR (20).
    FindCoordinator,
    ct::FIND_COORDINATOR,
    FindCoordinatorResponse
);

macro_rules! add_client {
    ($(#[$m:meta])* $name:ident, $t:expr) => {
        wire! {
            $(#[$m])*
            #[derive(Debug, Clone, PartialEq, Eq, Default)]
            pub struct $name [$t => ClientIdsResponse<{ -$t }>] {
                /// Topics (S2).
                pub topics: Vec<String>,
                /// The app (S2).
                pub app: String,
                /// Increasing sequence.
                pub sequence: i64,
            }
        }
        impl $name {
            /// The request for `topics` of `app`.
            pub fn new(topics: Vec<String>, app: String, sequence: i64) -> Self {
                $name { topics, app, sequence }
            }
        }
    };
}

add_client!(
    /// ADD_CONSUMER (3), once per topic per connection before consuming.
    AddConsumer,
    ct::ADD_CONSUMER
);
add_client!(
    /// ADD_PRODUCER (5), once per topic per connection before producing.
    AddProducer,
    ct::ADD_PRODUCER
);

wire! {
    /// ADD_CONSUMER (-3) / ADD_PRODUCER (-5) response: (topic S2, id S2) pairs.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ClientIdsResponse<const T: i8> [T] {
        /// (topic, consumer or producer id).
        pub ids: Vec<(String, String)>,
    }
}

wire! {
    /// A topic's producer policy in FETCH_CLUSTER.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProducerPolicy {
        /// Prefer brokers in the client's region.
        pub nearby: bool,
        /// Single-threaded sending.
        pub single: bool,
        /// Archive.
        pub archive: bool,
        /// (brokerId as text, weight).
        pub weights: Vec<(String, i16)>,
        /// Client IPs that may not produce.
        pub black_list: Vec<String>,
        /// Produce timeout, ms.
        pub timeout: i32,
    }
}

/// `batchSize` SHORT, then the deleted `concurrentConsume` BOOLEAN (written false, ignored
/// when read).
pub struct ThenDeletedFlag;

impl Layout<i16> for ThenDeletedFlag {
    const MIN_LEN: usize = 2 + 1;
    fn put(x: &i16, d: &mut BytesMut, _: &'static str, _: u8) -> Result<()> {
        d.put_i16(*x);
        put_bool(d, false);
        Ok(())
    }
    fn get(r: &mut Reader, _: u8) -> Result<i16> {
        let batch_size = r.i16()?;
        let _deleted = r.bool()?;
        Ok(batch_size)
    }
}

wire! {
    /// A topic's consumer policy in FETCH_CLUSTER.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ConsumerPolicy {
        /// Prefer brokers in the client's region.
        pub nearby: bool,
        /// Consumption paused.
        pub paused: bool,
        /// Archive.
        pub archive: bool,
        /// Retry enabled.
        pub retry: bool,
        /// Sequential consumption.
        pub seq: bool,
        /// Ack timeout, ms.
        pub ack_timeout: i32,
        /// Batch size.
        pub batch_size: i16 [as ThenDeletedFlag],
        /// Concurrent prefetch size.
        pub concurrent: i32,
        /// Delay, ms.
        pub delay: i32,
        /// Client IPs that may not consume.
        pub black_list: Vec<String>,
        /// Errors before retry.
        pub err_times: i32,
        /// Partitions one connection may occupy.
        pub max_partition_num: i32,
        /// Percentage of reads from the retry queue.
        pub read_retry_probability: i32,
    }
}

wire! {
    /// A partition group in FETCH_CLUSTER.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PartitionGroupMeta {
        /// Group id.
        pub id: i32,
        /// Leader broker id (match it against the broker list).
        pub leader: i32,
        /// Partition ids.
        pub partitions: Vec<i16>,
    }
}

/// Topic type byte: -1 none, 0 TOPIC, 1 BROADCAST.
pub mod topic_type {
    /// No type.
    pub const NONE: i8 = -1;
    /// A normal topic.
    pub const TOPIC: i8 = 0;
    /// A broadcast topic.
    pub const BROADCAST: i8 = 1;
}

wire! {
    /// A topic in FETCH_CLUSTER.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct TopicMeta {
        /// Topic name.
        pub topic: String,
        /// Present when the app may produce.
        pub producer_policy: Option<ProducerPolicy> [as Present],
        /// Present when the app may consume.
        pub consumer_policy: Option<ConsumerPolicy> [as Present],
        /// [`topic_type`].
        pub topic_type: i8,
        /// Partition groups.
        pub partition_groups: Vec<PartitionGroupMeta>,
        /// Per-topic result code (189 unknown topic, 1 no subscription).
        pub code: i32,
        /// Topic params, header version 4 only.
        pub params: Vec<(String, String)> [since 4, else Vec::new()],
    }
}

wire! {
    /// A broker in FETCH_CLUSTER / FIND_COORDINATOR.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct BrokerMeta {
        /// Broker id.
        pub id: i32,
        /// Advertised host.
        pub host: String,
        /// Port.
        pub port: i32,
        /// Data center (region).
        pub data_center: String,
        /// In the client's region.
        pub nearby: bool,
        /// Weight.
        pub weight: i32,
        /// Version ≥ 2 only.
        pub sys_code: i32 [since 2, else 0],
        /// Version ≥ 2 only: bit 0 readable, bit 1 writable.
        pub permission: i32 [since 2, else 3],
    }
}

impl BrokerMeta {
    /// `host:port`.
    pub fn address(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

wire! {
    /// FETCH_CLUSTER response (-10), §5.1.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchClusterResponse [-ct::FETCH_CLUSTER] {
        /// Topics in request order.
        pub topics: Vec<TopicMeta>,
        /// Leaders of the returned partition groups.
        pub brokers: Vec<BrokerMeta>,
    }
}

/// A FIND_COORDINATOR broker: its version-1 layout, without sysCode/permission whatever the
/// header version; `None` is the id -1 alone (there is no coordinator).
pub struct Coordinator;

impl Layout<Option<BrokerMeta>> for Coordinator {
    const MIN_LEN: usize = 4;
    fn put(x: &Option<BrokerMeta>, d: &mut BytesMut, field: &'static str, _: u8) -> Result<()> {
        match x {
            None => {
                d.put_i32(-1);
                Ok(())
            }
            Some(b) => b.put(d, field, 1),
        }
    }
    fn get(r: &mut Reader, _: u8) -> Result<Option<BrokerMeta>> {
        let mut id = r.clone();
        if id.i32()? == -1 {
            *r = id;
            return Ok(None);
        }
        Ok(Some(BrokerMeta::get(r, 1)?))
    }
}

wire! {
    /// One entry of the FIND_COORDINATOR response.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct CoordinatorEntry {
        /// Topic.
        pub topic: String,
        /// The coordinator (`None` when its id is -1: there is none).
        pub broker: Option<BrokerMeta> [as Coordinator],
        /// Result code.
        pub code: i32,
    }
}

wire! {
    /// FIND_COORDINATOR response (-20).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FindCoordinatorResponse [-ct::FIND_COORDINATOR] {
        /// One entry per topic.
        pub coordinators: Vec<CoordinatorEntry>,
    }
}

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

/// Produced messages: an ARRAY of MESSAGE whose length fields are not trusted when read (the
/// server ignores them on produce, §6).
pub struct Produced;

impl Layout<Vec<WireMessage>> for Produced {
    const MIN_LEN: usize = 2;
    fn put(x: &Vec<WireMessage>, d: &mut BytesMut, field: &'static str, v: u8) -> Result<()> {
        x.put(d, field, v)
    }
    fn get(r: &mut Reader, _: u8) -> Result<Vec<WireMessage>> {
        let n = r.count()?;
        let mut messages = Vec::with_capacity(n.min(r.remaining() / WireMessage::MIN_LEN));
        for _ in 0..n {
            messages.push(WireMessage::decode(r, false)?);
        }
        Ok(messages)
    }
}

wire! {
    /// One topic entry of PRODUCE_MESSAGE.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceTopic {
        /// Topic.
        pub topic: String,
        /// Transaction id from PREPARE, or none.
        pub tx_id: Option<String>,
        /// Produce timeout, ms.
        pub timeout: i32,
        /// Body QoS byte (`QosLevel`: 0 ONE_WAY … 3 REPLICATION).
        pub qos: u8,
        /// Messages, all on one partition.
        pub messages: Vec<WireMessage> [as Produced],
    }
}

wire! {
    /// PRODUCE_MESSAGE (50): single, batched (a batch MESSAGE) and multi-topic.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceMessage [ct::PRODUCE_MESSAGE => ProduceMessageResponse] {
        /// Topic entries.
        pub topics: Vec<ProduceTopic>,
        /// App.
        pub app: String,
    }
}

wire! {
    /// Where one produced (batch) message landed.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
    pub struct ProduceItem {
        /// Partition (-1 on failure).
        pub partition: i16,
        /// Index of the (first) message (-1 on failure).
        pub index: i64,
        /// When the broker started processing, epoch ms.
        pub start_time: i64,
    }
}

impl ProduceItem {
    /// The item of a message that was not stored (partition, index and start time all -1).
    pub const FAILED: ProduceItem = ProduceItem {
        partition: -1,
        index: -1,
        start_time: -1,
    };
}

wire! {
    /// The result of one topic entry.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceResult {
        /// Topic.
        pub topic: String,
        /// Code.
        pub code: i32,
        /// One item per MESSAGE sent.
        pub items: Vec<ProduceItem>,
    }
}

wire! {
    /// PRODUCE_MESSAGE response (-50).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct ProduceMessageResponse [-ct::PRODUCE_MESSAGE] {
        /// Per topic entry.
        pub data: Vec<ProduceResult>,
    }
}

wire! {
    /// PRODUCE_MESSAGE_PREPARE (51), with the trailing `timeout INT` DOC omits.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Prepare [ct::PRODUCE_MESSAGE_PREPARE => PrepareResponse] {
        /// Topic.
        pub topic: String,
        /// App.
        pub app: String,
        /// The client's transaction sequence.
        pub sequence: i64,
        /// User transaction id (needed for feedback).
        pub transaction_id: Option<String>,
        /// Transaction timeout, ms.
        pub timeout: i32,
    }
}

wire! {
    /// PREPARE response (-51).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct PrepareResponse [-ct::PRODUCE_MESSAGE_PREPARE] {
        /// The broker's transaction id.
        pub tx_id: Option<String>,
        /// Code.
        pub code: i32,
    }
}

macro_rules! tx_end {
    ($(#[$m:meta])* $name:ident, $resp:ident, $t:expr) => {
        wire! {
            $(#[$m])*
            #[derive(Debug, Clone, PartialEq, Eq, Default)]
            pub struct $name [$t => $resp] {
                /// Topic.
                pub topic: String,
                /// App.
                pub app: String,
                /// The broker's transaction id.
                pub tx_id: String,
            }
        }
        wire! {
            /// The response: a code.
            #[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
            pub struct $resp [-$t] {
                /// Code.
                pub code: i32,
            }
        }
    };
}

tx_end!(
    /// PRODUCE_MESSAGE_COMMIT (52).
    Commit,
    CommitResponse,
    ct::PRODUCE_MESSAGE_COMMIT
);
tx_end!(
    /// PRODUCE_MESSAGE_ROLLBACK (53).
    Rollback,
    RollbackResponse,
    ct::PRODUCE_MESSAGE_ROLLBACK
);

wire! {
    /// FETCH_PRODUCE_FEEDBACK (54): no `count` on the wire, `longPollTimeout` is an INT.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchProduceFeedback [ct::FETCH_PRODUCE_FEEDBACK => FetchProduceFeedbackResponse] {
        /// App.
        pub app: String,
        /// Topic.
        pub topic: String,
        /// Reserved status filter.
        pub status: u8,
        /// Reserved.
        pub long_poll_timeout: i32,
    }
}

wire! {
    /// One uncompleted transaction to compensate.
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct Feedback {
        /// Topic.
        pub topic: String,
        /// Broker transaction id.
        pub tx_id: String,
        /// User transaction id.
        pub transaction_id: String,
    }
}

wire! {
    /// FETCH_PRODUCE_FEEDBACK response (-54).
    #[derive(Debug, Clone, PartialEq, Eq, Default)]
    pub struct FetchProduceFeedbackResponse [-ct::FETCH_PRODUCE_FEEDBACK] {
        /// At most one entry per call on a real server.
        pub data: Vec<Feedback>,
        /// Code.
        pub code: i32,
    }
}

/// Declare [`AnyRequest`], one variant per request named after its payload type (the empty
/// payloads as variants without data), its decoder and the app it names.
macro_rules! any_request {
    (empty: $($e:ident),*; payload: $($p:ident),* $(,)?) => {
        /// Any request, as the server decodes it.
        #[derive(Debug, Clone, PartialEq)]
        #[allow(missing_docs)]
        pub enum AnyRequest {
            $($e,)*
            $($p($p),)*
        }

        impl AnyRequest {
            /// Decode the payload of a request of `command_type`. Unknown types and payloads
            /// that do not consume the frame exactly are protocol errors (the server closes the
            /// connection).
            pub fn decode(
                command_type: i8,
                version: u8,
                payload: bytes::Bytes,
            ) -> Result<AnyRequest> {
                let mut r = Reader::new(payload);
                let req = match command_type {
                    $(<$e as Payload>::TYPE => AnyRequest::$e,)*
                    $(<$p as Payload>::TYPE => AnyRequest::$p($p::decode(&mut r, version)?),)*
                    other => {
                        return Err(Error::protocol(format!(
                            "no decoder for JMQ4 command type {other} ({})",
                            ct::name(other)
                        )))
                    }
                };
                r.finish(ct::name(command_type))?;
                Ok(req)
            }

            /// The app the request names (every request with a payload names one).
            pub fn app(&self) -> Option<&str> {
                match self {
                    $(AnyRequest::$e => None,)*
                    $(AnyRequest::$p(r) => Some(&r.app),)*
                }
            }
        }
    };
}

any_request! {
    empty: RemoveConnection, Heartbeat, FetchHealth;
    payload: AddConnection, AddConsumer, RemoveConsumer, AddProducer, RemoveProducer, FetchCluster,
    FindCoordinator, FetchAssignedPartition, FetchTopicMessage, FetchPartitionMessage, CommitAck,
    CommitAckIndex, FetchIndex, ProduceMessage, Prepare, Commit, Rollback, FetchProduceFeedback,
}
