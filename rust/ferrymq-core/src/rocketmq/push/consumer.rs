//! [`PushConsumer`], the top of the push consumer: assignments, process queues, consumption and
//! shutdown.
//!
//! [`PushConsumer::start`] spawns an assignment scan (every [`PushConsumerConfig::assignment_interval`]
//! it asks the broker which queues of each subscribed topic this group should read, creating a
//! [`ProcessQueue`] with its receive loop for each new queue and dropping the ones that went
//! away) and the settler task. Received messages go through the consume service to a
//! [`Listener`]; results are settled by [`settle`].
//!
//! [`PushConsumer::shutdown`] stops receiving, abandons messages whose callback has not started
//! (they were never consumed, so the broker redelivers them), waits for running callbacks and
//! their acks up to a deadline, and reports what was left.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::context::{Context, PushConsumerConfig, SettleHandle};
use super::process_queue::ProcessQueue;
use super::receive::receive_loop;
use super::settle;
use super::settle_events::{self, SettleEvent, SettleEventReceiver};
use super::stats::{ConsumerStats, StatsSnapshot};
use crate::error::Result;
use crate::metrics::otlp::Exporter;
use crate::metrics::ClientMetrics;
use crate::proto;
use crate::rocketmq::client::{Client, ClientOptions, CommandHandler};
use crate::rocketmq::consumer_rpc::{ClientRpc, ConsumerRpc};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::listener::{ConsumeResult, Delivery, Listener};
use crate::rocketmq::message_view::MessageView;
use crate::status;

/// Identifies an assigned queue across scans.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct QueueKey {
    topic: String,
    broker: String,
    id: i32,
}

impl QueueKey {
    fn of(mq: &proto::MessageQueue) -> Self {
        Self {
            topic: mq
                .topic
                .as_ref()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            broker: mq
                .broker
                .as_ref()
                .map(|b| b.name.clone())
                .unwrap_or_default(),
            id: mq.id,
        }
    }
}

struct Assigned {
    pq: Arc<ProcessQueue>,
    task: JoinHandle<()>,
}

type Assignments = Arc<Mutex<HashMap<QueueKey, Assigned>>>;

/// What [`PushConsumer::shutdown`] left behind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Messages received but never given to the listener (the broker redelivers them).
    pub abandoned: usize,
    /// Whether every running listener call finished before the deadline.
    pub callbacks_finished: bool,
    /// Messages still unsettled at the deadline (the broker redelivers them).
    pub unsettled: usize,
}

/// A running push consumer.
pub struct PushConsumer<R: ConsumerRpc> {
    ctx: Arc<Context<R>>,
    assigned: Assignments,
    /// Serializes subscription changes (each tells the backend the whole new list).
    changes: tokio::sync::Mutex<()>,
    scanner: Mutex<Option<JoinHandle<()>>>,
    settler: Mutex<Option<JoinHandle<()>>>,
    /// Settle attempts, when `config.settle_events` asked for them.
    events: Option<SettleEventReceiver>,
    /// Exports the Java client's histograms where the server asks.
    exporter: Exporter,
}

fn readable(mq: &proto::MessageQueue) -> bool {
    use proto::Permission;
    let p = mq.permission;
    let leader = mq.broker.as_ref().is_none_or(|b| b.id == 0);
    leader && (p == Permission::Read as i32 || p == Permission::ReadWrite as i32)
}

impl<R: ConsumerRpc> PushConsumer<R> {
    /// Start consuming. Must be called inside the tokio runtime. `rpc` must already hold the
    /// broker's settings (FIFO or not is decided now, from them).
    pub fn start(
        rpc: Arc<R>,
        config: PushConsumerConfig,
        listener: Arc<dyn Listener>,
    ) -> Result<Self> {
        config.validate()?;
        let fifo = rpc.settings().fifo;
        let (settle, settle_rx) = SettleHandle::channel();
        let metrics = ClientMetrics::new(rpc.client_identity().with_group(config.group.clone()));
        let (events_tx, events) = config.settle_events.map(settle_events::channel).unzip();
        let ctx = Arc::new(Context {
            metrics,
            rpc,
            subscriptions: RwLock::new(config.subscriptions.clone()),
            rescan: Notify::new(),
            config,
            stats: Arc::new(ConsumerStats::default()),
            listener,
            settle,
            fifo,
            closing: CancellationToken::new(),
            abandon: CancellationToken::new(),
            stopped: CancellationToken::new(),
            events: events_tx,
        });
        let assigned: Assignments = Arc::default();
        let settler = tokio::spawn(settle::run(ctx.clone(), settle_rx));
        let rpc = ctx.rpc.clone();
        let exporter = Exporter::start(ctx.metrics.clone(), move || rpc.metric_collector());
        let scanner = tokio::spawn(scan_loop(ctx.clone(), assigned.clone()));
        Ok(Self {
            ctx,
            assigned,
            changes: tokio::sync::Mutex::new(()),
            scanner: Mutex::new(Some(scanner)),
            settler: Mutex::new(Some(settler)),
            events,
            exporter,
        })
    }

    /// Up to `max` settle attempts reported since the last call (see [`SettleEvent`]), waiting
    /// for the first; `None` when not observed (`config.settle_events`), or once the consumer
    /// is closed and every event was read.
    pub async fn settle_events(&self, max: usize) -> Option<Vec<SettleEvent>> {
        self.events.as_ref()?.next(max, &self.ctx.stopped).await
    }

    /// Settle events never delivered (the shutdown deadline passed while the channel was full).
    pub fn undelivered_settle_events(&self) -> u64 {
        self.events
            .as_ref()
            .map_or(0, SettleEventReceiver::undelivered)
    }

    /// The RPCs the consumer sends.
    pub fn rpc(&self) -> &Arc<R> {
        &self.ctx.rpc
    }

    /// Whether messages are consumed in FIFO order.
    pub fn is_fifo(&self) -> bool {
        self.ctx.fifo
    }

    /// The configuration.
    pub fn config(&self) -> &PushConsumerConfig {
        &self.ctx.config
    }

    /// What the consumer recorded of its receives, settle RPCs and listener calls.
    pub fn metrics(&self) -> &ClientMetrics {
        &self.ctx.metrics
    }

    /// Live counters.
    pub fn stats(&self) -> StatsSnapshot {
        let mut s = self.ctx.stats.snapshot();
        s.listener_queued = self.ctx.listener.queued();
        s.listener_running = self.ctx.listener.running();
        s
    }

    /// The process queues, for introspection.
    pub fn process_queues(&self) -> Vec<Arc<ProcessQueue>> {
        self.assigned
            .lock()
            .values()
            .map(|a| a.pq.clone())
            .collect()
    }

    /// The subscriptions read now.
    pub fn subscriptions(&self) -> Vec<(String, FilterExpression)> {
        self.ctx.subscriptions.read().clone()
    }

    /// Read `topic` with `filter` from now on: a new topic's queues are assigned at once (the
    /// assignment scan runs early); for a subscribed topic the filter is replaced, and its
    /// process queues are dropped and created again with the new one (messages already
    /// received are still consumed). The backend checks it first (the topic's route, the
    /// filter's support); on error nothing changes.
    ///
    /// Receives in flight with the previous filter finish first (what they bring is handed
    /// back to the broker, see [`ProcessQueue::retire`]); a message they meet that does not
    /// match the previous filter is skipped by the broker, as with every RocketMQ client.
    pub async fn subscribe(&self, topic: &str, filter: FilterExpression) -> Result<()> {
        crate::message::validate_topic(topic)?;
        self.change_subscriptions(topic, Some(filter)).await
    }

    /// Stop reading `topic`: no new receive from it; messages already received are still
    /// consumed and settled, what receives in flight bring is handed back to the broker
    /// ([`ProcessQueue::retire`]). Unsubscribing a topic not subscribed does nothing.
    pub async fn unsubscribe(&self, topic: &str) -> Result<()> {
        self.change_subscriptions(topic, None).await
    }

    async fn change_subscriptions(
        &self,
        topic: &str,
        filter: Option<FilterExpression>,
    ) -> Result<()> {
        if self.ctx.is_closing() {
            return Err(crate::error::Error::closed("the push consumer is closed"));
        }
        let _serial = self.changes.lock().await;
        let mut subs = self.subscriptions();
        let before = subs.clone();
        match (&filter, subs.iter_mut().find(|(t, _)| t == topic)) {
            (Some(f), Some(s)) => s.1 = f.clone(),
            (Some(f), None) => subs.push((topic.to_string(), f.clone())),
            (None, _) => subs.retain(|(t, _)| t != topic),
        }
        if subs == before {
            return Ok(());
        }
        self.ctx.rpc.update_subscriptions(&subs).await?;
        {
            // Under the assignment lock, so a scan that queried the old subscriptions cannot
            // create queues of a topic just retired.
            let mut map = self.assigned.lock();
            *self.ctx.subscriptions.write() = subs;
            map.retain(|key, a| {
                if key.topic != topic {
                    return true;
                }
                a.pq.retire();
                false
            });
            self.ctx
                .stats
                .process_queues
                .store(map.len(), Ordering::Relaxed);
        }
        self.ctx.rescan.notify_one();
        Ok(())
    }

    /// Stop: no new receives or callbacks, unstarted messages abandoned, running callbacks and
    /// outstanding acks waited for until `timeout`. Idempotent.
    pub async fn shutdown(&self, timeout: Duration) -> ShutdownReport {
        let deadline = crate::duration::deadline(Instant::now(), timeout);
        let ctx = &self.ctx;
        ctx.closing.cancel();
        let receivers: Vec<Assigned> = self.assigned.lock().drain().map(|(_, a)| a).collect();
        for a in &receivers {
            a.pq.drop_queue();
        }
        for a in receivers {
            let _ = a.task.await;
        }
        ctx.stats.process_queues.store(0, Ordering::Relaxed);
        let scanner = self.scanner.lock().take();
        if let Some(t) = scanner {
            let _ = t.await;
        }
        // Stop the listener: unstarted deliveries come back, running ones get until the deadline.
        let listener = ctx.listener.clone();
        let remaining = deadline.saturating_duration_since(Instant::now());
        let stopped = tokio::task::spawn_blocking(move || listener.shutdown(remaining))
            .await
            .unwrap_or_default();
        let abandoned_count = stopped.messages();
        let callbacks_finished = stopped.finished;
        stopped.abandon();
        // Outstanding acks, nacks and DLQ forwards until the deadline.
        loop {
            let changed = ctx.stats.cache_changed();
            tokio::pin!(changed);
            changed.as_mut().enable();
            if ctx.stats.cached() == 0 {
                break;
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline.into()) => break,
                () = changed => {}
            }
        }
        let unsettled = ctx.stats.cached();
        ctx.abandon.cancel();
        ctx.stopped.cancel();
        let settler = self.settler.lock().take();
        if let Some(t) = settler {
            let _ = t.await;
        }
        self.exporter.finish().await;
        if abandoned_count > 0 || unsettled > 0 || !callbacks_finished {
            tracing::info!(
                target: "ferrymq::consumer",
                "consumer {} closed: {abandoned_count} messages not consumed, {unsettled} not \
                 settled (the broker redelivers them); callbacks finished: {callbacks_finished}",
                ctx.config.group
            );
        }
        ShutdownReport {
            abandoned: abandoned_count,
            callbacks_finished,
            unsettled,
        }
    }
}

impl<R: ConsumerRpc> Drop for PushConsumer<R> {
    fn drop(&mut self) {
        self.ctx.closing.cancel();
        self.ctx.abandon.cancel();
        self.ctx.stopped.cancel();
        for a in self.assigned.lock().values() {
            a.pq.drop_queue();
        }
    }
}

/// `FAILED_TO_CONSUME_MESSAGE`, the `VerifyMessageResult` status of a message not consumed.
const FAILED_TO_CONSUME_MESSAGE: i32 = 60000;

/// Telemetry commands of a push consumer: `VerifyMessageCommand` runs the listener on the
/// message and reports whether it consumed it.
#[derive(Default)]
pub struct ConsumerCommands {
    listener: std::sync::OnceLock<Arc<dyn Listener>>,
}

impl CommandHandler for ConsumerCommands {
    fn verify_message(
        &self,
        client: Client,
        message: MessageView,
    ) -> futures::future::BoxFuture<'static, (i32, String)> {
        let listener = self.listener.get().cloned();
        Box::pin(async move {
            let Some(listener) = listener else {
                return (
                    status::NOT_IMPLEMENTED,
                    "the consumer is not running".into(),
                );
            };
            let _ = client;
            let view = Arc::new(message);
            let (tx, rx) = tokio::sync::oneshot::channel();
            listener.submit(vec![Delivery::new(view, move |r, _| {
                let _ = tx.send(r);
            })]);
            match rx.await {
                Ok(Some(ConsumeResult::Success)) => (status::OK, "OK".into()),
                _ => (
                    FAILED_TO_CONSUME_MESSAGE,
                    "the listener did not consume the message".into(),
                ),
            }
        })
    }
}

/// Connect the RocketMQ side of a push consumer: send the settings on the telemetry stream and
/// wait for the broker's (which decide FIFO or not), fetch the routes of the subscribed topics,
/// and answer the broker's `VerifyMessageCommand`s with `listener`. On failure the client is
/// shut down.
pub async fn connect_rpc(
    options: ClientOptions,
    config: &PushConsumerConfig,
    listener: &Arc<dyn Listener>,
) -> Result<ClientRpc> {
    config.validate()?;
    let commands = Arc::new(ConsumerCommands::default());
    let rpc = ClientRpc::connect(
        options,
        proto::ClientType::PushConsumer,
        &config.group,
        &config.subscriptions,
        commands.clone(),
    )
    .await?;
    let _ = commands.listener.set(listener.clone());
    Ok(rpc)
}

async fn scan_loop<R: ConsumerRpc>(ctx: Arc<Context<R>>, assigned: Assignments) {
    let mut first_failure = true;
    loop {
        expire_idle(&ctx, &assigned);
        let subscriptions = ctx.subscriptions.read().clone();
        for (topic, _) in &subscriptions {
            let result = tokio::select! {
                () = ctx.closing.cancelled() => return,
                r = ctx.rpc.query_assignment(topic) => r,
            };
            match result {
                Ok(queues) => {
                    first_failure = true;
                    apply_assignment(&ctx, &assigned, topic, &queues);
                }
                Err(e) => {
                    if first_failure {
                        tracing::warn!(
                            target: "ferrymq::consumer",
                            "querying the assignment of {topic} for group {} failed (kept the \
                             current queues, retrying every {:?}): {e}",
                            ctx.config.group, ctx.config.assignment_interval
                        );
                    }
                    first_failure = false;
                }
            }
        }
        tokio::select! {
            () = ctx.closing.cancelled() => return,
            () = ctx.rescan.notified() => {}
            () = tokio::time::sleep(ctx.config.assignment_interval) => {}
        }
    }
}

/// Drop the process queues whose receive loop ended or shows no sign of life for longer than
/// the idle limit (a receive that never answers, a loop that stopped on an error it could
/// not recover from): the scan that follows creates them again.
fn expire_idle<R: ConsumerRpc>(ctx: &Arc<Context<R>>, assigned: &Assignments) {
    let max_idle = ctx.max_idle();
    let mut map = assigned.lock();
    map.retain(|key, a| {
        let idle = a.pq.idle_for();
        if !a.task.is_finished() && idle < max_idle {
            return true;
        }
        tracing::warn!(
            target: "ferrymq::consumer",
            "process queue {} of {} on {} idle for {idle:?} (limit {max_idle:?}): created again",
            key.id, key.topic, key.broker
        );
        a.pq.drop_queue();
        ctx.stats.on_queue_expired(1);
        false
    });
    ctx.stats.process_queues.store(map.len(), Ordering::Relaxed);
}

fn apply_assignment<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    assigned: &Assignments,
    topic: &str,
    queues: &[proto::MessageQueue],
) {
    if ctx.is_closing() {
        return;
    }
    let latest: HashMap<QueueKey, &proto::MessageQueue> = queues
        .iter()
        .filter(|q| readable(q))
        .map(|q| (QueueKey::of(q), q))
        .collect();
    let mut map = assigned.lock();
    // Read under the assignment lock: a topic unsubscribed meanwhile gets no queue back.
    let Some(filter) = ctx.filter_of(topic) else {
        return;
    };
    map.retain(|key, a| {
        if key.topic != topic || latest.contains_key(key) {
            return true;
        }
        tracing::info!(
            target: "ferrymq::consumer",
            "queue {} of {} on {} is no longer assigned to group {}",
            key.id, key.topic, key.broker, ctx.config.group
        );
        a.pq.retire();
        false
    });
    for (key, mq) in latest {
        if map.contains_key(&key) {
            continue;
        }
        let pq = Arc::new(ProcessQueue::new(
            mq.clone(),
            filter.clone(),
            ctx.closing.child_token(),
            ctx.stats.clone(),
            &ctx.rpc.access_endpoints(),
        ));
        let task = tokio::spawn(receive_loop(ctx.clone(), pq.clone(), true));
        map.insert(key, Assigned { pq, task });
    }
    ctx.stats.process_queues.store(map.len(), Ordering::Relaxed);
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
pub(crate) mod tests;
