//! Request and response payloads of every JMQ4 command (reference §5), both directions.
//!
//! Each payload implements [`Payload`]: `encode` appends it to a frame buffer, `decode` reads it
//! from a [`Reader`] positioned at the start of the payload. Layouts that depend on the header
//! version take it as an argument (the version *sent in the request*, §2.1).
//!
//! A layout is stated once: most payloads are declared with [`wire!`](super::wire), their
//! fields in wire order, each written and read through its type's [`Wire`] layout (S2 strings,
//! SHORT-counted arrays, big-endian numbers). What is not a plain field list — S1 strings,
//! version-dependent fields, presence flags, the coordinator sentinel, the COMMIT_ACK count bug
//! — implements [`Wire`] or [`Payload`] by hand below, next to the type.

use bytes::{BufMut, BytesMut};

use super::codec::{command_type as ct, put_bool, put_count, put_s1, put_s2, Reader, BOOLEAN_ACK};
use super::message::WireMessage;
use super::wire::{wire, Wire};
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

/// ADD_CONNECTION (1): all strings S1, with a `language` byte after namespace.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddConnection {
    /// Reserved.
    pub username: Option<String>,
    /// Reserved.
    pub password: Option<String>,
    /// The app (consumer/producer group).
    pub app: String,
    /// The app's token.
    pub token: String,
    /// Region of the client, for nearby routing.
    pub region: Option<String>,
    /// Namespace.
    pub namespace: Option<String>,
    /// [`language`] code.
    pub language: u8,
    /// Free-form client version.
    pub client_version: String,
    /// Client IP text.
    pub ip: String,
    /// Connect time, epoch ms.
    pub time: i64,
    /// Connection sequence number of this client.
    pub sequence: i64,
}

impl Payload for AddConnection {
    const TYPE: i8 = ct::ADD_CONNECTION;
    fn encode(&self, _: u8, d: &mut BytesMut) -> Result<()> {
        put_s1(d, "username", self.username.as_deref())?;
        put_s1(d, "password", self.password.as_deref())?;
        put_s1(d, "app", Some(&self.app))?;
        put_s1(d, "token", Some(&self.token))?;
        put_s1(d, "region", self.region.as_deref())?;
        put_s1(d, "namespace", self.namespace.as_deref())?;
        d.put_u8(self.language);
        put_s1(d, "client_version", Some(&self.client_version))?;
        put_s1(d, "ip", Some(&self.ip))?;
        d.put_i64(self.time);
        d.put_i64(self.sequence);
        Ok(())
    }
    fn decode(r: &mut Reader, _: u8) -> Result<Self> {
        let username = r.s1()?;
        let password = r.s1()?;
        let app = r.s1()?.unwrap_or_default();
        let token = r.s1()?.unwrap_or_default();
        let region = r.s1()?;
        let namespace = r.s1()?;
        let language = r.u8()?;
        if language >= 9 {
            return Err(Error::protocol(format!(
                "unknown client language {language}"
            )));
        }
        Ok(AddConnection {
            username,
            password,
            app,
            token,
            region,
            namespace,
            language,
            client_version: r.s1()?.unwrap_or_default(),
            ip: r.s1()?.unwrap_or_default(),
            time: r.i64()?,
            sequence: r.i64()?,
        })
    }
}
impl Request for AddConnection {
    type Response = AddConnectionResponse;
}

/// ADD_CONNECTION response (-1): connectionId S1, notification S2.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AddConnectionResponse {
    /// Opaque id.
    pub connection_id: Option<String>,
    /// A notice for the user (logged).
    pub notification: Option<String>,
}

impl Payload for AddConnectionResponse {
    const TYPE: i8 = -ct::ADD_CONNECTION;
    fn encode(&self, _: u8, d: &mut BytesMut) -> Result<()> {
        put_s1(d, "connection_id", self.connection_id.as_deref())?;
        put_s2(d, "notification", self.notification.as_deref())
    }
    fn decode(r: &mut Reader, _: u8) -> Result<Self> {
        Ok(AddConnectionResponse {
            connection_id: r.s1()?,
            notification: r.s2()?,
        })
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

/// ADD_CONSUMER (-3) / ADD_PRODUCER (-5) response: (topic S2, id S2) pairs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClientIdsResponse<const T: i8> {
    /// (topic, consumer or producer id).
    pub ids: Vec<(String, String)>,
}

impl<const T: i8> Payload for ClientIdsResponse<T> {
    const TYPE: i8 = T;
    fn encode(&self, version: u8, d: &mut BytesMut) -> Result<()> {
        self.ids.put(d, "ids", version)
    }
    fn decode(r: &mut Reader, version: u8) -> Result<Self> {
        Ok(ClientIdsResponse {
            ids: Wire::get(r, version)?,
        })
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
    pub batch_size: i16,
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

/// Field list plus the deleted `concurrentConsume` BOOLEAN after `batch_size` (written false,
/// ignored when read).
impl Wire for ConsumerPolicy {
    const MIN_LEN: usize = 6 + 4 + 2 + 4 + 4 + 2 + 4 + 4 + 4;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        for b in [self.nearby, self.paused, self.archive, self.retry, self.seq] {
            put_bool(d, b);
        }
        d.put_i32(self.ack_timeout);
        d.put_i16(self.batch_size);
        put_bool(d, false);
        d.put_i32(self.concurrent);
        d.put_i32(self.delay);
        self.black_list.put(d, "black_list", v)?;
        d.put_i32(self.err_times);
        d.put_i32(self.max_partition_num);
        d.put_i32(self.read_retry_probability);
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        let nearby = r.bool()?;
        let paused = r.bool()?;
        let archive = r.bool()?;
        let retry = r.bool()?;
        let seq = r.bool()?;
        let ack_timeout = r.i32()?;
        let batch_size = r.i16()?;
        let _deleted = r.bool()?;
        Ok(ConsumerPolicy {
            nearby,
            paused,
            archive,
            retry,
            seq,
            ack_timeout,
            batch_size,
            concurrent: r.i32()?,
            delay: r.i32()?,
            black_list: Wire::get(r, v)?,
            err_times: r.i32()?,
            max_partition_num: r.i32()?,
            read_retry_probability: r.i32()?,
        })
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

/// A topic in FETCH_CLUSTER.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TopicMeta {
    /// Topic name.
    pub topic: String,
    /// Present when the app may produce.
    pub producer_policy: Option<ProducerPolicy>,
    /// Present when the app may consume.
    pub consumer_policy: Option<ConsumerPolicy>,
    /// [`topic_type`].
    pub topic_type: i8,
    /// Partition groups.
    pub partition_groups: Vec<PartitionGroupMeta>,
    /// Per-topic result code (189 unknown topic, 1 no subscription).
    pub code: i32,
    /// Topic params, header version 4 only.
    pub params: Vec<(String, String)>,
}

/// A BOOLEAN presence flag, then the value when present.
fn put_present<T: Wire>(d: &mut BytesMut, field: &'static str, v: u8, x: &Option<T>) -> Result<()> {
    put_bool(d, x.is_some());
    match x {
        Some(x) => x.put(d, field, v),
        None => Ok(()),
    }
}

fn get_present<T: Wire>(r: &mut Reader, v: u8) -> Result<Option<T>> {
    if r.bool()? {
        Ok(Some(T::get(r, v)?))
    } else {
        Ok(None)
    }
}

/// Field list with presence-flagged policies; `params` only in version 4.
impl Wire for TopicMeta {
    const MIN_LEN: usize = 2 + 1 + 1 + 1 + 2 + 4;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        self.topic.put(d, "topic", v)?;
        put_present(d, "producer_policy", v, &self.producer_policy)?;
        put_present(d, "consumer_policy", v, &self.consumer_policy)?;
        d.put_i8(self.topic_type);
        self.partition_groups.put(d, "partition_groups", v)?;
        d.put_i32(self.code);
        if v >= 4 {
            self.params.put(d, "params", v)?;
        }
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        Ok(TopicMeta {
            topic: Wire::get(r, v)?,
            producer_policy: get_present(r, v)?,
            consumer_policy: get_present(r, v)?,
            topic_type: r.i8()?,
            partition_groups: Wire::get(r, v)?,
            code: r.i32()?,
            params: if v >= 4 { Wire::get(r, v)? } else { Vec::new() },
        })
    }
}

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
    pub sys_code: i32,
    /// Version ≥ 2 only: bit 0 readable, bit 1 writable.
    pub permission: i32,
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

    /// The fields after `id` up to `weight` (what FIND_COORDINATOR sends).
    fn put_base(&self, d: &mut BytesMut, v: u8) -> Result<()> {
        self.host.put(d, "host", v)?;
        d.put_i32(self.port);
        self.data_center.put(d, "data_center", v)?;
        put_bool(d, self.nearby);
        d.put_i32(self.weight);
        Ok(())
    }

    fn get_base(id: i32, r: &mut Reader, v: u8) -> Result<Self> {
        Ok(BrokerMeta {
            id,
            host: Wire::get(r, v)?,
            port: r.i32()?,
            data_center: Wire::get(r, v)?,
            nearby: r.bool()?,
            weight: r.i32()?,
            sys_code: 0,
            permission: 3,
        })
    }
}

/// Field list; `sys_code` and `permission` from version 2 (read as 0 and 3 before).
impl Wire for BrokerMeta {
    const MIN_LEN: usize = 4 + 2 + 4 + 2 + 1 + 4;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        d.put_i32(self.id);
        self.put_base(d, v)?;
        if v >= 2 {
            d.put_i32(self.sys_code);
            d.put_i32(self.permission);
        }
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        let id = r.i32()?;
        let mut b = BrokerMeta::get_base(id, r, v)?;
        if v >= 2 {
            b.sys_code = r.i32()?;
            b.permission = r.i32()?;
        }
        Ok(b)
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

/// One entry of the FIND_COORDINATOR response.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CoordinatorEntry {
    /// Topic.
    pub topic: String,
    /// The coordinator (`None` when its id is -1: there is none).
    pub broker: Option<BrokerMeta>,
    /// Result code.
    pub code: i32,
}

/// Topic, then the coordinator without sysCode/permission (or the id -1 alone), then the code.
impl Wire for CoordinatorEntry {
    const MIN_LEN: usize = 2 + 4 + 4;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        self.topic.put(d, "topic", v)?;
        match &self.broker {
            None => d.put_i32(-1),
            Some(b) => {
                d.put_i32(b.id);
                b.put_base(d, v)?;
            }
        }
        d.put_i32(self.code);
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        let topic = Wire::get(r, v)?;
        let id = r.i32()?;
        let broker = if id == -1 {
            None
        } else {
            Some(BrokerMeta::get_base(id, r, v)?)
        };
        Ok(CoordinatorEntry {
            topic,
            broker,
            code: r.i32()?,
        })
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

/// COMMIT_ACK (-32) / COMMIT_ACK_INDEX (-33) response: (topic, (partition, code)).
///
/// Reproduces the server bug of §8.1: the topic count written is the number of
/// (topic, partition) cells. The decoder treats the count as an upper bound and stops when the
/// payload runs out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommitAckResponse<const T: i8> {
    /// (topic, (partition, code)).
    pub data: Vec<(String, Vec<(i16, i32)>)>,
}

impl<const T: i8> Payload for CommitAckResponse<T> {
    const TYPE: i8 = T;
    fn encode(&self, v: u8, d: &mut BytesMut) -> Result<()> {
        let cells: usize = self.data.iter().map(|(_, p)| p.len()).sum();
        // The bug: `Table.size()` (cells), not the number of topics.
        put_count(d, "data", cells.max(self.data.len()))?;
        for topic in &self.data {
            topic.put(d, "data", v)?;
        }
        Ok(())
    }
    fn decode(r: &mut Reader, v: u8) -> Result<Self> {
        let n = r.count()?;
        let mut data = Vec::new();
        for _ in 0..n {
            if r.remaining() == 0 {
                break;
            }
            data.push(Wire::get(r, v)?);
        }
        Ok(CommitAckResponse { data })
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
    pub left_index: i64,
    /// Next index to be written (version ≥ 3).
    pub right_index: i64,
}

/// Field list; `left_index` and `right_index` from version 3 (read as -1 before).
impl Wire for IndexEntry {
    const MIN_LEN: usize = 2 + 8 + 4;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        d.put_i16(self.partition);
        d.put_i64(self.index);
        d.put_i32(self.code);
        if v >= 3 {
            d.put_i64(self.left_index);
            d.put_i64(self.right_index);
        }
        Ok(())
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        let partition = r.i16()?;
        let index = r.i64()?;
        let code = r.i32()?;
        let (left_index, right_index) = if v >= 3 {
            (r.i64()?, r.i64()?)
        } else {
            (-1, -1)
        };
        Ok(IndexEntry {
            partition,
            index,
            code,
            left_index,
            right_index,
        })
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
    pub messages: Vec<WireMessage>,
}

/// Field list, except that the messages' length fields are not trusted when read: the server
/// ignores them on produce (§6).
impl Wire for ProduceTopic {
    const MIN_LEN: usize = 2 + 2 + 4 + 1 + 2;
    fn put(&self, d: &mut BytesMut, _: &'static str, v: u8) -> Result<()> {
        self.topic.put(d, "topic", v)?;
        self.tx_id.put(d, "tx_id", v)?;
        d.put_i32(self.timeout);
        d.put_u8(self.qos);
        self.messages.put(d, "messages", v)
    }
    fn get(r: &mut Reader, v: u8) -> Result<Self> {
        let topic = Wire::get(r, v)?;
        let tx_id = Wire::get(r, v)?;
        let timeout = r.i32()?;
        let qos = r.u8()?;
        let n = r.count()?;
        let mut messages = Vec::with_capacity(n.min(r.remaining() / WireMessage::MIN_LEN));
        for _ in 0..n {
            messages.push(WireMessage::decode(r, false)?);
        }
        Ok(ProduceTopic {
            topic,
            tx_id,
            timeout,
            qos,
            messages,
        })
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

/// Any request, as the server decodes it.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum AnyRequest {
    AddConnection(AddConnection),
    RemoveConnection,
    AddConsumer(AddConsumer),
    RemoveConsumer(RemoveConsumer),
    AddProducer(AddProducer),
    RemoveProducer(RemoveProducer),
    Heartbeat,
    FetchHealth,
    FetchCluster(FetchCluster),
    FindCoordinator(FindCoordinator),
    FetchAssignedPartition(FetchAssignedPartition),
    FetchTopicMessage(FetchTopicMessage),
    FetchPartitionMessage(FetchPartitionMessage),
    CommitAck(CommitAck),
    CommitAckIndex(CommitAckIndex),
    FetchIndex(FetchIndex),
    ProduceMessage(ProduceMessage),
    Prepare(Prepare),
    Commit(Commit),
    Rollback(Rollback),
    FetchProduceFeedback(FetchProduceFeedback),
}

impl AnyRequest {
    /// Decode the payload of a request of `command_type`. Unknown types and payloads that do
    /// not consume the frame exactly are protocol errors (the server closes the connection).
    pub fn decode(command_type: i8, version: u8, payload: bytes::Bytes) -> Result<AnyRequest> {
        let mut r = Reader::new(payload);
        let req = match command_type {
            ct::ADD_CONNECTION => {
                AnyRequest::AddConnection(AddConnection::decode(&mut r, version)?)
            }
            ct::REMOVE_CONNECTION => AnyRequest::RemoveConnection,
            ct::ADD_CONSUMER => AnyRequest::AddConsumer(AddConsumer::decode(&mut r, version)?),
            ct::REMOVE_CONSUMER => {
                AnyRequest::RemoveConsumer(RemoveConsumer::decode(&mut r, version)?)
            }
            ct::ADD_PRODUCER => AnyRequest::AddProducer(AddProducer::decode(&mut r, version)?),
            ct::REMOVE_PRODUCER => {
                AnyRequest::RemoveProducer(RemoveProducer::decode(&mut r, version)?)
            }
            ct::HEARTBEAT => AnyRequest::Heartbeat,
            ct::FETCH_HEALTH => AnyRequest::FetchHealth,
            ct::FETCH_CLUSTER => AnyRequest::FetchCluster(FetchCluster::decode(&mut r, version)?),
            ct::FIND_COORDINATOR => {
                AnyRequest::FindCoordinator(FindCoordinator::decode(&mut r, version)?)
            }
            ct::FETCH_ASSIGNED_PARTITION => {
                AnyRequest::FetchAssignedPartition(FetchAssignedPartition::decode(&mut r, version)?)
            }
            ct::FETCH_TOPIC_MESSAGE => {
                AnyRequest::FetchTopicMessage(FetchTopicMessage::decode(&mut r, version)?)
            }
            ct::FETCH_PARTITION_MESSAGE => {
                AnyRequest::FetchPartitionMessage(FetchPartitionMessage::decode(&mut r, version)?)
            }
            ct::COMMIT_ACK => AnyRequest::CommitAck(CommitAck::decode(&mut r, version)?),
            ct::COMMIT_ACK_INDEX => {
                AnyRequest::CommitAckIndex(CommitAckIndex::decode(&mut r, version)?)
            }
            ct::FETCH_INDEX => AnyRequest::FetchIndex(FetchIndex::decode(&mut r, version)?),
            ct::PRODUCE_MESSAGE => {
                AnyRequest::ProduceMessage(ProduceMessage::decode(&mut r, version)?)
            }
            ct::PRODUCE_MESSAGE_PREPARE => AnyRequest::Prepare(Prepare::decode(&mut r, version)?),
            ct::PRODUCE_MESSAGE_COMMIT => AnyRequest::Commit(Commit::decode(&mut r, version)?),
            ct::PRODUCE_MESSAGE_ROLLBACK => {
                AnyRequest::Rollback(Rollback::decode(&mut r, version)?)
            }
            ct::FETCH_PRODUCE_FEEDBACK => {
                AnyRequest::FetchProduceFeedback(FetchProduceFeedback::decode(&mut r, version)?)
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jmq::message::SysCode;
    use bytes::Bytes;

    fn round_trip<P: Payload + PartialEq + std::fmt::Debug>(p: &P, version: u8) -> BytesMut {
        let mut b = BytesMut::new();
        p.encode(version, &mut b).unwrap();
        let mut r = Reader::new(b.clone().freeze());
        let back = P::decode(&mut r, version).unwrap();
        r.finish("test").unwrap();
        assert_eq!(&back, p);
        b
    }

    #[test]
    fn add_connection_golden() {
        let p = AddConnection {
            app: "a".into(),
            token: "t".into(),
            language: language::PYTHON,
            client_version: "v".into(),
            ip: "i".into(),
            time: 2,
            sequence: 3,
            ..AddConnection::default()
        };
        let b = round_trip(&p, 3);
        let expected: &[u8] = &[
            0, 0, 1, b'a', 1, b't', 0,
            0, // username, password, app, token, region, namespace (S1)
            3, // language PYTHON
            1, b'v', 1, b'i', // version, ip
            0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 3,
        ];
        assert_eq!(&b[..], expected);
        let r = AddConnectionResponse {
            connection_id: Some("c".into()),
            notification: Some("n".into()),
        };
        assert_eq!(&round_trip(&r, 3)[..], &[1, b'c', 0, 1, b'n']);
    }

    #[test]
    fn language_nine_is_refused() {
        let mut b = BytesMut::new();
        AddConnection {
            language: 9,
            ..AddConnection::default()
        }
        .encode(3, &mut b)
        .unwrap();
        assert!(AnyRequest::decode(ct::ADD_CONNECTION, 3, b.freeze()).is_err());
    }

    fn cluster() -> FetchClusterResponse {
        FetchClusterResponse {
            topics: vec![TopicMeta {
                topic: "t".into(),
                producer_policy: Some(ProducerPolicy {
                    nearby: true,
                    weights: vec![("1".into(), 10)],
                    timeout: 100,
                    ..ProducerPolicy::default()
                }),
                consumer_policy: Some(ConsumerPolicy {
                    retry: true,
                    ack_timeout: 1000,
                    batch_size: 10,
                    black_list: vec!["9.9.9.9".into()],
                    ..ConsumerPolicy::default()
                }),
                topic_type: topic_type::TOPIC,
                partition_groups: vec![PartitionGroupMeta {
                    id: 0,
                    leader: 1,
                    partitions: vec![0, 1],
                }],
                code: 0,
                params: vec![],
            }],
            brokers: vec![BrokerMeta {
                id: 1,
                host: "h".into(),
                port: 50088,
                data_center: "dc".into(),
                nearby: true,
                weight: 100,
                sys_code: 0,
                permission: 3,
            }],
        }
    }

    #[test]
    fn fetch_cluster_golden_v3_and_version_fields() {
        let c = cluster();
        let b = round_trip(&c, 3);
        let mut e: Vec<u8> = vec![0, 1, 0, 1, b't'];
        e.extend([1, 1, 0, 0, 0, 1, 0, 1, b'1', 0, 10, 0, 0, 0, 0, 0, 100]); // producer policy
        e.extend([1, 0, 0, 0, 1, 0]); // consumer flag, nearby paused archive retry seq
        e.extend([0, 0, 3, 0xe8, 0, 10, 0]); // ackTimeout, batchSize, deleted bool
        e.extend([0, 0, 0, 0, 0, 0, 0, 0]); // concurrent, delay
        e.extend([0, 1, 0, 7]);
        e.extend(b"9.9.9.9");
        e.extend([0; 12]); // errTimes, maxPartitionNum, readRetryProbability
        e.extend([0]); // type BYTE
        e.extend([0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0, 2, 0, 0, 0, 1]); // group
        e.extend([0, 0, 0, 0]); // code
        e.extend([
            0, 1, 0, 0, 0, 1, 0, 1, b'h', 0, 0, 0xc3, 0xa8, 0, 2, b'd', b'c', 1,
        ]);
        e.extend([0, 0, 0, 100, 0, 0, 0, 0, 0, 0, 0, 3]); // weight, sysCode, permission
        assert_eq!(&b[..], &e[..]);
        // Version 1: no sysCode/permission; version 4: params after code.
        let mut c1 = c.clone();
        c1.brokers[0].sys_code = 0;
        assert_eq!(round_trip(&c1, 1).len(), b.len() - 8);
        let mut c4 = c.clone();
        c4.topics[0].params = vec![("k".into(), "v".into())];
        assert_eq!(round_trip(&c4, 4).len(), b.len() + 8);
    }

    #[test]
    fn commit_ack_response_reproduces_the_count_bug() {
        let resp: CommitAckResponse<{ -ct::COMMIT_ACK }> = CommitAckResponse {
            data: vec![("t".into(), vec![(0, 0), (1, 0), (2, 140)])],
        };
        let mut b = BytesMut::new();
        resp.encode(3, &mut b).unwrap();
        assert_eq!(&b[..2], &[0, 3], "count is the number of cells, not topics");
        let mut r = Reader::new(b.freeze());
        let back = CommitAckResponse::<{ -ct::COMMIT_ACK }>::decode(&mut r, 3).unwrap();
        r.finish("commit ack").unwrap();
        assert_eq!(back, resp);
    }

    #[test]
    fn produce_and_fetch_round_trip() {
        let mut m = WireMessage {
            partition: -1,
            sys_code: SysCode::default(),
            app: Some("a".into()),
            ..WireMessage::default()
        };
        m.set_body(Bytes::from_static(b"x"));
        let p = ProduceMessage {
            topics: vec![ProduceTopic {
                topic: "t".into(),
                tx_id: Some("tx".into()),
                timeout: 5,
                qos: 1,
                messages: vec![m.clone(), m.clone()],
            }],
            app: "a".into(),
        };
        round_trip(&p, 3);
        let r = ProduceMessageResponse {
            data: vec![ProduceResult {
                topic: "t".into(),
                code: 0,
                items: vec![ProduceItem {
                    partition: 0,
                    index: 7,
                    start_time: 1,
                }],
            }],
        };
        round_trip(&r, 3);
        round_trip(
            &FetchTopicMessageResponse {
                data: vec![TopicMessages {
                    topic: "t".into(),
                    messages: vec![m.clone()],
                    code: 0,
                }],
            },
            3,
        );
        round_trip(
            &FetchPartitionMessageResponse {
                data: vec![(
                    "t".into(),
                    vec![PartitionMessages {
                        partition: 2,
                        messages: vec![m],
                        code: 184,
                    }],
                )],
            },
            3,
        );
    }

    #[test]
    fn every_request_round_trips_through_any_request() {
        let reqs: Vec<(i8, BytesMut)> = {
            let mut v = Vec::new();
            macro_rules! push {
                ($p:expr) => {{
                    let p = $p;
                    let mut b = BytesMut::new();
                    p.encode(3, &mut b).unwrap();
                    v.push((Payload_type(&p), b));
                }};
            }
            #[allow(non_snake_case)]
            fn Payload_type<P: Payload>(_: &P) -> i8 {
                P::TYPE
            }
            push!(AddConnection::default());
            push!(RemoveConnection);
            push!(AddConsumer {
                topics: vec!["t".into()],
                app: "a".into(),
                sequence: 1
            });
            push!(RemoveConsumer::default());
            push!(AddProducer::default());
            push!(RemoveProducer::default());
            push!(Heartbeat);
            push!(FetchHealth);
            push!(FetchCluster {
                topics: vec!["a".into(), "b".into()],
                app: "x".into()
            });
            push!(FindCoordinator::default());
            push!(FetchAssignedPartition {
                topics: vec![("t".into(), 60_000, true)],
                app: "a".into()
            });
            push!(FetchTopicMessage {
                topics: vec![("t".into(), 10)],
                app: "a".into(),
                ack_timeout: 1,
                long_poll_timeout: 2
            });
            push!(FetchPartitionMessage {
                topics: vec![(
                    "t".into(),
                    vec![PartitionFetch {
                        partition: 1,
                        count: 2,
                        index: -1
                    }]
                )],
                app: "a".into()
            });
            push!(CommitAck {
                topics: vec![(
                    "t".into(),
                    vec![(
                        0,
                        vec![AckItem {
                            partition: 0,
                            index: 3,
                            retry_type: RetryType::Exception
                        }]
                    )]
                )],
                app: "a".into()
            });
            push!(CommitAckIndex::default());
            push!(FetchIndex::default());
            push!(ProduceMessage::default());
            push!(Prepare {
                timeout: 9,
                ..Prepare::default()
            });
            push!(Commit::default());
            push!(Rollback::default());
            push!(FetchProduceFeedback {
                long_poll_timeout: 1,
                ..FetchProduceFeedback::default()
            });
            v
        };
        assert_eq!(reqs.len(), ct::KNOWN.len());
        for (t, b) in reqs {
            AnyRequest::decode(t, 3, b.clone().freeze()).unwrap();
            // One byte too many is a protocol error: payloads must consume the frame exactly.
            let mut longer = b.clone();
            longer.put_u8(0);
            assert!(AnyRequest::decode(t, 3, longer.freeze()).is_err(), "{t}");
        }
        assert!(AnyRequest::decode(ct::FETCH_ACK_INDEX, 3, Bytes::new()).is_err());
    }

    #[test]
    fn feedback_and_prepare_tails_follow_the_code() {
        let b = round_trip(
            &FetchProduceFeedback {
                app: "a".into(),
                topic: "t".into(),
                status: 1,
                long_poll_timeout: 5,
            },
            3,
        );
        // app S2, topic S2, status BYTE, longPollTimeout INT: no count, a 4-byte tail.
        assert_eq!(b.len(), 3 + 3 + 1 + 4);
        let b = round_trip(
            &Prepare {
                topic: "t".into(),
                app: "a".into(),
                sequence: 1,
                transaction_id: None,
                timeout: 7,
            },
            3,
        );
        assert_eq!(&b[b.len() - 4..], &[0, 0, 0, 7]);
    }

    #[test]
    fn fetch_index_v2_has_no_left_right() {
        let r = FetchIndexResponse {
            data: vec![(
                "t".into(),
                vec![IndexEntry {
                    partition: 0,
                    index: 5,
                    code: 0,
                    left_index: -1,
                    right_index: -1,
                }],
            )],
        };
        let b2 = round_trip(&r, 2);
        let mut r3 = r.clone();
        r3.data[0].1[0].left_index = 0;
        r3.data[0].1[0].right_index = 9;
        let b3 = round_trip(&r3, 3);
        assert_eq!(b3.len(), b2.len() + 16);
    }
}
