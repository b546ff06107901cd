//! Unit tests of the JMQ4 topic store.

use super::*;
use crate::jmq::codec::now_millis;
use crate::jmq::command::{AckItem, RetryType};
use bytes::Bytes;

fn msg(body: &'static [u8]) -> WireMessage {
    let mut m = WireMessage {
        partition: -1,
        send_time: now_millis(),
        ..WireMessage::default()
    };
    m.set_body(Bytes::from_static(body));
    m
}

/// An ack (`RetryType::None`) or nack of one index.
fn item(partition: i16, index: i64, retry_type: RetryType) -> AckItem {
    AckItem {
        partition,
        index,
        retry_type,
    }
}

fn store() -> Arc<JmqStore> {
    let s = JmqStore::new(StoreConfig::default(), vec![1]);
    s.add_app("app", "tok");
    s.create_topic("t", 2, false).unwrap();
    s
}

#[test]
fn produce_fetch_ack_and_occupation() {
    let s = store();
    let (code, items) = s.produce(1, "t", "app", None, vec![msg(b"a"), msg(b"b")], None);
    assert_eq!(code, 0);
    assert_eq!(items.len(), 2);
    let p = items[0].partition;
    assert_eq!(items[1].index, items[0].index + 1);
    let f = s.fetch_topic(1, 7, "t", "app", 10, Duration::from_secs(30));
    assert_eq!(f.messages.len(), 2);
    // Occupied by connection 7: another connection gets nothing.
    let other = s.fetch_topic(1, 8, "t", "app", 10, Duration::from_secs(30));
    assert!(other.messages.is_empty());
    let acks: Vec<AckItem> = f
        .messages
        .iter()
        .map(|m| item(p, m.index, RetryType::None))
        .collect();
    assert_eq!(s.commit_ack("t", "app", p, &acks), 0);
    assert_eq!(s.fetch_index("t", "app", p).index, 2);
    assert!(s
        .fetch_topic(1, 8, "t", "app", 10, Duration::from_secs(30))
        .messages
        .is_empty());
}

#[test]
fn ack_timeout_redelivers_and_retry_queue_works() {
    let s = store();
    s.produce(1, "t", "app", None, vec![msg(b"a")], None);
    let f = s.fetch_topic(1, 1, "t", "app", 1, Duration::from_millis(0));
    assert_eq!(f.messages.len(), 1);
    let again = s.fetch_topic(1, 2, "t", "app", 1, Duration::from_secs(30));
    assert_eq!(
        again.messages, f.messages,
        "ack timeout passed: redelivered"
    );
    let m = &again.messages[0];
    s.commit_ack(
        "t",
        "app",
        m.partition,
        &[item(m.partition, m.index, RetryType::Exception)],
    );
    let r = s.fetch_topic(1, 2, "t", "app", 1, Duration::from_secs(30));
    assert_eq!(r.messages.len(), 1);
    assert_eq!(r.messages[0].partition, RETRY_PARTITION);
    assert_eq!(r.messages[0].body, m.body);
}

#[test]
fn retried_batches_keep_their_index_span() {
    let s = store();
    let mut batch = msg(b"three inner messages");
    batch.sys_code.batch = true;
    batch.flag = 3;
    batch.partition = 0;
    let mut single = msg(b"single");
    single.partition = 0;
    s.produce(1, "t", "app", None, vec![batch, single], None);
    let f = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
    assert_eq!(f.messages.len(), 2);
    let (b, one) = (&f.messages[0], &f.messages[1]);
    // Two of the batch's messages and the single one go to the retry queue: the batch is
    // queued once, not twice.
    let nack = |index| item(0, index, RetryType::Exception);
    let items = [nack(b.index), nack(b.index + 2), nack(one.index)];
    assert_eq!(s.commit_ack("t", "app", 0, &items), 0);
    let r = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
    assert_eq!(r.messages.len(), 2, "{:?}", r.messages);
    let (rb, rs) = (&r.messages[0], &r.messages[1]);
    assert_eq!(rb.body, b.body);
    assert_eq!(rs.body, one.body);
    // The batch's retry indices span its 3 messages, so the single one does not collide.
    assert_eq!(rs.index, rb.index + 3);
    // Acking the batch's last message settles the batch only; the single one stays in flight
    // and comes back after its ack timeout.
    let ack = item(RETRY_PARTITION, rb.index + 2, RetryType::None);
    assert_eq!(s.commit_ack("t", "app", RETRY_PARTITION, &[ack]), 0);
    let st = s.state.lock();
    let a = &st.topics["t"].apps["app"];
    assert_eq!(
        a.retry_inflight.keys().copied().collect::<Vec<_>>(),
        [rs.index]
    );
    drop(st);
    // Mixed answers for one entry: a nack among acks queues it again.
    let items = [item(RETRY_PARTITION, rs.index, RetryType::Exception)];
    assert_eq!(s.commit_ack("t", "app", RETRY_PARTITION, &items), 0);
    let again = s.fetch_topic(1, 1, "t", "app", 10, Duration::from_secs(30));
    assert_eq!(again.messages.len(), 1);
    assert_eq!(again.messages[0].body, one.body);
}

#[test]
fn leaders_ordering_and_codes() {
    let s = JmqStore::new(StoreConfig::default(), vec![1, 2]);
    s.add_app("app", "tok");
    s.create_topic("t", 4, false).unwrap();
    let mut m = msg(b"x");
    m.partition = 1; // group 1, led by node 2
    let (code, _) = s.produce(1, "t", "app", None, vec![m.clone()], None);
    assert_eq!(code, codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER);
    assert_eq!(s.produce(2, "t", "app", None, vec![m], None).0, 0);
    assert_eq!(
        s.produce(1, "nope", "app", None, vec![msg(b"x")], None).0,
        codes::FW_TOPIC_NOT_EXIST
    );
    let mut a = msg(b"a");
    a.partition = 0;
    let mut b = msg(b"b");
    b.partition = 2;
    assert_eq!(
        s.produce(1, "t", "app", None, vec![a, b], None).0,
        codes::CN_PARAM_ERROR
    );
    assert_eq!(
        s.fetch_partition(1, "t", "app", 0, 5, 1).1,
        codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE
    );
    assert_eq!(
        s.topic_meta("nope", "app").0.code,
        codes::FW_TOPIC_NOT_EXIST
    );
    assert_eq!(
        s.topic_meta("t", "stranger").0.code,
        codes::CN_NO_PERMISSION
    );
}

#[test]
fn transactions_and_feedback() {
    let s = store();
    let tx = s
        .prepare("t", "app", Some("biz-1".into()), Duration::from_millis(0))
        .unwrap();
    let (code, items) = s.produce(1, "t", "app", Some(&tx), vec![msg(b"a")], None);
    assert_eq!(code, 0);
    assert_eq!(items[0].index, -1);
    assert_eq!(s.message_count("t"), 0, "invisible before commit");
    let fb = s.feedback("t", "app");
    assert_eq!(fb.len(), 1);
    assert_eq!(fb[0].transaction_id, "biz-1");
    assert_eq!(s.commit("t", "app", &tx), 0);
    assert_eq!(s.message_count("t"), 1);
    assert_eq!(s.commit("t", "app", &tx), codes::FW_TRANSACTION_NOT_EXISTS);
}

#[test]
fn coordinator_shares_then_balances() {
    let s = JmqStore::new(StoreConfig::default(), vec![1, 2, 3, 4]);
    s.create_topic("t", 8, false).unwrap();
    let t = Duration::from_secs(60);
    assert_eq!(s.assign("t", "app", "a", t).unwrap().len(), 8);
    for m in ["b", "c", "d"] {
        s.assign("t", "app", m, t).unwrap();
    }
    let mut all: Vec<i16> = ["a", "b", "c", "d"]
        .iter()
        .flat_map(|m| s.assign("t", "app", m, t).unwrap())
        .collect();
    all.sort_unstable();
    assert_eq!(all, (0..8).collect::<Vec<i16>>(), "4 members: exclusive");
}
