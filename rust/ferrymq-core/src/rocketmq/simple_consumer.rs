//! The simple consumer: receive, ack and change invisible duration, as thin wrappers over the
//! RPCs. Nothing is retried internally (client workflow, "simple consumer"): every failure goes
//! to the caller, who owns the whole lifecycle of each message.
//!
//! `receive` takes the subscribed topics in turn and, within a topic, its readable queues in
//! turn; the broker long-polls for up to the await duration when the queue is empty.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::error::{Error, Result};
use crate::proto;
use crate::rocketmq::client::{Client, ClientOptions, NoCommands};
use crate::rocketmq::consumer_rpc::{ClientRpc, ConsumerRpc, ReceiveRequest};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};

/// The longest long-polling time the broker honours (the proxy clamps to [5 s, 20 s]).
pub const DEFAULT_AWAIT_DURATION: Duration = Duration::from_secs(20);
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

    fn validate(&self) -> Result<()> {
        if self.group.trim().is_empty() {
            return Err(Error::invalid("group", "must not be blank"));
        }
        for (topic, _) in &self.subscriptions {
            crate::message::validate_topic(topic)?;
        }
        if self.await_duration.is_zero() {
            return Err(Error::invalid("await_duration", "must be positive"));
        }
        Ok(())
    }
}

/// A started simple consumer.
#[derive(Debug)]
pub struct SimpleConsumer {
    rpc: ClientRpc,
    group: String,
    subscriptions: RwLock<Vec<(String, FilterExpression)>>,
    /// Serializes subscription changes (each sends the whole new list).
    changes: tokio::sync::Mutex<()>,
    await_duration: Duration,
    next_topic: AtomicUsize,
    next_queue: AtomicUsize,
    full_streak: AtomicUsize,
}

impl SimpleConsumer {
    /// Connect: send the settings on the telemetry stream, wait for the broker's, and fetch the
    /// routes of the subscribed topics. Fails (and leaves nothing running) if any step fails.
    pub async fn connect(options: ClientOptions, config: SimpleConsumerConfig) -> Result<Self> {
        config.validate()?;
        let rpc = ClientRpc::connect(
            options,
            proto::ClientType::SimpleConsumer,
            &config.group,
            &config.subscriptions,
            Arc::new(NoCommands),
        )
        .await?;
        Ok(Self {
            rpc,
            group: config.group,
            subscriptions: RwLock::new(config.subscriptions),
            changes: tokio::sync::Mutex::new(()),
            await_duration: config.await_duration,
            next_topic: AtomicUsize::new(0),
            next_queue: AtomicUsize::new(0),
            full_streak: AtomicUsize::new(0),
        })
    }

    /// The client layer.
    pub fn client(&self) -> &Client {
        self.rpc.client()
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
        crate::message::validate_topic(topic)?;
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
    /// `invisible_duration`. An empty vector means the await duration passed with no message.
    pub async fn receive(
        &self,
        max_messages: u32,
        invisible_duration: Duration,
    ) -> Result<Vec<Arc<MessageView>>> {
        self.client().check_running()?;
        if max_messages == 0 {
            return Err(Error::invalid("max_messages", "must be at least 1"));
        }
        if invisible_duration.is_zero() {
            return Err(Error::invalid("invisible_duration", "must be positive"));
        }
        let (topic, filter) = {
            let subs = self.subscriptions.read();
            if subs.is_empty() {
                return Err(Error::invalid(
                    "subscriptions",
                    "the consumer is not subscribed to any topic",
                ));
            }
            let i = self.next_topic.fetch_add(1, Ordering::Relaxed) % subs.len();
            subs[i].clone()
        };
        let queues = self.rpc.readable_queues(&topic).await?;
        let turn = self.next_queue.load(Ordering::Relaxed);
        let queue = queues[turn % queues.len()].clone();
        let source = Arc::new(MessageSource::of_queue(
            &queue,
            self.client().access_endpoints(),
        ));
        let result = self
            .rpc
            .receive_simple(ReceiveRequest {
                queue,
                filter,
                batch_size: max_messages,
                invisible_duration: Some(invisible_duration),
                auto_renew: false,
                long_polling_timeout: self.await_duration,
            })
            .await;
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

    /// Acknowledge `message`: it will not be delivered again.
    pub async fn ack(&self, message: &MessageView) -> Result<()> {
        self.client().check_running()?;
        let mut results = self.rpc.ack(message.source(), &[message]).await?;
        match results.pop() {
            Some(r) => r,
            None => Err(Error::protocol("the broker answered no ack result")),
        }
        .map_err(|e| e.context(format!("ack of message {}", message.message_id())))
    }

    /// Make `message` invisible for `duration` from now; later acks use the new receipt handle.
    pub async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<()> {
        self.client().check_running()?;
        if duration.is_zero() {
            return Err(Error::invalid("invisible_duration", "must be positive"));
        }
        let handle = self
            .rpc
            .change_invisible_duration(message, duration)
            .await
            .map_err(|e| {
                e.context(format!(
                    "change invisible duration of message {}",
                    message.message_id()
                ))
            })?;
        message.set_receipt_handle(&handle);
        Ok(())
    }

    /// Tell the brokers this consumer is gone and stop the background tasks. Idempotent.
    pub async fn close(&self) {
        self.client().shutdown().await;
    }
}
