//! The consumers over JMQ4: the push engine (`PushConsumer<ConsumerBackend>`) and the simple
//! consumer against the embedded JMQ4 server over loopback (delivery and acks, failures through
//! the retry queue, results of partly consumed fetches sent at close, the invisible duration as
//! the fetch's ack timeout).

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ferrymq_core::consumer_backend::{ConsumerBackend, ConsumerTarget};
use ferrymq_core::jmq::consumer::{ConsumeMode, ConsumerOptions, JmqConsumer};
use ferrymq_core::jmq::producer::{JmqProducer, ProducerOptions};
use ferrymq_core::rocketmq::filter::FilterExpression;
use ferrymq_core::rocketmq::listener::{BatchListener, ConsumeResult};
use ferrymq_core::rocketmq::message_view::MessageView;
use ferrymq_core::rocketmq::push::{PushConsumer, PushConsumerConfig};
use ferrymq_core::rocketmq::simple_consumer::{SimpleConsumer, SimpleConsumerConfig};
use ferrymq_core::rocketmq::worker_pool::WorkerPool;
use ferrymq_core::Message;
use ferrymq_server::jmq::server::{JmqServer, JmqServerConfig, DEFAULT_APP};
use parking_lot::Mutex;

mod common;
use common::cluster_opts;

fn consumer_opts() -> ConsumerOptions {
    ConsumerOptions {
        long_poll: Duration::from_millis(200),
        ..ConsumerOptions::default()
    }
}

/// A topic with `n` messages `m0..`, sent one by one, or the second half in batches of 10
/// (a JMQ4 batch is stored, delivered and retried as one entry).
async fn topic_with(s: &JmqServer, topic: &str, n: usize, batches: bool) -> BTreeSet<Bytes> {
    s.create_topic(topic, 4).unwrap();
    let p = JmqProducer::connect(cluster_opts(s), ProducerOptions::default())
        .await
        .unwrap();
    let bodies: Vec<Bytes> = (0..n).map(|i| Bytes::from(format!("m{i}"))).collect();
    let messages: Vec<Message> = bodies
        .iter()
        .map(|b| Message::builder(topic, b.clone()).build().unwrap())
        .collect();
    let (single, batched) = messages.split_at(if batches { n / 2 } else { n });
    for m in single {
        p.send(m).await.unwrap();
    }
    for chunk in batched.chunks(10) {
        p.send_batch(chunk).await.unwrap();
    }
    p.close().await;
    bodies.into_iter().collect()
}

struct FnListener<F>(F);

impl<F> BatchListener for FnListener<F>
where
    F: Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static,
{
    fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
        results.extend(messages.iter().map(|m| (self.0)(m)));
    }
}

/// A push consumer of `topic` whose `threads` threads call `f` with up to `batch` messages at a
/// time.
async fn start<F>(
    s: &JmqServer,
    topic: &str,
    threads: usize,
    batch: usize,
    f: F,
) -> PushConsumer<ConsumerBackend>
where
    F: Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static,
{
    let pool = WorkerPool::start(Arc::new(FnListener(f)), threads, batch).unwrap();
    let config = PushConsumerConfig {
        group: DEFAULT_APP.into(),
        subscriptions: vec![(topic.into(), FilterExpression::all())],
        ..Default::default()
    };
    PushConsumer::connect(
        ConsumerTarget::Jmq(cluster_opts(s), consumer_opts()),
        config,
        Arc::new(pool),
    )
    .await
    .unwrap()
}

async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// What a plain consumer still receives from `topic` (acking it), until a receive is empty.
async fn rest(s: &JmqServer, topic: &str) -> Vec<Bytes> {
    let c = JmqConsumer::connect(
        cluster_opts(s),
        ConsumerOptions {
            topics: vec![topic.into()],
            mode: ConsumeMode::Clustering,
            ..consumer_opts()
        },
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    loop {
        let got = c.receive(64, Duration::from_millis(500)).await.unwrap();
        if got.is_empty() {
            break;
        }
        c.ack(&got).await.unwrap();
        out.extend(got.into_iter().map(|m| m.body));
    }
    c.close().await;
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_message_is_delivered_once_and_acked() {
    let s = JmqServer::start(JmqServerConfig::default()).await.unwrap();
    let sent = topic_with(&s, "push-all", 200, true).await;
    let seen: Arc<Mutex<HashMap<Bytes, usize>>> = Arc::default();
    let seen2 = seen.clone();
    // One message per callback on 4 threads, each taking a moment: the messages of one fetch
    // finish at different times, and a fetch settled in parts would be delivered again.
    let c = start(&s, "push-all", 4, 1, move |m| {
        std::thread::sleep(Duration::from_millis(1));
        assert_eq!(m.topic(), "push-all");
        assert_eq!(m.delivery_attempt(), 1);
        assert_eq!(
            m.message_id(),
            format!("push-all/{}/{}", m.queue_id(), m.offset())
        );
        *seen2.lock().entry(m.body().clone()).or_default() += 1;
        ConsumeResult::Success
    })
    .await;
    assert!(!c.is_fifo(), "JMQ4 has no message groups");
    wait_for("every message consumed and settled", || {
        seen.lock().len() == sent.len() && c.stats().cached_messages == 0
    })
    .await;
    let stats = c.stats();
    assert_eq!(stats.process_queues, 1, "one queue per topic");
    assert_eq!(stats.consumed_ok, 200);
    assert_eq!(stats.acked, 200);
    let report = c.close(Duration::from_secs(5)).await;
    assert_eq!(report.unsettled, 0);
    assert!(
        seen.lock().values().all(|n| *n == 1),
        "a message came twice"
    );
    assert_eq!(seen.lock().keys().cloned().collect::<BTreeSet<_>>(), sent);
    assert!(
        rest(&s, "push-all").await.is_empty(),
        "everything was acked"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_go_to_the_retry_queue_and_are_delivered_again() {
    let s = JmqServer::start(JmqServerConfig::default()).await.unwrap();
    let sent = topic_with(&s, "push-retry", 20, true).await;
    let attempts: Arc<Mutex<Vec<(Bytes, i32)>>> = Arc::default();
    let a2 = attempts.clone();
    let c = start(&s, "push-retry", 2, 64, move |m| {
        a2.lock().push((m.body().clone(), m.delivery_attempt()));
        // Every single message fails its first delivery.
        let single = m
            .body()
            .strip_prefix(b"m")
            .and_then(|d| std::str::from_utf8(d).ok());
        let first_half = single
            .and_then(|d| d.parse::<usize>().ok())
            .is_some_and(|i| i < 10);
        if first_half && m.delivery_attempt() == 1 {
            ConsumeResult::Failure
        } else {
            ConsumeResult::Success
        }
    })
    .await;
    wait_for("the failed ones consumed again", || {
        let a = attempts.lock();
        a.iter().filter(|(_, n)| *n == 2).count() >= 10
            && a.iter().map(|(b, _)| b.clone()).collect::<BTreeSet<_>>() == sent
    })
    .await;
    wait_for("settled", || c.stats().cached_messages == 0).await;
    let stats = c.stats();
    assert_eq!(stats.nacked, 10);
    assert_eq!(stats.consumed_failed, 10);
    c.close(Duration::from_secs(5)).await;
    let retried: BTreeSet<Bytes> = attempts
        .lock()
        .iter()
        .filter(|(_, n)| *n == 2)
        .map(|(b, _)| b.clone())
        .collect();
    let failed: BTreeSet<Bytes> = (0..10).map(|i| Bytes::from(format!("m{i}"))).collect();
    assert_eq!(retried, failed);
    assert!(rest(&s, "push-retry").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_sends_what_partly_consumed_fetches_settled() {
    let s = JmqServer::start(JmqServerConfig::default()).await.unwrap();
    let sent = topic_with(&s, "push-close", 40, false).await;
    let consumed: Arc<Mutex<Vec<Bytes>>> = Arc::default();
    let c2 = consumed.clone();
    let c = start(&s, "push-close", 1, 1, move |m| {
        std::thread::sleep(Duration::from_millis(30));
        c2.lock().push(m.body().clone());
        ConsumeResult::Success
    })
    .await;
    wait_for("a few consumed", || consumed.lock().len() >= 3).await;
    let report = c.close(Duration::from_secs(10)).await;
    assert!(report.callbacks_finished);
    assert_eq!(report.unsettled, 0);
    let consumed: BTreeSet<Bytes> = consumed.lock().iter().cloned().collect();
    assert!(consumed.len() < sent.len(), "closed before the end");
    assert_eq!(c.stats().acked as usize, consumed.len());
    // The consumed ones were acked even though their fetches were not finished; the others
    // come back once, to the next consumer.
    let rest = rest(&s, "push-close").await;
    let rest_set: BTreeSet<Bytes> = rest.iter().cloned().collect();
    assert_eq!(rest.len(), rest_set.len(), "delivered twice: {rest:?}");
    assert!(
        consumed.is_disjoint(&rest_set),
        "an acked message came back"
    );
    assert_eq!(
        consumed.union(&rest_set).cloned().collect::<BTreeSet<_>>(),
        sent
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_consumer_receives_acks_and_nacks_through_the_retry_queue() {
    let s = JmqServer::start(JmqServerConfig::default()).await.unwrap();
    let sent = topic_with(&s, "simple", 20, true).await;
    let mut config = SimpleConsumerConfig::new(DEFAULT_APP);
    config.subscriptions = vec![("simple".into(), FilterExpression::all())];
    config.await_duration = Duration::from_millis(300);
    let target = ConsumerTarget::Jmq(cluster_opts(&s), consumer_opts());
    let c = SimpleConsumer::connect(target, config).await.unwrap();
    assert_eq!(c.client_id(), format!("jmq:{DEFAULT_APP}"));
    // Not acked within its invisible duration (the fetch's ack timeout): delivered again.
    let first = c
        .receive(64, Some(Duration::from_millis(200)))
        .await
        .unwrap();
    assert!(!first.is_empty());
    let mut got: Vec<Arc<MessageView>> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut nacked = None;
    while got.len() < sent.len() {
        assert!(Instant::now() < deadline, "only {} received", got.len());
        for m in c.receive(64, None).await.unwrap() {
            assert_eq!(m.topic(), "simple");
            if nacked.is_none() {
                // To the retry queue, whatever the delay asked; delivered as attempt 2.
                c.change_invisible_duration(&m, Duration::from_secs(60))
                    .await
                    .unwrap();
                nacked = Some(m.body().clone());
                continue;
            }
            c.ack(&[&m]).await.unwrap();
            got.push(m);
        }
    }
    let bodies: BTreeSet<Bytes> = got.iter().map(|m| m.body().clone()).collect();
    assert_eq!(bodies, sent, "each message once");
    assert_eq!(bodies.len(), got.len());
    let retried: Vec<&Arc<MessageView>> =
        got.iter().filter(|m| m.delivery_attempt() == 2).collect();
    assert_eq!(retried.len(), 1);
    assert_eq!(Some(retried[0].body()), nacked.as_ref());
    c.close().await;
    assert!(c.receive(1, None).await.is_err(), "closed");
    assert!(rest(&s, "simple").await.is_empty(), "everything was acked");
}
