//! Process queues: the push consumer's per-queue message cache and its receive loop.
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
//! the dead-letter queue, or abandoned at shutdown. The count limit is therefore exact; the
//! byte limit can be passed by at most one received batch, because sizes are known only after
//! the receive.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio_util::sync::CancellationToken;

use crate::error::ErrorKind;
use crate::proto;
use crate::rocketmq::consume_service;
use crate::rocketmq::consumer_rpc::{ConsumerRpc, ReceiveRequest};
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};
use crate::rocketmq::push_consumer::{ConsumerStats, Context};

/// Back-off after a throttled receive (`TOO_MANY_REQUESTS`).
pub const FLOW_CONTROL_BACKOFF: Duration = Duration::from_millis(20);
/// Back-off after a failed receive.
pub const RECEIVE_FAILURE_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait before the cache is checked again while it is full.
pub const CACHE_FULL_RECHECK: Duration = Duration::from_secs(1);

/// The messages of one FIFO lane (a message group with the accelerator, else the whole queue)
/// waiting to be consumed, oldest first.
#[derive(Default)]
pub(crate) struct FifoLane {
    pub(crate) pending: VecDeque<Arc<MessageView>>,
}

/// The cache and receive state of one assigned message queue.
pub struct ProcessQueue {
    queue: proto::MessageQueue,
    source: Arc<MessageSource>,
    filter: FilterExpression,
    cancel: CancellationToken,
    cached_messages: AtomicUsize,
    cached_bytes: AtomicUsize,
    /// FIFO lanes that have a consuming task, keyed by message group ("" without the
    /// accelerator). A lane is present exactly while its task runs.
    pub(crate) fifo_lanes: Mutex<HashMap<String, FifoLane>>,
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
            fifo_lanes: Mutex::new(HashMap::new()),
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

    /// Put received messages in the cache; `reserved` slots taken before the receive are
    /// released at the same time.
    fn cache(&self, views: &[Arc<MessageView>], reserved: usize) {
        let bytes: usize = views.iter().map(|v| v.size()).sum();
        self.cached_messages
            .fetch_add(views.len(), Ordering::AcqRel);
        self.cached_bytes.fetch_add(bytes, Ordering::AcqRel);
        self.stats.on_cached(views.len(), bytes, reserved);
    }

    /// End the lifecycle of `view`: it leaves the cache, and receive loops waiting for room are
    /// woken.
    pub(crate) fn evict(&self, view: &MessageView) {
        self.cached_messages.fetch_sub(1, Ordering::AcqRel);
        self.cached_bytes.fetch_sub(view.size(), Ordering::AcqRel);
        self.stats.on_evicted(view.size());
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

/// The receive loop of one process queue; returns when the queue is dropped.
pub(crate) async fn receive_loop<R: ConsumerRpc>(ctx: Arc<Context<R>>, pq: Arc<ProcessQueue>) {
    let mut failures: u32 = 0;
    loop {
        if pq.is_dropped() {
            return;
        }
        // Armed before the check, so an eviction between the check and the wait is not missed.
        let room = ctx.stats.cache_changed();
        tokio::pin!(room);
        room.as_mut().enable();
        let (count_limit, bytes_limit) = ctx.per_queue_limits();
        let cached = pq.cached_messages();
        let settings = ctx.rpc.settings();
        let want = ctx
            .config
            .receive_batch_size
            .unwrap_or(settings.receive_batch_size)
            .max(1) as usize;
        let want = want.min(count_limit.saturating_sub(cached));
        // Slots are reserved in the consumer-wide count before the receive, so concurrent
        // receive loops can never exceed the limit together.
        let granted = if want == 0 || pq.cached_bytes() >= bytes_limit {
            0
        } else {
            ctx.stats.reserve(
                want,
                ctx.config.max_cache_messages,
                ctx.config.max_cache_bytes,
            )
        };
        if granted == 0 {
            ctx.stats.on_cache_full();
            tokio::select! {
                () = pq.cancel.cancelled() => return,
                _ = tokio::time::timeout(CACHE_FULL_RECHECK, room) => {}
            }
            continue;
        }
        let request = ReceiveRequest {
            queue: pq.queue.clone(),
            filter: pq.filter.clone(),
            batch_size: u32::try_from(granted).unwrap_or(u32::MAX),
            invisible_duration: None,
            auto_renew: true,
            long_polling_timeout: settings.long_polling_timeout,
        };
        let result = tokio::select! {
            () = pq.cancel.cancelled() => {
                ctx.stats.unreserve(granted);
                return;
            }
            r = ctx.rpc.receive(request) => r,
        };
        if result.as_ref().map_or(true, Vec::is_empty) {
            ctx.stats.unreserve(granted);
        }
        match result {
            Ok(messages) => {
                failures = 0;
                if messages.is_empty() {
                    continue;
                }
                let mut views = Vec::with_capacity(messages.len());
                for m in messages {
                    match MessageView::from_proto(m, pq.source.clone()) {
                        Ok(v) => views.push(Arc::new(v)),
                        Err(e) => tracing::warn!(
                            target: "ferrymq::consumer",
                            "dropping an undecodable message from {}: {e}",
                            pq.source.topic.name
                        ),
                    }
                }
                ctx.stats.on_received(views.len());
                pq.cache(&views, granted);
                consume_service::dispatch(&ctx, &pq, views);
            }
            Err(e) if e.kind() == ErrorKind::FlowControl => {
                ctx.stats.on_receive_throttled();
                sleep_or_cancel(&pq, FLOW_CONTROL_BACKOFF).await;
            }
            Err(e) if e.kind() == ErrorKind::Closed => return,
            Err(e) => {
                ctx.stats.on_receive_failed();
                failures += 1;
                // The first failure of a streak is a warning; the rest would only repeat it.
                if failures == 1 {
                    tracing::warn!(
                        target: "ferrymq::consumer",
                        "receive from {} queue {} failed, retrying every {:?}: {e}",
                        pq.source.topic.name, pq.queue.id, RECEIVE_FAILURE_BACKOFF
                    );
                } else {
                    tracing::debug!(
                        target: "ferrymq::consumer",
                        "receive from {} queue {} failed ({failures} in a row): {e}",
                        pq.source.topic.name, pq.queue.id
                    );
                }
                sleep_or_cancel(&pq, RECEIVE_FAILURE_BACKOFF).await;
            }
        }
    }
}

async fn sleep_or_cancel(pq: &ProcessQueue, d: Duration) {
    tokio::select! {
        () = pq.cancel.cancelled() => {}
        () = tokio::time::sleep(d) => {}
    }
}
