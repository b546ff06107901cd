//! The simple consumer: receive, ack and change invisible duration, as thin wrappers over the
//! RPCs. Nothing is retried internally (client workflow, "simple consumer"): every failure goes
//! to the caller, who owns the whole lifecycle of each message.
//!
//! One consumer for every protocol: it talks to its broker through a [`ConsumerBackend`]
//! (RocketMQ 5, JMQ4 or NATS JetStream), as the push engine does, and every message is a
//! [`MessageView`].
//!
//! `receive` takes the subscribed topics in turn and, within a topic, its queues
//! ([`ConsumerRpc::receive_queues`]) in turn; the broker long-polls for up to the await
//! duration when the queue is empty. A backend whose receives return with the first messages
//! ([`ConsumerRpc::receive_slice`]: JMQ4, JetStream) has every subscription polled within one
//! receive instead: each once at once, then in turn for at most a slice each.
//!
//! Every receive, ack and change of invisible duration is recorded in the consumer's
//! [`ClientMetrics`] (one record per RPC, its messages counted), whatever the protocol.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::consumer_backend::{ConsumerBackend, ConsumerTarget};
use crate::error::{Error, Result};
use crate::metrics::otlp::Exporter;
use crate::metrics::{ClientMetrics, Operation};
use crate::proto;
use crate::rocketmq::client::NoCommands;
use crate::rocketmq::consumer_rpc::{ClientRpc, ConsumerRpc, ReceiveRequest};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};

/// The longest long-polling time the broker honours (the proxy clamps to [5 s, 20 s]).
pub const DEFAULT_AWAIT_DURATION: Duration = Duration::from_secs(20);
/// How long received RocketMQ messages stay invisible when the caller gives no duration (the
/// other protocols use their consumer's own: JMQ4's ack timeout, JetStream's `ack_wait`).
pub const DEFAULT_INVISIBLE_DURATION: Duration = Duration::from_secs(30);
/// Most receives in a row from one broker while each comes back full, before the rotation
/// moves on anyway (so a broker with a standing backlog cannot starve the others).
pub const MAX_FULL_STREAK: usize = 8;

/// Simple consumer options.
#[derive(Debug, Clone)]
pub struct SimpleConsumerConfig {
    /// The consumer group.
    pub group: String,
    /// Subscribed topics and their filters.
    pub subscriptions: Vec<(String, FilterExpression)>,
    /// How long `receive` lets the broker wait for messages when there are none.
    pub await_duration: Duration,
}

impl SimpleConsumerConfig {
    /// A configuration for `group` with the default await duration.
    pub fn new(group: impl Into<String>) -> Self {
        Self {
            group: group.into(),
            subscriptions: Vec::new(),
            await_duration: DEFAULT_AWAIT_DURATION,
        }
    }

    /// Check the options for `target` (a JetStream subject may hold wildcards, which its
    /// server checks).
    fn validate(&self, target: &ConsumerTarget) -> Result<()> {
        if self.group.trim().is_empty() {
            return Err(Error::invalid("group", "must not be blank"));
        }
        if !matches!(target, ConsumerTarget::Nats(..)) {
            for (topic, _) in &self.subscriptions {
                crate::message::validate_topic(topic)?;
            }
        }
        Error::require_positive("await_duration", self.await_duration)?;
        Ok(())
    }
}

/// A started simple consumer.
#[derive(Debug)]
pub struct SimpleConsumer {
    rpc: Arc<ConsumerBackend>,
    closed: AtomicBool,
    group: String,
    subscriptions: RwLock<Vec<(String, FilterExpression)>>,
    /// Serializes subscription changes (each sends the whole new list).
    changes: tokio::sync::Mutex<()>,
    await_duration: Duration,
    next_topic: AtomicUsize,
    next_queue: AtomicUsize,
    full_streak: AtomicUsize,
    metrics: ClientMetrics,
    /// Exports the Java client's histograms where the server asks.
    exporter: Exporter,
}

impl SimpleConsumer {
    /// Connect to `target`. RocketMQ: send the settings on the telemetry stream, wait for the
    /// broker's, and fetch the routes of the subscribed topics; JMQ4: connect and check the
    /// topics; JetStream: bind the group's durable consumer of every subject. Fails (and leaves
    /// nothing running) if any step fails.
    pub async fn connect(target: ConsumerTarget, config: SimpleConsumerConfig) -> Result<Self> {
        config.validate(&target)?;
        let rpc = ConsumerBackend::connect_with(target, &config.subscriptions, |options| {
            ClientRpc::connect(
                options,
                proto::ClientType::SimpleConsumer,
                &config.group,
                &config.subscriptions,
                Arc::new(NoCommands),
            )
        })
        .await?;
        let metrics = ClientMetrics::new(rpc.client_identity().with_group(config.group.clone()));
        let rpc = Arc::new(rpc);
        let collector = rpc.clone();
        let exporter = Exporter::start(metrics.clone(), move || collector.metric_collector());
        Ok(Self {
            exporter,
            metrics,
            rpc,
            closed: AtomicBool::new(false),
            group: config.group,
            subscriptions: RwLock::new(config.subscriptions),
            changes: tokio::sync::Mutex::new(()),
            await_duration: config.await_duration,
            next_topic: AtomicUsize::new(0),
            next_queue: AtomicUsize::new(0),
            full_streak: AtomicUsize::new(0),
        })
    }

    /// The connection to the broker.
    pub fn backend(&self) -> &ConsumerBackend {
        &self.rpc
    }

    /// The client id the broker knows this consumer by.
    pub fn client_id(&self) -> String {
        self.rpc.client_id()
    }

    /// What the consumer recorded of its receives, acks and changes of invisible duration.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.metrics
    }

    fn check_running(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::closed("the consumer is closed"));
        }
        match &*self.rpc {
            ConsumerBackend::RocketMq(r) => r.client().check_running(),
            _ => Ok(()),
        }
    }

    /// The consumer group.
    pub fn group(&self) -> &str {
        &self.group
    }

    /// The subscriptions.
    pub fn subscriptions(&self) -> Vec<(String, FilterExpression)> {
        self.subscriptions.read().clone()
    }

    /// Add or replace the subscription of `topic` (the route must exist).
    pub async fn subscribe(&self, topic: &str, filter: FilterExpression) -> Result<()> {
        if !matches!(*self.rpc, ConsumerBackend::Nats(_)) {
            crate::message::validate_topic(topic)?;
        }
        let _serial = self.changes.lock().await;
        let mut subs = self.subscriptions();
        match subs.iter_mut().find(|(t, _)| t == topic) {
            Some(s) => s.1 = filter,
            None => subs.push((topic.to_string(), filter)),
        }
        self.rpc.update_subscriptions(&subs).await?;
        *self.subscriptions.write() = subs;
        Ok(())
    }

    /// Remove the subscription of `topic`.
    pub async fn unsubscribe(&self, topic: &str) -> Result<()> {
        let _serial = self.changes.lock().await;
        let mut subs = self.subscriptions();
        subs.retain(|(t, _)| t != topic);
        self.rpc.update_subscriptions(&subs).await?;
        *self.subscriptions.write() = subs;
        Ok(())
    }

    /// Receive up to `max_messages` messages, invisible to other consumers for
    /// `invisible_duration` (`None`: [`DEFAULT_INVISIBLE_DURATION`] for RocketMQ, the
    /// consumer's own for the other protocols). An empty vector means the await duration passed
    /// with no message.
    pub async fn receive(
        &self,
        max_messages: u32,
        invisible_duration: Option<Duration>,
    ) -> Result<Vec<Arc<MessageView>>> {
        self.check_running()?;
        Error::require_count("max_messages", max_messages)?;
        if invisible_duration.is_some_and(|d| d.is_zero()) {
            return Err(Error::invalid("invisible_duration", "must be positive"));
        }
        let invisible_duration = match *self.rpc {
            ConsumerBackend::RocketMq(_) => {
                Some(invisible_duration.unwrap_or(DEFAULT_INVISIBLE_DURATION))
            }
            _ => invisible_duration,
        };
        let subs = self.subscriptions();
        if subs.is_empty() {
            return Err(Error::invalid(
                "subscriptions",
                "the consumer is not subscribed to any topic",
            ));
        }
        let receive = |sub, wait| self.receive_from(sub, max_messages, invisible_duration, wait);
        let Some(slice) = self.rpc.receive_slice().filter(|_| subs.len() > 1) else {
            let i = self.next_topic.fetch_add(1, Ordering::Relaxed) % subs.len();
            return receive(&subs[i], self.await_duration).await;
        };
        // Every subscription once without waiting, then in turn for at most a slice each.
        for sub in &subs {
            let got = receive(sub, Duration::ZERO).await?;
            if !got.is_empty() {
                return Ok(got);
            }
        }
        let deadline =
            crate::duration::tokio_deadline(tokio::time::Instant::now(), self.await_duration);
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Ok(Vec::new());
            }
            let i = self.next_topic.fetch_add(1, Ordering::Relaxed) % subs.len();
            let got = receive(&subs[i], left.min(slice)).await?;
            if !got.is_empty() {
                return Ok(got);
            }
        }
    }

    /// One receive from a queue of `topic`, waiting up to `wait`.
    async fn receive_from(
        &self,
        (topic, filter): &(String, FilterExpression),
        max_messages: u32,
        invisible_duration: Option<Duration>,
        wait: Duration,
    ) -> Result<Vec<Arc<MessageView>>> {
        let queues = self.rpc.receive_queues(topic).await?;
        if queues.is_empty() {
            return Err(Error::protocol(format!("topic {topic:?} has no queue")));
        }
        let turn = self.next_queue.load(Ordering::Relaxed);
        let queue = queues[turn % queues.len()].clone();
        let source = Arc::new(MessageSource::of_queue(
            &queue,
            &self.rpc.access_endpoints(),
        ));
        let timing = self.metrics.begin(Operation::Receive);
        let result = self
            .rpc
            .receive(ReceiveRequest {
                queue,
                filter: filter.clone(),
                batch_size: max_messages,
                invisible_duration,
                auto_renew: false,
                long_polling_timeout: wait,
            })
            .await
            .map(|r| r.into_messages(&self.metrics, topic));
        timing.finish(
            topic,
            result.as_ref().map_or(0, |m| m.len() as u64),
            result.as_ref().map(|_| ()),
        );
        let full = result
            .as_ref()
            .is_ok_and(|m| m.len() >= max_messages as usize);
        self.rotate(&queues, turn, full);
        let messages = result?;
        let mut out = Vec::with_capacity(messages.len());
        for m in messages {
            match MessageView::from_proto(m, source.clone()) {
                Ok(v) => out.push(Arc::new(v)),
                Err(e) => tracing::warn!(
                    target: "ferrymq::consumer",
                    "dropping an undecodable message from {topic}: {e}"
                ),
            }
        }
        Ok(out)
    }

    /// Choose the queue of the next receive after one from `queues[turn]`. A broker answers a
    /// receive from any of its queues, so a receive that did not come back full means the
    /// broker has nothing more right now: the next one goes to the next broker of the route
    /// (not to another queue of the same broker, which would only long-poll it again). A full
    /// receive means a backlog: the next one stays, up to [`MAX_FULL_STREAK`] in a row.
    /// Round-robin over the route's queues instead spent half the receives long-polling an
    /// empty broker while another's backlog waited (after a restart had sent a burst to one).
    fn rotate(&self, queues: &[proto::MessageQueue], turn: usize, full: bool) {
        if full && self.full_streak.fetch_add(1, Ordering::Relaxed) + 1 < MAX_FULL_STREAK {
            return;
        }
        self.full_streak.store(0, Ordering::Relaxed);
        let n = queues.len();
        let broker = |i: usize| queues[i % n].broker.as_ref().map(|b| &b.name);
        let step = (1..n)
            .find(|k| broker(turn + k) != broker(turn))
            .unwrap_or(1);
        // Concurrent receives: only the first to finish moves the rotation on.
        let _ = self.next_queue.compare_exchange(
            turn,
            turn.wrapping_add(step),
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Acknowledge `messages`: they will not be delivered again. One request per run of
    /// messages from the same source (JetStream: their confirmed acks run concurrently; JMQ4:
    /// one COMMIT_ACK once every message of a receive has its result).
    pub async fn ack(&self, messages: &[&MessageView]) -> Result<()> {
        self.check_running()?;
        for run in messages.chunk_by(|a, b| a.source() == b.source()) {
            let timing = self.metrics.begin(Operation::Ack);
            let topic = &run[0].source().topic.name;
            let results = self.rpc.ack(run[0].source(), run).await;
            match &results {
                Ok(r) => timing.finish_entries(topic, r.iter().map(|r| r.as_ref().err())),
                Err(e) => timing.finish(topic, run.len() as u64, Err(e)),
            }
            let results = results?;
            if results.len() != run.len() {
                return Err(Error::protocol(format!(
                    "the broker answered {} ack results for {} messages",
                    results.len(),
                    run.len()
                )));
            }
            for (m, r) in run.iter().zip(results) {
                r.map_err(|e| e.context(format!("ack of message {}", m.message_id())))?;
            }
        }
        Ok(())
    }

    /// Make `message` invisible for `duration` from now; later acks use the new receipt handle.
    pub async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<()> {
        self.check_running()?;
        Error::require_positive("invisible_duration", duration)?;
        let timing = self.metrics.begin(Operation::ChangeInvisibleDuration);
        let handle = self.rpc.change_invisible_duration(message, duration).await;
        timing.finish(&message.source().topic.name, 1, handle.as_ref().map(|_| ()));
        let handle = handle.map_err(|e| {
            e.context(format!(
                "change invisible duration of message {}",
                message.message_id()
            ))
        })?;
        message.set_receipt_handle(&handle);
        Ok(())
    }

    /// Tell the brokers this consumer is gone and stop the background tasks (JMQ4: first send
    /// the results of fetches partly settled). Idempotent.
    pub async fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.exporter.finish().await;
        self.rpc.close().await;
    }
}
