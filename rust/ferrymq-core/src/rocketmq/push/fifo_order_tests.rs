//! FIFO order as the client workflow defines it: message B of a lane may start only once A was
//! consumed and the broker accepted A's result (its ack, or its dead-letter forward). Checked on
//! the in-memory broker of `consumer_rpc` with failing and refused acks, in the default (ordered)
//! mode and, for contrast, with `fifo_pipelining`.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::consumer::tests::{config, fifo_broker, start};
use super::context::PushConsumerConfig;
use crate::rocketmq::consumer_rpc::fake::FakeBroker;
use crate::rocketmq::listener::ConsumeResult;
use crate::rocketmq::message_view::MessageView;
use crate::test_support::wait_for;

fn fifo_config(accelerator: bool, pipelining: bool) -> PushConsumerConfig {
    let mut cfg = config();
    cfg.fifo_accelerator = accelerator;
    cfg.fifo_pipelining = pipelining;
    cfg
}

/// Watches a consumer from inside its listener: the order in which messages started, and every
/// start of a message whose lane predecessor's result the broker had not accepted yet.
struct Watch {
    broker: Arc<FakeBroker>,
    accelerator: bool,
    /// The last message started per lane.
    last: Mutex<HashMap<String, String>>,
    /// (predecessor, message) pairs started too early.
    early: Mutex<Vec<(String, String)>>,
    /// Every start, in order.
    seen: Mutex<Vec<String>>,
}

impl Watch {
    fn new(broker: &Arc<FakeBroker>, accelerator: bool) -> Arc<Self> {
        Arc::new(Self {
            broker: broker.clone(),
            accelerator,
            last: Mutex::default(),
            early: Mutex::default(),
            seen: Mutex::default(),
        })
    }

    fn on_start(&self, m: &MessageView) {
        let id = m.message_id().to_string();
        self.seen.lock().push(id.clone());
        let lane = if self.accelerator {
            m.message_group().unwrap_or_default().to_string()
        } else {
            String::new()
        };
        let mut last = self.last.lock();
        if let Some(prev) = last.get(&lane) {
            let accepted = self.broker.acked.lock().contains(prev)
                || self.broker.dlq.lock().iter().any(|(d, _)| d == prev);
            if prev != &id && !accepted {
                self.early.lock().push((prev.clone(), id.clone()));
            }
        }
        last.insert(lane, id);
    }

    /// Per message group (the id's prefix before `-`), the ids in the order they started.
    fn by_group(&self) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        for id in self.seen.lock().iter() {
            let g = id.split('-').next().unwrap_or_default().to_string();
            out.entry(g).or_default().push(id.clone());
        }
        out
    }

    /// Groups in which a message started after a later message of its group (ids sort in send
    /// order within a group). Starting the same message again is not a violation.
    fn order_violations(&self) -> Vec<(String, Vec<String>)> {
        self.by_group()
            .into_iter()
            .filter(|(_, ids)| ids.windows(2).any(|w| w[1] < w[0]))
            .collect()
    }
}

/// g1-04 fails once, g2-05 always fails (dead-lettered after 3 attempts), the rest succeed.
fn flaky(watch: &Arc<Watch>) -> impl Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static {
    let watch = watch.clone();
    move |m| {
        watch.on_start(m);
        let id = m.message_id();
        if (id == "g1-04" && m.delivery_attempt() == 1) || id == "g2-05" {
            ConsumeResult::Failure
        } else {
            ConsumeResult::Success
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_fifo_starts_a_message_only_once_the_broker_accepted_the_previous_result() {
    for accelerator in [false, true] {
        let broker = fifo_broker(3, 3, 30);
        // The first AckMessage calls fail: each is retried a second later, and the lanes wait.
        broker.fail_acks.store(3, Ordering::Relaxed);
        let watch = Watch::new(&broker, accelerator);
        let c = start(&broker, fifo_config(accelerator, false), 4, flaky(&watch));
        wait_for("settled", || {
            broker.acked.lock().len() == 29 && broker.dlq.lock().len() == 1
        })
        .await;
        let early = watch.early.lock().clone();
        assert!(
            early.is_empty(),
            "accelerator {accelerator}: started before the previous result was accepted: {early:?}"
        );
        assert!(watch.order_violations().is_empty());
        assert_eq!(watch.by_group().len(), 3);
        let s = c.stats();
        assert!(s.settle_retries >= 3, "{s:?}");
        assert_eq!((s.local_retries, s.dead_lettered), (3, 1), "{s:?}");
        assert_eq!(s.left_for_redelivery, 0);
        c.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_fifo_runs_ahead_of_acks_the_broker_has_not_accepted() {
    // The documented weaker guarantee: same order while acks land, but the next messages start
    // before the broker accepted the previous one's ack.
    let broker = fifo_broker(3, 3, 30);
    broker.fail_acks.store(3, Ordering::Relaxed);
    let watch = Watch::new(&broker, true);
    let c = start(&broker, fifo_config(true, true), 4, flaky(&watch));
    wait_for("settled", || {
        broker.acked.lock().len() == 29 && broker.dlq.lock().len() == 1
    })
    .await;
    assert!(!watch.early.lock().is_empty());
    assert!(watch.order_violations().is_empty());
    c.shutdown(Duration::from_secs(5)).await;
}

/// 12 messages of groups g0 and g1 on one queue; the first ack entry finds its handle expired,
/// so the broker redelivers the whole first batch (8 messages).
fn expiring_broker() -> Arc<FakeBroker> {
    let broker = fifo_broker(5, 2, 12);
    broker.expire_acks.store(1, Ordering::Relaxed);
    broker
}

fn succeed(watch: &Arc<Watch>) -> impl Fn(&MessageView) -> ConsumeResult + Send + Sync + 'static {
    let watch = watch.clone();
    move |m| {
        watch.on_start(m);
        ConsumeResult::Success
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_result_leaves_the_messages_received_with_it_for_redelivery() {
    for accelerator in [false, true] {
        let broker = expiring_broker();
        let watch = Watch::new(&broker, accelerator);
        let c = start(&broker, fifo_config(accelerator, false), 4, succeed(&watch));
        wait_for("all acked", || broker.acked.lock().len() == 12).await;
        let mut acked = broker.acked.lock().clone();
        acked.sort_unstable();
        acked.dedup();
        assert_eq!(acked.len(), 12, "acked twice: {:?}", broker.acked.lock());
        let violations = watch.order_violations();
        assert!(
            violations.is_empty(),
            "accelerator {accelerator}: out of order: {violations:?}"
        );
        let s = c.stats();
        assert!(s.invalid_receipt_handles >= 1, "{s:?}");
        assert!(s.left_for_redelivery >= 1, "{s:?}");
        wait_for("cache drained", || c.stats().cached_messages == 0).await;
        c.shutdown(Duration::from_secs(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_pipelining_a_refused_ack_brings_its_message_back_after_later_ones() {
    let broker = expiring_broker();
    let watch = Watch::new(&broker, false);
    let c = start(&broker, fifo_config(false, true), 4, succeed(&watch));
    wait_for("all acked", || broker.acked.lock().len() == 12).await;
    assert!(!watch.order_violations().is_empty());
    c.shutdown(Duration::from_secs(5)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redelivery_overtakes_the_stale_copies_even_when_the_stale_ack_is_answered_ok() {
    // A proxy answers OK to an ack whose handle went stale (the message was redelivered): the
    // lane cannot learn it from the ack, but the redelivered copies show it.
    for accelerator in [false, true] {
        let broker = fifo_broker(5, 2, 12);
        broker.stale_acks_ok.store(true, Ordering::Relaxed);
        broker.fail_acks.store(1000, Ordering::Relaxed);
        let watch = Watch::new(&broker, accelerator);
        let c = start(&broker, fifo_config(accelerator, false), 4, succeed(&watch));
        wait_for("an ack failed", || c.stats().settle_retries >= 1).await;
        let received = c.stats().received;
        broker.expire_inflight();
        wait_for("the redelivery", || c.stats().received > received).await;
        broker.fail_acks.store(0, Ordering::Relaxed);
        wait_for("all acked", || broker.acked.lock().len() == 12).await;
        let violations = watch.order_violations();
        assert!(
            violations.is_empty(),
            "accelerator {accelerator}: out of order: {violations:?}"
        );
        assert!(c.stats().left_for_redelivery >= 1, "{:?}", c.stats());
        c.shutdown(Duration::from_secs(5)).await;
    }
}
