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

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::context::{Context, PushConsumerConfig, SettleHandle};
use super::process_queue::ProcessQueue;
use super::receive::receive_loop;
use super::settle;
use super::stats::{ConsumerStats, StatsSnapshot};
use crate::error::Result;
use crate::proto;
use crate::rocketmq::client::{Client, ClientOptions, CommandHandler};
use crate::rocketmq::consumer_rpc::{ClientRpc, ConsumerRpc};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::listener::{ConsumeResult, Delivery, Listener};
use crate::rocketmq::message_view::MessageView;
use crate::rocketmq::simple_consumer::subscription_settings;
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
    scanner: Mutex<Option<JoinHandle<()>>>,
    settler: Mutex<Option<JoinHandle<()>>>,
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
        let ctx = Arc::new(Context {
            rpc,
            config,
            stats: Arc::new(ConsumerStats::default()),
            listener,
            settle,
            fifo,
            closing: CancellationToken::new(),
            abandon: CancellationToken::new(),
            stopped: CancellationToken::new(),
        });
        let assigned: Assignments = Arc::default();
        let settler = tokio::spawn(settle::run(ctx.clone(), settle_rx));
        let scanner = tokio::spawn(scan_loop(ctx.clone(), assigned.clone()));
        Ok(Self {
            ctx,
            assigned,
            scanner: Mutex::new(Some(scanner)),
            settler: Mutex::new(Some(settler)),
        })
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
            listener.submit(vec![Delivery::new(view, move |r| {
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
    let pub_sub = subscription_settings(&options.namespace, &config.group, &config.subscriptions);
    let client = Client::new(
        options,
        proto::ClientType::PushConsumer,
        Some(config.group.clone()),
        pub_sub,
        commands.clone(),
    )?;
    client.start().await?;
    for (topic, _) in &config.subscriptions {
        if let Err(e) = client.route(topic).await {
            client.shutdown().await;
            return Err(e);
        }
    }
    let _ = commands.listener.set(listener.clone());
    Ok(ClientRpc::new(client, &config.group))
}

async fn scan_loop<R: ConsumerRpc>(ctx: Arc<Context<R>>, assigned: Assignments) {
    let mut first_failure = true;
    loop {
        for (topic, filter) in &ctx.config.subscriptions {
            let result = tokio::select! {
                () = ctx.closing.cancelled() => return,
                r = ctx.rpc.query_assignment(topic) => r,
            };
            match result {
                Ok(queues) => {
                    first_failure = true;
                    apply_assignment(&ctx, &assigned, topic, filter, &queues);
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
            () = tokio::time::sleep(ctx.config.assignment_interval) => {}
        }
    }
}

fn apply_assignment<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    assigned: &Assignments,
    topic: &str,
    filter: &FilterExpression,
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
    map.retain(|key, a| {
        if key.topic != topic || latest.contains_key(key) {
            return true;
        }
        tracing::info!(
            target: "ferrymq::consumer",
            "queue {} of {} on {} is no longer assigned to group {}",
            key.id, key.topic, key.broker, ctx.config.group
        );
        a.pq.drop_queue();
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
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::sync::atomic::AtomicBool;

    use super::*;
    use crate::rocketmq::consumer_rpc::fake::FakeBroker;
    use crate::rocketmq::consumer_rpc::ConsumerSettings;
    use crate::rocketmq::listener::{BatchListener, WorkerPool};
    use crate::rocketmq::message_view::MessageView;
    use crate::rocketmq::push::context::DEFAULT_MAX_CONCURRENT_RECEIVES;
    use crate::rocketmq::settings::{Backoff, RetryPolicy};

    pub(crate) struct FnListener<F>(F);

    impl<F> BatchListener for FnListener<F>
    where
        F: Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static,
    {
        fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
            results.extend(messages.iter().map(|m| (self.0)(m)));
        }
    }

    pub(crate) fn settings(fifo: bool, max_attempts: u32) -> ConsumerSettings {
        ConsumerSettings {
            fifo,
            receive_batch_size: 8,
            long_polling_timeout: Duration::from_secs(20),
            retry_policy: RetryPolicy {
                max_attempts,
                backoff: Backoff::Exponential {
                    initial: Duration::from_millis(10),
                    max: Duration::from_millis(40),
                    multiplier: 2.0,
                },
            },
        }
    }

    pub(crate) fn config() -> PushConsumerConfig {
        PushConsumerConfig {
            group: "g".into(),
            subscriptions: vec![("t".into(), FilterExpression::all())],
            assignment_interval: Duration::from_millis(200),
            ..Default::default()
        }
    }

    pub(crate) fn start<F>(
        broker: &Arc<FakeBroker>,
        config: PushConsumerConfig,
        threads: usize,
        f: F,
    ) -> PushConsumer<FakeBroker>
    where
        F: Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static,
    {
        let pool = WorkerPool::start(Arc::new(FnListener(f)), threads, 64).unwrap();
        PushConsumer::start(broker.clone(), config, Arc::new(pool)).unwrap()
    }

    pub(crate) async fn wait_for(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn consumes_and_acks_in_batches() {
        let broker = FakeBroker::new(4, settings(false, 3));
        for i in 0..400 {
            broker.send(i % 4, &format!("m{i}"), b"x", None);
        }
        let c = start(&broker, config(), 2, |_| ConsumeResult::Success);
        wait_for("all acked", || broker.acked.lock().len() == 400).await;
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        let s = c.stats();
        assert_eq!(s.received, 400);
        assert_eq!(s.consumed_ok, 400);
        assert_eq!(s.acked, 400);
        assert_eq!(s.process_queues, 4);
        assert!(
            broker.ack_rpcs.load(Ordering::Relaxed) < 400,
            "acks were not batched"
        );
        let report = c.shutdown(Duration::from_secs(5)).await;
        assert_eq!(
            report,
            ShutdownReport {
                abandoned: 0,
                callbacks_finished: true,
                unsettled: 0
            }
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failure_is_redelivered_after_the_policy_delay_then_dead_lettered_by_the_broker() {
        let broker = FakeBroker::new(1, settings(false, 3));
        broker.send(0, "ok-on-2", b"x", None);
        broker.send(0, "always-fails", b"x", None);
        let c = start(&broker, config(), 1, |m| {
            if m.message_id() == "ok-on-2" && m.delivery_attempt() >= 2 {
                ConsumeResult::Success
            } else {
                ConsumeResult::Failure
            }
        });
        wait_for("acked after retry", || broker.acked.lock().len() == 1).await;
        wait_for("dead-lettered", || broker.dlq.lock().len() == 1).await;
        let nacked = broker.nacked.lock().clone();
        // The delay follows the policy for each attempt: 10 ms after the 1st, 20 ms after the 2nd.
        assert!(nacked.contains(&("ok-on-2".into(), 1, Duration::from_millis(10))));
        assert!(nacked.contains(&("always-fails".into(), 2, Duration::from_millis(20))));
        assert_eq!(broker.dlq.lock()[0].0, "always-fails");
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        c.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_slow_listener_does_not_grow_the_cache_past_its_limits() {
        let broker = FakeBroker::new(4, settings(false, 3));
        for i in 0..300 {
            broker.send(i % 4, &format!("m{i}"), &[0u8; 100], None);
        }
        let mut cfg = config();
        cfg.max_cache_messages = 20;
        let c = start(&broker, cfg, 2, |_| {
            std::thread::sleep(Duration::from_millis(2));
            ConsumeResult::Success
        });
        wait_for("all acked", || broker.acked.lock().len() == 300).await;
        let s = c.stats();
        assert!(s.max_cached_messages <= 20, "{s:?}");
        assert!(s.cache_full_waits > 0, "{s:?}");
        c.shutdown(Duration::from_secs(5)).await;

        let broker = FakeBroker::new(2, settings(false, 3));
        for i in 0..100 {
            broker.send(i % 2, &format!("m{i}"), &[0u8; 1000], None);
        }
        let mut cfg = config();
        cfg.max_cache_bytes = 5_000;
        cfg.receive_batch_size = Some(2);
        let c = start(&broker, cfg, 1, |_| {
            std::thread::sleep(Duration::from_millis(1));
            ConsumeResult::Success
        });
        wait_for("all acked", || broker.acked.lock().len() == 100).await;
        let s = c.stats();
        // Sizes are known only after a receive, so each receive in flight (2 process queues,
        // up to DEFAULT_MAX_CONCURRENT_RECEIVES each) may pass the byte limit by one batch
        // (2 messages of about 1 KB) — never more.
        let in_flight = DEFAULT_MAX_CONCURRENT_RECEIVES * 2;
        assert!(s.max_cached_bytes <= 5_000 + in_flight * 2 * 1_100, "{s:?}");
        c.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn throttled_and_failed_receives_back_off_and_recover() {
        let broker = FakeBroker::new(1, settings(false, 3));
        broker.throttle_receives.store(3, Ordering::Relaxed);
        broker.fail_receives.store(1, Ordering::Relaxed);
        for i in 0..10 {
            broker.send(0, &format!("m{i}"), b"x", None);
        }
        let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
        wait_for("all acked", || broker.acked.lock().len() == 10).await;
        let s = c.stats();
        assert_eq!(s.receive_throttled, 3);
        assert_eq!(s.receive_failures, 1);
        c.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn failed_acks_are_retried_and_invalid_handles_are_not() {
        let broker = FakeBroker::new(1, settings(false, 3));
        broker.fail_acks.store(1, Ordering::Relaxed);
        for i in 0..5 {
            broker.send(0, &format!("m{i}"), b"x", None);
        }
        let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
        wait_for("all acked", || broker.acked.lock().len() == 5).await;
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        assert!(c.stats().settle_retries >= 1);
        c.shutdown(Duration::from_secs(5)).await;

        let broker = FakeBroker::new(1, settings(false, 3));
        broker.invalid_acks.store(1, Ordering::Relaxed);
        broker.send(0, "m0", b"x", None);
        let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
        wait_for("refused", || c.stats().invalid_receipt_handles == 1).await;
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        let s = c.stats();
        assert_eq!(s.settle_retries, 0);
        assert_eq!(s.acked, 0);
        c.shutdown(Duration::from_secs(5)).await;
    }

    pub(crate) fn fifo_broker(max_attempts: u32) -> Arc<FakeBroker> {
        let broker = FakeBroker::new(1, settings(true, max_attempts));
        for i in 0..30 {
            let group = format!("g{}", i % 3);
            broker.send(0, &format!("{group}-{i:02}"), b"x", Some(&group));
        }
        broker
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fifo_keeps_group_order_under_failures_and_dead_letters_after_max_attempts() {
        for accelerator in [false, true] {
            let broker = fifo_broker(3);
            let seen: Arc<Mutex<Vec<(String, i32)>>> = Arc::default();
            let s2 = seen.clone();
            let mut cfg = config();
            cfg.fifo_accelerator = accelerator;
            let c = start(&broker, cfg, 4, move |m| {
                s2.lock()
                    .push((m.message_id().to_string(), m.delivery_attempt()));
                let id = m.message_id();
                // Fails once, then succeeds; g2-05 always fails and goes to the DLQ.
                if (id == "g1-04" && m.delivery_attempt() == 1) || id == "g2-05" {
                    ConsumeResult::Failure
                } else {
                    ConsumeResult::Success
                }
            });
            assert!(c.is_fifo());
            wait_for("settled", || {
                broker.acked.lock().len() == 29 && broker.dlq.lock().len() == 1
            })
            .await;
            assert_eq!(broker.dlq.lock()[0], ("g2-05".to_string(), 3));
            let seen = seen.lock().clone();
            for g in ["g0", "g1", "g2"] {
                let order: Vec<&(String, i32)> =
                    seen.iter().filter(|(id, _)| id.starts_with(g)).collect();
                let ids: Vec<&str> = order.iter().map(|(id, _)| id.as_str()).collect();
                let mut sorted = ids.clone();
                sorted.sort_unstable();
                assert_eq!(ids, sorted, "group {g} out of order: {ids:?}");
            }
            assert!(seen.contains(&("g1-04".into(), 2)));
            assert!(seen.contains(&("g2-05".into(), 3)));
            assert!(!seen.contains(&("g2-05".into(), 4)));
            assert!(broker.nacked.lock().is_empty(), "FIFO retries are local");
            let s = c.stats();
            assert_eq!(s.local_retries, 3);
            assert_eq!(s.dead_lettered, 1);
            c.shutdown(Duration::from_secs(5)).await;
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_accelerator_runs_message_groups_in_parallel() {
        // g0's message waits until g1's has been consumed: only possible if groups run in
        // parallel.
        let broker = FakeBroker::new(1, settings(true, 3));
        broker.send(0, "a", b"x", Some("g0"));
        broker.send(0, "b", b"x", Some("g1"));
        let b_done = Arc::new(AtomicBool::new(false));
        let b2 = b_done.clone();
        let mut cfg = config();
        cfg.fifo_accelerator = true;
        let c = start(&broker, cfg, 2, move |m| {
            if m.message_id() == "a" {
                let deadline = Instant::now() + Duration::from_secs(5);
                while !b2.load(Ordering::Acquire) {
                    if Instant::now() > deadline {
                        return ConsumeResult::Failure;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            } else {
                b2.store(true, Ordering::Release);
            }
            ConsumeResult::Success
        });
        wait_for("both acked", || broker.acked.lock().len() == 2).await;
        assert_eq!(c.stats().consumed_failed, 0);
        c.shutdown(Duration::from_secs(5)).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn shutdown_finishes_running_callbacks_and_their_acks() {
        let broker = FakeBroker::new(2, settings(false, 3));
        for i in 0..200 {
            broker.send(i % 2, &format!("m{i}"), b"x", None);
        }
        let consumed: Arc<Mutex<HashMap<String, usize>>> = Arc::default();
        let c2 = consumed.clone();
        let c = start(&broker, config(), 2, move |m| {
            std::thread::sleep(Duration::from_millis(2));
            *c2.lock().entry(m.message_id().to_string()).or_default() += 1;
            ConsumeResult::Success
        });
        wait_for("some consumed", || consumed.lock().len() >= 20).await;
        let report = c.shutdown(Duration::from_secs(10)).await;
        assert!(report.callbacks_finished);
        assert_eq!(report.unsettled, 0);
        // Everything the listener consumed was acked; nothing else was.
        let consumed = consumed.lock().clone();
        let acked = broker.acked.lock().clone();
        assert_eq!(acked.len(), consumed.len());
        assert!(acked.iter().all(|id| consumed.contains_key(id)));
        assert_eq!(c.stats().cached_messages, 0);
    }
}
