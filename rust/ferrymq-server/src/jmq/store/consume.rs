//! Consumption from the store: topic and partition fetches with occupation, acks, the retry
//! queue and ack indices (reference §7).

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use super::{codes, Fetched, JmqStore, Occupation, RetryEntry};
use crate::jmq::command::{AckItem, IndexEntry, RetryType};
use crate::jmq::message::{WireMessage, RETRY_PARTITION};

impl JmqStore {
    /// FETCH_TOPIC_MESSAGE on broker `node` for connection `conn`: the retry queue first, then a
    /// free local partition, read from its ack index. The partition (or retry message) stays
    /// occupied by `conn` until acked or `ack_timeout` passes.
    pub fn fetch_topic(
        &self,
        node: i32,
        conn: u64,
        topic: &str,
        app: &str,
        count: usize,
        ack_timeout: Duration,
    ) -> Fetched {
        self.sync_topic(topic);
        let now = Instant::now();
        let mut st = self.state.lock();
        let consume = self.sub_locked(&st, topic, app).consume;
        let Some(t) = st.topics.get_mut(topic) else {
            return Fetched::failed(codes::FW_TOPIC_NOT_EXIST);
        };
        if !consume {
            return Fetched::failed(codes::CN_NO_PERMISSION);
        }
        let local = t.local(node);
        if local.is_empty() {
            return Fetched::failed(codes::FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER);
        }
        let count = count.max(1);
        let a = t.apps.entry(app.to_string()).or_default();
        // Expired retry deliveries go back to the queue.
        let expired: Vec<i64> = a
            .retry_inflight
            .iter()
            .filter(|(_, (_, until))| *until <= now)
            .map(|(id, _)| *id)
            .collect();
        for id in expired {
            if let Some((e, _)) = a.retry_inflight.remove(&id) {
                a.retry.push_front(e);
            }
        }
        let mut out = Vec::new();
        while out.len() < count {
            let Some(pos) = a.retry.iter().position(|e| e.due <= now) else {
                break;
            };
            let e = a.retry.remove(pos).expect("position is valid");
            let mut m = e.msg.clone();
            m.partition = RETRY_PARTITION;
            m.index = e.id;
            out.push(m);
            a.retry_inflight
                .insert(e.id, (e, crate::duration::deadline(now, ack_timeout)));
        }
        if !out.is_empty() {
            return Fetched {
                messages: out,
                code: codes::SUCCESS,
            };
        }
        let n = local.len();
        for k in 0..n {
            let p = local[(a.cursor + k) % n];
            let ps = a.parts.entry(p).or_default();
            if let Some(o) = &ps.occupied {
                if o.until > now {
                    continue;
                }
                ps.occupied = None;
            }
            let part = &t.partitions[&p];
            let mut pos = part.position(ps.ack_index);
            let mut got = 0usize;
            while pos < part.entries.len() && got < count {
                let e = &part.entries[pos];
                let fully_acked = (e.index..e.index + e.count)
                    .all(|i| i < ps.ack_index || ps.acked_above.contains(&i));
                if !fully_acked {
                    out.push(e.msg.clone());
                    got += usize::try_from(e.count).unwrap_or(1);
                }
                pos += 1;
            }
            if !out.is_empty() {
                ps.occupied = Some(Occupation {
                    conn,
                    until: crate::duration::deadline(now, ack_timeout),
                });
                a.cursor = (a.cursor + k + 1) % n;
                break;
            }
        }
        Fetched {
            messages: out,
            code: codes::SUCCESS,
        }
    }

    /// FETCH_PARTITION_MESSAGE: `count` indices from `index` (-1: the ack index).
    pub fn fetch_partition(
        &self,
        node: i32,
        topic: &str,
        app: &str,
        partition: i16,
        index: i64,
        count: usize,
    ) -> (Vec<WireMessage>, i32) {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        let consume = self.sub_locked(&st, topic, app).consume;
        let Some(t) = st.topics.get_mut(topic) else {
            return (Vec::new(), codes::FW_TOPIC_NOT_EXIST);
        };
        if !consume {
            return (Vec::new(), codes::CN_NO_PERMISSION);
        }
        let Some(part) = t.partitions.get(&partition) else {
            return (Vec::new(), codes::CN_PARAM_ERROR);
        };
        if !t.local(node).contains(&partition) {
            return (Vec::new(), codes::FW_FETCH_TOPIC_MESSAGE_BROKER_NOT_LEADER);
        }
        let index = if index == -1 {
            t.apps
                .get(app)
                .and_then(|a| a.parts.get(&partition))
                .map_or(0, |p| p.ack_index)
        } else {
            index
        };
        if index < 0 || index > part.next {
            return (Vec::new(), codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE);
        }
        let mut out = Vec::new();
        let mut got = 0usize;
        let mut pos = part.position(index);
        while pos < part.entries.len() && got < count.max(1) {
            let e = &part.entries[pos];
            out.push(e.msg.clone());
            got += usize::try_from(e.count).unwrap_or(1);
            pos += 1;
        }
        (out, codes::SUCCESS)
    }

    /// COMMIT_ACK of one (topic, partition) cell. Releases the partition's occupation.
    pub fn commit_ack(&self, topic: &str, app: &str, partition: i16, items: &[AckItem]) -> i32 {
        self.sync_topic(topic);
        let now = Instant::now();
        let retry_delay = self.config.retry_delay;
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return codes::FW_TOPIC_NOT_EXIST;
        };
        if partition != RETRY_PARTITION && !t.partitions.contains_key(&partition) {
            return codes::CN_PARAM_ERROR;
        }
        let a = t.apps.entry(app.to_string()).or_default();
        if partition == RETRY_PARTITION {
            // Items are the indices of unpacked messages: find the entry each belongs to. An
            // entry settles once, and goes back to the queue if any of its items asks for it.
            let mut settled: BTreeMap<i64, bool> = BTreeMap::new();
            for it in items {
                let owner = a
                    .retry_inflight
                    .range(..=it.index)
                    .next_back()
                    .filter(|(id, (e, _))| it.index < **id + e.count.max(1))
                    .map(|(id, _)| *id);
                if let Some(id) = owner {
                    *settled.entry(id).or_default() |= it.retry_type != RetryType::None;
                }
            }
            for (id, again) in settled {
                if let Some((e, _)) = a.retry_inflight.remove(&id) {
                    if again {
                        a.retry.push_back(RetryEntry {
                            due: crate::duration::deadline(now, retry_delay),
                            ..e
                        });
                    }
                }
            }
        } else {
            let mut to_retry = Vec::new();
            {
                let ps = a.parts.entry(partition).or_default();
                for it in items {
                    ps.ack(it.index);
                }
                ps.occupied = None;
            }
            let part = &t.partitions[&partition];
            // One retry entry per stored entry, however many of a batch's messages asked.
            let mut seen = HashSet::new();
            for it in items.iter().filter(|i| i.retry_type != RetryType::None) {
                let pos = part.position(it.index);
                if let Some(e) = part.entries.get(pos) {
                    if seen.insert(e.index) {
                        to_retry.push((e.msg.clone(), e.count.max(1)));
                    }
                }
            }
            for (msg, count) in to_retry {
                let id = a.next_retry_id;
                a.next_retry_id += count;
                a.retry.push_back(RetryEntry {
                    id,
                    count,
                    msg,
                    due: crate::duration::deadline(now, retry_delay),
                });
            }
        }
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// COMMIT_ACK_INDEX of one cell.
    pub fn commit_index(&self, topic: &str, app: &str, partition: i16, index: i64) -> i32 {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        let Some(t) = st.topics.get_mut(topic) else {
            return codes::FW_TOPIC_NOT_EXIST;
        };
        let Some(part) = t.partitions.get(&partition) else {
            return codes::CN_PARAM_ERROR;
        };
        if index < 0 || index > part.next {
            return codes::FW_FETCH_MESSAGE_INDEX_OUT_OF_RANGE;
        }
        let ps = t
            .apps
            .entry(app.to_string())
            .or_default()
            .parts
            .entry(partition)
            .or_default();
        ps.ack_index = index;
        ps.acked_above.retain(|i| *i > index);
        ps.occupied = None;
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// FETCH_INDEX of one partition.
    pub fn fetch_index(&self, topic: &str, app: &str, partition: i16) -> IndexEntry {
        self.sync_topic(topic);
        let st = self.state.lock();
        let mut e = IndexEntry {
            partition,
            index: -1,
            code: codes::SUCCESS,
            left_index: -1,
            right_index: -1,
        };
        let Some(t) = st.topics.get(topic) else {
            e.code = codes::FW_TOPIC_NOT_EXIST;
            return e;
        };
        let Some(part) = t.partitions.get(&partition) else {
            e.code = codes::CN_PARAM_ERROR;
            return e;
        };
        e.index = t
            .apps
            .get(app)
            .and_then(|a| a.parts.get(&partition))
            .map_or(0, |p| p.ack_index);
        e.left_index = 0;
        e.right_index = part.next;
        e
    }

    /// Release everything connection `conn` occupies (it closed).
    pub fn release_connection(&self, conn: u64) {
        let mut st = self.state.lock();
        for t in st.topics.values_mut() {
            for a in t.apps.values_mut() {
                for ps in a.parts.values_mut() {
                    if ps.occupied.as_ref().is_some_and(|o| o.conn == conn) {
                        ps.occupied = None;
                    }
                }
            }
        }
        drop(st);
        self.wake();
    }
}
