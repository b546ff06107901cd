//! Topics, queues and consumer groups: where messages live.
//!
//! Every queue has its own lock (`parking_lot::Mutex<QueueState>`); the topic and group maps are
//! read-mostly `RwLock`s taken only to look a name up. Messages are stored once behind an `Arc`
//! in the compact form of [`record`](super::record) (metadata encoded once, body in the same
//! record, records packed into per-queue chunks); a topic's memory bound counts what each
//! message really holds ([`accounted_size`]).

use std::collections::{HashMap, VecDeque};
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::config::{BrokerConfig, WhenFull};
use super::cursor::Cursor;
use super::record::Arena;
use crate::error::{Error, Result};
use crate::message::MessageKind;
use crate::proto;
use crate::status;

pub use super::record::{accounted_size, timestamp_ms, Stored, MESSAGE_OVERHEAD};

/// The message types a topic accepts (its `message.type` attribute).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TopicType {
    /// Exactly one kind.
    Only(MessageKind),
    /// NORMAL, FIFO, DELAY and TRANSACTION (RocketMQ's `MIXED`).
    Mixed,
}

impl TopicType {
    /// Parse `"NORMAL"`, `"FIFO"`, `"DELAY"`, `"TRANSACTION"`, `"PRIORITY"` or `"MIXED"`.
    pub fn parse(s: &str) -> Result<Self> {
        if s.eq_ignore_ascii_case("MIXED") {
            return Ok(TopicType::Mixed);
        }
        MessageKind::parse(s).map(TopicType::Only).map_err(|_| {
            Error::invalid(
                "message_type",
                format!("{s:?} is not one of NORMAL, FIFO, DELAY, TRANSACTION, PRIORITY, MIXED"),
            )
        })
    }

    /// The upper-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            TopicType::Only(k) => k.as_str(),
            TopicType::Mixed => "MIXED",
        }
    }

    /// Whether a message of `kind` may be sent to the topic.
    pub fn accepts(self, kind: MessageKind) -> bool {
        match self {
            TopicType::Only(k) => k == kind,
            TopicType::Mixed => kind != MessageKind::Priority,
        }
    }

    /// `accept_message_types` of the topic's queues in a route.
    pub fn proto_types(self) -> Vec<i32> {
        let kinds: &[MessageKind] = match self {
            TopicType::Only(k) => return vec![kind_to_proto(k) as i32],
            TopicType::Mixed => &[
                MessageKind::Normal,
                MessageKind::Fifo,
                MessageKind::Delay,
                MessageKind::Transaction,
            ],
        };
        kinds.iter().map(|k| kind_to_proto(*k) as i32).collect()
    }
}

/// The protobuf `MessageType` of a kind.
pub fn kind_to_proto(k: MessageKind) -> proto::MessageType {
    match k {
        MessageKind::Normal => proto::MessageType::Normal,
        MessageKind::Fifo => proto::MessageType::Fifo,
        MessageKind::Delay => proto::MessageType::Delay,
        MessageKind::Transaction => proto::MessageType::Transaction,
        MessageKind::Priority => proto::MessageType::Priority,
    }
}

/// Parse a permission name (`"READ_WRITE"`, `"READ"`, `"WRITE"`, `"NONE"`).
pub fn parse_permission(s: &str) -> Result<proto::Permission> {
    match s.to_ascii_uppercase().as_str() {
        "READ_WRITE" | "RW" => Ok(proto::Permission::ReadWrite),
        "READ" | "R" => Ok(proto::Permission::Read),
        "WRITE" | "W" => Ok(proto::Permission::Write),
        "NONE" => Ok(proto::Permission::None),
        other => Err(Error::invalid(
            "permission",
            format!("{other:?} is not one of READ_WRITE, READ, WRITE, NONE"),
        )),
    }
}

/// Whether a permission allows reading.
pub fn readable(p: proto::Permission) -> bool {
    matches!(p, proto::Permission::Read | proto::Permission::ReadWrite)
}

/// Whether a permission allows writing.
pub fn writable(p: proto::Permission) -> bool {
    matches!(p, proto::Permission::Write | proto::Permission::ReadWrite)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Milliseconds since the epoch of a protobuf timestamp.
pub fn ms_of(ts: &prost_types::Timestamp) -> i64 {
    ts.seconds
        .saturating_mul(1000)
        .saturating_add(i64::from(ts.nanos) / 1_000_000)
}

/// A protobuf duration (the client's conversion).
pub use ferrymq_core::rocketmq::message_view::to_proto_duration as proto_duration;

/// A `std` duration from a protobuf one (negative → `None`).
pub fn std_duration(d: &prost_types::Duration) -> Option<Duration> {
    if d.seconds < 0 || d.nanos < 0 {
        return None;
    }
    Some(Duration::new(d.seconds as u64, d.nanos as u32))
}

/// The mutable state of one queue, behind the queue's lock.
#[derive(Debug, Default)]
pub struct QueueState {
    /// Offset of `messages[0]` (the lowest retained offset).
    pub base: u64,
    /// Retained messages, oldest first.
    pub messages: VecDeque<Arc<Stored>>,
    /// Sum of the accounted sizes of `messages`.
    pub bytes: usize,
    /// POP state of every consumer group that received from this queue.
    pub cursors: HashMap<Arc<str>, Cursor>,
    /// Offsets committed with UpdateOffset, per group.
    pub offsets: HashMap<String, i64>,
    /// Where the records of new messages are written.
    pub arena: Arena,
}

impl QueueState {
    /// The offset the next stored message gets.
    pub fn end(&self) -> u64 {
        self.base + self.messages.len() as u64
    }

    /// The message at `offset`, if retained.
    pub fn get(&self, offset: u64) -> Option<&Arc<Stored>> {
        offset
            .checked_sub(self.base)
            .and_then(|i| self.messages.get(i as usize))
    }

    /// Lowest offset that some consumer still needs (POP cursors and committed pull offsets).
    fn needed_from(&self) -> Option<u64> {
        let pop = self.cursors.values().map(|c| c.low());
        let pull = self.offsets.values().map(|o| (*o).max(0) as u64);
        pop.chain(pull).min()
    }

    /// Drop front messages below `limit` until `want` bytes are freed; returns bytes freed.
    fn evict_front(&mut self, limit: u64, want: usize) -> usize {
        let mut freed = 0;
        while freed < want && self.base < limit {
            match self.messages.pop_front() {
                Some(m) => {
                    freed += m.size();
                    self.base += 1;
                }
                None => break,
            }
        }
        self.bytes -= freed;
        freed
    }
}

/// One message queue of a topic, owned by one endpoint ("broker").
#[derive(Debug)]
pub struct Queue {
    /// Index of the owning endpoint.
    pub broker: usize,
    /// Queue id within its broker (0..n-1).
    pub id: i32,
    perm: AtomicI32,
    /// The queue's data.
    pub state: Mutex<QueueState>,
}

impl Queue {
    /// The queue's permission.
    pub fn permission(&self) -> proto::Permission {
        proto::Permission::try_from(self.perm.load(Ordering::Relaxed))
            .unwrap_or(proto::Permission::ReadWrite)
    }

    /// Change the queue's permission.
    pub fn set_permission(&self, p: proto::Permission) {
        self.perm.store(p as i32, Ordering::Relaxed);
    }
}

/// A topic: its type, its queues spread over the endpoints, and its memory accounting.
#[derive(Debug)]
pub struct Topic {
    /// The topic name.
    pub name: Arc<str>,
    ty: RwLock<TopicType>,
    /// All queues; `by_broker[e][id]` indexes into this.
    pub queues: Vec<Arc<Queue>>,
    /// Queue indices per endpoint, ordered by queue id.
    pub by_broker: Vec<Vec<usize>>,
    /// Accounted bytes stored (all queues).
    pub bytes: AtomicUsize,
    /// Woken when messages become available (long polling).
    pub notify: Notify,
    /// Long-polling receivers currently waiting.
    pub waiters: AtomicUsize,
    /// Round-robin counter for sends that name no queue.
    pub rr: AtomicUsize,
}

impl Topic {
    fn new(name: &str, ty: TopicType, queues: usize, brokers: usize) -> Topic {
        let counts: Vec<usize> = (0..brokers)
            .map(|b| queues / brokers + usize::from(b < queues % brokers))
            .collect();
        Topic::with_counts(name, ty, &counts)
    }

    /// A topic with `counts[b]` queues on endpoint `b`.
    fn with_counts(name: &str, ty: TopicType, counts: &[usize]) -> Topic {
        let mut all = Vec::with_capacity(counts.iter().sum());
        let mut by_broker = vec![Vec::new(); counts.len()];
        for (b, ids) in by_broker.iter_mut().enumerate() {
            for id in 0..counts[b] {
                ids.push(all.len());
                all.push(Arc::new(Queue {
                    broker: b,
                    id: id as i32,
                    perm: AtomicI32::new(proto::Permission::ReadWrite as i32),
                    state: Mutex::new(QueueState::default()),
                }));
            }
        }
        Topic {
            name: name.into(),
            ty: RwLock::new(ty),
            queues: all,
            by_broker,
            bytes: AtomicUsize::new(0),
            notify: Notify::new(),
            waiters: AtomicUsize::new(0),
            rr: AtomicUsize::new(0),
        }
    }

    /// The message type(s) the topic accepts.
    pub fn topic_type(&self) -> TopicType {
        *self.ty.read()
    }

    /// The queue `id` of endpoint `broker`.
    pub fn queue(&self, broker: usize, id: i32) -> Option<&Arc<Queue>> {
        let i = usize::try_from(id).ok()?;
        self.by_broker.get(broker)?.get(i).map(|q| &self.queues[*q])
    }

    /// Wake long-polling receivers, if any.
    pub fn wake(&self) {
        if self.waiters.load(Ordering::SeqCst) > 0 {
            self.notify.notify_waiters();
        }
    }

    /// A long poll: call `look` until it gives the answer (`Break`); while it asks to wait
    /// (`Continue(until)`), wait until `until`, an append to the topic or `stop`, then look again.
    /// The poll counts as a waiter of the topic while it runs, and arms its wake-up before each
    /// look, so an append between a look and the wait is not missed.
    pub(crate) async fn long_poll<T>(
        &self,
        stop: &CancellationToken,
        mut look: impl FnMut() -> ControlFlow<T, Instant>,
    ) -> T {
        let _waiting = Waiting::new(self);
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let until = match look() {
                ControlFlow::Break(answer) => return answer,
                ControlFlow::Continue(until) => until,
            };
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(until.into()) => {}
                () = stop.cancelled() => {}
            }
        }
    }

    /// Total retained messages.
    pub fn message_count(&self) -> u64 {
        self.queues
            .iter()
            .map(|q| q.state.lock().messages.len() as u64)
            .sum()
    }
}

/// A consumer group's configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct GroupConfig {
    /// The group name.
    pub name: String,
    /// Whether the group consumes in order (message groups are blocked while in flight).
    pub fifo: bool,
    /// Deliveries of one message before it goes to the group's DLQ.
    pub max_delivery_attempts: u32,
    /// Retry back-off echoed to consumers (customized policy); empty = RocketMQ's default.
    pub retry_backoff: Vec<Duration>,
}

impl GroupConfig {
    /// A group with RocketMQ's defaults (not FIFO; `retryMaxTimes` 16, i.e. 17 deliveries, the
    /// `max_attempts` the proxy echoes in settings).
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: name.into(),
            fifo: false,
            max_delivery_attempts: 17,
            retry_backoff: Vec::new(),
        }
    }
}

/// The name of a group's dead-letter topic.
pub fn dlq_topic(group: &str) -> String {
    format!("%DLQ%{group}")
}

/// Validate a topic or group name the way RocketMQ does (`^[%|a-zA-Z0-9_-]+$`, ≤ 127 chars).
pub fn valid_resource_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= crate::message::MAX_TOPIC_LEN
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'%' | b'|' | b'_' | b'-'))
}

/// Topics and groups.
#[derive(Debug)]
pub struct Store {
    brokers: usize,
    topics: RwLock<HashMap<String, Arc<Topic>>>,
    groups: RwLock<HashMap<String, Arc<GroupConfig>>>,
}

/// Why an append failed.
#[derive(Debug)]
pub struct AppendError {
    /// RocketMQ status code to answer.
    pub code: i32,
    /// Explanation.
    pub message: String,
}

impl Store {
    /// An empty store for `brokers` endpoints.
    pub fn new(brokers: usize) -> Self {
        Self {
            brokers,
            topics: RwLock::new(HashMap::new()),
            groups: RwLock::new(HashMap::new()),
        }
    }

    /// Create a topic, or change the type of an existing one with the same queue count.
    pub fn create_topic(&self, name: &str, ty: TopicType, queues: usize) -> Result<Arc<Topic>> {
        if !valid_resource_name(name) {
            return Err(Error::invalid(
                "name",
                format!("{name:?} is not a valid topic name ([%|a-zA-Z0-9_-], at most 127)"),
            ));
        }
        if queues == 0 || queues > 1024 {
            return Err(Error::invalid("queues", "must be between 1 and 1024"));
        }
        let mut topics = self.topics.write();
        if let Some(t) = topics.get(name) {
            if t.queues.len() != queues {
                return Err(Error::invalid(
                    "queues",
                    format!(
                        "topic {name:?} exists with {} queues; the count cannot change",
                        t.queues.len()
                    ),
                ));
            }
            *t.ty.write() = ty;
            return Ok(t.clone());
        }
        let t = Arc::new(Topic::new(name, ty, queues, self.brokers));
        topics.insert(name.to_string(), t.clone());
        Ok(t)
    }

    /// Create a topic whose `queues` queues all live on endpoint `broker` (a remoting
    /// `UPDATE_AND_CREATE_TOPIC` sent to one broker). An existing topic is returned unchanged.
    pub fn create_topic_on(
        &self,
        name: &str,
        ty: TopicType,
        broker: usize,
        queues: usize,
    ) -> Result<Arc<Topic>> {
        if !valid_resource_name(name) {
            return Err(Error::invalid(
                "name",
                format!("{name:?} is not a valid topic name ([%|a-zA-Z0-9_-], at most 127)"),
            ));
        }
        if queues == 0 || queues > 1024 || broker >= self.brokers {
            return Err(Error::invalid("queues", "must be between 1 and 1024"));
        }
        let mut counts = vec![0; self.brokers];
        counts[broker] = queues;
        Ok(self
            .topics
            .write()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(Topic::with_counts(name, ty, &counts)))
            .clone())
    }

    /// Delete a topic and its messages. Returns whether it existed.
    pub fn delete_topic(&self, name: &str) -> bool {
        self.topics.write().remove(name).is_some()
    }

    /// Look a topic up.
    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.topics.read().get(name).cloned()
    }

    /// Look a topic up, creating it (NORMAL) when `auto_create` is on.
    pub fn topic_or_create(&self, name: &str, config: &BrokerConfig) -> Option<Arc<Topic>> {
        if let Some(t) = self.topic(name) {
            return Some(t);
        }
        if !config.auto_create || !valid_resource_name(name) {
            return None;
        }
        self.create_topic(
            name,
            TopicType::Only(MessageKind::Normal),
            config.auto_create_queues,
        )
        .ok()
    }

    /// The DLQ topic of `group`, created on first use (one queue on endpoint 0, MIXED).
    pub fn dlq_of(&self, group: &str) -> Arc<Topic> {
        let name = dlq_topic(group);
        if let Some(t) = self.topic(&name) {
            return t;
        }
        let mut topics = self.topics.write();
        topics
            .entry(name.clone())
            .or_insert_with(|| Arc::new(Topic::new(&name, TopicType::Mixed, 1, self.brokers)))
            .clone()
    }

    /// All topics, sorted by name.
    pub fn topics(&self) -> Vec<Arc<Topic>> {
        let mut v: Vec<_> = self.topics.read().values().cloned().collect();
        v.sort_by(|a, b| a.name.cmp(&b.name));
        v
    }

    /// Create or replace a consumer group.
    pub fn create_group(&self, group: GroupConfig) -> Result<Arc<GroupConfig>> {
        if !valid_resource_name(&group.name) {
            return Err(Error::invalid(
                "name",
                format!("{:?} is not a valid group name", group.name),
            ));
        }
        if group.max_delivery_attempts == 0 {
            return Err(Error::invalid(
                "max_delivery_attempts",
                "must be at least 1",
            ));
        }
        let g = Arc::new(group);
        self.groups.write().insert(g.name.clone(), g.clone());
        Ok(g)
    }

    /// Look a group up.
    pub fn group(&self, name: &str) -> Option<Arc<GroupConfig>> {
        self.groups.read().get(name).cloned()
    }

    /// Look a group up, creating it with defaults if it does not exist: RocketMQ brokers create
    /// subscription groups on first use (`autoCreateSubscriptionGroup`, on by default), whatever
    /// `auto_create` (which is about topics) says.
    pub fn group_or_create(&self, name: &str, _config: &BrokerConfig) -> Option<Arc<GroupConfig>> {
        if let Some(g) = self.group(name) {
            return Some(g);
        }
        if !valid_resource_name(name) {
            return None;
        }
        let mut groups = self.groups.write();
        Some(
            groups
                .entry(name.to_string())
                .or_insert_with(|| Arc::new(GroupConfig::new(name)))
                .clone(),
        )
    }

    /// Append `msgs` (already validated, system properties filled except offsets) to `queue` of
    /// `topic`, enforcing the topic's memory bound. Returns the first offset.
    pub fn append(
        &self,
        topic: &Topic,
        queue: &Queue,
        msgs: Vec<proto::Message>,
        config: &BrokerConfig,
    ) -> std::result::Result<u64, AppendError> {
        let total: usize = msgs.iter().map(accounted_size).sum();
        self.reserve(topic, total, config)?;
        Ok(self.append_reserved(topic, queue, msgs))
    }

    /// Append messages whose size was already reserved with [`Store::reserve`] (delayed and
    /// half messages count against the bound from the moment they are sent).
    pub fn append_reserved(&self, topic: &Topic, queue: &Queue, msgs: Vec<proto::Message>) -> u64 {
        let store_ms = now_ms();
        let first;
        {
            let mut guard = queue.state.lock();
            let st = &mut *guard;
            first = st.end();
            let mut total = 0;
            for (i, m) in msgs.into_iter().enumerate() {
                let stored = Stored::store(first + i as u64, m, store_ms, &mut st.arena);
                total += stored.size();
                st.messages.push_back(Arc::new(stored));
            }
            st.bytes += total;
        }
        topic.wake();
        first
    }

    /// Give back bytes reserved for a message that will not be stored (recalled, rolled back).
    pub fn release(&self, topic: &Topic, bytes: usize) {
        topic.bytes.fetch_sub(bytes, Ordering::AcqRel);
    }

    /// Account `want` bytes to `topic`, evicting what the policy allows when it is full.
    pub fn reserve(
        &self,
        topic: &Topic,
        want: usize,
        config: &BrokerConfig,
    ) -> std::result::Result<(), AppendError> {
        let limit = config.max_topic_bytes;
        let after = topic.bytes.fetch_add(want, Ordering::AcqRel) + want;
        if after <= limit {
            return Ok(());
        }
        let mut need = after - limit;
        for q in &topic.queues {
            if need == 0 {
                break;
            }
            let mut st = q.state.lock();
            let upto = match config.when_full {
                WhenFull::DropOldest => u64::MAX,
                WhenFull::Reject => st.needed_from().unwrap_or(st.base),
            };
            let freed = st.evict_front(upto, need);
            drop(st);
            topic.bytes.fetch_sub(freed, Ordering::AcqRel);
            need = need.saturating_sub(freed);
        }
        if need == 0 {
            return Ok(());
        }
        topic.bytes.fetch_sub(want, Ordering::AcqRel);
        Err(AppendError {
            code: status::TOO_MANY_REQUESTS,
            message: format!(
                "topic {} is full ({} of {} bytes in memory): consumers must catch up",
                topic.name,
                topic.bytes.load(Ordering::Relaxed),
                limit
            ),
        })
    }
}

/// Decrements a topic's waiter count when a long poll ends.
struct Waiting<'a>(&'a Topic);

impl<'a> Waiting<'a> {
    fn new(t: &'a Topic) -> Self {
        t.waiters.fetch_add(1, Ordering::SeqCst);
        Self(t)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(body: &'static [u8]) -> proto::Message {
        proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            }),
            user_properties: HashMap::new(),
            system_properties: Some(proto::SystemProperties {
                message_id: "id".into(),
                ..Default::default()
            }),
            body: bytes::Bytes::from_static(body),
        }
    }

    #[test]
    fn queues_spread_over_brokers() {
        let s = Store::new(3);
        let t = s
            .create_topic("t", TopicType::Only(MessageKind::Normal), 8)
            .unwrap();
        let counts: Vec<usize> = t.by_broker.iter().map(Vec::len).collect();
        assert_eq!(counts, vec![3, 3, 2]);
        assert_eq!(t.queue(2, 1).unwrap().broker, 2);
        assert!(t.queue(2, 2).is_none());
    }

    #[test]
    fn full_topic_rejects_then_evicts_consumed() {
        let s = Store::new(1);
        let t = s
            .create_topic("t", TopicType::Only(MessageKind::Normal), 1)
            .unwrap();
        let one = accounted_size(&msg(b"x"));
        let cfg = BrokerConfig {
            max_topic_bytes: 3 * one,
            max_body_size: 1,
            ..BrokerConfig::default()
        };
        let q = t.queues[0].clone();
        for _ in 0..3 {
            s.append(&t, &q, vec![msg(b"x")], &cfg).unwrap();
        }
        // Nobody consumed anything: a clear, retriable rejection.
        let e = s.append(&t, &q, vec![msg(b"x")], &cfg).unwrap_err();
        assert_eq!(e.code, status::TOO_MANY_REQUESTS);
        // A pull consumer committed offset 2: two messages may go.
        q.state.lock().offsets.insert("g".into(), 2);
        assert_eq!(s.append(&t, &q, vec![msg(b"x")], &cfg).unwrap(), 3);
        assert_eq!(q.state.lock().base, 1);
        let drop = BrokerConfig {
            when_full: WhenFull::DropOldest,
            ..cfg
        };
        q.state.lock().offsets.clear();
        assert_eq!(s.append(&t, &q, vec![msg(b"x")], &drop).unwrap(), 4);
        assert_eq!(t.bytes.load(Ordering::Relaxed), 3 * one);
    }

    #[test]
    fn names_are_validated() {
        assert!(valid_resource_name("%DLQ%group-1_a"));
        assert!(!valid_resource_name("bad name"));
        assert!(!valid_resource_name(""));
        assert!(TopicType::parse("mixed")
            .unwrap()
            .accepts(MessageKind::Fifo));
        assert!(TopicType::parse("bogus").is_err());
    }
}
