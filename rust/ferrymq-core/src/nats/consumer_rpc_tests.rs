//! [`JsConsumerRpc`] behind the core push engine, and [`PullConsumer::fetch`], against a real
//! `nats-server -js` started on a free loopback port for each test.

use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use parking_lot::Mutex;

use super::*;
use crate::nats::{NatsOptions, StreamConfig};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::listener::ConsumeResult;
use crate::rocketmq::push::consumer::tests::FnListener;
use crate::rocketmq::push::{PushConsumer, PushConsumerConfig};
use crate::rocketmq::worker_pool::WorkerPool;
use crate::test_support::wait_for;

/// A `nats-server -js` for one test, stopped and its store removed on drop.
struct NatsServer {
    child: Child,
    store: std::path::PathBuf,
    url: String,
}

impl NatsServer {
    fn start() -> Self {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let store = std::env::temp_dir().join(format!("ferrymq-nats-{}", nuid::next()));
        let exe = ["nats-server", "/usr/sbin/nats-server"]
            .into_iter()
            .find(|e| Command::new(e).arg("--version").output().is_ok())
            .expect("nats-server is installed (apt-get install -y nats-server)");
        let child = Command::new(exe)
            .args(["-js", "-a", "127.0.0.1", "-p", &port.to_string(), "-sd"])
            .arg(&store)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nats-server starts");
        let deadline = Instant::now() + Duration::from_secs(15);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "nats-server did not listen");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            store,
            url: format!("nats://127.0.0.1:{port}"),
        }
    }

    async fn connect(&self) -> JetStream {
        JetStream::connect(NatsOptions {
            endpoints: vec![self.url.clone()],
            ..NatsOptions::default()
        })
        .await
        .expect("connected")
    }

    /// A server with a stream for each (name, subjects), and a client of it.
    async fn with_streams(streams: &[(&str, &str)]) -> (Self, JetStream) {
        let server = Self::start();
        let js = server.connect().await;
        for (name, subjects) in streams {
            js.create_stream(&StreamConfig {
                name: (*name).into(),
                subjects: vec![(*subjects).into()],
                replicas: 1,
                ..StreamConfig::default()
            })
            .await
            .expect("stream created");
        }
        (server, js)
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

async fn publish(js: &JetStream, subject: &str, id: &str) {
    let mut headers = HeaderMap::new();
    headers.insert(async_nats::header::NATS_MESSAGE_ID, id);
    js.context()
        .publish_with_headers(subject.to_string(), headers, Bytes::from(id.to_string()))
        .await
        .expect("published")
        .await
        .expect("stored");
}

fn options(group: &str, max_attempts: u32) -> JsConsumerOptions {
    let mut o = JsConsumerOptions::new(group);
    o.receive_batch_size = 8;
    o.retry_policy = RetryPolicy {
        max_attempts,
        backoff: Backoff::Exponential {
            initial: Duration::from_millis(10),
            max: Duration::from_millis(40),
            multiplier: 2.0,
        },
    };
    o
}

/// Deliveries seen by the listener: message id → delivery attempts, in order.
type Seen = Arc<Mutex<HashMap<String, Vec<i32>>>>;

fn start_push(
    rpc: JsConsumerRpc,
    topic: &str,
    result: impl Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static,
) -> (PushConsumer<JsConsumerRpc>, Seen) {
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let listener = FnListener(move |m: &MessageView| {
        log.lock()
            .entry(m.message_id().to_string())
            .or_default()
            .push(m.delivery_attempt());
        result(m)
    });
    let pool = WorkerPool::start(Arc::new(listener), 2, 64).expect("workers");
    let config = PushConsumerConfig {
        group: rpc.options().group.clone(),
        subscriptions: vec![(topic.to_string(), FilterExpression::all())],
        assignment_interval: Duration::from_millis(200),
        ..PushConsumerConfig::default()
    };
    let consumer = PushConsumer::start(Arc::new(rpc), config, Arc::new(pool)).expect("started");
    (consumer, seen)
}

/// Until the durable consumer has nothing delivered and unsettled, nor left to deliver.
async fn settled(
    js: &JetStream,
    stream: &str,
    group: &str,
) -> crate::nats::consumer::ConsumerState {
    let c = js
        .pull_consumer(
            stream,
            &PullConsumerConfig {
                durable: Some(group.into()),
                ..PullConsumerConfig::default()
            },
        )
        .await
        .expect("bound");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let s = c.state().await.expect("state");
        if s.num_pending == 0 && s.num_ack_pending == 0 {
            return s;
        }
        assert!(Instant::now() < deadline, "never settled: {s:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetch_returns_with_the_first_messages_without_waiting_for_a_full_batch() {
    let (_server, js) = NatsServer::with_streams(&[("F", "f.>")]).await;
    let c = js
        .pull_consumer("F", &PullConsumerConfig::default())
        .await
        .expect("consumer");
    let fetching = tokio::spawn({
        let c = c.clone();
        async move { c.fetch(16, Duration::from_secs(20)).await }
    });
    // Publish only once the long pull is parked on the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    while c.state().await.expect("state").num_waiting == 0 {
        assert!(Instant::now() < deadline, "the pull never waited");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for i in 0..3 {
        publish(&js, "f.x", &format!("m{i}")).await;
    }
    // A fetch that waited for a full batch would hold these until its 20 s expiry.
    let got = tokio::time::timeout(Duration::from_secs(10), fetching)
        .await
        .expect("fetch returned before its wait ended")
        .expect("joined")
        .expect("fetched");
    assert!(!got.is_empty());
    let mut bodies: Vec<Bytes> = got.iter().map(|m| m.body.clone()).collect();
    for m in &got {
        m.acknowledge(crate::nats::AckKind::Ack)
            .await
            .expect("acked");
    }
    // No request is left pending that would swallow the rest: they come with the next fetch.
    while bodies.len() < 3 {
        let more = c.fetch(16, Duration::from_secs(5)).await.expect("fetched");
        assert!(!more.is_empty(), "messages went missing: {bodies:?}");
        for m in &more {
            m.acknowledge(crate::nats::AckKind::Ack)
                .await
                .expect("acked");
        }
        bodies.extend(more.into_iter().map(|m| m.body));
    }
    assert_eq!(bodies, vec!["m0", "m1", "m2"]);
    assert_eq!(c.state().await.expect("state").num_ack_pending, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_engine_delivers_each_message_once_and_acks_it() {
    let (_server, js) = NatsServer::with_streams(&[("ORDERS", "orders.>")]).await;
    for i in 0..50 {
        publish(&js, "orders.new", &format!("o{i}")).await;
    }
    let rpc = JsConsumerRpc::new(js.clone(), options("billing", 3)).expect("rpc");
    let (consumer, seen) = start_push(rpc, "orders.new", |_| ConsumeResult::Success);
    wait_for("50 acked", || consumer.stats().acked == 50).await;
    let state = settled(&js, "ORDERS", "billing").await;
    assert_eq!(state.ack_floor_stream_sequence, 50);
    assert_eq!(state.num_redelivered, 0);
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 50);
    assert!(seen.values().all(|a| a == &[1]), "{seen:?}");
    let report = consumer.shutdown(Duration::from_secs(5)).await;
    assert_eq!(report.unsettled, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_messages_are_redelivered_then_terminated_after_the_last_attempt() {
    let (_server, js) = NatsServer::with_streams(&[("JOBS", "jobs.>")]).await;
    publish(&js, "jobs.a", "ok-on-2").await;
    publish(&js, "jobs.a", "always-fails").await;
    publish(&js, "jobs.a", "ok").await;
    let rpc = JsConsumerRpc::new(js.clone(), options("workers", 3)).expect("rpc");
    let (consumer, seen) = start_push(rpc, "jobs.a", |m| {
        match (m.message_id(), m.delivery_attempt()) {
            ("ok", _) => ConsumeResult::Success,
            ("ok-on-2", a) if a >= 2 => ConsumeResult::Success,
            _ => ConsumeResult::Failure,
        }
    });
    wait_for("two acked", || consumer.stats().acked == 2).await;
    wait_for("the last attempt failed", || {
        seen.lock().get("always-fails").map(Vec::len) == Some(3)
    })
    .await;
    let state = settled(&js, "JOBS", "workers").await;
    // Terminated: nothing pending, nothing unsettled, and no fourth delivery.
    assert_eq!(state.ack_floor_stream_sequence, 3);
    let seen = seen.lock().clone();
    assert_eq!(seen["ok"], vec![1]);
    assert_eq!(seen["ok-on-2"], vec![1, 2]);
    assert_eq!(seen["always-fails"], vec![1, 2, 3]);
    consumer.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_are_checked_against_the_server() {
    let (_server, js) = NatsServer::with_streams(&[("S", "s.>")]).await;
    let rpc = JsConsumerRpc::new(js.clone(), options("g", 3)).expect("rpc");
    let e = rpc.subscribe("nowhere.x").await.expect_err("no stream");
    assert!(e.to_string().contains("nowhere.x"), "{e}");
    rpc.subscribe("s.a").await.expect("bound");
    let e = rpc.subscribe("s.b").await.expect_err("same stream");
    assert!(e.to_string().contains("one subject per stream"), "{e}");
    // Another client's group of that name reads another subject.
    let other = JsConsumerRpc::new(js.clone(), options("g", 3)).expect("rpc");
    let e = other.subscribe("s.c").await.expect_err("filter differs");
    assert!(e.to_string().contains("already reads"), "{e}");
    let e = JsConsumerRpc::new(js, options("a.b", 3)).expect_err("bad group");
    assert!(e.to_string().contains("group"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subscriptions_change_while_running() {
    let (_server, js) = NatsServer::with_streams(&[("A", "a.>"), ("B", "b.>")]).await;
    publish(&js, "a.x", "a1").await;
    publish(&js, "b.x", "b1").await;
    let rpc = JsConsumerRpc::new(js.clone(), options("late", 3)).expect("rpc");
    let (consumer, seen) = start_push(rpc, "a.x", |_| ConsumeResult::Success);
    wait_for("a1 acked", || consumer.stats().acked == 1).await;
    let e = consumer
        .subscribe("b.x", FilterExpression::tag("TagA").expect("filter"))
        .await
        .expect_err("tag filters are refused");
    assert!(e.to_string().contains("subject"), "{e}");
    let e = consumer
        .subscribe("nowhere.x", FilterExpression::all())
        .await
        .expect_err("no stream");
    assert!(e.to_string().contains("nowhere.x"), "{e}");
    consumer
        .subscribe("b.x", FilterExpression::all())
        .await
        .expect("subscribed");
    wait_for("b1 acked", || consumer.stats().acked == 2).await;
    assert_eq!(settled(&js, "B", "late").await.ack_floor_stream_sequence, 1);
    let seen = seen.lock().clone();
    assert_eq!(seen.keys().count(), 2, "{seen:?}");
    consumer.shutdown(Duration::from_secs(5)).await;
}

/// The one simple consumer over JetStream: several subjects are all read within one receive,
/// a receive asking for another invisible duration than `ack_wait` is refused, acks settle,
/// and `change_invisible_duration` redelivers after the delay as the next attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn simple_consumer_reads_every_subject_settles_and_redelivers() {
    use crate::consumer_backend::ConsumerTarget;
    use crate::rocketmq::simple_consumer::{SimpleConsumer, SimpleConsumerConfig};
    let (server, js) = NatsServer::with_streams(&[("X", "x.>"), ("Y", "y.>")]).await;
    publish(&js, "y.a", "y0").await;
    let mut config = SimpleConsumerConfig::new("sg");
    config.subscriptions = ["x.a", "y.a"]
        .iter()
        .map(|t| (t.to_string(), FilterExpression::all()))
        .collect();
    config.await_duration = Duration::from_secs(5);
    let target = ConsumerTarget::Nats(
        NatsOptions {
            endpoints: vec![server.url.clone()],
            ..NatsOptions::default()
        },
        JsConsumerOptions::new("sg"),
    );
    let c = SimpleConsumer::connect(target, config)
        .await
        .expect("connected");
    assert_eq!(c.client_id(), "nats:sg");
    let e = c
        .receive(16, Some(Duration::from_secs(60)))
        .await
        .expect_err("not the ack_wait");
    assert!(e.to_string().contains("ack_wait"), "{e}");
    // The first subject is empty: a receive that long-polled it alone would wait 5 s.
    let started = Instant::now();
    let got = c.receive(16, None).await.expect("received");
    assert!(started.elapsed() < Duration::from_secs(4));
    let ids: Vec<(String, i32)> = got
        .iter()
        .map(|m| (m.message_id().to_string(), m.delivery_attempt()))
        .collect();
    assert_eq!(ids, [("y0".to_string(), 1)]);
    assert_eq!(got[0].topic(), "y.a");
    c.change_invisible_duration(&got[0], Duration::from_millis(100))
        .await
        .expect("nak");
    let again = c.receive(16, None).await.expect("received again");
    assert_eq!(again.len(), 1);
    assert_eq!(
        (again[0].message_id(), again[0].delivery_attempt()),
        ("y0", 2)
    );
    c.ack(&[&again[0]]).await.expect("acked");
    c.close().await;
    assert!(c.receive(1, None).await.is_err(), "closed");
    settled(&js, "Y", "sg").await;
}
