//! The JMQ4 producer: PRODUCE_MESSAGE (single, batched, multi-topic), QoS, compression above a
//! threshold, partition-group selection by weight, retries on retriable codes to another leader,
//! transactions (PREPARE → PRODUCE with the txId → COMMIT / ROLLBACK) and FETCH_PRODUCE_FEEDBACK
//! compensation through a user callback.
//!
//! Mapping from the shared [`Message`]: the first key is the `businessId`, properties are the
//! attributes (the tag travels as attribute `TAGS`), `priority` is the priority byte, a
//! `message_group` makes the message ordered and picks its partition with Java's string hash.
//! Delayed messages do not exist in JMQ4 and are refused.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::client::Connection;
use super::cluster::{weighted_pick, Cluster, ClusterOptions, TopicRoute};
use super::codec::{now_millis, QosLevel};
use super::codes;
use super::command::{BrokerMeta, Feedback, PartitionGroupMeta, ProduceMessage, ProduceTopic};
use super::compress::{self, Compression};
use super::message::{
    encode_batch, encode_client_ip, encode_properties, java_string_hash, BatchItem, SysCode,
    WireMessage, MAX_BUSINESS_ID,
};
use crate::error::{Error, ErrorKind, Result};
use crate::message::Message;
use crate::metrics::{ClientIdentity, ClientMetrics, Operation, System};

/// The attribute that carries a message's tag.
pub const TAG_ATTRIBUTE: &str = "TAGS";

/// How a feedback callback resolves an expired transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxResolution {
    /// Commit it.
    Commit,
    /// Roll it back.
    Rollback,
    /// Not known yet: ask again later.
    Unknown,
}

/// The compensation callback: given an expired transaction, decide its fate.
pub type TransactionChecker =
    Arc<dyn Fn(Feedback) -> Pin<Box<dyn Future<Output = TxResolution> + Send>> + Send + Sync>;

/// Producer settings.
#[derive(Clone)]
pub struct ProducerOptions {
    /// QoS of PRODUCE_MESSAGE (the header uses ONE_WAY for `OneWay`, RECEIVE otherwise).
    pub qos: QosLevel,
    /// Compression of bodies at or above `compress_threshold` bytes.
    pub compression: Compression,
    /// Smallest body compressed.
    pub compress_threshold: usize,
    /// Attempts per send, the first included.
    pub max_attempts: u32,
    /// Per-request deadline (also sent as the produce timeout).
    pub send_timeout: Duration,
    /// Largest body accepted (the server's default limit is 3 MiB).
    pub max_body: usize,
    /// Transaction timeout sent with PREPARE (the server's default is 10 minutes).
    pub transaction_timeout: Duration,
    /// Period of the FETCH_PRODUCE_FEEDBACK poll when a checker is set.
    pub feedback_interval: Duration,
    /// Compensation callback for expired transactions.
    pub checker: Option<TransactionChecker>,
    /// Topics polled for feedback from the start (topics used in transactions are added).
    pub transaction_topics: Vec<String>,
}

impl std::fmt::Debug for ProducerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProducerOptions")
            .field("qos", &self.qos)
            .field("compression", &self.compression)
            .field("compress_threshold", &self.compress_threshold)
            .field("max_attempts", &self.max_attempts)
            .field("checker", &self.checker.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ProducerOptions {
    fn default() -> Self {
        ProducerOptions {
            qos: QosLevel::Replication,
            compression: Compression::Zlib,
            compress_threshold: compress::DEFAULT_THRESHOLD,
            max_attempts: 3,
            send_timeout: Duration::from_secs(5),
            max_body: super::message::DEFAULT_MAX_BODY,
            transaction_timeout: Duration::from_secs(600),
            feedback_interval: Duration::from_secs(5),
            checker: None,
            transaction_topics: Vec::new(),
        }
    }
}

/// Where a message was stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendReceipt {
    /// Topic.
    pub topic: String,
    /// Partition (-1 for ONE_WAY sends).
    pub partition: i16,
    /// Index in the partition (-1 for ONE_WAY sends and inside transactions).
    pub index: i64,
    /// When the broker started handling it, epoch ms.
    pub start_time: i64,
    /// The broker that stored it.
    pub broker_id: i32,
}

impl SendReceipt {
    /// A message id in the JMQ4 sense: `topic/partition/index`.
    pub fn message_id(&self) -> String {
        format!("{}/{}/{}", self.topic, self.partition, self.index)
    }
}

pub(super) struct Inner {
    pub(super) cluster: Cluster,
    pub(super) options: ProducerOptions,
    pub(super) tx_seq: AtomicI64,
    pub(super) feedback_topics: Mutex<HashSet<String>>,
    pub(super) cancel: CancellationToken,
    pub(super) metrics: ClientMetrics,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.cancel.cancel();
    }
}

/// A JMQ4 producer. Cheap to clone.
#[derive(Clone)]
pub struct JmqProducer {
    pub(super) inner: Arc<Inner>,
}

impl std::fmt::Debug for JmqProducer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqProducer")
            .field("cluster", &self.inner.cluster)
            .finish_non_exhaustive()
    }
}

/// The outcome of one topic entry: its receipts, or the code and the entry to retry.
type EntryResult = std::result::Result<Vec<SendReceipt>, (i32, Box<Entry>)>;

/// One topic entry being sent: the encoded message and the receipts it will produce.
#[derive(Clone)]
pub(super) struct Entry {
    pub(super) topic: String,
    pub(super) wire: WireMessage,
    pub(super) count: usize,
    pub(super) ordered_key: Option<String>,
}

fn to_item(m: &Message, max_body: usize) -> Result<(BatchItem, Option<String>)> {
    if m.delivery_time().is_some() {
        return Err(Error::invalid(
            "delivery_time",
            "JMQ4 has no delayed messages",
        ));
    }
    if m.body().len() > max_body {
        return Err(Error::invalid(
            "body",
            format!(
                "{} bytes, more than the limit of {max_body} bytes",
                m.body().len()
            ),
        ));
    }
    if m.keys().len() > 1 {
        return Err(Error::invalid(
            "keys",
            format!(
                "a JMQ4 message carries one key (its businessId), not {}",
                m.keys().len()
            ),
        ));
    }
    let business_id = m.keys().first().cloned();
    if let Some(b) = &business_id {
        if b.chars().count() > MAX_BUSINESS_ID || b.len() > 127 {
            return Err(Error::invalid(
                "keys",
                format!(
                    "the first key is the JMQ4 businessId: at most {MAX_BUSINESS_ID} characters \
                     and 127 bytes, got {} bytes",
                    b.len()
                ),
            ));
        }
    }
    let priority = match m.priority() {
        None => 0,
        Some(p) => i8::try_from(p).map_err(|_| {
            Error::invalid("priority", format!("{p} does not fit a JMQ4 byte (0-127)"))
        })?,
    };
    let mut props: BTreeMap<String, String> = m.properties().clone();
    if let Some(tag) = m.tag() {
        props.insert(TAG_ATTRIBUTE.to_string(), tag.to_string());
    }
    if let Some(tc) = m.trace_context() {
        props.extend(tc.pairs().map(|(k, v)| (k.to_string(), v.to_string())));
    }
    let attributes = encode_properties(&props);
    if attributes
        .as_ref()
        .is_some_and(|a| a.len() > i16::MAX as usize)
    {
        return Err(Error::invalid(
            "properties",
            "more than 32767 bytes once encoded as JMQ4 attributes",
        ));
    }
    Ok((
        BatchItem {
            priority,
            flag: 0,
            body: m.body().clone(),
            business_id,
            attributes,
        },
        m.message_group().map(str::to_string),
    ))
}

impl JmqProducer {
    /// Connect (bootstrap, ADD_CONNECTION) and start the feedback poller if a checker is set.
    pub async fn connect(cluster: ClusterOptions, options: ProducerOptions) -> Result<JmqProducer> {
        Error::require_count("max_attempts", options.max_attempts)?;
        let cluster = Cluster::connect(cluster).await?;
        Ok(Self::with_cluster(cluster, options))
    }

    /// A producer on an existing session.
    pub fn with_cluster(cluster: Cluster, options: ProducerOptions) -> JmqProducer {
        let topics: HashSet<String> = options.transaction_topics.iter().cloned().collect();
        let has_checker = options.checker.is_some();
        let identity = ClientIdentity::new(System::Jmq, format!("jmq:{}", cluster.app()))
            .with_address(&cluster.options().bootstrap);
        let inner = Arc::new(Inner {
            metrics: ClientMetrics::new(identity),
            cluster,
            options,
            tx_seq: AtomicI64::new(0),
            feedback_topics: Mutex::new(topics),
            cancel: CancellationToken::new(),
        });
        if has_checker {
            tokio::spawn(feedback_loop(Arc::downgrade(&inner), inner.cancel.clone()));
        }
        JmqProducer { inner }
    }

    /// The session.
    pub fn cluster(&self) -> &Cluster {
        &self.inner.cluster
    }

    /// The producer's metrics: one `send` per request sent for the caller (a message, a batch
    /// per topic, a transaction's messages), timed over its retries, which are counted apart;
    /// one `end_transaction` per commit or rollback.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.inner.metrics
    }

    pub(super) fn check_open(&self) -> Result<()> {
        if self.inner.cluster.is_closed() {
            Err(Error::closed("the JMQ4 producer is closed"))
        } else {
            Ok(())
        }
    }

    /// Build the wire message for one or more messages of one topic (a batch MESSAGE when more
    /// than one), compressed when large enough.
    pub(super) fn build_entry(&self, topic: &str, msgs: &[&Message]) -> Result<Entry> {
        let opts = &self.inner.options;
        let mut items = Vec::with_capacity(msgs.len());
        let mut ordered_key = None;
        for m in msgs {
            let (item, key) = to_item(m, opts.max_body)?;
            if ordered_key.is_none() {
                ordered_key = key;
            }
            items.push(item);
        }
        let batch = items.len() > 1;
        if items.len() > i16::MAX as usize {
            return Err(Error::invalid(
                "messages",
                "at most 32767 messages per batch",
            ));
        }
        let (body, flag, priority, business_id, attributes) = if batch {
            let mut b = BytesMut::new();
            encode_batch(&items, &mut b)?;
            (b.freeze(), items.len() as i16, 0, None, None)
        } else {
            let it = items.pop().expect("at least one message");
            (it.body, 0, it.priority, it.business_id, it.attributes)
        };
        let mut sys_code = SysCode {
            ordered: ordered_key.is_some(),
            batch,
            ..SysCode::default()
        };
        let body = if opts.compression != Compression::None && body.len() >= opts.compress_threshold
        {
            let c = compress::compress(opts.compression, &body)?;
            if c.len() < body.len() {
                sys_code.compressed = true;
                sys_code.compression = opts.compression;
                Bytes::from(c)
            } else {
                body
            }
        } else {
            body
        };
        let mut wire = WireMessage {
            partition: -1,
            sys_code,
            priority,
            send_time: now_millis(),
            flag,
            business_id: business_id.or_else(|| ordered_key.clone()),
            attributes,
            app: Some(self.inner.cluster.app().to_string()),
            ..WireMessage::default()
        };
        wire.set_body(body);
        Ok(Entry {
            topic: topic.to_string(),
            wire,
            count: msgs.len(),
            ordered_key,
        })
    }

    /// Choose the partition for an entry, avoiding brokers in `exclude` when possible.
    pub(super) fn choose(
        &self,
        route: &TopicRoute,
        entry: &Entry,
        exclude: &HashSet<i32>,
        within: Option<&PartitionGroupMeta>,
    ) -> Result<(i16, BrokerMeta)> {
        let cluster = &self.inner.cluster;
        if let Some(key) = &entry.ordered_key {
            let parts = match within {
                Some(g) => {
                    let mut p = g.partitions.clone();
                    p.sort_unstable();
                    p
                }
                None => route.partitions(),
            };
            if parts.is_empty() {
                return Err(codes::error(
                    codes::FW_TOPIC_NO_PARTITIONGROUP,
                    format!("topic {:?}", entry.topic),
                ));
            }
            let p = parts[(java_string_hash(key).unsigned_abs() as usize) % parts.len()];
            return Ok((p, route.partition_leader(p)?.clone()));
        }
        let groups: Vec<&PartitionGroupMeta> = match within {
            Some(g) => vec![g],
            None => route.meta.partition_groups.iter().collect(),
        };
        let mut candidates: Vec<(&PartitionGroupMeta, f64, bool)> = groups
            .into_iter()
            .filter(|g| !g.partitions.is_empty())
            .filter_map(|g| {
                let b = route.leader(g)?;
                Some((g, cluster.group_weight(route, g), b.nearby))
            })
            .collect();
        if candidates.is_empty() {
            return Err(codes::error(
                codes::FW_TOPIC_NO_PARTITIONGROUP,
                format!(
                    "topic {:?} has no writable partition group with a known leader",
                    entry.topic
                ),
            ));
        }
        let not_excluded: Vec<_> = candidates
            .iter()
            .filter(|(g, _, _)| !exclude.contains(&g.leader))
            .cloned()
            .collect();
        if !not_excluded.is_empty() {
            candidates = not_excluded;
        }
        if cluster.nearby_first(route, true)
            && candidates.iter().any(|c| c.2)
            && candidates.iter().any(|c| !c.2)
        {
            candidates.retain(|c| c.2);
        }
        let weights: Vec<f64> = candidates.iter().map(|c| c.1).collect();
        let i = weighted_pick(&weights).unwrap_or(0);
        let g = candidates[i].0;
        let p = g.partitions[fastrand::usize(..g.partitions.len())];
        let b = route.leader(g).cloned().expect("filtered on known leaders");
        Ok((p, b))
    }

    pub(super) async fn produce_once(
        &self,
        conn: &Connection,
        entries: Vec<(Entry, i16)>,
        tx_id: Option<&str>,
        broker_id: i32,
    ) -> Result<Vec<EntryResult>> {
        let opts = &self.inner.options;
        let topics: Vec<&str> = entries.iter().map(|(e, _)| e.topic.as_str()).collect();
        conn.ensure_producer(&topics).await?;
        let timeout_ms = i32::try_from(opts.send_timeout.as_millis()).unwrap_or(i32::MAX);
        let req = ProduceMessage {
            topics: entries
                .iter()
                .map(|(e, p)| {
                    let mut w = e.wire.clone();
                    w.partition = *p;
                    w.client_ip = client_ip_of(conn);
                    ProduceTopic {
                        topic: e.topic.clone(),
                        tx_id: tx_id.map(str::to_string),
                        timeout: timeout_ms,
                        qos: opts.qos as u8,
                        messages: vec![w],
                    }
                })
                .collect(),
            app: self.inner.cluster.app().to_string(),
        };
        if opts.qos == QosLevel::OneWay {
            conn.send_oneway(&req).await?;
            return Ok(entries
                .into_iter()
                .map(|(e, _)| {
                    Ok((0..e.count)
                        .map(|_| SendReceipt {
                            topic: e.topic.clone(),
                            partition: -1,
                            index: -1,
                            start_time: -1,
                            broker_id,
                        })
                        .collect())
                })
                .collect());
        }
        let resp = conn.call_timeout(&req, opts.send_timeout).await?;
        if resp.data.len() != entries.len() {
            return Err(Error::protocol(format!(
                "PRODUCE_MESSAGE answered {} topic results for {} entries",
                resp.data.len(),
                entries.len()
            )));
        }
        Ok(entries
            .into_iter()
            .zip(resp.data)
            .map(|((e, _), r)| {
                if r.code != codes::SUCCESS {
                    return Err((r.code, Box::new(e)));
                }
                let first = r.items.first().copied().unwrap_or_default();
                Ok((0..e.count)
                    .map(|i| SendReceipt {
                        topic: e.topic.clone(),
                        partition: first.partition,
                        index: if first.index < 0 {
                            -1
                        } else {
                            first.index + i as i64
                        },
                        start_time: first.start_time,
                        broker_id,
                    })
                    .collect())
            })
            .collect())
    }

    /// Send one entry with retries: retriable codes and connection failures go to another
    /// leader after refreshing the route (ordered messages keep their partition).
    async fn send_entry(&self, entry: Entry) -> Result<Vec<SendReceipt>> {
        let cluster = &self.inner.cluster;
        let attempts = self.inner.options.max_attempts;
        let mut exclude = HashSet::new();
        let mut last: Option<Error> = None;
        for attempt in 0..attempts {
            if attempt > 0 {
                self.inner.metrics.retried(Operation::Send, 1);
                tokio::time::sleep(Duration::from_millis(20 * u64::from(attempt))).await;
            }
            let route = cluster.route(&entry.topic).await?;
            let (partition, broker) = self.choose(&route, &entry, &exclude, None)?;
            let conn = match cluster.broker_connection(&broker).await {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Closed => return Err(e),
                Err(e) => {
                    cluster.mark_failing(broker.id);
                    cluster.invalidate(&entry.topic);
                    exclude.insert(broker.id);
                    last = Some(e);
                    continue;
                }
            };
            match self
                .produce_once(&conn, vec![(entry.clone(), partition)], None, broker.id)
                .await
            {
                Ok(mut results) => match results.pop().expect("one entry") {
                    Ok(r) => return Ok(r),
                    Err((code, _)) => {
                        cluster.on_code(&entry.topic, code);
                        let e = codes::error(
                            code,
                            format!("produce to topic {:?} on broker {}", entry.topic, broker.id),
                        );
                        if !codes::is_retriable(code) {
                            return Err(e);
                        }
                        exclude.insert(broker.id);
                        last = Some(e);
                    }
                },
                Err(e) => {
                    if let Some(s) = e.status() {
                        cluster.on_code(&entry.topic, s.code);
                    }
                    if !e.is_retriable() {
                        return Err(e);
                    }
                    if matches!(e.kind(), ErrorKind::Connection | ErrorKind::Timeout) {
                        cluster.mark_failing(broker.id);
                    }
                    exclude.insert(broker.id);
                    last = Some(e);
                }
            }
        }
        Err(last
            .unwrap_or_else(|| Error::internal("no attempt made"))
            .context(format!("after {attempts} attempts")))
    }

    /// Send one message.
    pub async fn send(&self, message: &Message) -> Result<SendReceipt> {
        self.check_open()?;
        let entry = self.build_entry(message.topic(), &[message])?;
        let op = self.inner.metrics.begin(Operation::Send);
        let r = self.send_entry(entry).await;
        op.finish(message.topic(), 1, r.as_ref().map(drop));
        r?.pop().ok_or_else(|| Error::internal("no receipt"))
    }

    /// Send several messages in one PRODUCE_MESSAGE per leader: the messages of each topic go
    /// as one batch MESSAGE (one partition, consecutive indices), several topics as several
    /// topic entries. Receipts come back in input order.
    ///
    /// Recorded as one `send` per topic of the batch, carrying that topic's messages.
    pub async fn send_batch(&self, messages: &[Message]) -> Result<Vec<SendReceipt>> {
        self.check_open()?;
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let op = self.inner.metrics.begin(Operation::Send);
        let started = std::time::Instant::now();
        let r = self.send_batch_grouped(messages).await;
        let elapsed = started.elapsed();
        let mut counts: Vec<(&str, u64)> = Vec::new();
        for m in messages {
            match counts.iter_mut().find(|(t, _)| *t == m.topic()) {
                Some((_, n)) => *n += 1,
                None => counts.push((m.topic(), 1)),
            }
        }
        for (topic, n) in counts {
            self.inner
                .metrics
                .record(Operation::Send, topic, n, elapsed, r.as_ref().map(drop));
        }
        drop(op);
        r
    }

    async fn send_batch_grouped(&self, messages: &[Message]) -> Result<Vec<SendReceipt>> {
        // Group by topic, keeping the first-seen order and each message's position.
        let mut order: Vec<String> = Vec::new();
        let mut by_topic: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (i, m) in messages.iter().enumerate() {
            let e = by_topic.entry(m.topic().to_string()).or_default();
            if e.is_empty() {
                order.push(m.topic().to_string());
            }
            e.push(i);
        }
        let mut entries = Vec::with_capacity(order.len());
        for t in &order {
            let idx = &by_topic[t];
            let msgs: Vec<&Message> = idx.iter().map(|i| &messages[*i]).collect();
            let mut e = self.build_entry(t, &msgs)?;
            // A batch goes to one partition: ordering keys of later messages are ignored.
            e.ordered_key = msgs
                .iter()
                .find_map(|m| m.message_group().map(str::to_string));
            entries.push(e);
        }
        // First attempt: one request per leader broker with every topic it leads.
        let cluster = &self.inner.cluster;
        let mut per_broker: BTreeMap<i32, (BrokerMeta, Vec<(Entry, i16)>)> = BTreeMap::new();
        for e in &entries {
            let route = cluster.route(&e.topic).await?;
            let (p, b) = self.choose(&route, e, &HashSet::new(), None)?;
            per_broker
                .entry(b.id)
                .or_insert_with(|| (b.clone(), Vec::new()))
                .1
                .push((e.clone(), p));
        }
        let mut done: BTreeMap<String, Vec<SendReceipt>> = BTreeMap::new();
        let mut retry: Vec<Entry> = Vec::new();
        for (_, (broker, list)) in per_broker {
            let conn = match cluster.broker_connection(&broker).await {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Closed => return Err(e),
                Err(_) => {
                    cluster.mark_failing(broker.id);
                    retry.extend(list.into_iter().map(|(e, _)| e));
                    continue;
                }
            };
            match self
                .produce_once(&conn, list.clone(), None, broker.id)
                .await
            {
                Ok(results) => {
                    for r in results {
                        match r {
                            Ok(receipts) => {
                                if let Some(f) = receipts.first() {
                                    done.insert(f.topic.clone(), receipts);
                                }
                            }
                            Err((code, e)) => {
                                cluster.on_code(&e.topic, code);
                                if !codes::is_retriable(code) {
                                    return Err(codes::error(
                                        code,
                                        format!("produce to topic {:?}", e.topic),
                                    ));
                                }
                                retry.push(*e);
                            }
                        }
                    }
                }
                Err(e) if e.is_retriable() && self.inner.options.max_attempts > 1 => {
                    retry.extend(list.into_iter().map(|(e, _)| e));
                }
                Err(e) => return Err(e),
            }
        }
        self.inner
            .metrics
            .retried(Operation::Send, retry.len() as u64);
        for e in retry {
            let topic = e.topic.clone();
            let receipts = self.send_entry(e).await?;
            done.insert(topic, receipts);
        }
        let mut out = vec![None; messages.len()];
        for t in &order {
            let receipts = done
                .remove(t)
                .ok_or_else(|| Error::internal(format!("no result for topic {t}")))?;
            for (pos, r) in by_topic[t].iter().zip(receipts) {
                out[*pos] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.ok_or_else(|| Error::internal("missing receipt")))
            .collect()
    }

    /// Stop background work and close every connection (REMOVE_PRODUCER, REMOVE_CONNECTION).
    pub async fn close(&self) {
        self.inner.cancel.cancel();
        self.inner.cluster.close().await;
    }

    /// Whether the producer is closed.
    pub fn is_closed(&self) -> bool {
        self.inner.cluster.is_closed()
    }
}

/// The 16-byte client IP field for a connection (exposed for tools).
pub fn client_ip_of(conn: &Connection) -> [u8; 16] {
    encode_client_ip(conn.local_addr()).0
}

async fn feedback_loop(inner: std::sync::Weak<Inner>, cancel: CancellationToken) {
    let every = match inner.upgrade() {
        Some(i) => i.options.feedback_interval.max(Duration::from_millis(50)),
        None => return,
    };
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tokio::select! {
            () = cancel.cancelled() => return,
            _ = tick.tick() => {}
        }
        let Some(i) = inner.upgrade() else { return };
        let topics: Vec<String> = i.feedback_topics.lock().iter().cloned().collect();
        let p = JmqProducer { inner: i };
        for t in topics {
            if let Err(e) = p.resolve_feedback(&t).await {
                tracing::debug!(target: "ferrymq::jmq", "transaction feedback for {t} failed: {e}");
            }
        }
    }
}
