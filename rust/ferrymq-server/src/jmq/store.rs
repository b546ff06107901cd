//! The topic store of the embedded JMQ4 server: partitions, per-app ack state, partition
//! occupation, retry queues, transactions, coordinator membership (reference §5 notes, §7, §8).
//!
//! All state sits behind one mutex and no method awaits while holding it; long polling waits on
//! [`JmqStore::changed`] outside the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::codec::now_millis;
use super::codes;
use super::command::{
    topic_type, AckItem, ConsumerPolicy, Feedback, IndexEntry, PartitionGroupMeta, ProduceItem,
    ProducerPolicy, RetryType, TopicMeta,
};
use super::message::{encode_client_ip, java_string_hash, WireMessage, RETRY_PARTITION};
use crate::error::{Error, Result};

/// The admin app: sees every topic (`isSystem`).
pub const ADMIN_APP: &str = "joyqueue";
/// Members that share a partition group before the coordinator balances (§7.5).
pub const COORDINATOR_MIN_CONNECTIONS: usize = 3;

/// A stored message: one entry, `count` consecutive indices (a batch takes `flag` of them).
#[derive(Debug, Clone)]
struct Entry {
    index: i64,
    count: i64,
    msg: WireMessage,
}

#[derive(Debug, Default)]
struct Partition {
    entries: Vec<Entry>,
    next: i64,
}

impl Partition {
    fn append(&mut self, mut msg: WireMessage) -> i64 {
        let count = if msg.sys_code.batch {
            i64::from(msg.flag.max(1))
        } else {
            1
        };
        let index = self.next;
        msg.index = index;
        self.next += count;
        self.entries.push(Entry { index, count, msg });
        index
    }

    /// Position of the entry holding `index`.
    fn position(&self, index: i64) -> usize {
        self.entries.partition_point(|e| e.index + e.count <= index)
    }
}

#[derive(Debug, Clone)]
struct Occupation {
    conn: u64,
    until: Instant,
}

#[derive(Debug, Default)]
struct PartState {
    ack_index: i64,
    acked_above: BTreeSet<i64>,
    occupied: Option<Occupation>,
}

impl PartState {
    fn ack(&mut self, index: i64) {
        if index < self.ack_index {
            return;
        }
        self.acked_above.insert(index);
        while self.acked_above.remove(&self.ack_index) {
            self.ack_index += 1;
        }
    }
}

#[derive(Debug, Clone)]
struct RetryEntry {
    /// First retry index of the entry; a batch entry spans `count` indices (`id..id + count`),
    /// as the client numbers the messages it unpacks from it.
    id: i64,
    count: i64,
    msg: WireMessage,
    due: Instant,
}

#[derive(Debug, Default)]
struct AppState {
    parts: HashMap<i16, PartState>,
    retry: VecDeque<RetryEntry>,
    retry_inflight: BTreeMap<i64, (RetryEntry, Instant)>,
    next_retry_id: i64,
    cursor: usize,
}

#[derive(Debug)]
struct Group {
    id: i32,
    leader: i32,
    partitions: Vec<i16>,
}

#[derive(Debug)]
struct Topic {
    topic_type: i8,
    partitions: HashMap<i16, Partition>,
    groups: Vec<Group>,
    apps: HashMap<String, AppState>,
    members: HashMap<String, HashMap<String, Instant>>,
}

impl Topic {
    /// The partitions of the groups `node` leads.
    fn local(&self, node: i32) -> Vec<i16> {
        self.groups
            .iter()
            .filter(|g| g.leader == node)
            .flat_map(|g| g.partitions.iter().copied())
            .collect()
    }
}

#[derive(Debug)]
struct Tx {
    topic: String,
    app: String,
    transaction_id: Option<String>,
    deadline: Instant,
    timeout: Duration,
    messages: Vec<(i16, WireMessage)>,
    last_feedback: Option<Instant>,
}

/// A subscription override for one (topic, app).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subscription {
    /// May produce.
    pub produce: bool,
    /// May consume.
    pub consume: bool,
}

#[derive(Debug, Default)]
struct State {
    topics: HashMap<String, Topic>,
    apps: HashMap<String, String>,
    subscriptions: HashMap<(String, String), Subscription>,
    txs: HashMap<String, Tx>,
    tx_seq: u64,
    nodes: Vec<i32>,
}

/// Settings of the store.
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// Subscribe every registered app to every topic (producer and consumer) unless overridden.
    pub auto_subscribe: bool,
    /// Delay before a message sent to the retry queue is delivered again.
    pub retry_delay: Duration,
    /// Largest accepted body (`produce.body.length`).
    pub max_body: usize,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            auto_subscribe: true,
            retry_delay: Duration::from_millis(0),
            max_body: super::message::DEFAULT_MAX_BODY,
        }
    }
}

/// Where topics defined elsewhere come from: given a name, the partition count of the topic if
/// it exists there (the embedded RocketMQ broker's topics, whose queues become partitions).
pub type TopicSource = Arc<dyn Fn(&str) -> Option<u16> + Send + Sync>;

/// The store shared by every node of an embedded JMQ4 server.
pub struct JmqStore {
    state: Mutex<State>,
    changed: Notify,
    config: StoreConfig,
    source: parking_lot::RwLock<Option<TopicSource>>,
}

impl std::fmt::Debug for JmqStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqStore")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Where a FETCH_TOPIC_MESSAGE found its messages.
#[derive(Debug, Default)]
pub struct Fetched {
    /// Messages (partition and index set).
    pub messages: Vec<WireMessage>,
    /// Per-topic code.
    pub code: i32,
}

impl Fetched {
    /// No messages, and why.
    pub fn failed(code: i32) -> Fetched {
        Fetched {
            messages: Vec::new(),
            code,
        }
    }
}

impl JmqStore {
    /// A store whose partition groups are led by `nodes` (broker ids) in turn.
    pub fn new(config: StoreConfig, nodes: Vec<i32>) -> Arc<JmqStore> {
        Arc::new(JmqStore {
            state: Mutex::new(State {
                nodes,
                ..State::default()
            }),
            changed: Notify::new(),
            config,
            source: parking_lot::RwLock::new(None),
        })
    }

    /// Learn topics from `source` on first use: a topic unknown here but known there is created
    /// with its partition count. This is how the embedded broker serves the topics made with
    /// `create_topic` over both protocols.
    pub fn set_topic_source(&self, source: TopicSource) {
        *self.source.write() = Some(source);
    }

    fn sync_topic(&self, name: &str) {
        if self.state.lock().topics.contains_key(name) {
            return;
        }
        let source = self.source.read().clone();
        if let Some(n) = source.and_then(|f| f(name)) {
            let _ = self.create_topic(name, n.max(1), false);
        }
    }

    /// Settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    /// Woken whenever messages become visible or partitions are released.
    pub fn changed(&self) -> &Notify {
        &self.changed
    }

    fn wake(&self) {
        self.changed.notify_waiters();
    }

    /// Register an app and its token.
    pub fn add_app(&self, app: &str, token: &str) {
        self.state
            .lock()
            .apps
            .insert(app.to_string(), token.to_string());
    }

    /// Whether `app` exists with `token`.
    pub fn authenticate(&self, app: &str, token: &str) -> bool {
        self.state.lock().apps.get(app).is_some_and(|t| t == token)
    }

    /// Override the subscription of `app` to `topic`.
    pub fn set_subscription(&self, topic: &str, app: &str, sub: Subscription) {
        self.state
            .lock()
            .subscriptions
            .insert((topic.to_string(), app.to_string()), sub);
    }

    /// Create a topic with `partitions` partitions, split into one partition group per node.
    /// Creating an existing topic with the same partition count is a no-op.
    pub fn create_topic(&self, name: &str, partitions: u16, broadcast: bool) -> Result<()> {
        crate::message::validate_topic(name)?;
        if partitions == 0 || partitions >= RETRY_PARTITION as u16 {
            return Err(Error::invalid(
                "partitions",
                format!("{partitions} must be between 1 and 32766"),
            ));
        }
        let mut st = self.state.lock();
        if let Some(t) = st.topics.get(name) {
            if t.partitions.len() == usize::from(partitions) {
                return Ok(());
            }
            return Err(Error::invalid(
                "topic",
                format!("{name:?} exists with {} partitions", t.partitions.len()),
            ));
        }
        let nodes = st.nodes.clone();
        let ngroups = nodes.len().clamp(1, usize::from(partitions));
        let mut groups: Vec<Group> = (0..ngroups)
            .map(|g| Group {
                id: g as i32,
                leader: nodes[g % nodes.len()],
                partitions: Vec::new(),
            })
            .collect();
        for p in 0..partitions {
            groups[usize::from(p) % ngroups].partitions.push(p as i16);
        }
        st.topics.insert(
            name.to_string(),
            Topic {
                topic_type: if broadcast {
                    topic_type::BROADCAST
                } else {
                    topic_type::TOPIC
                },
                partitions: (0..partitions as i16)
                    .map(|p| (p, Partition::default()))
                    .collect(),
                groups,
                apps: HashMap::new(),
                members: HashMap::new(),
            },
        );
        Ok(())
    }

    /// Whether the topic exists.
    pub fn has_topic(&self, name: &str) -> bool {
        self.sync_topic(name);
        self.state.lock().topics.contains_key(name)
    }

    /// Names of all topics.
    pub fn topics(&self) -> Vec<String> {
        let mut v: Vec<String> = self.state.lock().topics.keys().cloned().collect();
        v.sort();
        v
    }

    /// Move the leadership of partition group `group` of `topic` to broker `node`.
    pub fn set_leader(&self, topic: &str, group: i32, node: i32) -> Result<()> {
        let mut st = self.state.lock();
        let t = st
            .topics
            .get_mut(topic)
            .ok_or_else(|| Error::invalid("topic", format!("{topic:?} does not exist")))?;
        let g = t
            .groups
            .iter_mut()
            .find(|g| g.id == group)
            .ok_or_else(|| Error::invalid("group", format!("no partition group {group}")))?;
        g.leader = node;
        Ok(())
    }

    /// Number of messages (indices) stored in `topic`, over all partitions.
    pub fn message_count(&self, topic: &str) -> u64 {
        self.state
            .lock()
            .topics
            .get(topic)
            .map_or(0, |t| t.partitions.values().map(|p| p.next as u64).sum())
    }

    /// The subscription of `app` to `topic` (admin: both).
    pub fn subscription_of(&self, topic: &str, app: &str) -> Subscription {
        let st = self.state.lock();
        self.sub_locked(&st, topic, app)
    }

    /// FETCH_CLUSTER metadata of `topic` for `app` (§5.1), and the leader ids it references.
    pub fn topic_meta(&self, topic: &str, app: &str) -> (TopicMeta, Vec<i32>) {
        self.sync_topic(topic);
        let st = self.state.lock();
        let Some(t) = st.topics.get(topic) else {
            return (
                TopicMeta {
                    topic: topic.to_string(),
                    topic_type: topic_type::TOPIC,
                    code: codes::FW_TOPIC_NOT_EXIST,
                    ..TopicMeta::default()
                },
                Vec::new(),
            );
        };
        let sub = self.sub_locked(&st, topic, app);
        if !sub.produce && !sub.consume {
            return (
                TopicMeta {
                    topic: topic.to_string(),
                    topic_type: t.topic_type,
                    code: codes::CN_NO_PERMISSION,
                    ..TopicMeta::default()
                },
                Vec::new(),
            );
        }
        let mut leaders: Vec<i32> = t.groups.iter().map(|g| g.leader).collect();
        leaders.sort_unstable();
        leaders.dedup();
        let meta = TopicMeta {
            topic: topic.to_string(),
            producer_policy: sub.produce.then(|| ProducerPolicy {
                nearby: false,
                single: false,
                archive: false,
                weights: Vec::new(),
                black_list: Vec::new(),
                timeout: 5000,
            }),
            consumer_policy: sub.consume.then(|| ConsumerPolicy {
                retry: true,
                ack_timeout: 30_000,
                batch_size: 10,
                max_partition_num: -1,
                read_retry_probability: 20,
                err_times: 3,
                ..ConsumerPolicy::default()
            }),
            topic_type: t.topic_type,
            partition_groups: t
                .groups
                .iter()
                .map(|g| PartitionGroupMeta {
                    id: g.id,
                    leader: g.leader,
                    partitions: g.partitions.clone(),
                })
                .collect(),
            code: codes::SUCCESS,
            params: Vec::new(),
        };
        (meta, leaders)
    }

    fn sub_locked(&self, st: &State, topic: &str, app: &str) -> Subscription {
        if app == ADMIN_APP {
            return Subscription {
                produce: true,
                consume: true,
            };
        }
        if let Some(s) = st.subscriptions.get(&(topic.to_string(), app.to_string())) {
            return *s;
        }
        let on = self.config.auto_subscribe && st.apps.contains_key(app);
        Subscription {
            produce: on,
            consume: on,
        }
    }

    /// Check ADD_PRODUCER / ADD_CONSUMER: `Ok` or the code of the BooleanAck.
    pub fn check_subscription(&self, topic: &str, app: &str, produce: bool) -> i32 {
        self.sync_topic(topic);
        let st = self.state.lock();
        let sub = self.sub_locked(&st, topic, app);
        let ok = if produce { sub.produce } else { sub.consume };
        if ok && st.topics.contains_key(topic) {
            codes::SUCCESS
        } else {
            codes::CN_NO_PERMISSION
        }
    }

    /// PRODUCE_MESSAGE for one topic entry on broker `node`.
    #[allow(clippy::too_many_arguments)]
    pub fn produce(
        &self,
        node: i32,
        topic: &str,
        app: &str,
        tx_id: Option<&str>,
        mut messages: Vec<WireMessage>,
        client: Option<std::net::SocketAddr>,
    ) -> (i32, Vec<ProduceItem>) {
        self.sync_topic(topic);
        let start_time = now_millis();
        let fail = |code: i32, n: usize| {
            (
                code,
                vec![
                    ProduceItem {
                        partition: -1,
                        index: -1,
                        start_time: -1,
                    };
                    n
                ],
            )
        };
        let n = messages.len();
        let mut st = self.state.lock();
        if !st.topics.contains_key(topic) {
            return fail(codes::FW_TOPIC_NOT_EXIST, n);
        }
        if !self.sub_locked(&st, topic, app).produce {
            return fail(codes::CN_NO_PERMISSION, n);
        }
        if messages.is_empty() {
            return (codes::SUCCESS, Vec::new());
        }
        let partition = messages[0].partition;
        if messages.iter().any(|m| m.partition != partition) {
            return fail(codes::CN_PARAM_ERROR, n);
        }
        if messages.iter().any(|m| {
            m.body.len() > self.config.max_body
                || m.business_id
                    .as_ref()
                    .is_some_and(|b| b.chars().count() > 100)
        }) {
            return fail(codes::CN_PARAM_ERROR, n);
        }
        let t = st.topics.get_mut(topic).expect("checked above");
        let local = t.local(node);
        let partition = if partition < 0 {
            if local.is_empty() {
                return fail(codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, n);
            }
            let pick = if messages[0].sys_code.ordered {
                let h = java_string_hash(messages[0].business_id.as_deref().unwrap_or(""));
                (h.unsigned_abs() as usize) % local.len()
            } else {
                (super::random_u64() % local.len() as u64) as usize
            };
            local[pick]
        } else if !t.partitions.contains_key(&partition) {
            return fail(codes::CN_PARAM_ERROR, n);
        } else if !local.contains(&partition) {
            return fail(codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, n);
        } else {
            partition
        };
        let now = now_millis();
        let (ip, ipv4) = encode_client_ip(client);
        for m in &mut messages {
            m.partition = partition;
            m.term = 0;
            m.client_ip = ip;
            m.sys_code.ipv4 = ipv4;
            m.app = Some(app.to_string());
            m.store_time = i32::try_from(now - m.send_time).unwrap_or(0);
        }
        if let Some(tx) = tx_id {
            let Some(txn) = st.txs.get_mut(tx) else {
                return fail(codes::FW_TRANSACTION_NOT_EXISTS, n);
            };
            if txn.topic != topic {
                return fail(codes::FW_TRANSACTION_NOT_EXISTS, n);
            }
            let items = messages
                .iter()
                .map(|_| ProduceItem {
                    partition,
                    index: -1,
                    start_time,
                })
                .collect();
            txn.messages
                .extend(messages.into_iter().map(|m| (partition, m)));
            return (codes::SUCCESS, items);
        }
        let p = t.partitions.get_mut(&partition).expect("partition exists");
        let items = messages
            .into_iter()
            .map(|m| ProduceItem {
                partition,
                index: p.append(m),
                start_time,
            })
            .collect();
        drop(st);
        self.wake();
        (codes::SUCCESS, items)
    }

    /// FETCH_TOPIC_MESSAGE on broker `node` for connection `conn`: the retry queue first, then a
    /// free local partition, read from its ack index. The partition (or retry message) stays
    /// occupied by `conn` until acked or `ack_timeout` passes.
    pub fn fetch_topic(
        &self,
        node: i32,
        conn: u64,
        topic: &str,
        app: &str,
        count: usize,
        ack_timeout: Duration,
    ) -> Fetched {
        self.sync_topic(topic);
        let now = Instant::now();
        let mut st = self.state.lock();
        let consume = self.sub_locked(&st, topic, app).consume;
        let Some(t) = st.topics.get_mut(topic) else {
            return Fetched::failed(codes::FW_TOPIC_NOT_EXIST);
        };
        if !consume {
            return Fetched::failed(codes::CN_NO_PERMISSION);
        }
        let local = t.local(node);
        if local.is_empty() {
            return Fetched::failed(codes::FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER);
        }
        let count = count.max(1);
        let a = t.apps.entry(app.to_string()).or_default();
        // Expired retry deliveries go back to the queue.
        let expired: Vec<i64> = a
            .retry_inflight
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some((e, _)) = a.retry_inflight.remove(&id) {
                a.retry.push_front(e);
            }
        }
        let mut out = Vec::new();
        while out.len() < count {
            let Some(pos) = a.retry.iter().position(|e| e.due <= now) else {
                break;
            };
            let e = a.retry.remove(pos).expect("position is valid");
            let mut m = e.msg.clone();
            m.partition = RETRY_PARTITION;
            m.index = e.id;
            out.push(m);
            a.retry_inflight
                .insert(e.id, (e, crate::duration::deadline(now, ack_timeout)));
        }
        if !out.is_empty() {
            return Fetched {
                messages: out,
                code: codes::SUCCESS,
            };
        }
        let n = local.len();
        for k in 0..n {
            let p = local[(a.cursor + k) % n];
            let ps = a.parts.entry(p).or_default();
            if let Some(o) = &ps.occupied {
                if o.until > now {
                    continue;
                }
                ps.occupied = None;
            }
            let part = &t.partitions[&p];
            let mut pos = part.position(ps.ack_index);
            let mut got = 0usize;
            while pos < part.entries.len() && got < count {
                let e = &part.entries[pos];
                let fully_acked = (e.index..e.index + e.count)
                    .all(|i| i < ps.ack_index || ps.acked_above.contains(&i));
                if !fully_acked {
                    out.push(e.msg.clone());
                    got += usize::try_from(e.count).unwrap_or(1);
                }
                pos += 1;
            }
            if !out.is_empty() {
                ps.occupied = Some(Occupation {
                    conn,
                    until: crate::duration::deadline(now, ack_timeout),
                });
                a.cursor = (a.cursor + k + 1) % n;
                break;
            }
        }
        Fetched {
            messages: out,
            code: codes::SUCCESS,
        }
    }

    /// FETCH_PARTITION_MESSAGE: `count` indices from `index` (-1: the ack index).
    pub fn fetch_partition(
        &self,
        node: i32,
        topic: &str,
        app: &str,
        partition: i16,
        index: i64,
        count: usize,
    ) -> (Vec<WireMessage>, i32) {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        let consume = self.sub_locked(&st, topic, app).consume;
        let Some(t) = st.topics.get_mut(topic) else {
            return (Vec::new(), codes::FW_TOPIC_NOT_EXIST);
        };
        if !consume {
            return (Vec::new(), codes::CN_NO_PERMISSION);
        }
        let Some(part) = t.partitions.get(&partition) else {
            return (Vec::new(), codes::CN_PARAM_ERROR);
        };
        if !t
            .groups
            .iter()
            .any(|g| g.leader == node && g.partitions.contains(&partition))
        {
            return (Vec::new(), codes::FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER);
        }
        let index = if index == -1 {
            t.apps
                .get(app)
                .and_then(|a| a.parts.get(&partition))
                .map_or(0, |p| p.ack_index)
        } else {
            index
        };
        if index < 0 || index > part.next {
            return (Vec::new(), codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE);
        }
        let mut out = Vec::new();
        let mut got = 0usize;
        let mut pos = part.position(index);
        while pos < part.entries.len() && got < count.max(1) {
            let e = &part.entries[pos];
            out.push(e.msg.clone());
            got += usize::try_from(e.count).unwrap_or(1);
            pos += 1;
        }
        (out, codes::SUCCESS)
    }

    /// COMMIT_ACK of one (topic, partition) cell. Releases the partition's occupation.
    pub fn commit_ack(&self, topic: &str, app: &str, partition: i16, items: &[AckItem]) -> i32 {
        self.sync_topic(topic);
        let now = Instant::now();
        let retry_delay = self.config.retry_delay;
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return codes::FW_TOPIC_NOT_EXIST;
        };
        if partition != RETRY_PARTITION && !t.partitions.contains_key(&partition) {
            return codes::CN_PARAM_ERROR;
        }
        let a = t.apps.entry(app.to_string()).or_default();
        if partition == RETRY_PARTITION {
            // Items are the indices of unpacked messages: find the entry each belongs to. An
            // entry settles once, and goes back to the queue if any of its items asks for it.
            let mut settled: BTreeMap<i64, bool> = BTreeMap::new();
            for it in items {
                let owner = a
                    .retry_inflight
                    .range(..=it.index)
                    .next_back()
                    .filter(|(id, (e, _))| it.index < **id + e.count.max(1))
                    .map(|(id, _)| *id);
                if let Some(id) = owner {
                    *settled.entry(id).or_default() |= it.retry_type != RetryType::None;
                }
            }
            for (id, again) in settled {
                if let Some((e, _)) = a.retry_inflight.remove(&id) {
                    if again {
                        a.retry.push_back(RetryEntry {
                            due: crate::duration::deadline(now, retry_delay),
                            ..e
                        });
                    }
                }
            }
        } else {
            let mut to_retry = Vec::new();
            {
                let ps = a.parts.entry(partition).or_default();
                for it in items {
                    ps.ack(it.index);
                }
                ps.occupied = None;
            }
            let part = &t.partitions[&partition];
            // One retry entry per stored entry, however many of a batch's messages asked.
            let mut seen = HashSet::new();
            for it in items.iter().filter(|i| i.retry_type != RetryType::None) {
                let pos = part.position(it.index);
                if let Some(e) = part.entries.get(pos) {
                    if seen.insert(e.index) {
                        to_retry.push((e.msg.clone(), e.count.max(1)));
                    }
                }
            }
            for (msg, count) in to_retry {
                let id = a.next_retry_id;
                a.next_retry_id += count;
                a.retry.push_back(RetryEntry {
                    id,
                    count,
                    msg,
                    due: crate::duration::deadline(now, retry_delay),
                });
            }
        }
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// COMMIT_ACK_INDEX of one cell.
    pub fn commit_index(&self, topic: &str, app: &str, partition: i16, index: i64) -> i32 {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return codes::FW_TOPIC_NOT_EXIST;
        };
        let Some(part) = t.partitions.get(&partition) else {
            return codes::CN_PARAM_ERROR;
        };
        if index < 0 || index > part.next {
            return codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE;
        }
        let ps = t
            .apps
            .entry(app.to_string())
            .or_default()
            .parts
            .entry(partition)
            .or_default();
        ps.ack_index = index;
        ps.acked_above.retain(|i| *i > index);
        ps.occupied = None;
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// FETCH_INDEX of one partition.
    pub fn fetch_index(&self, topic: &str, app: &str, partition: i16) -> IndexEntry {
        self.sync_topic(topic);
        let st = self.state.lock();
        let mut e = IndexEntry {
            partition,
            index: -1,
            code: codes::SUCCESS,
            left_index: -1,
            right_index: -1,
        };
        let Some(t) = st.topics.get(topic) else {
            e.code = codes::FW_TOPIC_NOT_EXIST;
            return e;
        };
        let Some(part) = t.partitions.get(&partition) else {
            e.code = codes::CN_PARAM_ERROR;
            return e;
        };
        e.index = t
            .apps
            .get(app)
            .and_then(|a| a.parts.get(&partition))
            .map_or(0, |p| p.ack_index);
        e.left_index = 0;
        e.right_index = part.next;
        e
    }

    /// PRODUCE_MESSAGE_PREPARE: a new transaction id.
    pub fn prepare(
        &self,
        topic: &str,
        app: &str,
        transaction_id: Option<String>,
        timeout: Duration,
    ) -> std::result::Result<String, i32> {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        if !st.topics.contains_key(topic) {
            return Err(codes::FW_TOPIC_NOT_EXIST);
        }
        st.tx_seq += 1;
        let id = format!("tx-{}-{}", now_millis(), st.tx_seq);
        st.txs.insert(
            id.clone(),
            Tx {
                topic: topic.to_string(),
                app: app.to_string(),
                transaction_id,
                deadline: crate::duration::deadline(Instant::now(), timeout),
                timeout,
                messages: Vec::new(),
                last_feedback: None,
            },
        );
        Ok(id)
    }

    /// PRODUCE_MESSAGE_COMMIT: append the transaction's messages.
    pub fn commit(&self, topic: &str, app: &str, tx_id: &str) -> i32 {
        let mut st = self.state.lock();
        let Some(tx) = take_tx(&mut st, topic, app, tx_id) else {
            return codes::FW_TRANSACTION_NOT_EXISTS;
        };
        if let Some(t) = st.topics.get_mut(topic) {
            for (p, m) in tx.messages {
                if let Some(part) = t.partitions.get_mut(&p) {
                    part.append(m);
                }
            }
        }
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// PRODUCE_MESSAGE_ROLLBACK: discard the transaction.
    pub fn rollback(&self, topic: &str, app: &str, tx_id: &str) -> i32 {
        match take_tx(&mut self.state.lock(), topic, app, tx_id) {
            Some(_) => codes::SUCCESS,
            None => codes::FW_TRANSACTION_NOT_EXISTS,
        }
    }

    /// FETCH_PRODUCE_FEEDBACK: at most one expired transaction that has a user transaction id
    /// (the request's `count` never reaches the server, §8.2). An entry is offered again after
    /// another transaction timeout if it is still not completed.
    pub fn feedback(&self, topic: &str, app: &str) -> Vec<Feedback> {
        let now = Instant::now();
        let mut st = self.state.lock();
        let mut ids: Vec<&String> = st
            .txs
            .iter()
            .filter(|(_, tx)| {
                tx.topic == topic
                    && tx.app == app
                    && tx.transaction_id.is_some()
                    && tx.deadline <= now
                    && tx.last_feedback.is_none_or(|t| t + tx.timeout <= now)
            })
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        let Some(id) = ids.first().map(|s| (*s).clone()) else {
            return Vec::new();
        };
        let tx = st.txs.get_mut(&id).expect("found above");
        tx.last_feedback = Some(now);
        vec![Feedback {
            topic: topic.to_string(),
            tx_id: id,
            transaction_id: tx.transaction_id.clone().unwrap_or_default(),
        }]
    }

    /// The coordinator's assignment for `member` (a client IP): partition groups are shared by
    /// up to [`COORDINATOR_MIN_CONNECTIONS`] members, then dealt out round-robin.
    pub fn assign(
        &self,
        topic: &str,
        app: &str,
        member: &str,
        session_timeout: Duration,
    ) -> std::result::Result<Vec<i16>, i32> {
        self.sync_topic(topic);
        let now = Instant::now();
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return Err(codes::FW_TOPIC_NOT_EXIST);
        };
        let members = t.members.entry(app.to_string()).or_default();
        members.retain(|_, until| *until > now);
        members.insert(
            member.to_string(),
            crate::duration::deadline(now, session_timeout),
        );
        let mut names: Vec<&String> = members.keys().collect();
        names.sort();
        let me = names.iter().position(|n| *n == member).unwrap_or(0);
        let m = names.len();
        let mut out = Vec::new();
        for (i, g) in t.groups.iter().enumerate() {
            if m <= COORDINATOR_MIN_CONNECTIONS || i % m == me {
                out.extend(g.partitions.iter().copied());
            }
        }
        out.sort_unstable();
        Ok(out)
    }

    /// Release everything connection `conn` occupies (it closed).
    pub fn release_connection(&self, conn: u64) {
        let mut st = self.state.lock();
        for t in st.topics.values_mut() {
            for a in t.apps.values_mut() {
                for ps in a.parts.values_mut() {
                    if ps.occupied.as_ref().is_some_and(|o| o.conn == conn) {
                        ps.occupied = None;
                    }
                }
            }
        }
        drop(st);
        self.wake();
    }

    /// Broker ids that lead at least one partition group of any topic.
    pub fn nodes(&self) -> Vec<i32> {
        self.state.lock().nodes.clone()
    }

    /// All partitions of `topic` (sorted), for tests.
    pub fn partitions(&self, topic: &str) -> Vec<i16> {
        let st = self.state.lock();
        let mut v: Vec<i16> = st
            .topics
            .get(topic)
            .map(|t| t.partitions.keys().copied().collect())
            .unwrap_or_default();
        v.sort_unstable();
        v
    }

    /// Topic names an app may see (every topic for the admin app).
    pub fn visible_topics(&self, app: &str) -> Vec<String> {
        let st = self.state.lock();
        let mut v: Vec<String> = st
            .topics
            .keys()
            .filter(|t| {
                let s = self.sub_locked(&st, t, app);
                s.produce || s.consume
            })
            .cloned()
            .collect();
        v.sort();
        v
    }
}

/// Remove and return transaction `tx_id` if it is `app`'s on `topic`.
fn take_tx(st: &mut State, topic: &str, app: &str, tx_id: &str) -> Option<Tx> {
    match st.txs.get(tx_id) {
        Some(tx) if tx.topic == topic && tx.app == app => st.txs.remove(tx_id),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    fn msg(body: &'static [u8]) -> WireMessage {
        let mut m = WireMessage {
            partition: -1,
            send_time: now_millis(),
            ..WireMessage::default()
        };
        m.set_body(Bytes::from_static(body));
        m
    }

    fn store() -> Arc<JmqStore> {
        let s = JmqStore::new(StoreConfig::default(), vec![1]);
        s.add_app("app", "tok");
        s.create_topic("t", 2, false).unwrap();
        s
    }

    #[test]
    fn produce_fetch_ack_and_occupation() {
        let s = store();
        let (code, items) = s.produce(1, "t", "app", None, vec![msg(b"a"), msg(b"b")], None);
        assert_eq!(code, 0);
        assert_eq!(items.len(), 2);
        let p = items[0].partition;
        assert_eq!(items[1].index, items[0].index + 1);
        let f = s.fetch_topic(1, 7, "t", "app", 10, Duration::from_secs(30));
        assert_eq!(f.messages.len(), 2);
        // Occupied by connection 7: another connection gets nothing.
        let other = s.fetch_topic(1, 8, "t", "app", 10, Duration::from_secs(30));
        assert!(other.messages.is_empty());
        let acks: Vec<AckItem> = f
            .messages
            .iter()
            .map(|m| AckItem {
                partition: p,
                index: m.index,
                retry_type: RetryType::None,
            })
            .collect();
        assert_eq!(s.commit_ack("t", "app", p, &acks), 0);
        assert_eq!(s.fetch_index("t", "app", p).index, 2);
        assert!(s
            .fetch_topic(1, 8, "t", "app", 10, Duration::from_secs(30))
            .messages
            .is_empty());
    }

    #[test]
    fn ack_timeout_redelivers_and_retry_queue_works() {
        let s = store();
        s.produce(1, "t", "app", None, vec![msg(b"a")], None);
        let f = s.fetch_topic(1, 1, "t", "app", 1, Duration::from_millis(0));
        assert_eq!(f.messages.len(), 1);
        let again = s.fetch_topic(1, 2, "t", "app", 1, Duration::from_secs(30));
        assert_eq!(
            again.messages, f.messages,
            "ack timeout passed: redelivered"
        );
        let m = &again.messages[0];
        s.commit_ack(
            "t",
            "app",
            m.partition,
            &[AckItem {
                partition: m.partition,
                index: m.index,
                retry_type: RetryType::Exception,
            }],
        );
        let r = s.fetch_topic(1, 2, "t", "app", 1, Duration::from_secs(30));
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.messages[0].partition, RETRY_PARTITION);
        assert_eq!(r.messages[0].body, m.body);
    }

    #[test]
    fn retried_batches_keep_their_index_span() {
        let s = store();
        let mut batch = msg(b"three inner messages");
        batch.sys_code.batch = true;
        batch.flag = 3;
        batch.partition = 0;
        let mut single = msg(b"single");
        single.partition = 0;
        s.produce(1, "t", "app", None, vec![batch, single], None);
        let f = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
        assert_eq!(f.messages.len(), 2);
        let (b, one) = (&f.messages[0], &f.messages[1]);
        // Two of the batch's messages and the single one go to the retry queue: the batch is
        // queued once, not twice.
        let nack = |index| AckItem {
            partition: 0,
            index,
            retry_type: RetryType::Exception,
        };
        let items = [nack(b.index), nack(b.index + 2), nack(one.index)];
        assert_eq!(s.commit_ack("t", "app", 0, &items), 0);
        let r = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
        assert_eq!(r.messages.len(), 2, "{:?}", r.messages);
        let (rb, rs) = (&r.messages[0], &r.messages[1]);
        assert_eq!(rb.body, b.body);
        assert_eq!(rs.body, one.body);
        // The batch's retry indices span its 3 messages, so the single one does not collide.
        assert_eq!(rs.index, rb.index + 3);
        // Acking the batch's last message settles the batch only; the single one stays in flight
        // and comes back after its ack timeout.
        let ack = AckItem {
            partition: RETRY_PARTITION,
            index: rb.index + 2,
            retry_type: RetryType::None,
        };
        assert_eq!(s.commit_ack("t", "app", RETRY_PARTITION, &[ack]), 0);
        let st = s.state.lock();
        let a = &st.topics["t"].apps["app"];
        assert_eq!(
            a.retry_inflight.keys().copied().collect::<Vec<_>>(),
            [rs.index]
        );
        drop(st);
        // Mixed answers for one entry: a nack among acks queues it again.
        let items = [AckItem {
            partition: RETRY_PARTITION,
            index: rs.index,
            retry_type: RetryType::Exception,
        }];
        assert_eq!(s.commit_ack("t", "app", RETRY_PARTITION, &items), 0);
        let again = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
        assert_eq!(again.messages.len(), 1);
        assert_eq!(again.messages[0].body, one.body);
    }

    #[test]
    fn leaders_ordering_and_codes() {
        let s = JmqStore::new(StoreConfig::default(), vec![1, 2]);
        s.add_app("app", "tok");
        s.create_topic("t", 4, false).unwrap();
        let mut m = msg(b"x");
        m.partition = 1; // group 1, led by node 2
        let (code, _) = s.produce(1, "t", "app", None, vec![m.clone()], None);
        assert_eq!(code, codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER);
        assert_eq!(s.produce(2, "t", "app", None, vec![m], None).0, 0);
        assert_eq!(
            s.produce(1, "nope", "app", None, vec![msg(b"x")], None).0,
            codes::FW_TOPIC_NOT_EXIST
        );
        let mut a = msg(b"a");
        a.partition = 0;
        let mut b = msg(b"b");
        b.partition = 2;
        assert_eq!(
            s.produce(1, "t", "app", None, vec![a, b], None).0,
            codes::CN_PARAM_ERROR
        );
        assert_eq!(
            s.fetch_partition(1, "t", "app", 0, 5, 1).1,
            codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE
        );
        assert_eq!(
            s.topic_meta("nope", "app").0.code,
            codes::FW_TOPIC_NOT_EXIST
        );
        assert_eq!(
            s.topic_meta("t", "stranger").0.code,
            codes::CN_NO_PERMISSION
        );
    }

    #[test]
    fn transactions_and_feedback() {
        let s = store();
        let tx = s
            .prepare("t", "app", Some("biz-1".into()), Duration::from_millis(0))
            .unwrap();
        let (code, items) = s.produce(1, "t", "app", Some(&tx), vec![msg(b"a")], None);
        assert_eq!(code, 0);
        assert_eq!(items[0].index, -1);
        assert_eq!(s.message_count("t"), 0, "invisible before commit");
        let fb = s.feedback("t", "app");
        assert_eq!(fb.len(), 1);
        assert_eq!(fb[0].transaction_id, "biz-1");
        assert_eq!(s.commit("t", "app", &tx), 0);
        assert_eq!(s.message_count("t"), 1);
        assert_eq!(s.commit("t", "app", &tx), codes::FW_TRANSACTION_NOT_EXISTS);
    }

    #[test]
    fn coordinator_shares_then_balances() {
        let s = JmqStore::new(StoreConfig::default(), vec![1, 2, 3, 4]);
        s.create_topic("t", 8, false).unwrap();
        let t = Duration::from_secs(60);
        assert_eq!(s.assign("t", "app", "a", t).unwrap().len(), 8);
        for m in ["b", "c", "d"] {
            s.assign("t", "app", m, t).unwrap();
        }
        let mut all: Vec<i16> = ["a", "b", "c", "d"]
            .iter()
            .flat_map(|m| s.assign("t", "app", m, t).unwrap())
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..8).collect::<Vec<i16>>(), "4 members: exclusive");
    }
}
