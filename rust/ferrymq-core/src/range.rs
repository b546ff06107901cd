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

use futures::future::BoxFuture;

use crate::columnar::RangeRead;
use crate::error::{Error, Result};

/// Offset-range reads of one protocol. Object safe: callers hold an `Arc<dyn RangeSource>`.
pub trait RangeSource: Send + Sync {
    /// The protocol's name (`"rocketmq"`, `"remoting"`, `"jmq"`, `"nats"`).
    fn protocol(&self) -> &'static str;

    /// Connect where the protocol connects lazily (fails on an unreachable server).
    fn start(&self) -> BoxFuture<'_, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// The readable partitions of `topic`, sorted.
    fn partitions<'a>(&'a self, topic: &'a str) -> BoxFuture<'a, Result<Vec<String>>>;

    /// The first offset still stored in `partition`.
    fn earliest<'a>(&'a self, topic: &'a str, partition: &'a str) -> BoxFuture<'a, Result<i64>>;

    /// The next offset to be written to `partition`.
    fn latest<'a>(&'a self, topic: &'a str, partition: &'a str) -> BoxFuture<'a, Result<i64>>;

    /// The first offset of `partition` stored at or after `timestamp_ms` (Unix milliseconds).
    /// Fails where the protocol cannot search by time.
    fn offset_for_time<'a>(
        &'a self,
        _topic: &'a str,
        _partition: &'a str,
        _timestamp_ms: i64,
    ) -> BoxFuture<'a, Result<i64>> {
        let protocol = self.protocol();
        Box::pin(async move {
            Err(Error::invalid(
                "option 'startingTimestamp'",
                format!("not available for {protocol}"),
            ))
        })
    }

    /// The earliest (or, with `latest`, the latest) offset of every partition of `topic`, in
    /// partition order. By default one request per partition.
    fn snapshot<'a>(
        &'a self,
        topic: &'a str,
        latest: bool,
    ) -> BoxFuture<'a, Result<Vec<(String, i64)>>> {
        Box::pin(async move {
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
        })
    }

    /// Every message of `partition` with `start <= offset < end`, at most `max_rows` of them
    /// (the read then stops early: continue from [`RangeRead::next_offset`]).
    fn read<'a>(
        &'a self,
        topic: &'a str,
        partition: &'a str,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> BoxFuture<'a, Result<RangeRead>>;

    /// Record `offset` (the next one to read) as the reader's progress on `partition`, where
    /// the protocol keeps progress for others to see (lag tools). By default nothing: the
    /// caller's checkpoint holds the offsets.
    fn commit<'a>(
        &'a self,
        _topic: &'a str,
        _partition: &'a str,
        _offset: i64,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// Close the client (idempotent).
    fn close(&self) -> BoxFuture<'_, Result<()>>;
}
