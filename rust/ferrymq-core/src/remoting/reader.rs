//! [`RemotingReader`]: offset-based, replayable reads of RocketMQ queues over the remoting
//! protocol, with the public API of the gRPC [`crate::rocketmq::pull::PullReader`].
//!
//! Queues are addressed by `(topic, broker name, queue id)` ([`QueueRef`]). Their bounds come
//! from the min/max offset requests (the max is exclusive), a start by time from the
//! offset-by-timestamp search, and [`RemotingReader::read_range`] returns exactly the messages
//! with `start <= queue_offset < end` as Arrow columns. Pulls below the known end of the
//! queue do not wait; once the read reaches the end, pulls long-poll for a few seconds, and a
//! read that sees no progress for several of them fails with a timeout.
//!
//! When retention removed messages below the requested offset, the broker answers "offset
//! moved" with the first offset still stored; the read continues there and
//! [`RangeRead::first_offset`] shows the jump, so the caller can decide whether that is data
//! loss.

use std::time::Duration;

use super::client::{PullStatus, RemotingClient, RemotingOptions, TagFilter};
use crate::columnar::{RangeCursor, RangeRead};
use crate::error::Result;
use crate::rocketmq::pull::{
    check_reader, push_message, queue_range_source, OffsetPolicy, QueueRef,
};

/// How many consecutive pulls without progress [`RemotingReader::read_range`] tolerates.
const MAX_EMPTY_PULLS: u32 = 3;
/// The broker never returns more than this many messages per pull.
const SERVER_PULL_CAP: i32 = 32;
/// How long a pull at the end of a queue may be held by the broker.
const END_SUSPEND: Duration = Duration::from_secs(5);

queue_range_source!(RemotingReader, "remoting");

/// Offset-based reader of RocketMQ queues over remoting, for one consumer group.
#[derive(Debug, Clone)]
pub struct RemotingReader {
    client: RemotingClient,
    group: String,
    filter: Option<TagFilter>,
    pull_batch_size: i32,
}

impl RemotingReader {
    /// A reader for `group`, optionally filtered by a tag expression (`"*"` or `"a || b"`).
    /// No I/O until the first call.
    pub fn new(
        options: RemotingOptions,
        group: impl Into<String>,
        tag_filter: Option<String>,
        pull_batch_size: i32,
    ) -> Result<Self> {
        let group = group.into();
        check_reader(&group, pull_batch_size)?;
        let filter = match tag_filter {
            Some(f) => Some(TagFilter::parse(&f)?).filter(|f| f.expression() != "*"),
            None => None,
        };
        Ok(RemotingReader {
            client: RemotingClient::new(options)?,
            group,
            filter,
            pull_batch_size,
        })
    }

    /// Nothing to set up: connections open on first use (the endpoints were checked by
    /// [`RemotingReader::new`]). Fails only after a shutdown.
    pub async fn start(&self) -> Result<()> {
        self.client.check_open()
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The shared client.
    pub fn client(&self) -> &RemotingClient {
        &self.client
    }

    /// The readable queues of `topic`, sorted by broker then id.
    pub async fn queues(&self, topic: &str) -> Result<Vec<QueueRef>> {
        self.client.read_queues(topic).await
    }

    /// The beginning, the end (exclusive) or the first offset at a time of one queue.
    pub async fn query_offset(
        &self,
        topic: &str,
        queue: &QueueRef,
        policy: OffsetPolicy,
    ) -> Result<i64> {
        match policy {
            OffsetPolicy::Beginning => self.client.min_offset(topic, queue).await,
            OffsetPolicy::End => self.client.max_offset(topic, queue).await,
            OffsetPolicy::Timestamp(ms) => self.client.search_offset(topic, queue, ms).await,
        }
    }

    /// The offset committed for this reader's group, if any.
    pub async fn committed_offset(&self, topic: &str, queue: &QueueRef) -> Result<Option<i64>> {
        self.client
            .query_consumer_offset(&self.group, topic, queue)
            .await
    }

    /// Record `offset` (the next offset to read) as this group's progress on the queue.
    pub async fn commit_offset(&self, topic: &str, queue: &QueueRef, offset: i64) -> Result<()> {
        self.client
            .update_consumer_offset(&self.group, topic, queue, offset)
            .await
    }

    /// Every message with `start <= queue offset < end`, at most `max_rows` of them (the read
    /// then stops early: continue from [`RangeRead::next_offset`]).
    pub async fn read_range(
        &self,
        topic: &str,
        queue: &QueueRef,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> Result<RangeRead> {
        let mut cursor = RangeCursor::new(start, end, 0, max_rows)?;
        let mut known_max: Option<i64> = None;
        let cap = usize::try_from(self.pull_batch_size.max(SERVER_PULL_CAP)).unwrap_or(1);
        while cursor.wants_more() {
            let at = cursor.at();
            let want = i32::try_from(cursor.want(cap)).unwrap_or(SERVER_PULL_CAP);
            let suspend = known_max.filter(|m| at >= *m).map(|_| END_SUSPEND);
            let filter = self.filter.as_ref();
            let pulled = self
                .client
                .pull(&self.group, topic, queue, at, want, filter, suspend)
                .await?;
            known_max = Some(pulled.max_offset);
            match pulled.status {
                PullStatus::Found => {
                    for m in &pulled.messages {
                        let off = m.queue_offset;
                        if !cursor.wants(off) {
                            continue;
                        }
                        let mut p = m.to_proto();
                        if let Some(t) = p.topic.as_mut() {
                            t.name = topic.to_string();
                        }
                        cursor.take(off, |c| push_message(c, &p, topic, off))?;
                    }
                    if !cursor.full() {
                        cursor.skip_to(pulled.next_begin_offset);
                    }
                }
                // Filtered-out messages, or retention removed what we asked for: continue
                // where the broker says (first_offset shows the jump).
                PullStatus::RetryImmediately | PullStatus::OffsetIllegal => {
                    cursor.skip_to(pulled.next_begin_offset);
                }
                PullStatus::NoNewMessages => {}
            }
            if cursor.at() == at {
                cursor.nothing_new(MAX_EMPTY_PULLS, |at, end| {
                    format!(
                        "{topic}/{}: no message at offset {at} below {end} after \
                         {MAX_EMPTY_PULLS} pulls (queue end {}; was the range planned against \
                         another broker?)",
                        queue.key(),
                        pulled.max_offset
                    )
                })?;
            }
        }
        Ok(cursor.into_read())
    }

    /// Close the connections (idempotent).
    pub async fn shutdown(&self) {
        self.client.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::remoting::codec::RemotingCommand;
    use crate::remoting::stored::{encode_properties, encode_stored, StoredRecord};
    use crate::test_support::remoting_server;
    use bytes::BytesMut;

    /// A name server and broker in one: topic `t`, one queue on `broker-a` holding offsets
    /// `MIN..MAX` (older ones removed by retention), tags alternating `a` / `b`. Pulls are
    /// answered at once, with at most 32 messages.
    const MIN: i64 = 5;
    const MAX: i64 = 60;

    async fn fake_cluster() -> String {
        remoting_server(answer).await
    }

    fn answer(c: &RemotingCommand, me: &str) -> RemotingCommand {
        let mut r = RemotingCommand::response(0, c.opaque, None);
        match c.code {
            105 => {
                r.body = format!(
                    "{{\"brokerDatas\":[{{\"brokerAddrs\":{{\"0\":\"{me}\"}},\"brokerName\":\"broker-a\"}}],\
                     \"queueDatas\":[{{\"brokerName\":\"broker-a\",\"perm\":6,\"readQueueNums\":1,\"writeQueueNums\":1}}]}}"
                )
                .into();
            }
            31 => r.set_ext("offset", MIN),
            30 => r.set_ext("offset", MAX),
            11 => {
                let at: i64 = c.ext("queueOffset").unwrap().parse().unwrap();
                let n: i64 = c.ext("maxMsgNums").unwrap().parse().unwrap();
                r.set_ext("minOffset", MIN);
                r.set_ext("maxOffset", MAX);
                if at < MIN {
                    r.code = 21;
                    r.set_ext("nextBeginOffset", MIN);
                } else if at >= MAX {
                    r.code = 19;
                    r.set_ext("nextBeginOffset", at);
                } else {
                    let end = (at + n.min(32)).min(MAX);
                    let mut body = BytesMut::new();
                    for off in at..end {
                        let tag = if off % 2 == 0 { "a" } else { "b" };
                        let props =
                            encode_properties(&[("TAGS", tag), ("UNIQ_KEY", &format!("ID{off}"))]);
                        encode_stored(
                            &StoredRecord {
                                topic: "t",
                                queue_offset: off,
                                body: format!("m{off}").as_bytes(),
                                properties: &props,
                                ..Default::default()
                            },
                            &mut body,
                        )
                        .unwrap();
                    }
                    r.body = body.freeze();
                    r.set_ext("nextBeginOffset", end);
                }
            }
            _ => r.code = 3,
        }
        r
    }

    #[tokio::test]
    async fn reads_exact_ranges() {
        let addr = fake_cluster().await;
        let reader = RemotingReader::new(RemotingOptions::new(&addr), "g", None, 32).unwrap();
        reader.start().await.unwrap();
        let qs = reader.queues("t").await.unwrap();
        assert_eq!(qs.len(), 1);
        let q = &qs[0];
        assert_eq!(
            reader
                .query_offset("t", q, OffsetPolicy::Beginning)
                .await
                .unwrap(),
            MIN
        );
        assert_eq!(
            reader
                .query_offset("t", q, OffsetPolicy::End)
                .await
                .unwrap(),
            MAX
        );

        // Retention: the read continues at the first stored offset, first_offset shows it.
        let r = reader.read_range("t", q, 0, 12, 100).await.unwrap();
        assert_eq!(r.first_offset, Some(MIN));
        assert_eq!((r.columns.len(), r.next_offset), (7, 12));
        assert_eq!(r.columns.message_id.data(), b"ID5ID6ID7ID8ID9ID10ID11");

        // Several pulls (32 per pull), exact bounds, and a row limit.
        let r = reader.read_range("t", q, 7, MAX, 1000).await.unwrap();
        assert_eq!(r.columns.len(), usize::try_from(MAX - 7).unwrap());
        assert_eq!(r.next_offset, MAX);
        let r = reader.read_range("t", q, 8, 20, 5).await.unwrap();
        assert_eq!(
            (r.columns.len(), r.next_offset, r.first_offset),
            (5, 13, Some(8))
        );

        // Tag filter: exact re-check on the client.
        let filtered =
            RemotingReader::new(RemotingOptions::new(&addr), "g", Some("a".into()), 32).unwrap();
        let r = filtered.read_range("t", q, 10, 20, 100).await.unwrap();
        assert_eq!(r.columns.len(), 5);
        assert_eq!(r.columns.tag.data(), b"aaaaa");
        assert_eq!(r.next_offset, 20);

        // Beyond the end: bounded waiting, then a timeout.
        let e = reader
            .read_range("t", q, MAX - 1, MAX + 1, 100)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Timeout, "{e}");
        reader.shutdown().await;
    }

    #[test]
    fn rejects_bad_options() {
        let o = RemotingOptions::new("127.0.0.1:9876");
        assert!(RemotingReader::new(o.clone(), "", None, 32).is_err());
        assert!(RemotingReader::new(o.clone(), "g", None, 0).is_err());
        assert!(RemotingReader::new(RemotingOptions::new(""), "g", None, 32).is_err());
        let r = RemotingReader::new(o.clone(), "g", Some("*".into()), 32).unwrap();
        assert!(r.filter.is_none());
        let r = RemotingReader::new(o, "g", Some("a || b".into()), 32).unwrap();
        assert_eq!(r.filter.unwrap().expression(), "a || b");
    }
}
