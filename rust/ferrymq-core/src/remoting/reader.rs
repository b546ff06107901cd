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
use crate::columnar::MessageColumns;
use crate::error::{Error, Result};
use crate::rocketmq::pull::{push_message, OffsetPolicy, QueueRef, RangeRead};

/// How many consecutive pulls without progress [`RemotingReader::read_range`] tolerates.
const MAX_EMPTY_PULLS: u32 = 3;
/// The broker never returns more than this many messages per pull.
const SERVER_PULL_CAP: i32 = 32;
/// How long a pull at the end of a queue may be held by the broker.
const END_SUSPEND: Duration = Duration::from_secs(5);

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
        if group.is_empty() {
            return Err(Error::invalid("group", "must not be empty"));
        }
        if pull_batch_size < 1 {
            return Err(Error::invalid("pull_batch_size", "must be at least 1"));
        }
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

    /// Nothing to set up: connections open on first use. Fails only after a shutdown.
    pub async fn start(&self) -> Result<()> {
        if self.client.options().endpoints.is_empty() {
            return Err(Error::invalid("endpoints", "must not be empty"));
        }
        Ok(())
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
        if start < 0 || end < start {
            return Err(Error::invalid(
                "range",
                format!("[{start}, {end}) is not a valid offset range"),
            ));
        }
        let max_rows = max_rows.max(1);
        let mut columns = MessageColumns::new();
        let mut first_offset = None;
        let mut at = start;
        let mut known_max: Option<i64> = None;
        let mut empty = 0u32;
        while at < end && columns.len() < max_rows {
            let want = (end - at)
                .min(i64::from(self.pull_batch_size.max(SERVER_PULL_CAP)))
                .min(i64::try_from(max_rows - columns.len()).unwrap_or(i64::MAX));
            let want = i32::try_from(want).unwrap_or(SERVER_PULL_CAP);
            let suspend = known_max.filter(|m| at >= *m).map(|_| END_SUSPEND);
            let pulled = self
                .client
                .pull(
                    &self.group,
                    topic,
                    queue,
                    at,
                    want,
                    self.filter.as_ref(),
                    suspend,
                )
                .await?;
            known_max = Some(pulled.max_offset);
            let before = at;
            match pulled.status {
                PullStatus::Found => {
                    for m in &pulled.messages {
                        let off = m.queue_offset;
                        if off < at || off >= end {
                            continue;
                        }
                        if columns.len() >= max_rows {
                            break;
                        }
                        let mut p = m.to_proto();
                        if let Some(t) = p.topic.as_mut() {
                            t.name = topic.to_string();
                        }
                        first_offset.get_or_insert(off);
                        push_message(&mut columns, &p, topic, off)?;
                        at = off + 1;
                    }
                    if columns.len() < max_rows && pulled.next_begin_offset > at {
                        at = pulled.next_begin_offset.min(end);
                    }
                }
                PullStatus::RetryImmediately | PullStatus::OffsetIllegal => {
                    // Filtered-out messages, or retention removed what we asked for: continue
                    // where the broker says (first_offset shows the jump).
                    if pulled.next_begin_offset > at {
                        at = pulled.next_begin_offset.min(end);
                    }
                }
                PullStatus::NoNewMessages => {}
            }
            if at > before {
                empty = 0;
            } else {
                empty += 1;
                if empty >= MAX_EMPTY_PULLS {
                    return Err(Error::timeout(format!(
                        "{topic}/{}: no message at offset {at} below {end} after {empty} pulls \
                         (queue end {}; was the range planned against another broker?)",
                        queue.key(),
                        pulled.max_offset
                    )));
                }
            }
        }
        Ok(RangeRead {
            columns,
            next_offset: at.min(end),
            first_offset,
        })
    }

    /// Close the connections (idempotent).
    pub async fn shutdown(&self) {
        self.client.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
