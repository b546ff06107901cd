//! The topic store of the embedded JMQ4 server: partitions, per-app ack state, partition
//! occupation, retry queues, transactions, coordinator membership (reference §5 notes, §7, §8).
//!
//! All state sits behind one mutex and no method awaits while holding it; long polling waits on
//! [`JmqStore::changed`] outside the lock.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::codes;
use super::command::{topic_type, ConsumerPolicy, PartitionGroupMeta, ProducerPolicy, TopicMeta};
use super::message::{WireMessage, RETRY_PARTITION};
use crate::error::{Error, Result};

mod consume;
mod coordinator;
mod produce;

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
}

#[cfg(test)]
mod tests;
