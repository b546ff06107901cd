//! Tests of the push consumer against the in-memory broker.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;

use super::*;
use crate::rocketmq::consumer_rpc::fake::FakeBroker;
use crate::rocketmq::consumer_rpc::ConsumerSettings;
use crate::rocketmq::listener::BatchListener;
use crate::rocketmq::message_view::MessageView;
use crate::rocketmq::push::context::DEFAULT_MAX_CONCURRENT_RECEIVES;
use crate::rocketmq::push::settle_events::SettleOp;
use crate::rocketmq::settings::{Backoff, RetryPolicy};
use crate::rocketmq::worker_pool::WorkerPool;
use crate::test_support::wait_for;

pub(crate) struct FnListener<F>(pub(crate) F);

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

/// A broker with `queues` queues (3 attempts) holding `n` messages `m<i>` with `body`, spread
/// over the queues in turn.
fn loaded(queues: i32, n: i32, body: &[u8]) -> Arc<FakeBroker> {
    let broker = FakeBroker::new(queues, settings(false, 3));
    for i in 0..n {
        broker.send(i % queues, &format!("m{i}"), body, None);
    }
    broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumes_and_acks_in_batches() {
    let broker = loaded(4, 400, b"x");
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
    let broker = loaded(4, 300, &[0u8; 100]);
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

    let broker = loaded(2, 100, &[0u8; 1000]);
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
    let broker = loaded(1, 10, b"x");
    broker.throttle_receives.store(3, Ordering::Relaxed);
    broker.fail_receives.store(1, Ordering::Relaxed);
    let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
    wait_for("all acked", || broker.acked.lock().len() == 10).await;
    let s = c.stats();
    assert_eq!(s.receive_throttled, 3);
    assert_eq!(s.receive_failures, 1);
    c.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_acks_are_retried_and_invalid_handles_are_not() {
    let broker = loaded(1, 5, b"x");
    broker.fail_acks.store(1, Ordering::Relaxed);
    let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
    wait_for("all acked", || broker.acked.lock().len() == 5).await;
    wait_for("cache drained", || c.stats().cached_messages == 0).await;
    assert!(c.stats().settle_retries >= 1);
    c.shutdown(Duration::from_secs(5)).await;

    let broker = loaded(1, 1, b"x");
    broker.invalid_acks.store(1, Ordering::Relaxed);
    let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
    wait_for("refused", || c.stats().invalid_receipt_handles == 1).await;
    wait_for("cache drained", || c.stats().cached_messages == 0).await;
    let s = c.stats();
    assert_eq!(s.settle_retries, 0);
    assert_eq!(s.acked, 0);
    c.shutdown(Duration::from_secs(5)).await;
}

/// A FIFO broker (one queue, `max_attempts`) holding `n` messages `g<k>-<i>` of `groups`
/// message groups in turn.
pub(crate) fn fifo_broker(max_attempts: u32, groups: usize, n: usize) -> Arc<FakeBroker> {
    let broker = FakeBroker::new(1, settings(true, max_attempts));
    for i in 0..n {
        let group = format!("g{}", i % groups);
        broker.send(0, &format!("{group}-{i:02}"), b"x", Some(&group));
    }
    broker
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_keeps_group_order_under_failures_and_dead_letters_after_max_attempts() {
    for accelerator in [false, true] {
        let broker = fifo_broker(3, 3, 30);
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
        // Every listener call is recorded: 30 messages, 4 failed attempts (g1-04 once, g2-05
        // three times), then the dead-letter forward and the acks (recorded before their
        // messages leave the cache).
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        let m = c.metrics().summary(&[50.0]).unwrap();
        let process = m.get(crate::metrics::Operation::Process).unwrap();
        assert_eq!((process.messages, process.failed_messages), (33, 4));
        assert_eq!(m.ok_messages(crate::metrics::Operation::DeadLetter), 1);
        assert_eq!(m.ok_messages(crate::metrics::Operation::Ack), 29);
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
    let broker = loaded(2, 200, b"x");
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_change_while_running() {
    let broker = FakeBroker::new(1, settings(false, 3));
    let mut cfg = config();
    // Only the early scan a change triggers can pick up a new subscription in time.
    cfg.assignment_interval = Duration::from_secs(3600);
    let c = start(&broker, cfg, 1, |_| ConsumeResult::Success);
    broker.send(0, "m0", b"x", None);
    wait_for("m0 acked", || broker.acked.lock().len() == 1).await;
    let first = c.process_queues();
    assert_eq!(first.len(), 1);

    c.unsubscribe("t").await.unwrap();
    assert!(first[0].is_retired());
    assert!(c.process_queues().is_empty());
    assert_eq!(c.stats().process_queues, 0);
    assert!(c.subscriptions().is_empty());
    assert_eq!(broker.announced.lock().last(), Some(&vec![]));

    let tag_a = FilterExpression::tag("a").unwrap();
    broker.send(0, "m1", b"x", None);
    c.subscribe("u", tag_a.clone()).await.unwrap();
    wait_for("m1 acked through u", || broker.acked.lock().len() == 2).await;
    let on_u = c.process_queues();
    assert_eq!(on_u.len(), 1);
    assert_eq!(on_u[0].source().topic.name, "u");
    assert_eq!(on_u[0].filter, tag_a);
    assert_eq!(
        broker.announced.lock().last(),
        Some(&vec![("u".to_string(), tag_a.clone())])
    );

    // A new filter for a subscribed topic: its queues are created again with it.
    c.subscribe("u", FilterExpression::all()).await.unwrap();
    assert!(on_u[0].is_retired());
    wait_for("u read with the new filter", || {
        c.process_queues()
            .iter()
            .any(|pq| pq.filter == FilterExpression::all())
    })
    .await;

    // Refused by the backend, or a bad name: nothing changes.
    *broker.unknown_topic.lock() = Some("nope".into());
    let announced = broker.announced.lock().len();
    let err = c
        .subscribe("nope", FilterExpression::all())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::Broker, "{err}");
    let err = c.subscribe("", FilterExpression::all()).await.unwrap_err();
    assert_eq!(
        err.kind(),
        crate::error::ErrorKind::InvalidArgument,
        "{err}"
    );
    assert_eq!(
        c.subscriptions(),
        vec![("u".to_string(), FilterExpression::all())]
    );
    assert_eq!(broker.announced.lock().len(), announced);
    // Unchanged lists are not announced again.
    c.unsubscribe("never-subscribed").await.unwrap();
    assert_eq!(broker.announced.lock().len(), announced);

    let report = c.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.unsettled, 0);
    let err = c.subscribe("t", FilterExpression::all()).await.unwrap_err();
    assert_eq!(err.kind(), crate::error::ErrorKind::Closed, "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_process_queue_is_created_again() {
    let broker = loaded(1, 1, b"x");
    // The first receive is lost: it never answers.
    broker.hang_receives.store(1, Ordering::Relaxed);
    let mut cfg = config();
    cfg.assignment_interval = Duration::from_millis(50);
    cfg.max_idle = Some(Duration::from_millis(300));
    let c = start(&broker, cfg, 1, |_| ConsumeResult::Success);
    wait_for("m0 acked", || broker.acked.lock().len() == 1).await;
    let s = c.stats();
    assert!(s.expired_process_queues >= 1, "{s:?}");
    assert_eq!(s.process_queues, 1);
    wait_for("cache drained", || c.stats().cached_messages == 0).await;
    let report = c.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.unsettled, 0);
}

#[test]
fn max_idle_must_be_positive() {
    let mut cfg = config();
    cfg.max_idle = Some(Duration::ZERO);
    let err = cfg.validate().unwrap_err();
    assert!(err.to_string().contains("max_idle"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receives_settles_and_listener_calls_are_recorded_in_the_metrics() {
    use crate::metrics::{Operation, PROCESS_FAILURE};
    let broker = loaded(2, 100, b"x");
    broker.fail_receives.store(2, Ordering::Relaxed);
    // m7 fails once (nacked, then redelivered and acked).
    let c = start(&broker, config(), 2, |m| {
        if m.message_id() == "m7" && m.delivery_attempt() == 1 {
            ConsumeResult::Failure
        } else {
            ConsumeResult::Success
        }
    });
    wait_for("all acked", || broker.acked.lock().len() == 100).await;
    wait_for("cache drained", || c.stats().cached_messages == 0).await;
    let sum = c.metrics().summary(&[50.0, 99.0]).unwrap();
    let receive = sum.get(Operation::Receive).unwrap();
    assert_eq!(receive.ok_messages(), 101);
    assert_eq!(receive.errors, [("connection", 2)]);
    assert_eq!(sum.ok_messages(Operation::Ack), 100);
    assert_eq!(sum.ok_messages(Operation::Nack), 1);
    let process = sum.get(Operation::Process).unwrap();
    assert_eq!((process.messages, process.failed), (101, 1));
    assert_eq!(process.errors, [(PROCESS_FAILURE, 1)]);
    let lat = process.latency_ms.as_ref().unwrap();
    assert!(lat.percentiles[0].1 <= lat.percentiles[1].1 && lat.percentiles[1].1 <= lat.max);
    assert_eq!(c.metrics().identity().consumer_group.as_deref(), Some("g"));
    c.shutdown(Duration::from_secs(5)).await;
}

/// Read settle events until `done` holds for what was read (or the consumer closed).
async fn read_events(
    c: &PushConsumer<FakeBroker>,
    done: impl Fn(&[SettleEvent]) -> bool,
) -> Vec<SettleEvent> {
    let mut all = Vec::new();
    let read = async {
        while !done(&all) {
            match c.settle_events(256).await {
                Some(batch) => all.extend(batch),
                None => break,
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(20), read)
        .await
        .expect("settle events in time");
    all
}

/// `(op, before, message ids, failed)` of each event.
fn summary(events: &[SettleEvent]) -> Vec<(SettleOp, bool, Vec<String>, bool)> {
    let ids = |ms: &[Arc<MessageView>]| ms.iter().map(|m| m.message_id().to_owned()).collect();
    events
        .iter()
        .map(|e| match e {
            SettleEvent::Before { op, messages } => (*op, true, ids(messages), false),
            SettleEvent::After {
                op,
                messages,
                error,
                ..
            } => (*op, false, ids(messages), error.is_some()),
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_attempts_are_reported_before_and_after_when_observed() {
    let broker = loaded(1, 1, b"x");
    broker.fail_acks.store(1, Ordering::Relaxed);
    let observed = PushConsumerConfig {
        settle_events: Some(4),
        ..config()
    };
    let c = start(&broker, observed, 1, |_| ConsumeResult::Success);
    let events = read_events(&c, |e| summary(e).iter().any(|s| !s.1 && !s.3)).await;
    let m0 = vec!["m0".to_owned()];
    assert_eq!(
        summary(&events),
        vec![
            (SettleOp::Ack, true, m0.clone(), false),
            (SettleOp::Ack, false, m0.clone(), true),
            (SettleOp::Ack, true, m0.clone(), false),
            (SettleOp::Ack, false, m0, false),
        ]
    );
    c.shutdown(Duration::from_secs(5)).await;
    assert!(c.settle_events(16).await.is_none(), "closed and drained");
    assert_eq!(c.undelivered_settle_events(), 0);

    // A failed consumption's nack, then the ack of its second attempt.
    let broker = loaded(1, 1, b"x");
    let observed = PushConsumerConfig {
        settle_events: Some(4),
        ..config()
    };
    let c = start(&broker, observed, 1, |m| {
        if m.delivery_attempt() == 1 {
            ConsumeResult::Failure
        } else {
            ConsumeResult::Success
        }
    });
    let events = read_events(&c, |e| {
        summary(e).iter().any(|s| s.0 == SettleOp::Ack && !s.1)
    })
    .await;
    let ops: Vec<(SettleOp, bool)> = summary(&events).iter().map(|s| (s.0, s.1)).collect();
    assert_eq!(
        ops,
        vec![
            (SettleOp::Nack, true),
            (SettleOp::Nack, false),
            (SettleOp::Ack, true),
            (SettleOp::Ack, false),
        ]
    );
    c.shutdown(Duration::from_secs(5)).await;

    // The FIFO dead-letter forward, with a channel of one event: the settler waits for the
    // reader, and nothing is lost.
    let broker = fifo_broker(2, 1, 1);
    let observed = PushConsumerConfig {
        settle_events: Some(1),
        ..config()
    };
    let c = start(&broker, observed, 1, |_| ConsumeResult::Failure);
    let events = read_events(&c, |e| {
        summary(e)
            .iter()
            .any(|s| s.0 == SettleOp::DeadLetter && !s.1)
    })
    .await;
    let s = summary(&events);
    assert_eq!(
        s,
        vec![
            (SettleOp::DeadLetter, true, vec!["g0-00".to_owned()], false),
            (SettleOp::DeadLetter, false, vec!["g0-00".to_owned()], false),
        ]
    );
    assert_eq!(broker.dlq.lock().len(), 1);
    c.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unobserved_consumers_report_nothing() {
    let broker = loaded(1, 3, b"x");
    let c = start(&broker, config(), 1, |_| ConsumeResult::Success);
    wait_for("all acked", || broker.acked.lock().len() == 3).await;
    assert!(c.settle_events(16).await.is_none());
    let zero = PushConsumerConfig {
        settle_events: Some(0),
        ..config()
    };
    let err = zero.validate().unwrap_err();
    assert!(err.to_string().contains("settle_events"), "{err}");
    c.shutdown(Duration::from_secs(5)).await;
}
