//! Delayed delivery: DELAY messages wait here until their delivery time, then enter their queue
//! (and get their offset) like RocketMQ's timer wheel does. A recall handle, returned by
//! SendMessage, removes a message that has not been delivered yet (RecallMessage).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use super::store::{Queue, Topic};
use crate::proto;

/// A message waiting for its delivery time.
#[derive(Debug)]
pub struct Delayed {
    /// Its topic.
    pub topic: Arc<Topic>,
    /// The queue it will enter.
    pub queue: Arc<Queue>,
    /// The message.
    pub msg: proto::Message,
}

/// Messages waiting for their delivery time, ordered by (due ms, sequence).
#[derive(Debug, Default)]
pub struct Timer {
    wheel: Mutex<TimerState>,
    seq: AtomicU64,
    /// Woken when an earlier message is scheduled.
    pub changed: Notify,
}

#[derive(Debug, Default)]
struct TimerState {
    due: BTreeMap<(i64, u64), Delayed>,
    by_handle: HashMap<u64, i64>,
}

impl Timer {
    /// Schedule `d` for `due_ms`; returns its recall handle.
    pub fn schedule(&self, due_ms: i64, d: Delayed) -> String {
        let seq = self.seq.fetch_add(1, Ordering::Relaxed);
        let mut st = self.wheel.lock();
        let earliest = st.due.keys().next().map(|k| k.0);
        st.due.insert((due_ms, seq), d);
        st.by_handle.insert(seq, due_ms);
        drop(st);
        if earliest.is_none_or(|e| due_ms < e) {
            self.changed.notify_one();
        }
        encode_recall(seq)
    }

    /// Remove a pending message of `topic` by recall handle; returns it.
    pub fn recall(&self, handle: &str, topic: &str) -> Option<Delayed> {
        let seq = decode_recall(handle)?;
        let mut st = self.wheel.lock();
        let due = *st.by_handle.get(&seq)?;
        if st
            .due
            .get(&(due, seq))
            .is_none_or(|d| &*d.topic.name != topic)
        {
            return None;
        }
        st.by_handle.remove(&seq);
        st.due.remove(&(due, seq))
    }

    /// Take every message due at `now_ms`; returns them and the next due time.
    pub fn take_due(&self, now_ms: i64) -> (Vec<Delayed>, Option<i64>) {
        let mut st = self.wheel.lock();
        let later = st.due.split_off(&(now_ms + 1, 0));
        let due = std::mem::replace(&mut st.due, later);
        for (_, seq) in due.keys() {
            st.by_handle.remove(seq);
        }
        let next = st.due.keys().next().map(|k| k.0);
        (due.into_values().collect(), next)
    }

    /// Messages waiting, per topic name.
    pub fn pending(&self) -> HashMap<String, u64> {
        let mut m = HashMap::new();
        for d in self.wheel.lock().due.values() {
            *m.entry(d.topic.name.to_string()).or_insert(0) += 1;
        }
        m
    }
}

/// Whether a string is a well-formed recall handle of this broker.
pub fn is_recall_handle(h: &str) -> bool {
    decode_recall(h).is_some()
}

fn encode_recall(seq: u64) -> String {
    format!("fmqr1.{seq:x}")
}

fn decode_recall(h: &str) -> Option<u64> {
    u64::from_str_radix(h.strip_prefix("fmqr1.")?, 16).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::broker::store::{Store, TopicType};
    use crate::message::MessageKind;

    #[test]
    fn due_order_and_recall() {
        let s = Store::new(1);
        let t = s
            .create_topic("d", TopicType::Only(MessageKind::Delay), 1)
            .unwrap();
        let timer = Timer::default();
        let mk = || Delayed {
            topic: t.clone(),
            queue: t.queues[0].clone(),
            msg: proto::Message::default(),
        };
        let h1 = timer.schedule(200, mk());
        assert!(timer.recall(&h1, "other").is_none(), "wrong topic");
        let _h2 = timer.schedule(100, mk());
        let h3 = timer.schedule(300, mk());
        assert!(timer.recall(&h3, "d").is_some());
        assert!(timer.recall(&h3, "d").is_none());
        assert!(timer.recall("junk", "d").is_none());
        let (due, next) = timer.take_due(150);
        assert_eq!(due.len(), 1);
        assert_eq!(next, Some(200));
        let (due, next) = timer.take_due(1000);
        assert_eq!(due.len(), 1);
        assert_eq!(next, None);
        assert!(timer.recall(&h1, "d").is_none(), "delivered already");
        assert!(is_recall_handle(&h1));
    }
}
