//! Tests of the producer against the embedded broker: batches, packed batches, retries and
//! route lookups.

use super::*;
use ferrymq_server::broker::{Broker, BrokerConfig, Rpc, StatusFault};
use std::time::{Duration, SystemTime};

async fn broker(endpoints: usize) -> Broker {
    Broker::start(BrokerConfig {
        endpoints,
        ..BrokerConfig::default()
    })
    .await
    .unwrap()
}

async fn producer(b: &Broker, topics: &[&str]) -> Producer {
    let mut o = ClientOptions::new(b.access_point());
    o.heartbeat_interval = Duration::from_millis(200);
    let p = Producer::new(o, topics.iter().map(ToString::to_string).collect(), None).unwrap();
    p.start().await.unwrap();
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_batch_and_message_ids() {
    let b = broker(1).await;
    b.create_topic("t", "NORMAL", 4).unwrap();
    let p = producer(&b, &["t"]).await;
    let r = p
        .send(Message::builder("t", "hello").tag("a").build().unwrap())
        .await
        .unwrap();
    assert!(
        message_id::parse(&r.message_id).is_some(),
        "{}",
        r.message_id
    );
    let msgs: Vec<Message> = (0..10)
        .map(|i| Message::builder("t", format!("m{i}")).build().unwrap())
        .collect();
    // One SendMessage per message (a multi-message one would lose ids on a real proxy).
    let rs = p.send_batch(msgs).await.unwrap();
    assert_eq!(rs.len(), 10);
    let ids: std::collections::HashSet<_> = rs.iter().map(|r| r.message_id.clone()).collect();
    assert_eq!(ids.len(), 10);
    assert_eq!(b.calls(0, Rpc::SendMessage).unwrap(), 11);
    p.close().await;
    assert_eq!(
        p.send(Message::builder("t", "x").build().unwrap())
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::Closed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_several_message_groups_keeps_each_group_in_order() {
    let b = broker(1).await;
    b.create_topic("f", "FIFO", 8).unwrap();
    let p = producer(&b, &["f"]).await;
    let groups = ["g-a", "g-b", "g-c"];
    let msgs: Vec<Message> = (0..30)
        .map(|i| {
            Message::builder("f", format!("m{i}"))
                .message_group(groups[i % 3])
                .build()
                .unwrap()
        })
        .collect();
    let rs = p.send_batch(msgs).await.unwrap();
    assert_eq!(rs.len(), 30);
    for g in 0..3 {
        let mine: Vec<&SendReceipt> = rs.iter().skip(g).step_by(3).collect();
        assert!(mine.windows(2).all(|w| w[0].queue_id == w[1].queue_id));
        assert!(
            mine.windows(2).all(|w| w[0].offset < w[1].offset),
            "group {g} out of order"
        );
    }
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_batches_go_in_few_requests_under_one_id() {
    let b = broker(1).await;
    b.create_topic("t", "NORMAL", 1).unwrap();
    let p = producer(&b, &["t"]).await;
    let msgs = |n: usize| -> Vec<Message> {
        (0..n)
            .map(|i| {
                Message::builder("t", format!("m{i}"))
                    .tag("a")
                    .keys(["k"])
                    .build()
                    .unwrap()
            })
            .collect()
    };
    let before = b.calls(0, Rpc::SendMessage).unwrap();
    let rs = p.send_packed(msgs(10)).await.unwrap();
    assert_eq!(b.calls(0, Rpc::SendMessage).unwrap(), before + 1);
    assert_eq!(rs.len(), 10);
    assert!(rs.iter().all(|r| r.message_id == rs[0].message_id));
    let offsets: Vec<i64> = rs.iter().map(|r| r.offset).collect();
    assert_eq!(
        offsets,
        (rs[0].offset..rs[0].offset + 10).collect::<Vec<_>>()
    );
    let stored = b.messages("t", 100).unwrap();
    assert_eq!(stored.len(), 10);
    for (i, s) in stored.iter().enumerate() {
        assert_eq!(s.message.body.as_ref(), format!("m{i}").as_bytes());
        let sp = s.message.system_properties.as_ref().unwrap();
        assert_eq!(
            (sp.message_id.as_str(), sp.tag.as_deref()),
            (rs[0].message_id.as_str(), Some("a"))
        );
    }
    // Longer batches are cut into requests of at most PACK_MAX_MESSAGES, in order.
    let before = b.calls(0, Rpc::SendMessage).unwrap();
    let n = 2 * PACK_MAX_MESSAGES + 5;
    let rs = p.send_packed(msgs(n)).await.unwrap();
    assert_eq!(b.calls(0, Rpc::SendMessage).unwrap(), before + 3);
    assert_eq!(rs.len(), n);
    let ids: std::collections::HashSet<_> = rs.iter().map(|r| r.message_id.clone()).collect();
    assert_eq!(ids.len(), 3);
    // Messages that differ in more than their bodies fail before anything is sent.
    let before = b.calls(0, Rpc::SendMessage).unwrap();
    let mut odd = msgs(3);
    odd[2] = Message::builder("t", "x").tag("b").build().unwrap();
    let e = p.send_packed(odd).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.to_string().contains("message 2") && e.to_string().contains("tag"),
        "{e}"
    );
    let delayed = vec![Message::builder("t", "x")
        .delivery_time(SystemTime::now() + std::time::Duration::from_secs(60))
        .build()
        .unwrap()];
    let e = p.send_packed(delayed).await.unwrap_err();
    assert!(e.to_string().contains("NORMAL messages only"), "{e}");
    assert_eq!(b.calls(0, Rpc::SendMessage).unwrap(), before);
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_keeps_the_message_id_and_rotates_brokers() {
    let b = broker(2).await;
    b.create_topic("t", "NORMAL", 2).unwrap();
    let p = producer(&b, &["t"]).await;
    for ep in 0..2 {
        let fault = StatusFault {
            rpc: Some(Rpc::SendMessage),
            count: Some(1),
            ..StatusFault::new(status::INTERNAL_SERVER_ERROR)
        };
        b.inject_status(ep, fault).unwrap();
    }
    let r = p
        .send(Message::builder("t", "x").build().unwrap())
        .await
        .unwrap();
    // Attempt 1 failed on one broker, attempt 2 on the other, attempt 3 rotated back.
    assert_eq!(
        b.calls(0, Rpc::SendMessage).unwrap(),
        2 - u64::from(r.endpoints.key() != b.addresses()[0].to_string())
    );
    assert_eq!(
        b.calls(0, Rpc::SendMessage).unwrap() + b.calls(1, Rpc::SendMessage).unwrap(),
        3
    );
    assert_eq!(p.client().isolation().snapshot().len(), 2);
    let stored = b.messages("t", 10).unwrap();
    assert_eq!(stored.len(), 1);
    let sp = stored[0].message.system_properties.as_ref().unwrap();
    assert_eq!(sp.message_id, r.message_id);
    p.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_share_one_route_lookup() {
    let b = broker(1).await;
    b.create_topic("t", "NORMAL", 2).unwrap();
    b.create_topic("u", "NORMAL", 2).unwrap();
    let p = producer(&b, &["t"]).await;
    let before = b.calls(0, Rpc::QueryRoute).unwrap();
    let sends = (0..32).map(|_| p.send(Message::builder("u", "x").build().unwrap()));
    for r in futures::future::join_all(sends).await {
        r.unwrap();
    }
    assert_eq!(b.calls(0, Rpc::QueryRoute).unwrap(), before + 1);
    p.close().await;
}
