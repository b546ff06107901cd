//! What every task of one push consumer shares: its configuration ([`PushConsumerConfig`]), the
//! `Context` (broker calls, stats, listener, shutdown tokens) and the settle channel the
//! consume services hand finished messages to (`SettleHandle`, `Job`; the settler task that
//! reads it is in [`super::settle`]).
//!
//! It imports [`super::stats`] and [`super::process_queue`] (a job names its process queue);
//! everything above it (settle, consume service, receive loop, consumer) imports it.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;
use tokio::sync::{mpsc, oneshot, Notify};
use tokio_util::sync::CancellationToken;

use super::process_queue::ProcessQueue;
use super::settle_events::{SettleEvent, SettleEventSender};
use super::stats::ConsumerStats;
use crate::error::{Error, Result};
use crate::metrics::ClientMetrics;
use crate::rocketmq::consumer_rpc::ConsumerRpc;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::listener::Listener;
use crate::rocketmq::message_view::MessageView;

/// Java's default cap on cached messages per consumer.
pub const DEFAULT_MAX_CACHE_MESSAGES: usize = 4096;
/// Java's default cap on cached bytes per consumer (64 MiB).
pub const DEFAULT_MAX_CACHE_BYTES: usize = 64 * 1024 * 1024;
/// Java's interval between two assignment scans.
pub const DEFAULT_ASSIGNMENT_INTERVAL: Duration = Duration::from_secs(5);

/// Default of [`PushConsumerConfig::max_concurrent_receives`].
pub const DEFAULT_MAX_CONCURRENT_RECEIVES: usize = 4;

/// Push consumer options.
#[derive(Debug, Clone)]
pub struct PushConsumerConfig {
    /// The consumer group.
    pub group: String,
    /// Subscribed topics and their filters.
    pub subscriptions: Vec<(String, FilterExpression)>,
    /// Most messages cached (received and not yet settled) by the whole consumer.
    pub max_cache_messages: usize,
    /// Most bytes cached by the whole consumer (may be passed by one received batch per
    /// receive in flight: sizes are known only after a receive).
    pub max_cache_bytes: usize,
    /// FIFO groups: consume different message groups of a queue in parallel.
    pub fifo_accelerator: bool,
    /// FIFO groups: start a lane's next message as soon as the previous one was consumed,
    /// without waiting for the broker to accept its ack (runs of up to
    /// [`MAX_RUN`](super::consume_service::MAX_RUN) messages per hand-off). Faster, but weaker
    /// than the workflow's order: if an ack is refused for good, the broker redelivers that
    /// message after the ones behind it were consumed. Off by default: the next message starts
    /// only once the broker accepted the previous one's ack (or dead-letter forward).
    pub fifo_pipelining: bool,
    /// Messages per receive; `None` uses the batch size the broker issued.
    pub receive_batch_size: Option<u32>,
    /// Interval between two assignment scans.
    pub assignment_interval: Duration,
    /// Most receives in flight per process queue. Beyond the first, receives run only while
    /// the queue has a backlog (1 = the workflow's single receive loop).
    pub max_concurrent_receives: usize,
    /// A process queue whose receive loop shows no sign of life for this long (no receive
    /// started or answered, no wait for cache room) is dropped and created again at the next
    /// assignment scan. `None`: three times the sum of the long-polling timeout and
    /// [`IDLE_REQUEST_MARGIN`], as the Java client does.
    pub max_idle: Option<Duration>,
    /// Report every settle attempt (before and after, with its messages) on a channel of this
    /// many events, read through [`PushConsumer::settle_events`](super::PushConsumer::settle_events);
    /// `None`: not observed (nothing is built).
    pub settle_events: Option<usize>,
}

/// The request time-out added to the long-polling timeout in the default
/// [`PushConsumerConfig::max_idle`].
pub const IDLE_REQUEST_MARGIN: Duration = Duration::from_secs(3);

impl Default for PushConsumerConfig {
    fn default() -> Self {
        Self {
            group: String::new(),
            subscriptions: Vec::new(),
            max_cache_messages: DEFAULT_MAX_CACHE_MESSAGES,
            max_cache_bytes: DEFAULT_MAX_CACHE_BYTES,
            fifo_accelerator: false,
            fifo_pipelining: false,
            receive_batch_size: None,
            assignment_interval: DEFAULT_ASSIGNMENT_INTERVAL,
            max_concurrent_receives: DEFAULT_MAX_CONCURRENT_RECEIVES,
            max_idle: None,
            settle_events: None,
        }
    }
}

impl PushConsumerConfig {
    /// Check every option; the error names the offending one.
    pub fn validate(&self) -> Result<()> {
        if self.group.trim().is_empty() {
            return Err(Error::invalid("group", "must not be blank"));
        }
        if self.subscriptions.is_empty() {
            return Err(Error::invalid(
                "subscriptions",
                "subscribe to at least one topic",
            ));
        }
        for (topic, _) in &self.subscriptions {
            crate::message::validate_topic(topic)?;
        }
        Error::require_count("max_cache_messages", self.max_cache_messages)?;
        Error::require_count("max_cache_bytes", self.max_cache_bytes)?;
        if self.receive_batch_size == Some(0) {
            return Err(Error::invalid("receive_batch_size", "must be at least 1"));
        }
        Error::require_count("max_concurrent_receives", self.max_concurrent_receives)?;
        Error::require_positive("assignment_interval", self.assignment_interval)?;
        if self.max_idle.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid("max_idle", "must be positive"));
        }
        if self.settle_events == Some(0) {
            return Err(Error::invalid("settle_events", "must be at least 1"));
        }
        Ok(())
    }
}

/// State shared by the tasks of one push consumer.
pub(crate) struct Context<R: ConsumerRpc> {
    pub(crate) rpc: Arc<R>,
    pub(crate) config: PushConsumerConfig,
    /// The subscriptions read now (`config.subscriptions` at start, then changed while
    /// running by `PushConsumer::subscribe` / `unsubscribe`).
    pub(crate) subscriptions: RwLock<Vec<(String, FilterExpression)>>,
    /// Wakes the assignment scan early (a subscription changed).
    pub(crate) rescan: Notify,
    pub(crate) stats: Arc<ConsumerStats>,
    /// Receives, settle RPCs and listener calls, timed (see [`crate::metrics`]).
    pub(crate) metrics: ClientMetrics,
    pub(crate) listener: Arc<dyn Listener>,
    pub(crate) settle: SettleHandle,
    /// FIFO consumption (decided by the broker's settings at start).
    pub(crate) fifo: bool,
    /// Cancelled when shutdown begins: stop receiving and starting callbacks.
    pub(crate) closing: CancellationToken,
    /// Cancelled at the shutdown deadline: give up settle retries.
    pub(crate) abandon: CancellationToken,
    /// Cancelled when shutdown is over: the settler exits.
    pub(crate) stopped: CancellationToken,
    /// Where settle attempts are reported, when observed.
    pub(crate) events: Option<SettleEventSender>,
}

impl<R: ConsumerRpc> Context<R> {
    /// Per-queue cache limits: the consumer's limits shared evenly by its process queues.
    pub(crate) fn per_queue_limits(&self) -> (usize, usize) {
        let n = self.stats.process_queues.load(Ordering::Relaxed).max(1);
        (
            (self.config.max_cache_messages / n).max(1),
            (self.config.max_cache_bytes / n).max(1),
        )
    }

    /// How long a process queue may show no sign of life before it is expired.
    pub(crate) fn max_idle(&self) -> Duration {
        self.config.max_idle.unwrap_or_else(|| {
            self.rpc
                .settings()
                .long_polling_timeout
                .saturating_add(IDLE_REQUEST_MARGIN)
                .saturating_mul(3)
        })
    }

    /// The filter `topic` is read with now, `None` once it is unsubscribed.
    pub(crate) fn filter_of(&self, topic: &str) -> Option<FilterExpression> {
        self.subscriptions
            .read()
            .iter()
            .find(|(t, _)| t == topic)
            .map(|(_, f)| f.clone())
    }

    pub(crate) fn is_closing(&self) -> bool {
        self.closing.is_cancelled()
    }

    /// Whether settle attempts are observed (build their events only then).
    pub(crate) fn observed(&self) -> bool {
        self.events.is_some()
    }

    /// Report a settle step, when observed (waits for room in the channel, up to the shutdown
    /// deadline).
    pub(crate) async fn observe(&self, event: impl FnOnce() -> SettleEvent) {
        if let Some(events) = &self.events {
            events.send(event(), &self.abandon).await;
        }
    }

    /// FIFO consumption in the workflow's order: a lane waits for the broker to accept each
    /// result before it starts the next message.
    pub(crate) fn fifo_ordered(&self) -> bool {
        self.fifo && !self.config.fifo_pipelining
    }
}

/// What became of a settle operation, for a FIFO lane that waits on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Settled {
    /// The broker accepted it (acked, or forwarded to the dead-letter queue).
    Accepted,
    /// The broker refused it with `INVALID_RECEIPT_HANDLE`: it redelivers the message.
    Refused,
    /// Given up at the shutdown deadline: the broker redelivers the message.
    Abandoned,
}

pub(super) enum Kind {
    /// Ack, then evict.
    Ack,
    /// Change the invisible duration by the retry policy, then evict.
    Nack,
    /// Abandoned unconsumed at shutdown: evict without settling.
    Release,
}

/// A message to settle.
pub(crate) struct Job {
    pub(super) pq: Arc<ProcessQueue>,
    pub(super) view: Arc<MessageView>,
    pub(super) kind: Kind,
    /// Told what became of the job once it finished (a FIFO lane waiting to go on).
    confirm: Option<oneshot::Sender<Settled>>,
}

impl Job {
    pub(crate) fn ack(pq: Arc<ProcessQueue>, view: Arc<MessageView>) -> Self {
        Self {
            pq,
            view,
            kind: Kind::Ack,
            confirm: None,
        }
    }
    /// An ack whose outcome is reported on the returned receiver (a closed receiver means
    /// [`Settled::Abandoned`]).
    pub(crate) fn confirmed_ack(
        pq: Arc<ProcessQueue>,
        view: Arc<MessageView>,
    ) -> (Self, oneshot::Receiver<Settled>) {
        let (tx, rx) = oneshot::channel();
        let mut job = Self::ack(pq, view);
        job.confirm = Some(tx);
        (job, rx)
    }
    pub(crate) fn nack(pq: Arc<ProcessQueue>, view: Arc<MessageView>) -> Self {
        Self {
            pq,
            view,
            kind: Kind::Nack,
            confirm: None,
        }
    }
    pub(crate) fn release(pq: Arc<ProcessQueue>, view: Arc<MessageView>) -> Self {
        Self {
            pq,
            view,
            kind: Kind::Release,
            confirm: None,
        }
    }

    /// The job's lifecycle ended (settled or given up): the message leaves the cache, then a
    /// waiting lane learns `how`.
    pub(super) fn finish(self, how: Settled) {
        let stats = self.finish_quietly(how);
        if let Some(stats) = stats {
            stats.notify_changed();
        }
    }

    /// [`Job::finish`] without waking the receive loops; returns the stats to notify (the
    /// caller notifies once for a whole batch).
    pub(super) fn finish_quietly(mut self, how: Settled) -> Option<Arc<ConsumerStats>> {
        self.pq.evict_quietly(&self.view);
        if let Some(tx) = self.confirm.take() {
            let _ = tx.send(how);
        }
        Some(self.pq.stats().clone())
    }
}

/// Where consume services send finished messages; cheap to clone, usable from any thread.
#[derive(Clone)]
pub(crate) struct SettleHandle {
    tx: mpsc::UnboundedSender<Job>,
}

impl SettleHandle {
    pub(crate) fn channel() -> (Self, mpsc::UnboundedReceiver<Job>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }

    pub(crate) fn submit(&self, job: Job) {
        if let Err(mpsc::error::SendError(job)) = self.tx.send(job) {
            // The settler stopped (after the shutdown deadline): the message stays unsettled.
            job.finish_unsettled();
        }
    }
}

impl Job {
    pub(super) fn finish_unsettled(self) {
        self.finish(Settled::Abandoned);
    }
}
