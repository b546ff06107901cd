//! Replayable reads of JMQ4 partitions by index: the JMQ4 half of the PySpark source.
//!
//! A partition is one total order of indices (a batch message takes one index per item), so a
//! Spark offset is a partition index (the next one to read). [`JmqRangeReader::bounds`] asks
//! FETCH_INDEX for the readable range (`leftIndex`, `rightIndex`, header version ≥ 3), and
//! [`JmqRangeReader::read_range`] returns exactly the messages with `start <= index < end`
//! however often it is called, as Arrow columns, through FETCH_PARTITION_MESSAGE with a
//! client-managed index (no ADD_CONSUMER, no ack state touched on the broker).

use std::collections::BTreeMap;
use std::time::Duration;

use super::cluster::{Cluster, ClusterOptions};
use super::codes;
use super::command::{FetchIndex, FetchPartitionMessage, PartitionFetch};
use super::received::{unpack, ReceivedMessage};
use crate::columnar::{MessageColumns, RangeCursor, RangeRead, Row};
use crate::error::{Error, Result};
use crate::range::RangeSource;

/// The property carrying the row's key written by the Spark sink (the `businessId` holds the
/// deterministic write id).
pub const KEY_PROPERTY: &str = "ferrymq-key";

/// Most messages asked for in one FETCH_PARTITION_MESSAGE.
const FETCH_MAX: usize = 1000;
/// Empty answers tolerated below `end` before the read fails (the broker said the range holds
/// messages, so an empty answer is a transient state such as a leader change).
const MAX_EMPTY_FETCHES: u32 = 5;
/// Pause after an empty answer or a routing error.
const RETRY_PAUSE: Duration = Duration::from_millis(100);

/// The readable range of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBounds {
    /// Partition.
    pub partition: i16,
    /// Smallest index still stored.
    pub left: i64,
    /// Next index to be written.
    pub right: i64,
}

/// Reads index ranges of JMQ4 partitions (a cluster session of one app). Cheap to clone.
#[derive(Clone)]
pub struct JmqRangeReader {
    cluster: Cluster,
    max_body: usize,
}

impl std::fmt::Debug for JmqRangeReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqRangeReader")
            .field("cluster", &self.cluster)
            .finish_non_exhaustive()
    }
}

impl JmqRangeReader {
    /// Connect to the bootstrap broker (failing fast on a wrong address, app or token).
    pub async fn connect(options: ClusterOptions, max_body: usize) -> Result<JmqRangeReader> {
        Ok(JmqRangeReader {
            cluster: Cluster::connect(options).await?,
            max_body,
        })
    }

    /// The cluster session.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Every partition of `topic`, sorted (FETCH_CLUSTER, cached).
    pub async fn partitions(&self, topic: &str) -> Result<Vec<i16>> {
        Ok(self.cluster.route(topic).await?.partitions())
    }

    /// `(leftIndex, rightIndex)` of `partitions` of `topic` (every partition when empty): one
    /// FETCH_INDEX per leader broker.
    pub async fn bounds(&self, topic: &str, partitions: &[i16]) -> Result<Vec<PartitionBounds>> {
        let mut attempt = 0;
        loop {
            match self.bounds_once(topic, partitions).await {
                Err(e) if attempt == 0 && is_routing(&e) => {
                    attempt += 1;
                    self.cluster.invalidate(topic);
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
                r => return r,
            }
        }
    }

    async fn bounds_once(&self, topic: &str, partitions: &[i16]) -> Result<Vec<PartitionBounds>> {
        let route = self.cluster.route(topic).await?;
        let wanted: Vec<i16> = if partitions.is_empty() {
            route.partitions()
        } else {
            partitions.to_vec()
        };
        let mut by_leader: BTreeMap<i32, (super::command::BrokerMeta, Vec<i16>)> = BTreeMap::new();
        for &p in &wanted {
            let b = route.partition_leader(p)?;
            by_leader
                .entry(b.id)
                .or_insert_with(|| (b.clone(), Vec::new()))
                .1
                .push(p);
        }
        let mut out = Vec::with_capacity(wanted.len());
        for (_, (broker, parts)) in by_leader {
            let conn = self.cluster.broker_connection(&broker).await?;
            let resp = conn
                .call(&FetchIndex {
                    topics: vec![(topic.to_string(), parts.clone())],
                    app: self.cluster.app().to_string(),
                })
                .await?;
            let entries: Vec<_> = resp.data.into_iter().flat_map(|(_, v)| v).collect();
            for p in parts {
                let e = entries.iter().find(|e| e.partition == p).ok_or_else(|| {
                    Error::protocol(format!("FETCH_INDEX answered no entry for partition {p}"))
                })?;
                if e.code != codes::SUCCESS {
                    self.cluster.on_code(topic, e.code);
                    return Err(codes::error(
                        e.code,
                        format!("index of partition {p} of {topic:?}"),
                    ));
                }
                if e.left_index < 0 || e.right_index < e.left_index {
                    return Err(Error::protocol(format!(
                        "FETCH_INDEX of partition {p} of {topic:?} answered no valid range \
                         [{}, {}) (a broker before JoyQueue 4.2 has no leftIndex/rightIndex)",
                        e.left_index, e.right_index
                    )));
                }
                out.push(PartitionBounds {
                    partition: p,
                    left: e.left_index,
                    right: e.right_index,
                });
            }
        }
        out.sort_by_key(|b| b.partition);
        Ok(out)
    }

    /// Every message of `topic`/`partition` with `start <= index < end`, at most `max_rows` of
    /// them (continue from [`RangeRead::next_offset`]). An index below the partition's
    /// left index fails with `FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE` (184).
    pub async fn read_range(
        &self,
        topic: &str,
        partition: i16,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> Result<RangeRead> {
        let mut cursor = RangeCursor::new(start, end, 0, max_rows)?;
        let mut routing_errors = 0u32;
        while cursor.wants_more() {
            let at = cursor.at();
            let batch = match self
                .fetch(topic, partition, at, cursor.want(FETCH_MAX))
                .await
            {
                Ok(b) => b,
                Err(e) if routing_errors < 2 && is_routing(&e) => {
                    routing_errors += 1;
                    self.cluster.invalidate(topic);
                    tokio::time::sleep(RETRY_PAUSE).await;
                    continue;
                }
                Err(e) => return Err(e),
            };
            // The rest of a batch message that starts before `at` is skipped.
            for m in &batch {
                if cursor.wants(m.index) {
                    cursor.take(m.index, |c| push_jmq(c, m))?;
                }
            }
            if cursor.at() > at {
                continue;
            }
            if batch.last().is_some_and(|m| m.index >= end) {
                // Only indices at or past `end` remain.
                cursor.finish();
                break;
            }
            cursor.nothing_new(MAX_EMPTY_FETCHES, |at, end| {
                format!("partition {partition} of {topic:?}: no message at index {at} below {end}")
            })?;
            tokio::time::sleep(RETRY_PAUSE).await;
        }
        Ok(cursor.into_read())
    }

    /// One FETCH_PARTITION_MESSAGE from the partition's leader, unpacked.
    async fn fetch(
        &self,
        topic: &str,
        partition: i16,
        index: i64,
        count: usize,
    ) -> Result<Vec<ReceivedMessage>> {
        let route = self.cluster.route(topic).await?;
        let broker = route.partition_leader(partition)?.clone();
        let conn = self.cluster.broker_connection(&broker).await?;
        let resp = conn
            .call(&FetchPartitionMessage {
                topics: vec![(
                    topic.to_string(),
                    vec![PartitionFetch {
                        partition,
                        count: i32::try_from(count).unwrap_or(i32::MAX),
                        index,
                    }],
                )],
                app: self.cluster.app().to_string(),
            })
            .await?;
        let mut out = Vec::new();
        for (t, parts) in resp.data {
            for p in parts {
                if p.partition != partition {
                    continue;
                }
                if p.code != codes::SUCCESS {
                    self.cluster.on_code(&t, p.code);
                    return Err(codes::error(
                        p.code,
                        format!("fetch index {index} of partition {partition} of {t:?}"),
                    ));
                }
                for m in &p.messages {
                    out.extend(unpack(&t, broker.id, m, self.max_body)?);
                }
            }
        }
        out.sort_by_key(|m| m.index);
        Ok(out)
    }

    /// Close the session (REMOVE_CONNECTION).
    pub async fn close(&self) {
        self.cluster.close().await;
    }
}

/// The partition number a partition name stands for.
fn partition_number(topic: &str, partition: &str) -> Result<i16> {
    partition.parse().map_err(|_| {
        Error::invalid(
            "offsets",
            format!("{topic}/{partition} is not a JMQ4 partition number"),
        )
    })
}

impl JmqRangeReader {
    /// The `(left, right)` index range of one partition.
    async fn partition_bounds(&self, topic: &str, partition: &str) -> Result<(i64, i64)> {
        let p = partition_number(topic, partition)?;
        let b = self.bounds(topic, &[p]).await?;
        let b = b.first().ok_or_else(|| {
            Error::protocol(format!("FETCH_INDEX answered no entry for partition {p}"))
        })?;
        Ok((b.left, b.right))
    }
}

/// Partitions are partition numbers; the bounds of every partition come in one FETCH_INDEX
/// per leader; nothing is committed (the app's ack index would move its other consumers).
impl RangeSource for JmqRangeReader {
    fn protocol(&self) -> &'static str {
        "jmq"
    }

    async fn partitions(&self, topic: &str) -> Result<Vec<String>> {
        let parts = JmqRangeReader::partitions(self, topic).await?;
        Ok(parts.iter().map(i16::to_string).collect())
    }

    async fn earliest(&self, topic: &str, partition: &str) -> Result<i64> {
        Ok(self.partition_bounds(topic, partition).await?.0)
    }

    async fn latest(&self, topic: &str, partition: &str) -> Result<i64> {
        Ok(self.partition_bounds(topic, partition).await?.1)
    }

    async fn snapshot(&self, topic: &str, latest: bool) -> Result<Vec<(String, i64)>> {
        let bounds = self.bounds(topic, &[]).await?;
        Ok(bounds
            .iter()
            .map(|b| {
                let offset = if latest { b.right } else { b.left };
                (b.partition.to_string(), offset)
            })
            .collect())
    }

    async fn read(
        &self,
        topic: &str,
        partition: &str,
        start: i64,
        end: i64,
        max_rows: usize,
    ) -> Result<RangeRead> {
        let p = partition_number(topic, partition)?;
        self.read_range(topic, p, start, end, max_rows).await
    }

    async fn close(&self) -> Result<()> {
        JmqRangeReader::close(self).await;
        Ok(())
    }
}

/// Errors after which a fresh route may help (leader moved, partition group gone).
fn is_routing(e: &Error) -> bool {
    e.status().is_some_and(|s| {
        s.protocol == crate::error::Protocol::Jmq && codes::refreshes_metadata(s.code)
    })
}

/// Append a fetched message as row `m.index`.
fn push_jmq(columns: &mut MessageColumns, m: &ReceivedMessage) -> Result<()> {
    let key = m.properties.get(KEY_PROPERTY).map(String::as_bytes);
    // BTreeMap order: the map column comes out sorted by name.
    let mut props: Vec<(&str, &str)> = m
        .properties
        .iter()
        .filter(|(k, _)| k.as_str() != KEY_PROPERTY)
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    let (trace_context, trace_state) = crate::trace_context::take_received(None, &mut props);
    columns.push(&Row {
        key,
        value: &m.body,
        topic: &m.topic,
        partition: i32::from(m.partition),
        offset: m.index,
        timestamp_us: m.send_time.checked_mul(1000),
        properties: &props,
        tag: m.tag.as_deref(),
        message_group: None,
        message_id: m.business_id.as_deref(),
        trace_context,
        trace_state,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jmq::client::ConnectOptions;
    use crate::jmq::producer::{JmqProducer, ProducerOptions};
    use crate::Message;
    use ferrymq_server::jmq::server::{JmqServer, JmqServerConfig, DEFAULT_APP, DEFAULT_TOKEN};

    fn options(s: &JmqServer) -> ClusterOptions {
        let connect = ConnectOptions {
            app: DEFAULT_APP.into(),
            token: DEFAULT_TOKEN.into(),
            request_timeout: Duration::from_secs(5),
            ..ConnectOptions::default()
        };
        ClusterOptions::new(crate::jmq::parse_endpoint(&s.endpoint()).unwrap(), connect)
    }

    fn values(c: &MessageColumns) -> Vec<String> {
        let offs = c.value.offsets();
        let data = c.value.data();
        (0..c.len())
            .map(|i| {
                let (a, b) = (offs[i] as usize, offs[i + 1] as usize);
                String::from_utf8(data[a..b].to_vec()).unwrap()
            })
            .collect()
    }

    /// Two nodes (partition groups led by each in turn), batches and single messages: bounds
    /// come from FETCH_INDEX, and any `[start, end)` (also inside a batch) reads exactly those
    /// indices, in pages of `max_rows`.
    #[tokio::test]
    async fn reads_exact_index_ranges() {
        let s = JmqServer::start(JmqServerConfig {
            nodes: 2,
            ..JmqServerConfig::default()
        })
        .await
        .unwrap();
        s.create_topic("spark_range", 4).unwrap();
        let p = JmqProducer::connect(options(&s), ProducerOptions::default())
            .await
            .unwrap();
        // Partition 2: a batch of 5 (indices 0..5), then 3 singles (5..8), then a batch of 4.
        let mut n = 0;
        let mut next = |count: usize| -> Vec<Message> {
            (0..count)
                .map(|_| {
                    n += 1;
                    Message::builder("spark_range", format!("m{}", n - 1))
                        .keys([format!("w{}", n - 1)])
                        .property(KEY_PROPERTY, format!("k{}", n - 1))
                        .property("p", "v")
                        .tag("t")
                        .message_group("g")
                        .build()
                        .unwrap()
                })
                .collect()
        };
        // The message group pins every send to one partition.
        p.send_batch(&next(5)).await.unwrap();
        for m in next(3) {
            p.send(&m).await.unwrap();
        }
        p.send_batch(&next(4)).await.unwrap();

        let r = JmqRangeReader::connect(options(&s), 1 << 20).await.unwrap();
        assert_eq!(r.partitions("spark_range").await.unwrap(), vec![0, 1, 2, 3]);
        let bounds = r.bounds("spark_range", &[]).await.unwrap();
        let full: Vec<_> = bounds.iter().filter(|b| b.right > 0).collect();
        assert_eq!(full.len(), 1, "{bounds:?}");
        let part = full[0].partition;
        assert_eq!((full[0].left, full[0].right), (0, 12));

        let all = r.read_range("spark_range", part, 0, 12, 100).await.unwrap();
        assert_eq!(all.next_offset, 12);
        assert_eq!(all.first_offset, Some(0));
        assert_eq!(
            values(&all.columns),
            (0..12).map(|i| format!("m{i}")).collect::<Vec<_>>()
        );
        assert_eq!(all.columns.offset, (0..12).collect::<Vec<i64>>());
        assert!(all.columns.partition.iter().all(|p| *p == i32::from(part)));
        // The key comes from the property, the businessId is the message id.
        assert_eq!(all.columns.key.data(), b"k0k1k2k3k4k5k6k7k8k9k10k11");
        assert_eq!(all.columns.message_id.data(), b"w0w1w2w3w4w5w6w7w8w9w10w11");
        assert_eq!(all.columns.property_keys.data(), "p".repeat(12).as_bytes());

        // Inside batches, across entries, twice (replay gives the same rows).
        for _ in 0..2 {
            let mid = r.read_range("spark_range", part, 3, 10, 100).await.unwrap();
            assert_eq!(mid.columns.offset, (3..10).collect::<Vec<i64>>());
            assert_eq!(mid.next_offset, 10);
        }
        // Pages.
        let mut at = 1;
        let mut got = Vec::new();
        while at < 11 {
            let page = r.read_range("spark_range", part, at, 11, 3).await.unwrap();
            assert!(page.columns.len() <= 3);
            got.extend(page.columns.offset.iter().copied());
            at = page.next_offset;
        }
        assert_eq!(got, (1..11).collect::<Vec<i64>>());
        // Empty ranges and bad input.
        let none = r.read_range("spark_range", part, 12, 12, 10).await.unwrap();
        assert!(none.columns.is_empty());
        assert_eq!(none.next_offset, 12);
        assert!(r.read_range("spark_range", part, 5, 2, 10).await.is_err());
        // Past the right index: the broker's 184.
        let e = r
            .read_range("spark_range", part, 50, 60, 10)
            .await
            .unwrap_err();
        assert_eq!(
            e.status().map(|s| s.code),
            Some(codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE)
        );
        // A partition that does not exist.
        assert!(r.read_range("spark_range", 9, 0, 1, 10).await.is_err());
        r.close().await;
        p.close().await;
    }
}
