//! PRODUCE_MESSAGE into the store and the transactions around it (prepare, commit, rollback,
//! feedback; reference §8.2).

use std::time::{Duration, Instant};

use super::{codes, JmqStore, State, Tx};
use crate::jmq::codec::now_millis;
use crate::jmq::command::{Feedback, ProduceItem};
use crate::jmq::message::{encode_client_ip, java_string_hash, WireMessage};

impl JmqStore {
    /// PRODUCE_MESSAGE for one topic entry on broker `node`.
    #[allow(clippy::too_many_arguments)]
    pub fn produce(
        &self,
        node: i32,
        topic: &str,
        app: &str,
        tx_id: Option<&str>,
        mut messages: Vec<WireMessage>,
        client: Option<std::net::SocketAddr>,
    ) -> (i32, Vec<ProduceItem>) {
        self.sync_topic(topic);
        let start_time = now_millis();
        let fail = |code: i32, n: usize| (code, vec![ProduceItem::FAILED; n]);
        let n = messages.len();
        let mut st = self.state.lock();
        if !st.topics.contains_key(topic) {
            return fail(codes::FW_TOPIC_NOT_EXIST, n);
        }
        if !self.sub_locked(&st, topic, app).produce {
            return fail(codes::CN_NO_PERMISSION, n);
        }
        if messages.is_empty() {
            return (codes::SUCCESS, Vec::new());
        }
        let partition = messages[0].partition;
        if messages.iter().any(|m| m.partition != partition) {
            return fail(codes::CN_PARAM_ERROR, n);
        }
        if messages.iter().any(|m| {
            m.body.len() > self.config.max_body
                || m.business_id
                    .as_ref()
                    .is_some_and(|b| b.chars().count() > 100)
        }) {
            return fail(codes::CN_PARAM_ERROR, n);
        }
        let t = st.topics.get_mut(topic).expect("checked above");
        let local = t.local(node);
        let partition = if partition < 0 {
            if local.is_empty() {
                return fail(codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, n);
            }
            let pick = if messages[0].sys_code.ordered {
                let h = java_string_hash(messages[0].business_id.as_deref().unwrap_or(""));
                (h.unsigned_abs() as usize) % local.len()
            } else {
                (crate::jmq::random_u64() % local.len() as u64) as usize
            };
            local[pick]
        } else if !t.partitions.contains_key(&partition) {
            return fail(codes::CN_PARAM_ERROR, n);
        } else if !local.contains(&partition) {
            return fail(codes::FW_PRODUCE_MESSAGE_BROKER_NOT_LEADER, n);
        } else {
            partition
        };
        let now = now_millis();
        let (ip, ipv4) = encode_client_ip(client);
        for m in &mut messages {
            m.partition = partition;
            m.term = 0;
            m.client_ip = ip;
            m.sys_code.ipv4 = ipv4;
            m.app = Some(app.to_string());
            m.store_time = i32::try_from(now - m.send_time).unwrap_or(0);
        }
        if let Some(tx) = tx_id {
            let Some(txn) = st.txs.get_mut(tx) else {
                return fail(codes::FW_TRANSACTION_NOT_EXISTS, n);
            };
            if txn.topic != topic {
                return fail(codes::FW_TRANSACTION_NOT_EXISTS, n);
            }
            let items = messages
                .iter()
                .map(|_| ProduceItem {
                    partition,
                    index: -1,
                    start_time,
                })
                .collect();
            txn.messages
                .extend(messages.into_iter().map(|m| (partition, m)));
            return (codes::SUCCESS, items);
        }
        let p = t.partitions.get_mut(&partition).expect("partition exists");
        let items = messages
            .into_iter()
            .map(|m| ProduceItem {
                partition,
                index: p.append(m),
                start_time,
            })
            .collect();
        drop(st);
        self.wake();
        (codes::SUCCESS, items)
    }

    /// PRODUCE_MESSAGE_PREPARE: a new transaction id.
    pub fn prepare(
        &self,
        topic: &str,
        app: &str,
        transaction_id: Option<String>,
        timeout: Duration,
    ) -> std::result::Result<String, i32> {
        self.sync_topic(topic);
        let mut st = self.state.lock();
        if !st.topics.contains_key(topic) {
            return Err(codes::FW_TOPIC_NOT_EXIST);
        }
        st.tx_seq += 1;
        let id = format!("tx-{}-{}", now_millis(), st.tx_seq);
        st.txs.insert(
            id.clone(),
            Tx {
                topic: topic.to_string(),
                app: app.to_string(),
                transaction_id,
                deadline: crate::duration::deadline(Instant::now(), timeout),
                timeout,
                messages: Vec::new(),
                last_feedback: None,
            },
        );
        Ok(id)
    }

    /// PRODUCE_MESSAGE_COMMIT: append the transaction's messages.
    pub fn commit(&self, topic: &str, app: &str, tx_id: &str) -> i32 {
        let mut st = self.state.lock();
        let Some(tx) = take_tx(&mut st, topic, app, tx_id) else {
            return codes::FW_TRANSACTION_NOT_EXISTS;
        };
        if let Some(t) = st.topics.get_mut(topic) {
            for (p, m) in tx.messages {
                if let Some(part) = t.partitions.get_mut(&p) {
                    part.append(m);
                }
            }
        }
        drop(st);
        self.wake();
        codes::SUCCESS
    }

    /// PRODUCE_MESSAGE_ROLLBACK: discard the transaction.
    pub fn rollback(&self, topic: &str, app: &str, tx_id: &str) -> i32 {
        match take_tx(&mut self.state.lock(), topic, app, tx_id) {
            Some(_) => codes::SUCCESS,
            None => codes::FW_TRANSACTION_NOT_EXISTS,
        }
    }

    /// FETCH_PRODUCE_FEEDBACK: at most one expired transaction that has a user transaction id
    /// (the request's `count` never reaches the server, §8.2). An entry is offered again after
    /// another transaction timeout if it is still not completed.
    pub fn feedback(&self, topic: &str, app: &str) -> Vec<Feedback> {
        let now = Instant::now();
        let mut st = self.state.lock();
        let mut ids: Vec<&String> = st
            .txs
            .iter()
            .filter(|(_, tx)| {
                tx.topic == topic
                    && tx.app == app
                    && tx.transaction_id.is_some()
                    && tx.deadline <= now
                    && tx.last_feedback.is_none_or(|t| t + tx.timeout <= now)
            })
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        let Some(id) = ids.first().map(|s| (*s).clone()) else {
            return Vec::new();
        };
        let tx = st.txs.get_mut(&id).expect("found above");
        tx.last_feedback = Some(now);
        vec![Feedback {
            topic: topic.to_string(),
            tx_id: id,
            transaction_id: tx.transaction_id.clone().unwrap_or_default(),
        }]
    }
}

/// Remove and return transaction `tx_id` if it is `app`'s on `topic`.
fn take_tx(st: &mut State, topic: &str, app: &str, tx_id: &str) -> Option<Tx> {
    match st.txs.get(tx_id) {
        Some(tx) if tx.topic == topic && tx.app == app => st.txs.remove(tx_id),
        _ => None,
    }
}
