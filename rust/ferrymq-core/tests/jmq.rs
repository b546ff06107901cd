//! End-to-end JMQ4 tests: the client against the embedded JMQ4 server over loopback.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use ferrymq_core::jmq::client::ConnectOptions;
use ferrymq_core::jmq::codec::{self, command_type as ct, QosLevel};
use ferrymq_core::jmq::codes;
use ferrymq_core::jmq::command::{Payload, RetryType};
use ferrymq_core::jmq::compress::Compression;
use ferrymq_core::jmq::consumer::{ConsumeMode, ConsumerOptions, JmqConsumer, ReceivedMessage};
use ferrymq_core::jmq::producer::{JmqProducer, ProducerOptions, TransactionChecker, TxResolution};
use ferrymq_core::{ErrorKind, Message};
use ferrymq_server::jmq::server::{JmqServer, JmqServerConfig, DEFAULT_APP, DEFAULT_TOKEN};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;
use common::cluster_opts;

async fn server(nodes: usize) -> JmqServer {
    JmqServer::start(JmqServerConfig {
        nodes,
        ..JmqServerConfig::default()
    })
    .await
    .unwrap()
}

async fn producer(s: &JmqServer, opts: ProducerOptions) -> JmqProducer {
    JmqProducer::connect(cluster_opts(s), opts).await.unwrap()
}

async fn consumer(s: &JmqServer, topics: &[&str], mode: ConsumeMode) -> JmqConsumer {
    JmqConsumer::connect(
        cluster_opts(s),
        ConsumerOptions {
            topics: topics.iter().map(|t| (*t).to_string()).collect(),
            mode,
            long_poll: Duration::from_millis(500),
            ..ConsumerOptions::default()
        },
    )
    .await
    .unwrap()
}

/// Receive until `n` messages arrived (acking them when `ack`), with a bounded number of polls.
async fn drain(c: &JmqConsumer, n: usize, ack: bool) -> Vec<ReceivedMessage> {
    let mut out = Vec::new();
    for _ in 0..100 {
        if out.len() >= n {
            break;
        }
        let got = c.receive(32, Duration::from_millis(300)).await.unwrap();
        if ack && !got.is_empty() {
            c.ack(&got).await.unwrap();
        }
        out.extend(got);
    }
    out
}

/// A server of `nodes` nodes with `topic` of `partitions` partitions, and a producer.
async fn with_topic(nodes: usize, topic: &str, partitions: u16) -> (JmqServer, JmqProducer) {
    let s = server(nodes).await;
    s.create_topic(topic, partitions).unwrap();
    let p = producer(&s, ProducerOptions::default()).await;
    (s, p)
}

/// Whether a receive of up to `n` messages waiting `ms` gets nothing.
async fn idle(c: &JmqConsumer, n: usize, ms: u64) -> bool {
    let got = c.receive(n, Duration::from_millis(ms)).await.unwrap();
    got.is_empty()
}

fn msg(topic: &str, body: impl Into<Bytes>) -> Message {
    Message::builder(topic, body).build().unwrap()
}

#[tokio::test]
async fn produce_consume_ack_with_attributes_and_compression() {
    let (s, p) = with_topic(1, "orders", 4).await;
    let big = Bytes::from(vec![b'z'; 5000]);
    let m = Message::builder("orders", big.clone())
        .keys(["order-1"])
        .tag("paid")
        .property("region", "eu = west")
        .build()
        .unwrap();
    let r = p.send(&m).await.unwrap();
    assert_eq!(r.topic, "orders");
    assert!(r.index >= 0);
    for i in 0..9 {
        p.send(&msg("orders", format!("small-{i}"))).await.unwrap();
    }
    let c = consumer(&s, &["orders"], ConsumeMode::Clustering).await;
    let got = drain(&c, 10, true).await;
    assert_eq!(got.len(), 10);
    let first = got
        .iter()
        .find(|m| m.body == big)
        .expect("compressed body round trip");
    assert_eq!(first.business_id.as_deref(), Some("order-1"));
    assert_eq!(first.tag.as_deref(), Some("paid"));
    assert_eq!(
        first.properties.get("region").map(String::as_str),
        Some("eu = west")
    );
    assert_eq!(first.app.as_deref(), Some(DEFAULT_APP));
    // Everything acked: the ack indices add up and nothing is redelivered.
    let mut acked = 0;
    for part in 0..4 {
        let e = c.fetch_index("orders", part).await.unwrap();
        assert_eq!(e.index, e.right_index, "partition {part} fully acked");
        acked += e.index;
    }
    assert_eq!(acked, 10);
    assert!(idle(&c, 10, 100).await);
    p.close().await;
    c.close().await;
    assert!(p.send(&msg("orders", "late")).await.unwrap_err().kind() == ErrorKind::Closed);
}

#[tokio::test]
async fn every_compression_kind_round_trips() {
    let s = server(1).await;
    s.create_topic("zip", 1).unwrap();
    let c = consumer(&s, &["zip"], ConsumeMode::Clustering).await;
    for kind in [
        Compression::Zip,
        Compression::Zlib,
        Compression::Snappy,
        Compression::None,
    ] {
        let p = producer(
            &s,
            ProducerOptions {
                compression: kind,
                ..ProducerOptions::default()
            },
        )
        .await;
        let body: Vec<u8> = (0..20_000u32).map(|i| (i % 251) as u8).collect();
        p.send(&msg("zip", body.clone())).await.unwrap();
        let got = drain(&c, 1, true).await;
        assert_eq!(got[0].body.as_ref(), &body[..], "{kind:?}");
        p.close().await;
    }
}

#[tokio::test]
async fn batches_and_multi_topic_sends() {
    let s = server(2).await;
    s.create_topic("a", 4).unwrap();
    s.create_topic("b", 2).unwrap();
    let p = producer(&s, ProducerOptions::default()).await;
    let batch: Vec<Message> = (0..5).map(|i| msg("a", format!("a{i}"))).collect();
    let r = p.send_batch(&batch).await.unwrap();
    assert_eq!(r.len(), 5);
    for w in r.windows(2) {
        assert_eq!(w[1].partition, w[0].partition, "one batch, one partition");
        assert_eq!(w[1].index, w[0].index + 1, "consecutive indices");
    }
    let mixed = vec![msg("b", "b0"), msg("a", "a5"), msg("b", "b1")];
    let r = p.send_batch(&mixed).await.unwrap();
    assert_eq!(
        r.iter().map(|x| x.topic.as_str()).collect::<Vec<_>>(),
        ["b", "a", "b"]
    );
    let c = consumer(&s, &["a", "b"], ConsumeMode::Clustering).await;
    let got = drain(&c, 8, true).await;
    let bodies: BTreeSet<String> = got
        .iter()
        .map(|m| String::from_utf8(m.body.to_vec()).unwrap())
        .collect();
    assert_eq!(bodies.len(), 8);
    assert!(got.iter().filter(|m| m.batched).count() >= 5);
    assert_eq!(
        s.store().message_count("a") + s.store().message_count("b"),
        8
    );
}

#[tokio::test]
async fn transactions_commit_rollback_and_feedback() {
    let s = server(1).await;
    s.create_topic("tx", 2).unwrap();
    let calls = Arc::new(AtomicUsize::new(0));
    let seen = calls.clone();
    let checker: TransactionChecker = Arc::new(move |f| {
        let seen = seen.clone();
        Box::pin(async move {
            seen.fetch_add(1, Ordering::SeqCst);
            if f.transaction_id == "commit-me" {
                TxResolution::Commit
            } else {
                TxResolution::Rollback
            }
        })
    });
    let p = producer(
        &s,
        ProducerOptions {
            checker: Some(checker),
            transaction_timeout: Duration::from_millis(50),
            feedback_interval: Duration::from_secs(3600),
            ..ProducerOptions::default()
        },
    )
    .await;
    let c = consumer(&s, &["tx"], ConsumeMode::Clustering).await;

    let t = p.begin_transaction("tx", None).await.unwrap();
    t.send(&[msg("tx", "t1"), msg("tx", "t2")]).await.unwrap();
    assert_eq!(s.store().message_count("tx"), 0, "invisible before commit");
    t.commit().await.unwrap();
    assert!(
        t.commit().await.is_err(),
        "a finished transaction refuses more"
    );
    let got = drain(&c, 2, true).await;
    assert_eq!(got.len(), 2);

    let t = p.begin_transaction("tx", None).await.unwrap();
    t.send(&[msg("tx", "gone")]).await.unwrap();
    t.rollback().await.unwrap();
    assert_eq!(s.store().message_count("tx"), 2);

    // Expired transactions come back through FETCH_PRODUCE_FEEDBACK to the checker.
    let t1 = p
        .begin_transaction("tx", Some("commit-me".into()))
        .await
        .unwrap();
    t1.send(&[msg("tx", "compensated")]).await.unwrap();
    let t2 = p
        .begin_transaction("tx", Some("drop-me".into()))
        .await
        .unwrap();
    t2.send(&[msg("tx", "dropped")]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    let resolved = p.resolve_feedback("tx").await.unwrap();
    assert_eq!(resolved, 2);
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    let got = drain(&c, 1, true).await;
    assert_eq!(got[0].body.as_ref(), b"compensated");
    assert_eq!(s.store().message_count("tx"), 3);
}

#[tokio::test]
async fn coordinator_mode_assigns_and_falls_back() {
    let (s, p) = with_topic(3, "co", 6).await;
    for i in 0..12 {
        p.send(&msg("co", format!("m{i}"))).await.unwrap();
    }
    let c = consumer(&s, &["co"], ConsumeMode::Coordinator).await;
    let a = c.fetch_assignment().await.unwrap();
    assert_eq!(
        a["co"],
        (0..6).collect::<Vec<i16>>(),
        "a lone member gets every partition"
    );
    assert_eq!(drain(&c, 12, true).await.len(), 12);
    for i in 0..6 {
        p.send(&msg("co", format!("n{i}"))).await.unwrap();
    }
    s.set_coordinator_available(false);
    let e = c.fetch_assignment().await.unwrap_err();
    assert_eq!(
        e.status().unwrap().code,
        codes::FW_COORDINATOR_NOT_AVAILABLE
    );
    // Without a coordinator the consumer reads every leader, as the Java client does.
    let c2 = consumer(&s, &["co"], ConsumeMode::Coordinator).await;
    assert_eq!(drain(&c2, 6, true).await.len(), 6);
}

#[tokio::test]
async fn broadcast_consumers_each_read_everything() {
    let (s, p) = with_topic(2, "bc", 3).await;
    p.send_batch(
        &(0..4)
            .map(|i| msg("bc", format!("x{i}")))
            .collect::<Vec<_>>(),
    )
    .await
    .unwrap();
    for i in 0..3 {
        p.send(&msg("bc", format!("y{i}"))).await.unwrap();
    }
    let c1 = consumer(&s, &["bc"], ConsumeMode::Broadcast).await;
    let c2 = consumer(&s, &["bc"], ConsumeMode::Broadcast).await;
    assert_eq!(drain(&c1, 7, true).await.len(), 7);
    assert_eq!(drain(&c2, 7, true).await.len(), 7);
    assert!(idle(&c1, 10, 100).await);
    // Rewinding a partition replays it.
    let positions = c1.positions();
    let ((t, part), _) = positions.iter().find(|(_, i)| **i > 0).unwrap();
    c1.seek(t, *part, 0);
    assert!(!idle(&c1, 10, 300).await);
}

#[tokio::test]
async fn nack_goes_through_the_retry_queue() {
    let (s, p) = with_topic(1, "rq", 1).await;
    p.send(&msg("rq", "fail-once")).await.unwrap();
    let c = consumer(&s, &["rq"], ConsumeMode::Clustering).await;
    let got = drain(&c, 1, false).await;
    c.nack(&got, RetryType::Exception).await.unwrap();
    let again = drain(&c, 1, false).await;
    assert_eq!(again[0].body.as_ref(), b"fail-once");
    assert!(again[0].is_retry());
    c.ack(&again).await.unwrap();
    assert!(idle(&c, 1, 100).await);
}

#[tokio::test]
async fn settle_acks_and_nacks_one_fetch_in_one_request() {
    let (s, p) = with_topic(1, "st", 1).await;
    for b in ["a", "b", "c"] {
        p.send(&msg("st", b)).await.unwrap();
    }
    let c = consumer(&s, &["st"], ConsumeMode::Clustering).await;
    let got = drain(&c, 3, false).await;
    assert_eq!(got.len(), 3);
    let (nacked, acked) = got.split_at(1);
    c.settle(acked, nacked, RetryType::Exception).await.unwrap();
    // Only the nacked message comes back, from the retry queue.
    let again = drain(&c, 1, true).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].body, nacked[0].body);
    assert!(again[0].is_retry());
    assert!(idle(&c, 8, 100).await);
    assert_eq!(
        c.settle(&[], nacked, RetryType::None)
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[tokio::test]
async fn a_fetch_ack_timeout_overrides_the_consumers() {
    let (s, p) = with_topic(1, "at", 1).await;
    p.send(&msg("at", "x")).await.unwrap();
    let c = consumer(&s, &["at"], ConsumeMode::Clustering).await;
    let first = c
        .receive_with(
            8,
            Duration::from_millis(300),
            Some(Duration::from_millis(100)),
        )
        .await
        .unwrap();
    assert_eq!(first.len(), 1);
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Not acked within its 100 ms: delivered again (the consumer's own ack timeout is 30 s).
    let again = drain(&c, 1, true).await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].index, first[0].index);
}

#[tokio::test]
async fn retriable_codes_retry_on_another_leader() {
    let (s, p) = with_topic(2, "rt", 4).await;
    p.send(&msg("rt", "warm")).await.unwrap();
    s.fail_next(
        Some(ct::PRODUCE_MESSAGE),
        codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER,
        1,
    );
    p.send(&msg("rt", "after-188")).await.unwrap();
    // Leadership moves: the old leader answers 188, the client refreshes and follows.
    s.set_leader("rt", 0, 2).unwrap();
    s.set_leader("rt", 1, 2).unwrap();
    for i in 0..4 {
        let r = p.send(&msg("rt", format!("moved{i}"))).await.unwrap();
        assert_eq!(r.broker_id, 2);
    }
    // A non-retriable code is reported at once, with its name.
    s.fail_next(Some(ct::PRODUCE_MESSAGE), codes::CN_NO_PERMISSION, 1);
    let e = p.send(&msg("rt", "x")).await.unwrap_err();
    assert_eq!(e.status().unwrap().code, codes::CN_NO_PERMISSION);
    assert!(e.to_string().contains("CN_NO_PERMISSION"), "{e}");
    assert_eq!(s.store().message_count("rt"), 6);
}

#[tokio::test]
async fn restart_latency_and_health() {
    let (s, p) = with_topic(1, "hl", 1).await;
    p.send(&msg("hl", "1")).await.unwrap();
    s.restart();
    p.send(&msg("hl", "2")).await.unwrap();
    s.set_latency(Duration::from_millis(30));
    p.send(&msg("hl", "3")).await.unwrap();
    s.set_latency(Duration::ZERO);
    s.set_health(1, 9.0);
    p.cluster().check_health().await;
    assert!((p.cluster().health_factor(1) - 0.1).abs() < 1e-9);
    s.set_unavailable(true);
    let e = p.send(&msg("hl", "4")).await.unwrap_err();
    assert!(e.is_retriable(), "{e}");
    s.set_unavailable(false);
    p.send(&msg("hl", "5")).await.unwrap();
    assert_eq!(s.store().message_count("hl"), 4);
}

#[tokio::test]
async fn one_way_qos_gets_no_reply_but_stores() {
    let s = server(1).await;
    s.create_topic("ow", 1).unwrap();
    let p = producer(
        &s,
        ProducerOptions {
            qos: QosLevel::OneWay,
            ..ProducerOptions::default()
        },
    )
    .await;
    let r = p.send(&msg("ow", "fire")).await.unwrap();
    assert_eq!(r.index, -1);
    let c = consumer(&s, &["ow"], ConsumeMode::Clustering).await;
    assert_eq!(drain(&c, 1, true).await[0].body.as_ref(), b"fire");
}

#[tokio::test]
async fn long_poll_returns_when_a_message_arrives() {
    let s = server(1).await;
    s.create_topic("lp", 1).unwrap();
    let c = consumer(&s, &["lp"], ConsumeMode::Clustering).await;
    let p = producer(&s, ProducerOptions::default()).await;
    let waiter = tokio::spawn(async move { c.receive(1, Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    p.send(&msg("lp", "late")).await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert_eq!(got[0].body.as_ref(), b"late");
}

#[tokio::test]
async fn bad_input_gives_clear_errors() {
    let s = server(1).await;
    s.create_topic("ok", 1).unwrap();
    // Wrong token: authentication error 2 at connect.
    let mut o = cluster_opts(&s);
    o.connect.token = "wrong".into();
    let e = JmqProducer::connect(o, ProducerOptions::default())
        .await
        .unwrap_err();
    assert_eq!(e.status().unwrap().code, codes::CN_AUTHENTICATION_ERROR);
    assert!(e.to_string().contains("check app and token"), "{e}");
    // Unknown app.
    let mut o = cluster_opts(&s);
    o.connect.app = "nobody".into();
    assert!(JmqProducer::connect(o, ProducerOptions::default())
        .await
        .is_err());
    let p = producer(&s, ProducerOptions::default()).await;
    // Unknown topic.
    let e = p.send(&msg("missing", "x")).await.unwrap_err();
    assert_eq!(e.status().unwrap().code, codes::FW_TOPIC_NOT_EXIST);
    assert!(e.to_string().contains("does not exist"), "{e}");
    let e = JmqConsumer::connect(
        cluster_opts(&s),
        ConsumerOptions {
            topics: vec!["missing".into()],
            ..ConsumerOptions::default()
        },
    )
    .await
    .unwrap_err();
    assert_eq!(e.status().unwrap().code, codes::FW_TOPIC_NOT_EXIST);
    // Oversized body and businessId: refused before sending.
    let e = p
        .send(&msg("ok", vec![0u8; 3 * 1024 * 1024 + 1]))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.message().starts_with("body:"), "{e}");
    let long_key = Message::builder("ok", "x")
        .keys(["k".repeat(101)])
        .build()
        .unwrap();
    assert_eq!(
        p.send(&long_key).await.unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let delayed = Message::builder("ok", "x")
        .delivery_time(std::time::SystemTime::now())
        .build()
        .unwrap();
    assert!(p
        .send(&delayed)
        .await
        .unwrap_err()
        .message()
        .contains("delayed"));
    // No subscription: the topic exists but the app may not use it.
    s.store().set_subscription(
        "ok",
        DEFAULT_APP,
        ferrymq_server::jmq::store::Subscription {
            produce: false,
            consume: false,
        },
    );
    p.cluster().invalidate("ok");
    let e = p.send(&msg("ok", "x")).await.unwrap_err();
    assert_eq!(e.status().unwrap().code, codes::CN_NO_PERMISSION);
}

async fn raw_connect(s: &JmqServer) -> TcpStream {
    TcpStream::connect(s.nodes()[0].addr).await.unwrap()
}

async fn read_frame(sock: &mut TcpStream) -> Option<codec::Frame> {
    let mut buf = BytesMut::new();
    loop {
        if let Ok(Some(f)) = codec::decode_frame(&mut buf, 1 << 20) {
            return Some(f);
        }
        let n = tokio::time::timeout(Duration::from_secs(2), sock.read_buf(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
    }
}

fn frame<P: Payload>(p: &P, id: i32, qos: QosLevel) -> BytesMut {
    let mut b = BytesMut::new();
    codec::encode_frame_with(&codec::Header::request(P::TYPE, id, qos), &mut b, |d| {
        p.encode(codec::VERSION, d)
    })
    .unwrap();
    b
}

#[tokio::test]
async fn server_reproduces_protocol_quirks() {
    use ferrymq_core::jmq::command::*;
    let s = server(1).await;
    // Garbage as the first bytes: not JMQ4, the socket is closed.
    let mut sock = raw_connect(&s).await;
    sock.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    assert!(read_frame(&mut sock).await.is_none());
    // A request before ADD_CONNECTION: BooleanAck 132.
    let mut sock = raw_connect(&s).await;
    sock.write_all(&frame(&FetchHealth, 5, QosLevel::Receive))
        .await
        .unwrap();
    let f = read_frame(&mut sock).await.unwrap();
    assert_eq!(f.header.command_type, codec::BOOLEAN_ACK);
    assert_eq!(i32::from(f.header.status), codes::FW_CONNECTION_NOT_EXISTS);
    assert_eq!(f.header.request_id, 5);
    // Authenticate, then: ONE_WAY heartbeat gets no answer, the next request does.
    let add = AddConnection {
        app: DEFAULT_APP.into(),
        token: DEFAULT_TOKEN.into(),
        language: language::PYTHON,
        client_version: "raw".into(),
        ip: "127.0.0.1".into(),
        ..AddConnection::default()
    };
    sock.write_all(&frame(&add, 6, QosLevel::Receive))
        .await
        .unwrap();
    assert_eq!(read_frame(&mut sock).await.unwrap().header.command_type, -1);
    let mut two = frame(&Heartbeat, 7, QosLevel::OneWay);
    two.extend_from_slice(&frame(&Heartbeat, 8, QosLevel::Receive));
    sock.write_all(&two).await.unwrap();
    let f = read_frame(&mut sock).await.unwrap();
    assert_eq!(
        f.header.request_id, 8,
        "the ONE_WAY heartbeat (7) was not answered"
    );
    assert_eq!(f.header.command_type, codec::BOOLEAN_ACK);
    // A wrong app in a later command: BooleanAck 132.
    sock.write_all(&frame(
        &FetchCluster {
            topics: vec!["t".into()],
            app: "other".into(),
        },
        9,
        QosLevel::Receive,
    ))
    .await
    .unwrap();
    let f = read_frame(&mut sock).await.unwrap();
    assert_eq!(i32::from(f.header.status), codes::FW_CONNECTION_NOT_EXISTS);
    // PREPARE without ADD_PRODUCER: BooleanAck 134.
    s.create_topic("q", 1).unwrap();
    sock.write_all(&frame(
        &Prepare {
            topic: "q".into(),
            app: DEFAULT_APP.into(),
            ..Prepare::default()
        },
        10,
        QosLevel::Receive,
    ))
    .await
    .unwrap();
    let f = read_frame(&mut sock).await.unwrap();
    assert_eq!(i32::from(f.header.status), codes::FW_PRODUCER_NOT_EXISTS);
    // Unknown command type 34 (commented out of the server's enum): the socket is closed.
    let mut bad = BytesMut::new();
    codec::encode_frame(
        &codec::Header::request(ct::FETCH_ACK_INDEX, 11, QosLevel::Receive),
        &[],
        &mut bad,
    )
    .unwrap();
    sock.write_all(&bad).await.unwrap();
    assert!(read_frame(&mut sock).await.is_none());
    // A first read shorter than 19 bytes: closed.
    let mut sock = raw_connect(&s).await;
    sock.write_all(&[0, 0, 0, 23, 0xCA, 0xFE]).await.unwrap();
    assert!(read_frame(&mut sock).await.is_none());
}

#[tokio::test]
async fn commit_ack_count_bug_is_tolerated() {
    use ferrymq_core::jmq::command::*;
    let (s, p) = with_topic(1, "cb", 3).await;
    for i in 0..9 {
        p.send(&msg("cb", format!("{i}"))).await.unwrap();
    }
    // Ack three partitions of one topic in one COMMIT_ACK: the answer says 3 topics, holds 1.
    let conn = p
        .cluster()
        .connection(&ferrymq_core::jmq::parse_endpoint(&s.endpoint()).unwrap())
        .await
        .unwrap();
    let resp = conn
        .call(&CommitAck {
            topics: vec![(
                "cb".into(),
                (0..3)
                    .map(|part| {
                        (
                            part,
                            vec![AckItem {
                                partition: part,
                                index: 0,
                                retry_type: RetryType::None,
                            }],
                        )
                    })
                    .collect(),
            )],
            app: DEFAULT_APP.into(),
        })
        .await
        .unwrap();
    assert_eq!(resp.data.len(), 1);
    assert_eq!(resp.data[0].1.len(), 3);
}

#[tokio::test]
async fn a_malformed_response_is_a_protocol_error_not_a_panic() {
    // A fake broker that answers ADD_CONNECTION with a frame whose payload is truncated.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut sock, _) = listener.accept().await.unwrap();
        let mut buf = [0u8; 1024];
        let _ = sock.read(&mut buf).await;
        let req = codec::Header::request(1, 1, QosLevel::Receive);
        let h = codec::Header::response_to(&req, -1, 0, None);
        let mut out = BytesMut::new();
        codec::encode_frame(&h, &[5, b'a'], &mut out).unwrap();
        let _ = sock.write_all(&out).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    });
    let o = ConnectOptions {
        app: "a".into(),
        token: "t".into(),
        ..ConnectOptions::default()
    };
    let e = ferrymq_core::jmq::client::Connection::connect(&addr.to_string(), &o)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Protocol, "{e}");
}

#[tokio::test]
async fn nearby_region_and_health_steer_partition_choice() {
    let s = JmqServer::start(JmqServerConfig {
        nodes: 2,
        regions: vec!["east".into(), "west".into()],
        ..JmqServerConfig::default()
    })
    .await
    .unwrap();
    s.create_topic("geo", 8).unwrap();
    // A client in "west" prefers partition groups led by the west node (id 2).
    let mut o = cluster_opts(&s);
    o.connect.region = Some("west".into());
    let p = JmqProducer::connect(o, ProducerOptions::default())
        .await
        .unwrap();
    for i in 0..20 {
        let r = p.send(&msg("geo", format!("w{i}"))).await.unwrap();
        assert_eq!(r.broker_id, 2, "nearby broker first");
    }
    // Without a region preference, a broker reporting a bad health point loses its weight.
    let mut o = cluster_opts(&s);
    o.prefer_nearby = false;
    let p = JmqProducer::connect(o, ProducerOptions::default())
        .await
        .unwrap();
    p.send(&msg("geo", "warm")).await.unwrap();
    s.set_health(1, 1000.0);
    p.cluster().check_health().await;
    let mut on_two = 0;
    for i in 0..20 {
        if p.send(&msg("geo", format!("h{i}")))
            .await
            .unwrap()
            .broker_id
            == 2
        {
            on_two += 1;
        }
    }
    assert!(
        on_two >= 18,
        "{on_two} of 20 sends avoided the unhealthy broker"
    );
}

#[tokio::test]
async fn idle_connections_heartbeat() {
    let s = server(1).await;
    let mut o = cluster_opts(&s);
    o.connect.heartbeat_interval = Duration::from_millis(20);
    let p = JmqProducer::connect(o, ProducerOptions::default())
        .await
        .unwrap();
    let before = s.request_count();
    let mut beats = 0;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        beats = s.request_count() - before;
        if beats >= 2 {
            break;
        }
    }
    assert!(beats >= 2, "idle connection sent {beats} heartbeats");
    p.close().await;
    // The server notices the closed socket asynchronously.
    for _ in 0..200 {
        if s.connection_count() == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        s.connection_count(),
        0,
        "REMOVE_CONNECTION, then the socket was closed"
    );
}
