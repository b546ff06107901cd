//! An in-memory broker for unit tests: POP semantics (invisible until settled), FIFO groups
//! blocked while a message of theirs is in flight, broker-side DLQ after the last attempt, and
//! fault injection.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::*;
use crate::error::Error;
use crate::status;

#[derive(Clone)]
struct Stored {
    id: String,
    body: Vec<u8>,
    group: Option<String>,
    queue: i32,
    offset: i64,
    attempt: i32,
    /// The receive that handed it out (while in flight).
    receive: u64,
}

#[derive(Default)]
struct State {
    ready: HashMap<i32, VecDeque<Stored>>,
    inflight: HashMap<String, Stored>,
    group_inflight: HashMap<(i32, String), usize>,
    next_handle: u64,
    next_offset: i64,
    receives: u64,
}

#[derive(Default)]
pub(crate) struct FakeBroker {
    me: std::sync::Weak<FakeBroker>,
    pub(crate) settings: Mutex<ConsumerSettings>,
    pub(crate) queues: i32,
    state: Mutex<State>,
    arrived: Notify,
    pub(crate) ack_rpcs: AtomicUsize,
    pub(crate) acked: Mutex<Vec<String>>,
    pub(crate) nacked: Mutex<Vec<(String, i32, Duration)>>,
    pub(crate) dlq: Mutex<Vec<(String, u32)>>,
    pub(crate) fail_acks: AtomicUsize,
    pub(crate) invalid_acks: AtomicUsize,
    /// The next ack entries find their receipt handle expired: refused with
    /// `INVALID_RECEIPT_HANDLE`, and the message is redelivered with the rest of the batch
    /// it was received in, as a broker does when their invisibility ends.
    pub(crate) expire_acks: AtomicUsize,
    /// Answer OK to an ack whose handle is unknown (stale), without effect, as a proxy does.
    pub(crate) stale_acks_ok: std::sync::atomic::AtomicBool,
    pub(crate) throttle_receives: AtomicUsize,
    pub(crate) fail_receives: AtomicUsize,
    /// The next receives never answer (a call lost on a dead connection).
    pub(crate) hang_receives: AtomicUsize,
    pub(crate) receives: AtomicUsize,
    /// Every subscription list the consumer announced while running.
    pub(crate) announced: Mutex<Vec<Vec<(String, FilterExpression)>>>,
    /// A topic whose subscription is refused (as a topic without a route).
    pub(crate) unknown_topic: Mutex<Option<String>>,
}

impl FakeBroker {
    pub(crate) fn new(queues: i32, settings: ConsumerSettings) -> Arc<Self> {
        Arc::new_cyclic(|me| Self {
            me: me.clone(),
            settings: Mutex::new(settings),
            queues,
            ..Default::default()
        })
    }

    /// Store a message on queue `queue`.
    pub(crate) fn send(&self, queue: i32, id: &str, body: &[u8], group: Option<&str>) {
        let mut st = self.state.lock();
        st.next_offset += 1;
        let s = Stored {
            id: id.to_string(),
            body: body.to_vec(),
            group: group.map(Into::into),
            queue,
            offset: st.next_offset,
            attempt: 1,
            receive: 0,
        };
        st.ready.entry(queue).or_default().push_back(s);
        drop(st);
        self.arrived.notify_waiters();
    }

    fn requeue(&self, mut s: Stored) {
        let max = self.settings.lock().retry_policy.max_attempts;
        s.attempt += 1;
        if u32::try_from(s.attempt).unwrap_or(0) > max {
            self.dlq.lock().push((s.id, max));
            return;
        }
        self.state
            .lock()
            .ready
            .entry(s.queue)
            .or_default()
            .push_front(s);
        self.arrived.notify_waiters();
    }

    /// The invisibility of every message in flight ended: they are redelivered.
    pub(crate) fn expire_inflight(&self) {
        let handles: Vec<String> = self.state.lock().inflight.keys().cloned().collect();
        for h in handles {
            self.expire_batch(&h);
        }
    }

    /// The invisibility of the batch that brought `handle` ended: every message of it still
    /// in flight is redelivered (first, in offset order, with one more attempt).
    fn expire_batch(&self, handle: &str) {
        let mut st = self.state.lock();
        let Some((queue, receive)) = st.inflight.get(handle).map(|s| (s.queue, s.receive)) else {
            return;
        };
        let handles: Vec<String> = st
            .inflight
            .iter()
            .filter(|(_, s)| s.queue == queue && s.receive == receive)
            .map(|(h, _)| h.clone())
            .collect();
        let mut batch: Vec<Stored> = handles
            .iter()
            .filter_map(|h| st.inflight.remove(h))
            .collect();
        batch.sort_by_key(|s| std::cmp::Reverse(s.offset));
        for mut s in batch {
            Self::release_group(&mut st, &s);
            s.attempt += 1;
            st.ready.entry(queue).or_default().push_front(s);
        }
        drop(st);
        self.arrived.notify_waiters();
    }

    /// Take the message in flight under `handle` out of flight (releasing its group), or
    /// `INVALID_RECEIPT_HANDLE` when no message is.
    fn settle(&self, handle: &str) -> Result<Stored> {
        let mut st = self.state.lock();
        let s = st.inflight.remove(handle).ok_or_else(|| {
            Error::rocketmq_status(status::INVALID_RECEIPT_HANDLE, "unknown handle")
        })?;
        Self::release_group(&mut st, &s);
        Ok(s)
    }

    fn release_group(st: &mut State, s: &Stored) {
        if let Some(g) = &s.group {
            let key = (s.queue, g.clone());
            if let Some(n) = st.group_inflight.get_mut(&key) {
                *n -= 1;
                if *n == 0 {
                    st.group_inflight.remove(&key);
                }
            }
        }
    }

    fn take(&self, queue: i32, batch: u32) -> Vec<proto::Message> {
        let mut st = self.state.lock();
        let fifo = self.settings.lock().fifo;
        let mut out = Vec::new();
        st.receives += 1;
        let receive = st.receives;
        let ready = std::mem::take(st.ready.entry(queue).or_default());
        let mut keep = VecDeque::new();
        let mut blocked_now: Vec<String> = Vec::new();
        let inflight_before: Vec<String> = st
            .group_inflight
            .keys()
            .filter(|(q, _)| *q == queue)
            .map(|(_, g)| g.clone())
            .collect();
        for mut s in ready {
            let blocked = fifo
                && s.group
                    .as_ref()
                    .is_some_and(|g| inflight_before.contains(g) || blocked_now.contains(g));
            if out.len() >= batch as usize || blocked {
                if let Some(g) = &s.group {
                    blocked_now.push(g.clone());
                }
                keep.push_back(s);
                continue;
            }
            st.next_handle += 1;
            let handle = format!("h{}", st.next_handle);
            if let Some(g) = &s.group {
                *st.group_inflight.entry((queue, g.clone())).or_default() += 1;
            }
            out.push(proto::Message {
                topic: Some(proto::Resource {
                    resource_namespace: String::new(),
                    name: "t".into(),
                }),
                user_properties: HashMap::new(),
                system_properties: Some(proto::SystemProperties {
                    message_id: s.id.clone(),
                    receipt_handle: Some(handle.clone()),
                    queue_id: queue,
                    queue_offset: Some(s.offset),
                    delivery_attempt: Some(s.attempt),
                    message_group: s.group.clone(),
                    ..Default::default()
                }),
                body: bytes::Bytes::from(s.body.clone()),
            });
            s.receive = receive;
            st.inflight.insert(handle, s);
        }
        st.ready.insert(queue, keep);
        out
    }
}

impl ConsumerRpc for FakeBroker {
    fn settings(&self) -> ConsumerSettings {
        self.settings.lock().clone()
    }

    fn access_endpoints(&self) -> Endpoints {
        crate::rocketmq::message_view::tests::endpoints()
    }

    async fn query_assignment(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        Ok((0..self.queues)
            .map(|id| leader_queue(topic, id, proto::Permission::ReadWrite, "b"))
            .collect())
    }

    async fn receive(&self, request: ReceiveRequest) -> Result<Received> {
        self.receives.fetch_add(1, Ordering::Relaxed);
        if take_one(&self.throttle_receives) {
            return Err(Error::rocketmq_status(
                status::TOO_MANY_REQUESTS,
                "slow down",
            ));
        }
        if take_one(&self.fail_receives) {
            return Err(Error::connection("injected receive failure"));
        }
        if take_one(&self.hang_receives) {
            return std::future::pending().await;
        }
        let poll = request.long_polling_timeout.min(Duration::from_millis(50));
        let deadline = crate::duration::tokio_deadline(tokio::time::Instant::now(), poll);
        loop {
            let arrived = self.arrived.notified();
            tokio::pin!(arrived);
            arrived.as_mut().enable();
            let got = self.take(request.queue.id, request.batch_size);
            if !got.is_empty() {
                return Ok(got.into());
            }
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => return Ok(Received::default()),
                () = arrived => {}
            }
        }
    }

    async fn ack(
        &self,
        _source: &MessageSource,
        messages: &[&MessageView],
    ) -> Result<Vec<Result<()>>> {
        self.ack_rpcs.fetch_add(1, Ordering::Relaxed);
        if take_one(&self.fail_acks) {
            return Err(Error::rocketmq_status(
                status::INTERNAL_SERVER_ERROR,
                "injected",
            ));
        }
        let mut out = Vec::new();
        for m in messages {
            if take_one(&self.expire_acks) {
                self.expire_batch(&m.receipt_handle());
                out.push(Err(Error::rocketmq_status(
                    status::INVALID_RECEIPT_HANDLE,
                    "expired",
                )));
                continue;
            }
            if take_one(&self.invalid_acks) {
                out.push(Err(Error::rocketmq_status(
                    status::INVALID_RECEIPT_HANDLE,
                    "injected",
                )));
                continue;
            }
            match self.settle(&m.receipt_handle()) {
                Ok(s) => {
                    self.acked.lock().push(s.id);
                    out.push(Ok(()));
                }
                Err(_) if self.stale_acks_ok.load(Ordering::Relaxed) => out.push(Ok(())),
                Err(e) => out.push(Err(e)),
            }
        }
        self.arrived.notify_waiters();
        Ok(out)
    }

    async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<String> {
        let s = self.settle(&message.receipt_handle())?;
        self.nacked
            .lock()
            .push((s.id.clone(), message.delivery_attempt(), duration));
        let me = self.me.upgrade().expect("the fake broker is alive");
        tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            me.requeue(s);
        });
        Ok("new-handle".to_string())
    }

    async fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> Result<()> {
        let unknown = self.unknown_topic.lock().clone();
        if let Some(t) = unknown.filter(|u| subscriptions.iter().any(|(t, _)| t == u)) {
            return Err(Error::rocketmq_status(
                status::TOPIC_NOT_FOUND,
                format!("no route for {t}"),
            ));
        }
        self.announced.lock().push(subscriptions.to_vec());
        Ok(())
    }

    async fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        max_delivery_attempts: u32,
    ) -> Result<()> {
        let s = self.settle(&message.receipt_handle())?;
        self.dlq.lock().push((s.id, max_delivery_attempts));
        self.arrived.notify_waiters();
        Ok(())
    }
}

fn take_one(counter: &AtomicUsize) -> bool {
    counter
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
        .is_ok()
}
