//! Session and metadata commands: connections, heartbeats and health, consumer and producer
//! registration, FETCH_CLUSTER and FIND_COORDINATOR.

use bytes::{BufMut, BytesMut};

use super::payload::{empty_payload, BooleanAck};
use super::payload::{Payload, Request};
use crate::error::{Error, Result};
use crate::jmq::codec::{command_type as ct, put_bool, Reader};
use crate::jmq::wire::{wire, Layout, Present, Wire, S1};

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
