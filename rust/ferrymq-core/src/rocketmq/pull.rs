//! [`PullReader`]: offset-based, replayable reads of RocketMQ queues over the v2 RPCs
//! `PullMessage`, `QueryOffset`, `GetOffset` and `UpdateOffset`.
//!
//! This is the reader behind the exactly-once PySpark source: every queue is addressed by
//! `(topic, broker name, queue id)` ([`QueueRef`]), its readable range comes from
//! `QueryOffset BEGINNING / END`, and [`PullReader::read_range`] returns exactly the messages
//! with `start <= queue_offset < end`, however often it is called, laid out as Arrow columns
//! ([`crate::columnar::MessageColumns`]).
//!
//! The stock Apache RocketMQ proxy answers `UNIMPLEMENTED` for these RPCs (spark reference
//! §4.2); ferrymq's embedded broker and proxies that implement the pull API (rocketmq-rust)
//! serve them. [`queue_range_source!`] makes this reader and the remoting one
//! [`crate::range::RangeSource`]s.

use std::time::Duration;

use futures::StreamExt;

use super::client::{check_status, deadline, Client, ClientOptions, NoCommands};
use super::endpoints::Endpoints;
use crate::columnar::{MessageColumns, RangeCursor, RangeRead, Row};
use crate::duration::{timestamp_ms, to_proto_duration};
use crate::error::{Error, Result};
use crate::proto;
use crate::status;

/// One queue of a topic: the broker that owns it and its id there. The queue id alone is not
/// unique across brokers.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QueueRef {
    /// Broker name.
    pub broker: String,
    /// Queue id on that broker.
    pub id: i32,
}

impl QueueRef {
    /// The key used in Spark offsets: `"<broker>:<queue id>"`.
    pub fn key(&self) -> String {
        format!("{}:{}", self.broker, self.id)
    }

    /// Parse a key made by [`QueueRef::key`]. The broker name may itself contain `:`.
    pub fn parse(key: &str) -> Result<Self> {
        let (broker, id) = key.rsplit_once(':').ok_or_else(|| {
            Error::invalid("queue", format!("{key:?} is not \"<broker>:<queue id>\""))
        })?;
        let id = id
            .parse::<i32>()
            .map_err(|_| Error::invalid("queue", format!("{key:?}: queue id is not a number")))?;
        if broker.is_empty() || id < 0 {
            return Err(Error::invalid(
                "queue",
                format!("{key:?} is not \"<broker>:<queue id>\""),
            ));
        }
        Ok(Self {
            broker: broker.to_string(),
            id,
        })
    }
}

/// Where `QueryOffset` should look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetPolicy {
    /// The smallest offset still stored.
    Beginning,
    /// The next offset to be written.
    End,
    /// The first offset stored at or after this Unix time in milliseconds.
    Timestamp(i64),
}

/// The answer of one `PullMessage`.
#[derive(Debug, Clone, Default)]
pub struct Pulled {
    /// Messages in queue order, as the broker sent them.
    pub messages: Vec<proto::Message>,
    /// The offset to pull next.
    pub next_offset: i64,
}

/// How many consecutive empty answers below `end` [`PullReader::read_range`] tolerates.
const MAX_EMPTY_PULLS: u32 = 20;

/// The checks of an offset reader's arguments, naming the bad one.
pub(crate) fn check_reader(group: &str, pull_batch_size: i32) -> Result<()> {
    if group.is_empty() {
        return Err(Error::invalid("group", "must not be empty"));
    }
    if pull_batch_size < 1 {
        return Err(Error::invalid("pull_batch_size", "must be at least 1"));
    }
    Ok(())
}

/// [`crate::range::RangeSource`] for a RocketMQ queue reader `$reader` (with the methods of
/// [`PullReader`]): partitions are queue keys, the bounds and the offset by time come from
/// `query_offset`, and a commit records the group's progress.
macro_rules! queue_range_source {
    ($reader:ty, $protocol:literal) => {
        impl $crate::range::RangeSource for $reader {
            fn protocol(&self) -> &'static str {
                $protocol
            }

            async fn start(&self) -> $crate::Result<()> {
                <$reader>::start(self).await
            }

            async fn partitions(&self, topic: &str) -> $crate::Result<Vec<String>> {
                let queues = self.queues(topic).await?;
                Ok(queues.iter().map(QueueRef::key).collect())
            }

            async fn earliest(&self, topic: &str, partition: &str) -> $crate::Result<i64> {
                let q = QueueRef::parse(partition)?;
                self.query_offset(topic, &q, OffsetPolicy::Beginning).await
            }

            async fn latest(&self, topic: &str, partition: &str) -> $crate::Result<i64> {
                let q = QueueRef::parse(partition)?;
                self.query_offset(topic, &q, OffsetPolicy::End).await
            }

            async fn offset_for_time(
                &self,
                topic: &str,
                partition: &str,
                timestamp_ms: i64,
            ) -> $crate::Result<i64> {
                let q = QueueRef::parse(partition)?;
                let policy = OffsetPolicy::Timestamp(timestamp_ms);
                self.query_offset(topic, &q, policy).await
            }

            async fn read(
                &self,
                topic: &str,
                partition: &str,
                start: i64,
                end: i64,
                max_rows: usize,
            ) -> $crate::Result<$crate::columnar::RangeRead> {
                let q = QueueRef::parse(partition)?;
                self.read_range(topic, &q, start, end, max_rows).await
            }

            async fn commit(
                &self,
                topic: &str,
                partition: &str,
                offset: i64,
            ) -> $crate::Result<()> {
                let q = QueueRef::parse(partition)?;
                self.commit_offset(topic, &q, offset).await
            }

            async fn close(&self) -> $crate::Result<()> {
                self.shutdown().await;
                Ok(())
            }
        }
    };
}
pub(crate) use queue_range_source;

queue_range_source!(PullReader, "rocketmq");

/// Offset-based reader of RocketMQ queues (a `PULL_CONSUMER` client of one group).
#[derive(Debug, Clone)]
pub struct PullReader {
    client: Client,
    group: String,
    filter: Option<proto::FilterExpression>,
    pull_batch_size: i32,
}

impl PullReader {
    /// A reader for `group` announcing `topics`, optionally filtered by a tag expression
    /// (`"*"` or `"a || b"`). No I/O until [`PullReader::start`].
    pub fn new(
        options: ClientOptions,
        group: impl Into<String>,
        topics: &[String],
        tag_filter: Option<String>,
        pull_batch_size: i32,
    ) -> Result<Self> {
        let group = group.into();
        check_reader(&group, pull_batch_size)?;
        let filter = tag_filter
            .filter(|f| !f.trim().is_empty() && f.trim() != "*")
            .map(|f| proto::FilterExpression {
                r#type: proto::FilterType::Tag as i32,
                expression: f,
            });
        let namespace = options.namespace.clone();
        let resource = |name: &str| proto::Resource {
            resource_namespace: namespace.clone(),
            name: name.to_string(),
        };
        let pub_sub = proto::settings::PubSub::Subscription(proto::Subscription {
            group: Some(resource(&group)),
            subscriptions: topics
                .iter()
                .map(|t| proto::SubscriptionEntry {
                    topic: Some(resource(t)),
                    expression: Some(filter.clone().unwrap_or(proto::FilterExpression {
                        r#type: proto::FilterType::Tag as i32,
                        expression: "*".to_string(),
                    })),
                })
                .collect(),
            ..Default::default()
        });
        let client = Client::new(
            options,
            proto::ClientType::PullConsumer,
            Some(group.clone()),
            pub_sub,
            std::sync::Arc::new(NoCommands),
        )?;
        Ok(Self {
            client,
            group,
            filter,
            pull_batch_size,
        })
    }

    /// Connect: telemetry and settings (see [`Client::start`]).
    pub async fn start(&self) -> Result<()> {
        self.client.start().await
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The shared client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The readable queues of `topic` (leader brokers), sorted by broker then id.
    pub async fn queues(&self, topic: &str) -> Result<Vec<QueueRef>> {
        self.client.check_running()?;
        let route = self.client.route(topic).await?;
        let mut out: Vec<QueueRef> = route
            .queues()
            .iter()
            .filter(|q| is_readable(q))
            .filter_map(|q| {
                let b = q.broker.as_ref()?;
                (b.id == 0).then(|| QueueRef {
                    broker: b.name.clone(),
                    id: q.id,
                })
            })
            .collect();
        out.sort();
        out.dedup();
        Ok(out)
    }

    async fn locate(
        &self,
        topic: &str,
        queue: &QueueRef,
    ) -> Result<(proto::MessageQueue, Endpoints)> {
        let route = self.client.route(topic).await?;
        let found = route.queues().iter().enumerate().find(|(_, q)| {
            q.id == queue.id
                && q.broker
                    .as_ref()
                    .is_some_and(|b| b.id == 0 && b.name == queue.broker)
        });
        match found {
            Some((i, q)) => Ok((q.clone(), route.queue_endpoints(i).clone())),
            None => Err(Error::rocketmq_status(
                status::TOPIC_NOT_FOUND,
                format!(
                    "topic {topic:?} has no queue {} (the queue set changed?)",
                    queue.key()
                ),
            )),
        }
    }

    /// `QueryOffset`: the beginning, the end or the offset at a time of one queue.
    pub async fn query_offset(
        &self,
        topic: &str,
        queue: &QueueRef,
        policy: OffsetPolicy,
    ) -> Result<i64> {
        self.client.check_running()?;
        let (mq, ep) = self.locate(topic, queue).await?;
        let (p, ts) = match policy {
            OffsetPolicy::Beginning => (proto::QueryOffsetPolicy::Beginning, None),
            OffsetPolicy::End => (proto::QueryOffsetPolicy::End, None),
            OffsetPolicy::Timestamp(ms) => {
                (proto::QueryOffsetPolicy::Timestamp, Some(timestamp_ms(ms)))
            }
        };
        let timeout = self.client.settings().request_timeout;
        let req = self.client.request_with_timeout(
            proto::QueryOffsetRequest {
                message_queue: Some(mq),
                query_offset_policy: p as i32,
                timestamp: ts,
            },
            timeout,
        );
        let mut stub = self.client.stub(&ep)?;
        let what = || format!("QueryOffset {policy:?} of {topic}/{}", queue.key());
        let resp = deadline(timeout, stub.query_offset(req))
            .await
            .map_err(|e| e.context(what()))?
            .into_inner();
        check_status(resp.status.as_ref()).map_err(|e| e.context(what()))?;
        Ok(resp.offset)
    }

    /// `UpdateOffset`: record `offset` as this group's progress on the queue (for lag
    /// dashboards; the Spark checkpoint stays authoritative).
    pub async fn commit_offset(&self, topic: &str, queue: &QueueRef, offset: i64) -> Result<()> {
        self.client.check_running()?;
        let (mq, ep) = self.locate(topic, queue).await?;
        let timeout = self.client.settings().request_timeout;
        let req = self.client.request_with_timeout(
            proto::UpdateOffsetRequest {
                group: Some(self.client.resource(&self.group)),
                message_queue: Some(mq),
                offset,
            },
            timeout,
        );
        let mut stub = self.client.stub(&ep)?;
        let resp = deadline(timeout, stub.update_offset(req))
            .await?
            .into_inner();
        check_status(resp.status.as_ref())
            .map_err(|e| e.context(format!("UpdateOffset of {topic}/{}", queue.key())))
    }

    /// One `PullMessage` of at most `batch_size` messages from `offset`.
    pub async fn pull(
        &self,
        topic: &str,
        queue: &QueueRef,
        offset: i64,
        batch_size: i32,
        long_polling: Duration,
    ) -> Result<Pulled> {
        self.client.check_running()?;
        if offset < 0 {
            return Err(Error::invalid("offset", "must not be negative"));
        }
        let (mq, ep) = self.locate(topic, queue).await?;
        let timeout = self.client.settings().request_timeout + long_polling;
        let req = self.client.request_with_timeout(
            proto::PullMessageRequest {
                group: Some(self.client.resource(&self.group)),
                message_queue: Some(mq),
                offset,
                batch_size: batch_size.max(1),
                filter_expression: self.filter.clone(),
                long_polling_timeout: Some(to_proto_duration(long_polling)),
            },
            timeout,
        );
        let mut stub = self.client.stub(&ep)?;
        let what = || format!("PullMessage {topic}/{} @ {offset}", queue.key());
        let fut = async {
            let mut stream = stub.pull_message(req).await?.into_inner();
            let mut out = Pulled {
                messages: Vec::new(),
                next_offset: offset,
            };
            let mut next: Option<i64> = None;
            while let Some(item) = stream.next().await {
                match item?.content {
                    Some(proto::pull_message_response::Content::Status(s))
                        if s.code != status::MESSAGE_NOT_FOUND =>
                    {
                        check_status(Some(&s))?;
                    }
                    // MESSAGE_NOT_FOUND: nothing at this offset (yet).
                    Some(proto::pull_message_response::Content::Status(_)) => {}
                    Some(proto::pull_message_response::Content::Message(m)) => {
                        out.messages.push(m);
                    }
                    Some(proto::pull_message_response::Content::NextOffset(n)) => next = Some(n),
                    None => {}
                }
            }
            out.next_offset = match next {
                Some(n) => n,
                None => out
                    .messages
                    .iter()
                    .filter_map(queue_offset)
                    .max()
                    .map_or(offset, |o| o + 1),
            };
            Ok::<_, Error>(out)
        };
        let r = deadline(timeout, fut).await.map_err(|e| e.context(what()));
        if let Err(e) = &r {
            self.client.on_rpc_error(&ep, e).await;
        }
        r
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
        while cursor.wants_more() {
            let cap = usize::try_from(self.pull_batch_size).unwrap_or(1);
            let want = i32::try_from(cursor.want(cap)).unwrap_or(i32::MAX);
            let before = cursor.at();
            let pulled = self
                .pull(topic, queue, before, want, Duration::ZERO)
                .await?;
            for m in &pulled.messages {
                let Some(off) = queue_offset(m) else {
                    return Err(Error::protocol(format!(
                        "PullMessage {topic}/{}: a message without a queue offset",
                        queue.key()
                    )));
                };
                if cursor.wants(off) {
                    cursor.take(off, |c| push_message(c, m, topic, off))?;
                }
            }
            if !cursor.full() {
                cursor.skip_to(pulled.next_offset);
            }
            if cursor.at() == before {
                cursor.nothing_new(MAX_EMPTY_PULLS, |at, end| {
                    format!(
                        "{topic}/{}: no message at offset {at} below {end} after \
                         {MAX_EMPTY_PULLS} pulls (was the range planned against another broker?)",
                        queue.key()
                    )
                })?;
            }
        }
        Ok(cursor.into_read())
    }

    /// Stop the client (idempotent).
    pub async fn shutdown(&self) {
        self.client.shutdown().await;
    }
}

fn is_readable(q: &proto::MessageQueue) -> bool {
    q.permission == proto::Permission::Read as i32
        || q.permission == proto::Permission::ReadWrite as i32
}

fn queue_offset(m: &proto::Message) -> Option<i64> {
    m.system_properties.as_ref().and_then(|p| p.queue_offset)
}

fn micros(t: &prost_types::Timestamp) -> i64 {
    t.seconds
        .saturating_mul(1_000_000)
        .saturating_add(i64::from(t.nanos / 1000))
}

/// Append a wire message to `columns` as row `offset` of `topic` (the store time is the
/// timestamp, or the born time when the broker sent none).
pub fn push_message(
    columns: &mut MessageColumns,
    m: &proto::Message,
    topic: &str,
    offset: i64,
) -> Result<()> {
    let mut props: Vec<(&str, &str)> = m
        .user_properties
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let sp = m.system_properties.as_ref();
    let (trace_context, trace_state) = crate::trace_context::take_received(
        sp.and_then(|p| p.trace_context.as_deref()),
        &mut props,
    );
    props.sort_unstable();
    let ts = sp.and_then(|p| p.store_timestamp.as_ref().or(p.born_timestamp.as_ref()));
    let name = m.topic.as_ref().map_or("", |t| t.name.as_str());
    columns.push(&Row {
        key: sp.and_then(|p| p.keys.first()).map(String::as_bytes),
        value: &m.body,
        topic: if name.is_empty() { topic } else { name },
        partition: sp.map_or(0, |p| p.queue_id),
        offset,
        timestamp_us: ts.map(micros),
        properties: &props,
        tag: sp.and_then(|p| p.tag.as_deref()),
        message_group: sp.and_then(|p| p.message_group.as_deref()),
        message_id: sp
            .map(|p| p.message_id.as_str())
            .filter(|id| !id.is_empty()),
        trace_context,
        trace_state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_keys_round_trip() {
        let q = QueueRef {
            broker: "broker-a".into(),
            id: 7,
        };
        assert_eq!(q.key(), "broker-a:7");
        assert_eq!(QueueRef::parse("broker-a:7").unwrap(), q);
        assert_eq!(QueueRef::parse("b:c:0").unwrap().broker, "b:c");
        for bad in ["", "x", ":1", "b:-1", "b:x"] {
            assert!(QueueRef::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rejects_bad_options() {
        let o = ClientOptions::new("127.0.0.1:1");
        assert!(PullReader::new(o.clone(), "", &[], None, 32).is_err());
        assert!(PullReader::new(o.clone(), "g", &[], None, 0).is_err());
        let r = PullReader::new(o, "g", &["t".into()], Some("*".into()), 32).unwrap();
        assert!(r.filter.is_none());
    }

    #[test]
    fn messages_become_rows() {
        let m = proto::Message {
            topic: None,
            user_properties: [("p".to_string(), "q".to_string())].into(),
            system_properties: Some(proto::SystemProperties {
                message_id: "id1".into(),
                tag: Some("t".into()),
                keys: vec!["k1".into(), "k2".into()],
                born_timestamp: Some(timestamp_ms(5)),
                store_timestamp: Some(timestamp_ms(7)),
                queue_id: 2,
                queue_offset: Some(9),
                ..Default::default()
            }),
            body: bytes::Bytes::from_static(b"v"),
        };
        let mut c = MessageColumns::new();
        push_message(&mut c, &m, "orders", 9).unwrap();
        assert_eq!(c.key.data(), b"k1");
        assert_eq!(c.topic.data(), b"orders");
        assert_eq!(c.timestamp_us.values(), &[7000]);
        assert_eq!(c.partition, vec![2]);
        assert_eq!(c.message_id.data(), b"id1");
        assert_eq!(queue_offset(&m), Some(9));
    }
}
