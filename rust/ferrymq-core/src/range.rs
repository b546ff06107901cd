//! [`RangeSource`]: the one model of an offset-range reader, implemented once per protocol.
//!
//! Every replayable source (the PySpark source, benchmarks) sees a protocol the same way: a
//! topic has named partitions (a RocketMQ queue `"<broker>:<queue id>"`, a JMQ4 partition
//! number, the single partition `"0"` of a JetStream stream), each a total order of offsets
//! with an earliest and a latest (exclusive) bound, and [`RangeSource::read`] returns exactly
//! the messages with `start <= offset < end` as Arrow columns. What differs for real stays in
//! the implementations: RocketMQ commits the group's progress and finds offsets by time, JMQ4
//! asks the bounds of every partition at once, JetStream filters by subject.
//!
//! The implementations: [`crate::rocketmq::pull::PullReader`] (gRPC),
//! [`crate::remoting::RemotingReader`], [`crate::jmq::range::JmqRangeReader`] and
//! [`crate::nats::range::StreamReader`].

use std::future::Future;

use crate::columnar::RangeRead;
use crate::error::{Error, Result};

/// Offset-range reads of one protocol. The futures are `Send`: callers run them on the shared
/// runtime.
pub trait RangeSource: Send + Sync {
    /// The protocol's name (`"rocketmq"`, `"remoting"`, `"jmq"`, `"nats"`).
    fn protocol(&self) -> &'static str;

    /// Connect where the protocol connects lazily (fails on an unreachable server).
    fn start(&self) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// The readable partitions of `topic`, sorted.
    fn partitions(&self, topic: &str) -> impl Future<Output = Result<Vec<String>>> + Send;

    /// The first offset still stored in `partition`.
    fn earliest(&self, topic: &str, partition: &str) -> impl Future<Output = Result<i64>> + Send;

    /// The next offset to be written to `partition`.
    fn latest(&self, topic: &str, partition: &str) -> impl Future<Output = Result<i64>> + Send;

    /// The first offset of `partition` stored at or after `timestamp_ms` (Unix milliseconds).
    /// Fails where the protocol cannot search by time.
    fn offset_for_time(
        &self,
        _topic: &str,
        _partition: &str,
        _timestamp_ms: i64,
    ) -> impl Future<Output = Result<i64>> + Send {
        let protocol = self.protocol();
        async move {
            Err(Error::invalid(
                "option 'startingTimestamp'",
                format!("not available for {protocol}"),
            ))
        }
    }

    /// The earliest (or, with `latest`, the latest) offset of every partition of `topic`, in
    /// partition order. By default one request per partition.
    fn snapshot(
        &self,
        topic: &str,
        latest: bool,
    ) -> impl Future<Output = Result<Vec<(String, i64)>>> + Send {
        async move {
            let mut out = Vec::new();
            for p in self.partitions(topic).await? {
                let offset = if latest {
                    self.latest(topic, &p).await?
                } else {
                    self.earliest(topic, &p).await?
                };
                out.push((p, offset));
            }
            Ok(out)
        }
    }

    /// Every message of `partition` with `start <= offset < end`, at most `max_rows` of them
    /// (the read then stops early: continue from [`RangeRead::next_offset`]).
    fn read(
        &self,
        topic: &str,
        partition: &str,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> impl Future<Output = Result<RangeRead>> + Send;

    /// Record `offset` (the next one to read) as the reader's progress on `partition`, where
    /// the protocol keeps progress for others to see (lag tools). By default nothing: the
    /// caller's checkpoint holds the offsets.
    fn commit(
        &self,
        _topic: &str,
        _partition: &str,
        _offset: i64,
    ) -> impl Future<Output = Result<()>> + Send {
        async { Ok(()) }
    }

    /// Close the client (idempotent).
    fn close(&self) -> impl Future<Output = Result<()>> + Send;
}
