//! [`JmqRpc`]: the push consumer's [`ConsumerRpc`] over a JMQ4 [`JmqConsumer`], so that the one
//! push engine (process queues, cache limits, listener bridges, settle and retry) serves JMQ4.
//!
//! How the engine's RPCs map onto JMQ4:
//!
//! * **Assignment**: one queue per subscribed topic (id 0). A JMQ4 fetch
//!   (FETCH_TOPIC_MESSAGE) names a topic, not a partition: the broker picks a free partition
//!   (or the retry queue) and occupies it for this connection until the fetch is acknowledged.
//!   In coordinator mode the consumer fetches only from the leaders of its assigned partitions.
//! * **Receive** = one fetch of that topic, long-polling up to the engine's wait, with the
//!   consumer's ack timeout (a simple consumer's invisible duration, when it gives one). Each message becomes a wire message whose receipt handle names
//!   the fetch and (broker, partition, index, topic): partition 32767 is the retry queue, so
//!   the handle says whether it was a retry delivery. `delivery_attempt` is 1, or 2 for a
//!   delivery from the retry queue (JMQ4 does not count retries).
//! * **Ack** = COMMIT_ACK with retry type `None`; **nack** (`change_invisible_duration`) =
//!   COMMIT_ACK with retry type `Exception`: the broker puts the message in its retry queue and
//!   delivers it again after its own retry delay (the engine's delay is not used, and the
//!   receipt handle stays the same).
//! * **Dead letter**: JMQ4 has no dead-letter queue a client forwards to; the broker keeps a
//!   message in its retry queue until its own retry limit, then archives it. A forward is a
//!   nack, so the broker's limit applies. (The engine forwards only in FIFO consumption, which
//!   JMQ4 has no use for: it has no message groups, so [`ConsumerSettings::fifo`] is false.)
//!
//! **Settling a fetch together.** A COMMIT_ACK releases the partition its fetch occupies, and
//! the broker then delivers whatever of that fetch is still unacknowledged again; a retry entry
//! settles once, by its first COMMIT_ACK. So the results of one fetch's messages are held
//! here and sent in a single COMMIT_ACK once every message of the fetch has one: an ack or a
//! nack of a message whose fetch is not complete yet answers at once and is sent with the last
//! one. [`JmqRpc::close`] sends what the fetches still open have (their other messages were
//! never consumed and are delivered again), then closes the connection.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;

use super::cluster::ClusterOptions;
use super::command::RetryType;
use super::consumer::{check_ack_timeout, ConsumerOptions, JmqConsumer};
use super::message::RETRY_PARTITION;
use super::received::{AckRef, ReceivedMessage};
use crate::duration::timestamp_ms;
use crate::error::{Error, Result};
use crate::proto;
use crate::rocketmq::consumer_rpc::{
    leader_queue, ConsumerRpc, ConsumerSettings, ReceiveRequest, Received,
};
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};

/// The longest wait on one topic while a simple consumer polls several in turn.
const RECEIVE_SLICE: Duration = Duration::from_secs(1);

/// The retry type of a nack.
const NACK: RetryType = RetryType::Exception;

/// The messages of one fetch and the result each has so far.
struct Fetch {
    /// (partition, index) → where it is settled and its retry type once consumed.
    entries: BTreeMap<(i16, i64), (AckRef, Option<RetryType>)>,
}

impl Fetch {
    fn is_complete(&self) -> bool {
        self.entries.values().all(|(_, r)| r.is_some())
    }

    /// What to commit: every entry that has a result; with `rest`, the others too as nacks of
    /// the retry queue (a retry entry settles once: left out, its rest would be lost).
    fn items(&self, rest: bool) -> Vec<(AckRef, RetryType)> {
        self.entries
            .values()
            .filter_map(|(r, t)| match t {
                Some(t) => Some((r.clone(), *t)),
                None if rest && r.partition == RETRY_PARTITION => Some((r.clone(), NACK)),
                None => None,
            })
            .collect()
    }
}

/// [`ConsumerRpc`] over JMQ4 (see the module documentation for the mapping).
pub struct JmqRpc {
    consumer: JmqConsumer,
    endpoints: Endpoints,
    fetches: Mutex<HashMap<u64, Fetch>>,
    next_fetch: AtomicU64,
}

impl std::fmt::Debug for JmqRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JmqRpc")
            .field("consumer", &self.consumer)
            .finish_non_exhaustive()
    }
}

/// A receipt handle: `fetch:broker:partition:index:topic`.
fn handle(fetch: u64, r: &AckRef) -> String {
    format!(
        "{fetch}:{}:{}:{}:{}",
        r.broker_id, r.partition, r.index, r.topic
    )
}

fn parse_handle(h: &str) -> Result<(u64, (i16, i64))> {
    let bad = || {
        Error::rocketmq_status(
            crate::status::INVALID_RECEIPT_HANDLE,
            format!("{h:?} is not a JMQ4 receipt handle"),
        )
    };
    let mut it = h.splitn(5, ':');
    let fetch = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let _broker: i32 = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let partition = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    let index = it.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
    Ok((fetch, (partition, index)))
}

/// The engine's wire form of a received JMQ4 message.
fn to_wire(m: ReceivedMessage, fetch: u64) -> proto::Message {
    let receipt = handle(fetch, &m.ack_ref());
    proto::Message {
        topic: Some(proto::Resource {
            resource_namespace: String::new(),
            name: m.topic.clone(),
        }),
        system_properties: Some(proto::SystemProperties {
            message_id: m.message_id(),
            receipt_handle: Some(receipt),
            queue_id: i32::from(m.partition),
            queue_offset: Some(m.index),
            delivery_attempt: Some(if m.is_retry() { 2 } else { 1 }),
            tag: m.tag,
            keys: m.business_id.into_iter().collect(),
            born_timestamp: Some(timestamp_ms(m.send_time)),
            store_timestamp: Some(timestamp_ms(m.store_time)),
            ..Default::default()
        }),
        user_properties: m.properties.into_iter().collect(),
        body: m.body,
    }
}

impl JmqRpc {
    /// Connect a JMQ4 consumer for `options.topics` (checked readable by the app).
    pub async fn connect(cluster: ClusterOptions, options: ConsumerOptions) -> Result<Self> {
        let endpoints = Endpoints::parse_access_point(&cluster.bootstrap)?.endpoints;
        let consumer = JmqConsumer::connect(cluster, options).await?;
        Ok(Self {
            consumer,
            endpoints,
            fetches: Mutex::new(HashMap::new()),
            next_fetch: AtomicU64::new(1),
        })
    }

    /// The topics of a push consumer's subscriptions: JMQ4 has no tag or SQL filters, so each
    /// must match everything.
    pub fn topics(subscriptions: &[(String, FilterExpression)]) -> Result<Vec<String>> {
        subscriptions
            .iter()
            .map(|(t, f)| {
                if *f == FilterExpression::all() {
                    Ok(t.clone())
                } else {
                    Err(Error::invalid(
                        "subscriptions",
                        format!(
                            "JMQ4 has no tag or SQL filters (topic {t:?} has {:?}); subscribe \
                             with None or '*'",
                            f.expression()
                        ),
                    ))
                }
            })
            .collect()
    }

    /// The consumer.
    pub fn consumer(&self) -> &JmqConsumer {
        &self.consumer
    }

    /// Send what the open fetches have settled (their unconsumed messages are delivered
    /// again), then close the connection. Idempotent.
    pub async fn close(&self) {
        let items: Vec<(AckRef, RetryType)> = {
            let mut fetches = self.fetches.lock();
            fetches.drain().flat_map(|(_, f)| f.items(true)).collect()
        };
        if let Err(e) = self.consumer.commit(&items).await {
            tracing::warn!(
                target: "ferrymq::consumer",
                "closing: {} results of partly consumed JMQ4 fetches were not sent ({e}); the \
                 broker delivers those messages again", items.len()
            );
        }
        self.consumer.close().await;
    }

    /// Record `messages`' results; commit every fetch they complete in one COMMIT_ACK.
    async fn settle(&self, messages: &[&MessageView], retry: RetryType) -> Result<()> {
        let mut complete = Vec::new();
        let mut items = Vec::new();
        {
            let mut fetches = self.fetches.lock();
            for m in messages {
                let (fetch, key) = parse_handle(&m.receipt_handle())?;
                // An unknown fetch was committed already (a repeated result).
                let Some(f) = fetches.get_mut(&fetch) else {
                    continue;
                };
                if let Some(e) = f.entries.get_mut(&key) {
                    e.1 = Some(retry);
                }
                if f.is_complete() && !complete.contains(&fetch) {
                    complete.push(fetch);
                    items.extend(f.items(false));
                }
            }
        }
        if items.is_empty() {
            return Ok(());
        }
        // On failure the fetches stay recorded: the engine retries, which commits them again.
        self.consumer.commit(&items).await?;
        let mut fetches = self.fetches.lock();
        for f in complete {
            fetches.remove(&f);
        }
        Ok(())
    }
}

impl ConsumerRpc for JmqRpc {
    fn settings(&self) -> ConsumerSettings {
        ConsumerSettings {
            fifo: false,
            ..ConsumerSettings::default()
        }
    }

    fn access_endpoints(&self) -> Endpoints {
        self.endpoints.clone()
    }

    async fn query_assignment(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        Ok(vec![leader_queue(topic, 0, proto::Permission::Read, "jmq")])
    }

    async fn receive(&self, request: ReceiveRequest) -> Result<Received> {
        let topic = request.queue.topic.map(|t| t.name).unwrap_or_default();
        // Refused rather than clamped: the fetch carries an `i16` count and an `i32` of ms.
        let max = usize::try_from(request.batch_size).unwrap_or(usize::MAX);
        if let Some(d) = request.invisible_duration {
            check_ack_timeout("invisible_duration", d)?;
        }
        let got = self
            .consumer
            .receive_from(
                &topic,
                max,
                request.long_polling_timeout,
                request.invisible_duration,
            )
            .await?;
        if got.is_empty() {
            return Ok(Received::default());
        }
        let fetch = self.next_fetch.fetch_add(1, Ordering::Relaxed);
        let entries = got
            .iter()
            .map(|m| ((m.partition, m.index), (m.ack_ref(), None)))
            .collect();
        self.fetches.lock().insert(fetch, Fetch { entries });
        Ok(Received::from(
            got.into_iter()
                .map(|m| to_wire(m, fetch))
                .collect::<Vec<_>>(),
        ))
    }

    /// A fetch returns with the first messages, so several topics are polled in turn.
    fn receive_slice(&self) -> Option<Duration> {
        Some(RECEIVE_SLICE)
    }

    async fn ack(
        &self,
        _source: &MessageSource,
        messages: &[&MessageView],
    ) -> Result<Vec<Result<()>>> {
        self.settle(messages, RetryType::None).await?;
        Ok(messages.iter().map(|_| Ok(())).collect())
    }

    async fn change_invisible_duration(
        &self,
        message: &MessageView,
        _duration: Duration,
    ) -> Result<String> {
        self.settle(&[message], NACK).await?;
        Ok(message.receipt_handle().to_string())
    }

    async fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        _max_delivery_attempts: u32,
    ) -> Result<()> {
        self.settle(&[message], NACK).await
    }

    /// JMQ4 consumes the topics it registered at connection: a subscription may be dropped
    /// (and taken again), never added, and filters are refused.
    async fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> Result<()> {
        let known = &self.consumer.options().topics;
        for topic in Self::topics(subscriptions)? {
            if !known.contains(&topic) {
                return Err(Error::invalid(
                    "topic",
                    format!(
                        "a jmq:// consumer reads the topics named at construction ({known:?}); \
                         {topic:?} is not one of them"
                    ),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn receipt_handles_round_trip_and_bad_ones_are_invalid_handles() {
        let r = AckRef {
            topic: "a:b".into(),
            broker_id: 3,
            partition: RETRY_PARTITION,
            index: 42,
        };
        let h = handle(7, &r);
        assert_eq!(parse_handle(&h).unwrap(), (7, (RETRY_PARTITION, 42)));
        for bad in ["", "x", "1:2:3", "1:2:3:x:t"] {
            let e = parse_handle(bad).unwrap_err();
            assert_eq!(
                e.rocketmq_code(),
                Some(crate::status::INVALID_RECEIPT_HANDLE)
            );
        }
    }

    #[test]
    fn an_open_fetch_commits_its_results_and_the_rest_of_a_retry_entry() {
        let at = |partition, index| AckRef {
            topic: "t".into(),
            broker_id: 1,
            partition,
            index,
        };
        let mut f = Fetch {
            entries: [(0, 1), (0, 2), (RETRY_PARTITION, 5)]
                .into_iter()
                .map(|(p, i)| ((p, i), (at(p, i), None)))
                .collect(),
        };
        assert!(!f.is_complete());
        f.entries.get_mut(&(0, 1)).unwrap().1 = Some(RetryType::None);
        assert_eq!(f.items(false), vec![(at(0, 1), RetryType::None)]);
        assert_eq!(
            f.items(true),
            vec![(at(0, 1), RetryType::None), (at(RETRY_PARTITION, 5), NACK)]
        );
        for e in f.entries.values_mut() {
            e.1 = Some(RetryType::None);
        }
        assert!(f.is_complete());
    }
}
