//! JMQ4 transactions: PREPARE on a partition group's leader, PRODUCE with the txId, then
//! COMMIT or ROLLBACK; and the compensation of expired transactions (FETCH_PRODUCE_FEEDBACK
//! answered by a user callback, polled in the background while a checker is set).

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use super::client::Connection;
use super::codes;
use super::command::{
    BrokerMeta, Commit, FetchProduceFeedback, PartitionGroupMeta, Prepare, Rollback,
};
use super::message::WireMessage;
use super::producer::{Entry, JmqProducer, SendReceipt, TxResolution};
use crate::error::{Error, Result};
use crate::message::Message;
use crate::metrics::Operation;

impl JmqProducer {
    /// Begin a transaction on `topic`: PREPARE on the leader of a partition group chosen by
    /// weight. `transaction_id` (your own id) is what FETCH_PRODUCE_FEEDBACK reports back for
    /// compensation; without it an expired transaction is never offered to the checker.
    pub async fn begin_transaction(
        &self,
        topic: &str,
        transaction_id: Option<String>,
    ) -> Result<JmqTransaction> {
        self.check_open()?;
        crate::message::validate_topic(topic)?;
        let cluster = &self.inner.cluster;
        let route = cluster.route(topic).await?;
        let probe = Entry {
            topic: topic.to_string(),
            wire: WireMessage::default(),
            count: 0,
            ordered_key: None,
        };
        let (partition, broker) = self.choose(&route, &probe, &HashSet::new(), None)?;
        let group = route
            .group_of(partition)
            .cloned()
            .ok_or_else(|| Error::internal("partition without group"))?;
        let conn = cluster.broker_connection(&broker).await?;
        conn.ensure_producer(&[topic]).await?;
        let resp = conn
            .call(&Prepare {
                topic: topic.to_string(),
                app: cluster.app().to_string(),
                sequence: self.inner.tx_seq.fetch_add(1, Ordering::Relaxed) + 1,
                transaction_id: transaction_id.clone(),
                timeout: i32::try_from(self.inner.options.transaction_timeout.as_millis())
                    .unwrap_or(i32::MAX),
            })
            .await?;
        codes::check(resp.code, || {
            format!("prepare a transaction on topic {topic:?}")
        })?;
        let tx_id = resp
            .tx_id
            .ok_or_else(|| Error::protocol("PREPARE answered without a txId"))?;
        self.inner.feedback_topics.lock().insert(topic.to_string());
        Ok(JmqTransaction {
            producer: self.clone(),
            topic: topic.to_string(),
            tx_id,
            transaction_id,
            conn,
            broker,
            group,
            state: Arc::new(Mutex::new(TxState::Open)),
            sent: Arc::new(AtomicU64::new(0)),
        })
    }

    /// One compensation pass over `topic`: FETCH_PRODUCE_FEEDBACK on each leader, the checker
    /// for each entry, then COMMIT or ROLLBACK. Returns how many transactions were resolved.
    pub async fn resolve_feedback(&self, topic: &str) -> Result<usize> {
        self.check_open()?;
        let Some(checker) = self.inner.options.checker.clone() else {
            return Err(Error::invalid(
                "checker",
                "the producer has no transaction checker",
            ));
        };
        let cluster = &self.inner.cluster;
        let route = cluster.route(topic).await?;
        let mut resolved = 0;
        for b in route.leaders() {
            let conn = cluster.broker_connection(&b).await?;
            // A real server returns at most one entry per call (§8.2): drain with a bound.
            for _ in 0..100 {
                let resp = conn
                    .call(&FetchProduceFeedback {
                        app: cluster.app().to_string(),
                        topic: topic.to_string(),
                        status: 1,
                        long_poll_timeout: 0,
                    })
                    .await?;
                codes::check(resp.code, || format!("feedback of topic {topic:?}"))?;
                if resp.data.is_empty() {
                    break;
                }
                for f in resp.data {
                    let (tx_id, t) = (f.tx_id.clone(), f.topic.clone());
                    let commit = match checker(f).await {
                        TxResolution::Commit => true,
                        TxResolution::Rollback => false,
                        TxResolution::Unknown => continue,
                    };
                    let code = end_transaction(&conn, cluster.app(), &t, &tx_id, commit).await?;
                    let what = if commit { "commit" } else { "rollback" };
                    codes::check(code, || format!("{what} from feedback"))?;
                    resolved += 1;
                }
            }
        }
        Ok(resolved)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxState {
    Open,
    Committed,
    RolledBack,
}

/// An open JMQ4 transaction: messages sent through it stay invisible until [`commit`].
///
/// [`commit`]: JmqTransaction::commit
#[derive(Clone)]
pub struct JmqTransaction {
    producer: JmqProducer,
    topic: String,
    tx_id: String,
    transaction_id: Option<String>,
    conn: Connection,
    broker: BrokerMeta,
    group: PartitionGroupMeta,
    state: Arc<Mutex<TxState>>,
    /// Messages sent in the transaction (what its end is recorded with).
    sent: Arc<AtomicU64>,
}

impl std::fmt::Debug for JmqTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqTransaction")
            .field("topic", &self.topic)
            .field("tx_id", &self.tx_id)
            .field("state", &*self.state.lock())
            .finish_non_exhaustive()
    }
}

impl JmqTransaction {
    /// The broker's transaction id.
    pub fn tx_id(&self) -> &str {
        &self.tx_id
    }

    /// Your transaction id, if given.
    pub fn transaction_id(&self) -> Option<&str> {
        self.transaction_id.as_deref()
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    fn check(&self) -> Result<()> {
        match *self.state.lock() {
            TxState::Open => Ok(()),
            TxState::Committed => Err(Error::closed("the transaction is already committed")),
            TxState::RolledBack => Err(Error::closed("the transaction is already rolled back")),
        }
    }

    /// Send messages (all on the transaction's topic) inside the transaction.
    pub async fn send(&self, messages: &[Message]) -> Result<Vec<SendReceipt>> {
        self.check()?;
        if let Some(m) = messages.iter().find(|m| m.topic() != self.topic) {
            return Err(Error::invalid(
                "topic",
                format!(
                    "{:?} differs from the transaction's topic {:?}",
                    m.topic(),
                    self.topic
                ),
            ));
        }
        if messages.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&Message> = messages.iter().collect();
        let entry = self.producer.build_entry(&self.topic, &refs)?;
        let op = self.producer.metrics().begin(Operation::Send);
        let r = self.send_entry(entry).await;
        op.finish(&self.topic, messages.len() as u64, r.as_ref().map(drop));
        if r.is_ok() {
            self.sent
                .fetch_add(messages.len() as u64, Ordering::Relaxed);
        }
        r
    }

    async fn send_entry(&self, entry: Entry) -> Result<Vec<SendReceipt>> {
        let p = &self.producer;
        let route = p.inner.cluster.route(&self.topic).await?;
        let (partition, _) = p.choose(&route, &entry, &HashSet::new(), Some(&self.group))?;
        let mut results = p
            .produce_once(
                &self.conn,
                vec![(entry, partition)],
                Some(&self.tx_id),
                self.broker.id,
            )
            .await?;
        match results.pop().expect("one entry") {
            Ok(r) => Ok(r),
            Err((code, _)) => Err(codes::error(
                code,
                format!(
                    "produce in transaction {} on topic {:?}",
                    self.tx_id, self.topic
                ),
            )),
        }
    }

    /// Commit: the messages become visible.
    pub async fn commit(&self) -> Result<()> {
        self.finish(true).await
    }

    /// Roll back: the messages are discarded.
    pub async fn rollback(&self) -> Result<()> {
        self.finish(false).await
    }

    async fn finish(&self, commit: bool) -> Result<()> {
        self.check()?;
        let op = self.producer.metrics().begin(Operation::EndTransaction);
        let r = self.end(commit).await;
        let sent = self.sent.load(Ordering::Relaxed);
        op.finish(&self.topic, sent, r.as_ref().copied());
        r
    }

    async fn end(&self, commit: bool) -> Result<()> {
        let app = self.producer.inner.cluster.app();
        let code = end_transaction(&self.conn, app, &self.topic, &self.tx_id, commit).await?;
        let (what, state) = if commit {
            ("commit", TxState::Committed)
        } else {
            ("roll back", TxState::RolledBack)
        };
        codes::check(code, || format!("{what} transaction {}", self.tx_id))?;
        *self.state.lock() = state;
        Ok(())
    }

    /// Whether commit or rollback already happened.
    pub fn is_finished(&self) -> bool {
        *self.state.lock() != TxState::Open
    }
}

/// PRODUCE_MESSAGE_COMMIT (`commit`) or PRODUCE_MESSAGE_ROLLBACK of `tx_id`: the answer's code.
async fn end_transaction(
    conn: &Connection,
    app: &str,
    topic: &str,
    tx_id: &str,
    commit: bool,
) -> Result<i32> {
    let (topic, app, tx_id) = (topic.to_string(), app.to_string(), tx_id.to_string());
    Ok(if commit {
        conn.call(&Commit { topic, app, tx_id }).await?.code
    } else {
        conn.call(&Rollback { topic, app, tx_id }).await?.code
    })
}
