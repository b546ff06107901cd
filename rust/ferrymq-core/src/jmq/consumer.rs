//! The JMQ4 consumer.
//!
//! * **Clustering** (server-balanced): ADD_CONSUMER, then FETCH_TOPIC_MESSAGE with a long poll.
//!   The broker picks the partition and occupies it for this connection until COMMIT_ACK (or
//!   the ack timeout), so ack promptly.
//! * **Coordinator**: FIND_COORDINATOR, then FETCH_ASSIGNED_PARTITION on the coordinator; only
//!   the leaders of the assigned partitions are fetched from (falling back to all leaders when
//!   the coordinator is unavailable, as the Java client does). The assignment is renewed every
//!   third of the session timeout.
//! * **Broadcast**: FETCH_PARTITION_MESSAGE with an index kept by the client, per partition,
//!   starting from the app's ack index. No server-side acks or retries.
//!
//! Messages are decompressed and batches unpacked (inner message `i` has index `outer + i`).
//! COMMIT_ACK carries a retry type; anything but `None` sends the message to the broker's retry
//! queue, from which it comes back on partition 32767.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::client::Connection;
use super::cluster::{Cluster, ClusterOptions, TopicRoute};
use super::codes;
use super::command::{
    AckItem, BrokerMeta, CommitAck, CommitAckIndex, FetchAssignedPartition, FetchIndex,
    FetchPartitionMessage, FetchTopicMessage, FindCoordinator, IndexEntry, PartitionFetch,
    RetryType,
};
use super::compress::MAX_DECOMPRESSED;
pub use super::received::{unpack, AckRef, ReceivedMessage};
use crate::error::{Error, ErrorKind, Result};

/// How partitions are shared among consumers of one app.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConsumeMode {
    /// The broker balances (FETCH_TOPIC_MESSAGE).
    #[default]
    Clustering,
    /// The coordinator assigns partitions, then FETCH_TOPIC_MESSAGE on their leaders.
    Coordinator,
    /// Every consumer reads everything (FETCH_PARTITION_MESSAGE, client-side indices).
    Broadcast,
}

impl ConsumeMode {
    /// Parse a user-facing name.
    pub fn parse(s: &str) -> Result<ConsumeMode> {
        match s.to_ascii_lowercase().as_str() {
            "clustering" | "cluster" | "server" => Ok(ConsumeMode::Clustering),
            "coordinator" => Ok(ConsumeMode::Coordinator),
            "broadcast" | "broadcasting" => Ok(ConsumeMode::Broadcast),
            other => Err(Error::invalid(
                "mode",
                format!("{other:?} is not one of clustering, coordinator, broadcast"),
            )),
        }
    }
}

/// Refuse an ack timeout JMQ4 cannot carry: its wire field is an `i32` of milliseconds, and
/// zero asks the broker for its default, so 1 ms to about 24 days.
pub fn check_ack_timeout(field: &str, d: Duration) -> Result<()> {
    if d < Duration::from_millis(1) || d.as_millis() > i32::MAX as u128 {
        return Err(Error::invalid(field, "must be between 0.001 s and 24 days"));
    }
    Ok(())
}

/// Consumer settings.
#[derive(Debug, Clone)]
pub struct ConsumerOptions {
    /// Topics to consume.
    pub topics: Vec<String>,
    /// Sharing mode.
    pub mode: ConsumeMode,
    /// How long a fetched partition stays occupied without an ack.
    pub ack_timeout: Duration,
    /// Long-poll slice per FETCH_TOPIC_MESSAGE.
    pub long_poll: Duration,
    /// Coordinator session timeout.
    pub session_timeout: Duration,
    /// Broadcast: pause between empty polls.
    pub poll_interval: Duration,
    /// Largest decompressed body.
    pub max_body: usize,
}

impl Default for ConsumerOptions {
    fn default() -> Self {
        ConsumerOptions {
            topics: Vec::new(),
            mode: ConsumeMode::Clustering,
            ack_timeout: Duration::from_secs(30),
            long_poll: Duration::from_secs(5),
            session_timeout: Duration::from_secs(60),
            poll_interval: Duration::from_millis(50),
            max_body: MAX_DECOMPRESSED,
        }
    }
}

#[derive(Default)]
struct Assignment {
    fetched: Option<Instant>,
    partitions: HashMap<String, Vec<i16>>,
    failed: bool,
}

struct Inner {
    cluster: Cluster,
    options: ConsumerOptions,
    cursor: Mutex<usize>,
    /// Broadcast: next index per (topic, partition).
    indices: Mutex<HashMap<(String, i16), i64>>,
    assignment: tokio::sync::Mutex<Assignment>,
}

/// A JMQ4 consumer. Cheap to clone.
#[derive(Clone)]
pub struct JmqConsumer {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JmqConsumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqConsumer")
            .field("topics", &self.inner.options.topics)
            .field("mode", &self.inner.options.mode)
            .finish_non_exhaustive()
    }
}

impl JmqConsumer {
    /// Connect and check that every topic exists and is readable by the app.
    pub async fn connect(cluster: ClusterOptions, options: ConsumerOptions) -> Result<JmqConsumer> {
        if options.topics.is_empty() {
            return Err(Error::invalid("topics", "subscribe to at least one topic"));
        }
        for t in &options.topics {
            crate::message::validate_topic(t)?;
        }
        let cluster = Cluster::connect(cluster).await?;
        let c = JmqConsumer {
            inner: Arc::new(Inner {
                cluster,
                options,
                cursor: Mutex::new(0),
                indices: Mutex::new(HashMap::new()),
                assignment: tokio::sync::Mutex::new(Assignment::default()),
            }),
        };
        if let Err(e) = c.inner.cluster.refresh(&c.inner.options.topics).await {
            c.inner.cluster.close().await;
            return Err(e);
        }
        for t in &c.inner.options.topics {
            let route = c.inner.cluster.route(t).await?;
            if route.meta.consumer_policy.is_none() {
                c.inner.cluster.close().await;
                return Err(codes::error(
                    codes::CN_NO_PERMISSION,
                    format!(
                        "app {:?} has no consumer subscription to topic {t:?}",
                        c.inner.cluster.app()
                    ),
                ));
            }
        }
        Ok(c)
    }

    /// The session.
    pub fn cluster(&self) -> &Cluster {
        &self.inner.cluster
    }

    /// The options.
    pub fn options(&self) -> &ConsumerOptions {
        &self.inner.options
    }

    fn check_open(&self) -> Result<()> {
        if self.inner.cluster.is_closed() {
            Err(Error::closed("the JMQ4 consumer is closed"))
        } else {
            Ok(())
        }
    }

    /// Receive up to `max_messages`, waiting up to `wait` for the first ones.
    pub async fn receive(
        &self,
        max_messages: usize,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        self.receive_with(max_messages, wait, None).await
    }

    /// [`receive`](Self::receive) with the ack timeout of this fetch (how long the partition,
    /// or the retry message, stays occupied without an ack); `None` = the consumer's option.
    /// Broadcast mode has no occupation and ignores it.
    pub async fn receive_with(
        &self,
        max_messages: usize,
        wait: Duration,
        ack_timeout: Option<Duration>,
    ) -> Result<Vec<ReceivedMessage>> {
        self.receive_filtered(None, max_messages, wait, ack_timeout)
            .await
    }

    /// [`receive_with`](Self::receive_with) from one subscribed topic only.
    pub async fn receive_from(
        &self,
        topic: &str,
        max_messages: usize,
        wait: Duration,
        ack_timeout: Option<Duration>,
    ) -> Result<Vec<ReceivedMessage>> {
        if !self.inner.options.topics.iter().any(|t| t == topic) {
            return Err(Error::invalid(
                "topic",
                format!("{topic:?} is not a topic of this consumer"),
            ));
        }
        self.receive_filtered(Some(topic), max_messages, wait, ack_timeout)
            .await
    }

    async fn receive_filtered(
        &self,
        only: Option<&str>,
        max_messages: usize,
        wait: Duration,
        ack_timeout: Option<Duration>,
    ) -> Result<Vec<ReceivedMessage>> {
        self.check_open()?;
        if max_messages == 0 || max_messages > i16::MAX as usize {
            return Err(Error::invalid(
                "max_messages",
                "must be between 1 and 32767",
            ));
        }
        match self.inner.options.mode {
            ConsumeMode::Broadcast => self.receive_broadcast(only, max_messages, wait).await,
            _ => {
                let ack_timeout = ack_timeout.unwrap_or(self.inner.options.ack_timeout);
                self.receive_topic(only, max_messages, wait, ack_timeout)
                    .await
            }
        }
    }

    /// The subscribed topics, or only `only`.
    fn topics<'a>(&'a self, only: Option<&'a str>) -> impl Iterator<Item = &'a String> {
        self.inner
            .options
            .topics
            .iter()
            .filter(move |t| only.is_none_or(|o| o == t.as_str()))
    }

    /// (topic, leader broker) pairs to fetch from.
    async fn targets(&self, only: Option<&str>) -> Result<Vec<(String, BrokerMeta)>> {
        let coordinator = self.inner.options.mode == ConsumeMode::Coordinator;
        let assigned = if coordinator {
            self.assignment().await
        } else {
            None
        };
        let mut out = Vec::new();
        for t in self.topics(only) {
            let route = self.inner.cluster.route(t).await?;
            let leaders: Vec<BrokerMeta> = match assigned.as_ref().and_then(|a| a.get(t)) {
                Some(parts) => {
                    let mut v: Vec<BrokerMeta> = route
                        .meta
                        .partition_groups
                        .iter()
                        .filter(|g| g.partitions.iter().any(|p| parts.contains(p)))
                        .filter_map(|g| route.leader(g).cloned())
                        .collect();
                    v.sort_by_key(|b| b.id);
                    v.dedup_by_key(|b| b.id);
                    v
                }
                None => route.leaders(),
            };
            let leaders = self.prefer_nearby(&route, leaders);
            out.extend(leaders.into_iter().map(|b| (t.clone(), b)));
        }
        Ok(out)
    }

    fn prefer_nearby(&self, route: &TopicRoute, leaders: Vec<BrokerMeta>) -> Vec<BrokerMeta> {
        if self.inner.cluster.nearby_first(route, false)
            && leaders.iter().any(|b| b.nearby)
            && leaders.iter().any(|b| !b.nearby)
        {
            // Nearby leaders first; the others are still read so no partition starves.
            let (mut near, far): (Vec<_>, Vec<_>) = leaders.into_iter().partition(|b| b.nearby);
            near.extend(far);
            near
        } else {
            leaders
        }
    }

    /// The coordinator's assignment, renewed every third of the session timeout. `None` when
    /// the coordinator is unavailable (then every leader is read).
    async fn assignment(&self) -> Option<HashMap<String, Vec<i16>>> {
        let mut a = self.inner.assignment.lock().await;
        let renew = self.inner.options.session_timeout / 3;
        if let Some(at) = a.fetched {
            if at.elapsed() < renew {
                return (!a.failed).then(|| a.partitions.clone());
            }
        }
        a.fetched = Some(Instant::now());
        match self.fetch_assignment().await {
            Ok(p) => {
                a.partitions = p;
                a.failed = false;
                Some(a.partitions.clone())
            }
            Err(e) => {
                tracing::debug!(target: "ferrymq::jmq", "coordinator unavailable, reading every leader: {e}");
                a.failed = true;
                None
            }
        }
    }

    /// FIND_COORDINATOR, then FETCH_ASSIGNED_PARTITION on the coordinator.
    pub async fn fetch_assignment(&self) -> Result<HashMap<String, Vec<i16>>> {
        let cluster = &self.inner.cluster;
        let topics = self.inner.options.topics.clone();
        let conn = cluster.any_connection().await?;
        let found = conn
            .call(&FindCoordinator {
                topics: topics.clone(),
                app: cluster.app().to_string(),
            })
            .await?;
        let entry = found
            .coordinators
            .into_iter()
            .next()
            .ok_or_else(|| Error::protocol("FIND_COORDINATOR answered no coordinator entry"))?;
        codes::check(entry.code, || "find the coordinator".to_string())?;
        let Some(broker) = entry.broker else {
            return Err(codes::error(
                codes::FW_COORDINATOR_NOT_AVAILABLE,
                "no coordinator",
            ));
        };
        let coord = cluster.broker_connection(&broker).await?;
        let session =
            i32::try_from(self.inner.options.session_timeout.as_millis()).unwrap_or(i32::MAX);
        let resp = coord
            .call(&FetchAssignedPartition {
                topics: topics.iter().map(|t| (t.clone(), session, true)).collect(),
                app: cluster.app().to_string(),
            })
            .await?;
        let mut out = HashMap::new();
        for (t, parts, code) in resp.data {
            codes::check(code, || format!("assignment of topic {t:?}"))?;
            out.insert(t, parts);
        }
        Ok(out)
    }

    async fn fetch_from(
        &self,
        topic: &str,
        broker: &BrokerMeta,
        count: usize,
        long_poll: Duration,
        ack_timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        let cluster = &self.inner.cluster;
        let conn = cluster.broker_connection(broker).await?;
        conn.ensure_consumer(&[topic]).await?;
        let lp = i32::try_from(long_poll.as_millis()).unwrap_or(i32::MAX);
        let req = FetchTopicMessage {
            topics: vec![(topic.to_string(), count as i16)],
            app: cluster.app().to_string(),
            ack_timeout: i32::try_from(ack_timeout.as_millis()).unwrap_or(i32::MAX),
            long_poll_timeout: lp,
        };
        // The read deadline must exceed the long poll (the Java client waits twice as long).
        let deadline = cluster.options().connect.request_timeout + long_poll * 2;
        let resp = conn.call_timeout(&req, deadline).await?;
        let mut out = Vec::new();
        for t in resp.data {
            if t.code != codes::SUCCESS {
                cluster.on_code(&t.topic, t.code);
                if t.code == codes::FW_CONSUMER_NOT_EXISTS {
                    conn.forget_consumer(&t.topic).await;
                }
                return Err(codes::error(
                    t.code,
                    format!("fetch from topic {:?} on broker {}", t.topic, broker.id),
                ));
            }
            for m in &t.messages {
                out.extend(unpack(&t.topic, broker.id, m, self.inner.options.max_body)?);
            }
        }
        Ok(out)
    }

    async fn receive_topic(
        &self,
        only: Option<&str>,
        max: usize,
        wait: Duration,
        ack_timeout: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        let deadline = crate::duration::deadline(Instant::now(), wait);
        let mut first_pass = true;
        loop {
            let targets = self.targets(only).await?;
            let n = targets.len();
            if n == 0 {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(Vec::new());
                }
                tokio::time::sleep(left.min(self.inner.options.poll_interval * 4)).await;
                continue;
            }
            let start = {
                let mut c = self.inner.cursor.lock();
                let s = *c;
                *c = c.wrapping_add(1);
                s
            };
            // A quick pass over every (topic, leader) first, then long polls in turn.
            for k in 0..n {
                let (topic, broker) = &targets[(start + k) % n];
                let left = deadline.saturating_duration_since(Instant::now());
                let long_poll = if first_pass {
                    Duration::ZERO
                } else {
                    let slice = (wait / n as u32).max(Duration::from_millis(100));
                    left.min(slice).min(self.inner.options.long_poll)
                };
                if !first_pass && long_poll < Duration::from_millis(1) {
                    return Ok(Vec::new());
                }
                match self
                    .fetch_from(topic, broker, max, long_poll, ack_timeout)
                    .await
                {
                    Ok(msgs) if !msgs.is_empty() => return Ok(msgs),
                    Ok(_) => {}
                    Err(e) => {
                        let retry = match e.status() {
                            Some(s) => {
                                codes::refreshes_metadata(s.code)
                                    || s.code == codes::FW_CONSUMER_NOT_EXISTS
                            }
                            None => matches!(e.kind(), ErrorKind::Connection),
                        };
                        if !retry || Instant::now() >= deadline {
                            return Err(e);
                        }
                        if e.kind() == ErrorKind::Connection {
                            self.inner.cluster.mark_failing(broker.id);
                            self.inner.cluster.invalidate(topic);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
            }
            if Instant::now() >= deadline {
                return Ok(Vec::new());
            }
            first_pass = false;
        }
    }

    async fn receive_broadcast(
        &self,
        only: Option<&str>,
        max: usize,
        wait: Duration,
    ) -> Result<Vec<ReceivedMessage>> {
        let deadline = crate::duration::deadline(Instant::now(), wait);
        loop {
            for t in self.topics(only) {
                let route = self.inner.cluster.route(t).await?;
                for g in &route.meta.partition_groups {
                    let Some(b) = route.leader(g) else { continue };
                    let parts: Vec<PartitionFetch> = {
                        let idx = self.inner.indices.lock();
                        g.partitions
                            .iter()
                            .map(|p| PartitionFetch {
                                partition: *p,
                                count: max as i32,
                                index: idx.get(&(t.clone(), *p)).copied().unwrap_or(-1),
                            })
                            .collect()
                    };
                    let got = self.fetch_partitions(t, b, parts, max).await?;
                    if !got.is_empty() {
                        return Ok(got);
                    }
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            tokio::time::sleep(left.min(self.inner.options.poll_interval)).await;
        }
    }

    async fn fetch_partitions(
        &self,
        topic: &str,
        broker: &BrokerMeta,
        parts: Vec<PartitionFetch>,
        max: usize,
    ) -> Result<Vec<ReceivedMessage>> {
        let cluster = &self.inner.cluster;
        let conn = cluster.broker_connection(broker).await?;
        let resp = conn
            .call(&FetchPartitionMessage {
                topics: vec![(topic.to_string(), parts)],
                app: cluster.app().to_string(),
            })
            .await?;
        let mut out = Vec::new();
        for (t, parts) in resp.data {
            for p in parts {
                if p.code == codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE {
                    self.inner.indices.lock().remove(&(t.clone(), p.partition));
                    continue;
                }
                if p.code != codes::SUCCESS {
                    cluster.on_code(&t, p.code);
                    return Err(codes::error(
                        p.code,
                        format!("fetch partition {} of topic {t:?}", p.partition),
                    ));
                }
                for m in &p.messages {
                    let msgs = unpack(&t, broker.id, m, self.inner.options.max_body)?;
                    if let Some(last) = msgs.last() {
                        let mut idx = self.inner.indices.lock();
                        let next = idx.entry((t.clone(), p.partition)).or_insert(0);
                        *next = (*next).max(last.index + 1);
                    }
                    out.extend(msgs);
                }
                if out.len() >= max {
                    break;
                }
            }
        }
        Ok(out)
    }

    /// Acknowledge messages (COMMIT_ACK with retry type `None`).
    pub async fn ack(&self, messages: &[ReceivedMessage]) -> Result<()> {
        self.settle(messages, &[], RetryType::Exception).await
    }

    /// Negative acknowledgement: COMMIT_ACK with a retry type, so the broker redelivers the
    /// messages from its retry queue.
    pub async fn nack(&self, messages: &[ReceivedMessage], retry: RetryType) -> Result<()> {
        self.settle(&[], messages, retry).await
    }

    /// Settle the messages of one fetch in a single COMMIT_ACK: `acked` consumed, `nacked` to
    /// the retry queue with `retry`. An ack releases the partition's occupation, so acking part
    /// of a fetch in one request and the rest in another lets a concurrent fetch deliver the
    /// unsettled rest again; this avoids that.
    pub async fn settle(
        &self,
        acked: &[ReceivedMessage],
        nacked: &[ReceivedMessage],
        retry: RetryType,
    ) -> Result<()> {
        if retry == RetryType::None && !nacked.is_empty() {
            return Err(Error::invalid(
                "retry_type",
                "a nack needs a retry type other than none",
            ));
        }
        let items: Vec<(AckRef, RetryType)> = acked
            .iter()
            .map(|m| (m.ack_ref(), RetryType::None))
            .chain(nacked.iter().map(|m| (m.ack_ref(), retry)))
            .collect();
        self.commit(&items).await
    }

    /// One COMMIT_ACK per broker for `items`: retry type `None` acknowledges, any other sends
    /// the message to the retry queue. Broadcast mode has nothing to acknowledge.
    pub async fn commit(&self, items: &[(AckRef, RetryType)]) -> Result<()> {
        self.check_open()?;
        if items.is_empty() || self.inner.options.mode == ConsumeMode::Broadcast {
            // Broadcast keeps its position on the client; there is nothing to ack.
            return Ok(());
        }
        let cluster = &self.inner.cluster;
        // Group by broker → topic → partition.
        let mut by_broker: BTreeMap<i32, BTreeMap<&str, BTreeMap<i16, Vec<AckItem>>>> =
            BTreeMap::new();
        for (m, retry) in items {
            by_broker
                .entry(m.broker_id)
                .or_default()
                .entry(m.topic.as_str())
                .or_default()
                .entry(m.partition)
                .or_default()
                .push(AckItem {
                    partition: m.partition,
                    index: m.index,
                    retry_type: *retry,
                });
        }
        for (broker_id, topics) in by_broker {
            let first = topics.keys().next().map(|t| (*t).to_string());
            let conn = self.connection_for(broker_id, first.as_ref()).await?;
            let req = CommitAck {
                topics: topics
                    .into_iter()
                    .map(|(t, parts)| (t.to_string(), parts.into_iter().collect()))
                    .collect(),
                app: cluster.app().to_string(),
            };
            let resp = conn.call(&req).await?;
            for (t, parts) in resp.data {
                for (p, code) in parts {
                    if code != codes::SUCCESS {
                        cluster.on_code(&t, code);
                        return Err(codes::error(
                            code,
                            format!("ack partition {p} of topic {t:?}"),
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    async fn connection_for(&self, broker_id: i32, topic: Option<&String>) -> Result<Connection> {
        let cluster = &self.inner.cluster;
        let topics: Vec<&String> = match topic {
            Some(t) => vec![t],
            None => self.inner.options.topics.iter().collect(),
        };
        for t in topics {
            let route = cluster.route(t).await?;
            if let Some(b) = route.brokers.get(&broker_id) {
                return cluster.broker_connection(b).await;
            }
        }
        Err(Error::invalid(
            "messages",
            format!("broker {broker_id} that served the message is no longer a leader"),
        ))
    }

    async fn leader_of(&self, topic: &str, partition: i16) -> Result<Connection> {
        let cluster = &self.inner.cluster;
        let route = cluster.route(topic).await?;
        let b = route.partition_leader(partition)?.clone();
        cluster.broker_connection(&b).await
    }

    /// FETCH_INDEX: the app's ack index of a partition (with the partition's bounds).
    pub async fn fetch_index(&self, topic: &str, partition: i16) -> Result<IndexEntry> {
        self.check_open()?;
        let conn = self.leader_of(topic, partition).await?;
        let resp = conn
            .call(&FetchIndex {
                topics: vec![(topic.to_string(), vec![partition])],
                app: self.inner.cluster.app().to_string(),
            })
            .await?;
        let e = resp
            .data
            .into_iter()
            .flat_map(|(_, v)| v)
            .find(|e| e.partition == partition)
            .ok_or_else(|| Error::protocol("FETCH_INDEX answered no entry"))?;
        codes::check(e.code, || {
            format!("index of partition {partition} of {topic:?}")
        })?;
        Ok(e)
    }

    /// COMMIT_ACK_INDEX: set the app's ack index of a partition (also the broadcast start).
    pub async fn commit_index(&self, topic: &str, partition: i16, index: i64) -> Result<()> {
        self.check_open()?;
        let conn = self.leader_of(topic, partition).await?;
        let resp = conn
            .call(&CommitAckIndex {
                topics: vec![(topic.to_string(), vec![(partition, index)])],
                app: self.inner.cluster.app().to_string(),
            })
            .await?;
        for (_, parts) in resp.data {
            for (p, code) in parts {
                codes::check(code, || {
                    format!("commit index of partition {p} of {topic:?}")
                })?;
            }
        }
        Ok(())
    }

    /// Broadcast: the next index this consumer will read per (topic, partition).
    pub fn positions(&self) -> HashMap<(String, i16), i64> {
        self.inner.indices.lock().clone()
    }

    /// Broadcast: read `topic`/`partition` from `index` next.
    pub fn seek(&self, topic: &str, partition: i16, index: i64) {
        self.inner
            .indices
            .lock()
            .insert((topic.to_string(), partition), index);
    }

    /// Close (REMOVE_CONSUMER, REMOVE_CONNECTION).
    pub async fn close(&self) {
        self.inner.cluster.close().await;
    }

    /// Whether closed.
    pub fn is_closed(&self) -> bool {
        self.inner.cluster.is_closed()
    }
}
