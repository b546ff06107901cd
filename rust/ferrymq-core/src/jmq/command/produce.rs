//! Produce commands: PRODUCE_MESSAGE, and transactions (PREPARE, COMMIT, ROLLBACK,
//! FETCH_PRODUCE_FEEDBACK).

use bytes::BytesMut;

use super::payload::{Payload, Request};
use crate::error::Result;
use crate::jmq::codec::{command_type as ct, Reader};
use crate::jmq::message::WireMessage;
use crate::jmq::wire::{wire, Layout, Wire};

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
