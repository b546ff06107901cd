//! The remoting client against a real Apache RocketMQ (name server + broker).
//!
//! Runs only when `FERRYMQ_REMOTING_NAMESRV` names a name server (`127.0.0.1:9876`); otherwise
//! every test returns at once. It creates its own topic with 4 queues on the broker of the
//! route of `TBW102`.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use ferrymq_core::remoting::{
    PullStatus, RemotingClient, RemotingOptions, RemotingReader, TagFilter,
};
use ferrymq_core::rocketmq::pull::{OffsetPolicy, QueueRef};
use ferrymq_core::Message;

fn namesrv() -> Option<String> {
    match std::env::var("FERRYMQ_REMOTING_NAMESRV") {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            eprintln!("FERRYMQ_REMOTING_NAMESRV is not set; skipping the real-server test");
            None
        }
    }
}

fn now_ms() -> i64 {
    i64::try_from(
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap()
}

/// Create a fresh topic and wait until the name server routes it.
async fn fresh_topic(client: &RemotingClient, queues: i32) -> (String, String) {
    let topic = format!("remoting-it-{:08x}", fastrand_u32());
    let tbw = client.route("TBW102").await.expect("route of TBW102");
    let broker = tbw.broker_datas[0].broker_name.clone();
    client
        .create_topic(&broker, &topic, queues)
        .await
        .expect("create topic");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match client.read_queues(&topic).await {
            Ok(q) if q.len() == usize::try_from(queues).unwrap() => break,
            other => {
                assert!(
                    Instant::now() < deadline,
                    "topic {topic} never appeared: {other:?}"
                );
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
    (topic, broker)
}

fn fastrand_u32() -> u32 {
    let t = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    t ^ std::process::id().rotate_left(16)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remoting_against_real_server() {
    let Some(ns) = namesrv() else { return };
    let options = RemotingOptions::new(format!("remoting://{ns}"));
    let client = RemotingClient::new(options.clone()).unwrap();
    let (topic, broker) = fresh_topic(&client, 4).await;
    let queues = client.read_queues(&topic).await.unwrap();
    assert_eq!(client.write_queues(&topic).await.unwrap(), queues);

    // An unknown topic is TOPIC_NOT_EXIST from the name server.
    let e = client.route("remoting-it-missing-topic").await.unwrap_err();
    assert_eq!(e.status().unwrap().code, 17, "{e}");

    // Batch send: distinct keys, tags and properties per message.
    let before_send = now_ms() - 1;
    let n = 3000usize;
    let messages: Vec<Message> = (0..n)
        .map(|i| {
            Message::builder(topic.clone(), format!("body-{i}").repeat(1 + i % 5))
                .keys([format!("key-{i}"), format!("alt-{i}")])
                .tag(format!("tag-{}", i % 3))
                .property("index", i.to_string())
                .property("note", format!("p\"q\\{i}"))
                .build()
                .unwrap()
        })
        .collect();
    let receipts = client.send_batch(&topic, &messages).await.unwrap();
    assert_eq!(receipts.len(), n);
    let mut ids = std::collections::HashSet::new();
    for r in &receipts {
        assert_eq!(r.message_id.len(), 32);
        assert!(ids.insert(r.message_id.clone()), "duplicate id");
        assert_eq!(r.queue.broker, broker);
    }

    // Offsets: every queue's max covers what was sent to it.
    let reader = RemotingReader::new(options.clone(), "ferry-remoting-it", None, 32).unwrap();
    reader.start().await.unwrap();
    let mut total = 0;
    for q in &queues {
        let min = reader
            .query_offset(&topic, q, OffsetPolicy::Beginning)
            .await
            .unwrap();
        let max = reader
            .query_offset(&topic, q, OffsetPolicy::End)
            .await
            .unwrap();
        assert_eq!(min, 0);
        let sent = receipts.iter().filter(|r| r.queue == *q).count();
        assert_eq!(max, i64::try_from(sent).unwrap(), "{}", q.key());
        total += max;
        // Read the whole queue back and compare with what was sent.
        let read = reader.read_range(&topic, q, 0, max, 100_000).await.unwrap();
        assert_eq!(read.columns.len(), sent);
        assert_eq!(read.next_offset, max);
        assert_eq!(read.first_offset, if sent > 0 { Some(0) } else { None });
        // A range in the middle is exact.
        if max > 10 {
            let part = reader.read_range(&topic, q, 3, 9, 100).await.unwrap();
            assert_eq!(part.columns.len(), 6);
            assert_eq!(part.first_offset, Some(3));
            let limited = reader.read_range(&topic, q, 0, max, 5).await.unwrap();
            assert_eq!((limited.columns.len(), limited.next_offset), (5, 5));
        }
        // Search by time: everything is at or after the send started.
        let at = reader
            .query_offset(&topic, q, OffsetPolicy::Timestamp(before_send))
            .await
            .unwrap();
        assert_eq!(at, 0);
        let after = reader
            .query_offset(&topic, q, OffsetPolicy::Timestamp(now_ms() + 60_000))
            .await
            .unwrap();
        assert_eq!(after, max);
    }
    assert_eq!(total, i64::try_from(n).unwrap());

    // Message contents via the raw pull: ids, keys, tags, properties, offsets.
    let mut checked = 0;
    for q in &queues {
        let mut at = 0;
        let max = client.max_offset(&topic, q).await.unwrap();
        while at < max {
            let p = client
                .pull("ferry-remoting-it", &topic, q, at, 32, None, None)
                .await
                .unwrap();
            assert_eq!(p.status, PullStatus::Found);
            for m in &p.messages {
                assert_eq!(m.queue_offset, at);
                let i: usize = m.property("index").unwrap().parse().unwrap();
                let r = &receipts[i];
                assert_eq!((&r.queue, r.offset), (q, m.queue_offset));
                assert_eq!(m.msg_id, r.message_id);
                assert_eq!(m.keys(), vec![format!("key-{i}"), format!("alt-{i}")]);
                assert_eq!(m.tag(), Some(format!("tag-{}", i % 3).as_str()));
                assert_eq!(m.property("note"), Some(format!("p\"q\\{i}").as_str()));
                assert_eq!(
                    &m.body[..],
                    format!("body-{i}").repeat(1 + i % 5).as_bytes()
                );
                let proto = m.to_proto();
                assert_eq!(
                    proto.user_properties.len(),
                    2,
                    "{:?}",
                    proto.user_properties
                );
                at += 1;
                checked += 1;
            }
            assert_eq!(p.next_begin_offset, at);
        }
        // Past the end: nothing new, at once without suspend.
        let p = client
            .pull("ferry-remoting-it", &topic, q, max, 32, None, None)
            .await
            .unwrap();
        assert_eq!(p.status, PullStatus::NoNewMessages);
        // Far past the end: offset illegal, the broker suggests the max.
        let p = client
            .pull("ferry-remoting-it", &topic, q, max + 100, 32, None, None)
            .await
            .unwrap();
        assert_eq!(p.status, PullStatus::OffsetIllegal);
        assert_eq!(p.next_begin_offset, max);
    }
    assert_eq!(checked, n);

    // Tag filter: only exact matches come back.
    let f = TagFilter::parse("tag-1").unwrap();
    // 3000 messages make 3 requests of at most 1024: pick a queue that got one.
    let q0 = &receipts[0].queue;
    let p = client
        .pull("ferry-remoting-it", &topic, q0, 0, 32, Some(&f), None)
        .await
        .unwrap();
    assert!(!p.messages.is_empty());
    assert!(p.messages.iter().all(|m| m.tag() == Some("tag-1")));

    // FIFO: messages of one group land on one queue, in order, also across requests.
    let fifo: Vec<Message> = (0..2100)
        .map(|i| {
            let mut b = Message::builder(topic.clone(), format!("f{i}"));
            if i % 2 == 0 {
                b = b.message_group(format!("group-{}", i % 6));
            }
            b.build().unwrap()
        })
        .collect();
    let fifo_receipts = client.send_batch(&topic, &fifo).await.unwrap();
    for g in 0..3 {
        let of_group: Vec<&ferrymq_core::remoting::BatchReceipt> = fifo_receipts
            .iter()
            .enumerate()
            .filter(|(i, _)| i % 2 == 0 && (i % 6) / 2 == g)
            .map(|(_, r)| r)
            .collect();
        assert!(of_group.iter().all(|r| r.queue == of_group[0].queue));
        assert!(of_group.windows(2).all(|w| w[0].offset < w[1].offset));
    }

    // Commit and read back, with a group the broker has never seen.
    let group = format!("ferry-remoting-it-{:08x}", fastrand_u32());
    let committer = RemotingReader::new(options.clone(), group, None, 32).unwrap();
    assert_eq!(committer.committed_offset(&topic, q0).await.unwrap(), None);
    committer.commit_offset(&topic, q0, 7).await.unwrap();
    assert_eq!(
        committer.committed_offset(&topic, q0).await.unwrap(),
        Some(7)
    );

    // A long-poll pull is woken by a send.
    let q = QueueRef {
        broker: broker.clone(),
        id: 1,
    };
    let max = client.max_offset(&topic, &q).await.unwrap();
    let waiter = {
        let client = client.clone();
        let topic = topic.clone();
        let q = q.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            let p = client
                .pull(
                    "ferry-remoting-it",
                    &topic,
                    &q,
                    max,
                    32,
                    None,
                    Some(Duration::from_secs(15)),
                )
                .await
                .unwrap();
            (p, t.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    // Single sends round-robin, so send until one lands on queue 1.
    let mut sent = 0;
    while sent < 8 {
        let m = Message::builder(topic.clone(), "wake").build().unwrap();
        let r = client.send(&m).await.unwrap();
        sent += 1;
        if r.queue == q {
            assert_eq!(r.offset, max);
            break;
        }
    }
    let (p, took) = waiter.await.unwrap();
    assert_eq!(p.status, PullStatus::Found);
    assert_eq!(p.messages[0].queue_offset, max);
    assert!(
        took < Duration::from_secs(10),
        "the held pull took {took:?}"
    );

    // read_range waits at the end of a queue, then gives up with a timeout.
    let t = Instant::now();
    let e = reader
        .read_range(&topic, &q, max + 1, max + 2, 10)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ferrymq_core::ErrorKind::Timeout, "{e}");
    eprintln!("read_range at the end gave up after {:?}: {e}", t.elapsed());
    reader.shutdown().await;
    client.shutdown().await;
    assert!(client.route(&topic).await.is_err());
}
