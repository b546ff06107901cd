//! Process queues: the push consumer's per-queue message cache. Its receive loop is in
//! [`super::receive`]; this module imports only [`super::stats`] from the push consumer.
//!
//! There is one [`ProcessQueue`] per message queue assigned to this consumer. Its receive loop
//! follows the client workflow of RocketMQ 5 (and the Java `ProcessQueueImpl` schedules):
//!
//! ```text
//!        ┌────────────────────────────────────────────────────────────────┐
//!        ▼                                                                │
//!   cache full (count or bytes)? ── yes ─▶ wait until a message leaves    │
//!        │ no                              the cache, at most 1 s ────────┤
//!        ▼                                                                │
//!   ReceiveMessage(batch ≤ free count) ─ throttled ─▶ sleep 20 ms ────────┤
//!        │ ok                          ─ failed ────▶ sleep 1 s ──────────┤
//!        ▼                                                                │
//!   cache the messages, hand them to the consume service ─────────────────┘
//! ```
//!
//! A message stays in the cache, and counts against the limits, from the moment it is received
//! until its lifecycle ends: acknowledged, made invisible again after a failure, forwarded to
//! the dead-letter queue, or abandoned at shutdown. The count limit is therefore exact (slots
//! are reserved before each receive); the byte limit can be passed by at most one received
//! batch per receive in flight, because sizes are known only after the receive.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use super::stats::ConsumerStats;
use crate::proto;
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};

/// The messages of one FIFO lane (a message group with the accelerator, else the whole queue)
/// waiting to be consumed, oldest first, each with the number of the receive that brought it
/// (see [`FifoLanes`]).
#[derive(Default)]
pub(crate) struct FifoLane {
    pub(crate) pending: VecDeque<(u64, Arc<MessageView>)>,
    /// Highest offset received so far per queue id (a process queue may cover several queues
    /// when the broker assigns queue -1) and message group: the broker hands out a group's
    /// messages in offset order, different groups' in any order.
    pub(crate) high: HashMap<(i32, String), i64>,
    /// Redeliveries the broker started since the lane last looked (see [`Rewind`]).
    pub(crate) rewinds: Vec<Rewind>,
}

/// A receive brought a message of a group at or below an offset the lane had already received
/// of that group: the broker redelivers the group from `offset` on (the invisibility of the
/// earlier delivery ended, whatever an ack of it was answered), so the lane's copies of the
/// group from earlier receives at or above it are stale.
#[derive(Debug, Clone)]
pub(crate) struct Rewind {
    pub(crate) queue_id: i32,
    pub(crate) group: String,
    pub(crate) offset: i64,
    pub(crate) receive: u64,
}

impl FifoLane {
    /// Add a message of receive number `receive`, noting a rewind when it is a redelivery.
    pub(crate) fn push(&mut self, receive: u64, view: Arc<MessageView>) {
        let (queue_id, offset) = (view.queue_id(), view.offset());
        if offset >= 0 {
            let group = view.message_group().unwrap_or_default().to_string();
            let high = self.high.entry((queue_id, group.clone())).or_insert(-1);
            if offset <= *high {
                self.rewinds.push(Rewind {
                    queue_id,
                    group,
                    offset,
                    receive,
                });
            }
            *high = (*high).max(offset);
        }
        self.pending.push_back((receive, view));
    }
}

impl Rewind {
    /// Whether the lane's copy `view`, of receive number `receive`, is stale after this rewind.
    pub(crate) fn stales(&self, receive: u64, view: &MessageView) -> bool {
        receive < self.receive
            && view.queue_id() == self.queue_id
            && view.offset() >= self.offset
            && view.message_group().unwrap_or_default() == self.group
    }
}

/// The FIFO lanes of a process queue that have a consuming task, keyed by message group (""
/// without the accelerator); a lane is present exactly while its task runs. `receives` numbers
/// the receives whose messages were added, so a lane knows which of its messages came with an
/// earlier one (when the broker refuses that one's result, it redelivers it and them).
#[derive(Default)]
pub(crate) struct FifoLanes {
    pub(crate) lanes: HashMap<String, FifoLane>,
    pub(crate) receives: u64,
}

/// The cache and receive state of one assigned message queue.
pub struct ProcessQueue {
    pub(super) queue: proto::MessageQueue,
    pub(super) source: Arc<MessageSource>,
    pub(super) filter: FilterExpression,
    pub(super) cancel: CancellationToken,
    cached_messages: AtomicUsize,
    cached_bytes: AtomicUsize,
    /// FIFO lanes that have a consuming task.
    pub(crate) fifo_lanes: Mutex<FifoLanes>,
    /// Receive loops running besides the primary one.
    pub(super) extra_receivers: AtomicUsize,
    /// Retired: no new receive; what a receive in flight brings is handed back.
    retired: AtomicBool,
    /// When the queue was created, the origin of `activity`.
    born: Instant,
    /// Milliseconds after `born` of the receive loop's last sign of life (a receive started
    /// or answered, a wait for cache room): an idle queue is expired and created again.
    activity: AtomicU64,
    stats: Arc<ConsumerStats>,
}

impl ProcessQueue {
    /// A process queue for `queue`, stopped by `cancel`, accounting its cache in `stats`.
    pub fn new(
        queue: proto::MessageQueue,
        filter: FilterExpression,
        cancel: CancellationToken,
        stats: Arc<ConsumerStats>,
        fallback: &Endpoints,
    ) -> Self {
        Self {
            stats,
            source: Arc::new(MessageSource::of_queue(&queue, fallback)),
            queue,
            filter,
            cancel,
            cached_messages: AtomicUsize::new(0),
            cached_bytes: AtomicUsize::new(0),
            extra_receivers: AtomicUsize::new(0),
            retired: AtomicBool::new(false),
            born: Instant::now(),
            activity: AtomicU64::new(0),
            fifo_lanes: Mutex::new(FifoLanes::default()),
        }
    }

    /// The assigned message queue.
    pub fn queue(&self) -> &proto::MessageQueue {
        &self.queue
    }

    /// Topic and broker of the messages received here.
    pub fn source(&self) -> &Arc<MessageSource> {
        &self.source
    }

    /// Messages in the cache.
    pub fn cached_messages(&self) -> usize {
        self.cached_messages.load(Ordering::Acquire)
    }

    /// Approximate bytes of the messages in the cache.
    pub fn cached_bytes(&self) -> usize {
        self.cached_bytes.load(Ordering::Acquire)
    }

    /// Stop receiving (the queue was unassigned, or the consumer is closing).
    pub fn drop_queue(&self) {
        self.cancel.cancel();
    }

    /// Whether the queue was dropped.
    pub fn is_dropped(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Stop receiving without abandoning the receives in flight (the queue was unassigned or
    /// unsubscribed): a broker may go on serving an abandoned receive, and the messages it
    /// takes then stay invisible, so each receive in flight is let finish and the messages
    /// it brings are handed back to the broker at once, unconsumed.
    pub fn retire(&self) {
        self.retired.store(true, Ordering::Release);
    }

    /// Whether the queue was retired (or dropped).
    pub fn is_retired(&self) -> bool {
        self.retired.load(Ordering::Acquire) || self.is_dropped()
    }

    /// The receive loop shows it is alive.
    pub(super) fn mark_active(&self) {
        let ms = u64::try_from(self.born.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.activity.fetch_max(ms, Ordering::Relaxed);
    }

    /// How long since the receive loop last showed it is alive.
    pub fn idle_for(&self) -> Duration {
        let last = Duration::from_millis(self.activity.load(Ordering::Relaxed));
        self.born.elapsed().saturating_sub(last)
    }

    /// Put received messages in the cache; `reserved` slots taken before the receive are
    /// released at the same time.
    pub(super) fn cache(&self, views: &[Arc<MessageView>], reserved: usize) {
        let bytes: usize = views.iter().map(|v| v.size()).sum();
        self.cached_messages
            .fetch_add(views.len(), Ordering::AcqRel);
        self.cached_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.stats.on_cached(views.len(), bytes, reserved);
    }

    /// End the lifecycle of `view`: it leaves the cache, and receive loops waiting for room are
    /// woken.
    pub(crate) fn evict(&self, view: &MessageView) {
        self.evict_quietly(view);
        self.stats.notify_changed();
    }

    /// [`ProcessQueue::evict`] without waking anyone (the caller calls
    /// `ConsumerStats::notify_changed` once for a batch).
    pub(crate) fn evict_quietly(&self, view: &MessageView) {
        self.cached_messages.fetch_sub(1, Ordering::AcqRel);
        self.cached_bytes.fetch_sub(view.size(), Ordering::AcqRel);
        self.stats.on_evicted(view.size());
    }

    pub(crate) fn stats(&self) -> &Arc<ConsumerStats> {
        &self.stats
    }
}

impl std::fmt::Debug for ProcessQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProcessQueue")
            .field("topic", &self.source.topic.name)
            .field("queue_id", &self.queue.id)
            .field("cached_messages", &self.cached_messages())
            .field("cached_bytes", &self.cached_bytes())
            .finish()
    }
}
