//! [`ConsumerRpc`] over JetStream pull consumers, so that the push engine (and a simple
//! consumer) serve NATS as they serve RocketMQ.
//!
//! How the RocketMQ model maps onto JetStream:
//!
//! | RocketMQ | JetStream |
//! | --- | --- |
//! | consumer group | a durable pull consumer named after the group, one per subscribed topic's stream |
//! | topic (subscription) | a subject, wildcards allowed: the durable consumer's filter subject; its stream is the one whose subjects hold it (looked up once) unless [`JsConsumerOptions::stream`] names it |
//! | filter expression | only `*` (a subject filter is the topic itself) |
//! | subscribe / unsubscribe while running | binds the new subject's durable consumer first (an error leaves the subscriptions as they were) |
//! | queue assignment | one queue per topic (id 0, broker name = the stream) |
//! | receive | a [`PullConsumer::fetch`] (returns with the first messages) |
//! | receipt handle | the delivery's reply subject (`$JS.ACK.…`) |
//! | invisible duration | the consumer's `ack_wait`, fixed when it is created (a receive asking for another is refused) |
//! | ack | `+ACK`, confirmed by the server (a request, not a plain publish) |
//! | change invisible duration | `-NAK` with that delay: redeliver after it (not `+WPI`, which only restarts `ack_wait`); the handle stays the same |
//! | delivery attempt | the delivery count of the JetStream metadata |
//! | dead-letter queue | none in JetStream: `+TERM` (never delivered again); a message failed on its last attempt is terminated the same way |
//! | FIFO | not supported: JetStream keeps a subject's order only while nothing is redelivered |
//! | message id | the `Nats-Msg-Id` header, or else the stream sequence in decimal |
//!
//! Two subscriptions of one group in the same stream would need two filters on one durable
//! consumer (nats-server 2.10): a durable consumer of the group's name that already filters
//! another subject is refused.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::Mutex;

use super::consumer::{JsMessage, PullConsumer, PullConsumerConfig};
use super::JetStream;
use crate::error::{Error, Result};
use crate::proto;
use crate::rocketmq::consumer_rpc::{
    leader_queue, ConsumerRpc, ConsumerSettings, ReceiveRequest, Received,
};
use crate::rocketmq::endpoints::{Address, Endpoints};
use crate::rocketmq::filter::FilterExpression;
use crate::rocketmq::message_view::{MessageSource, MessageView};
use crate::rocketmq::settings::{Backoff, RetryPolicy};
use crate::status;

/// How a group consumes from JetStream.
#[derive(Debug, Clone, PartialEq)]
pub struct JsConsumerOptions {
    /// The consumer group: the durable consumer's name.
    pub group: String,
    /// The stream of every subscription; `None`: the stream whose subjects hold the topic.
    pub stream: Option<String>,
    /// How long a delivered message may stay unsettled before the server redelivers it (the
    /// durable consumer's `ack_wait`, used when it is created).
    pub ack_wait: Duration,
    /// How many messages one receive may return.
    pub receive_batch_size: u32,
    /// How long a receive waits for the first message.
    pub long_polling_timeout: Duration,
    /// Deliveries before a failing message is terminated, and the delays between them.
    pub retry_policy: RetryPolicy,
}

impl JsConsumerOptions {
    /// The defaults of every protocol's consumer (16 messages, 20 s long poll, 16 attempts
    /// with the stock exponential back-off) for `group`.
    pub fn new(group: &str) -> Self {
        Self {
            group: group.to_string(),
            stream: None,
            ack_wait: Duration::from_secs(30),
            receive_batch_size: 16,
            long_polling_timeout: Duration::from_secs(20),
            retry_policy: RetryPolicy {
                max_attempts: 16,
                backoff: Backoff::Exponential {
                    initial: Duration::from_secs(1),
                    max: Duration::from_secs(60),
                    multiplier: 2.0,
                },
            },
        }
    }
}

/// A consumer group's RPCs on JetStream. Cheap to share (`Arc`).
pub struct JsConsumerRpc {
    js: JetStream,
    options: JsConsumerOptions,
    access: Endpoints,
    /// The bound durable consumer of each topic.
    consumers: Mutex<HashMap<String, PullConsumer>>,
}

impl std::fmt::Debug for JsConsumerRpc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsConsumerRpc")
            .field("endpoints", &self.js.endpoints())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

/// `INVALID_RECEIPT_HANDLE`: what the engines expect of a handle that cannot be settled.
fn invalid_handle(handle: &str) -> Error {
    Error::rocketmq_status(
        status::INVALID_RECEIPT_HANDLE,
        format!("{handle:?} is not the reply subject of a JetStream delivery"),
    )
}

/// The endpoints a process queue reports as its source: the first `nats://host:port`.
fn endpoints_of(js: &JetStream) -> Result<Endpoints> {
    let first = js.endpoints().split(',').next().unwrap_or_default();
    let rest = first.split_once("://").map_or(first, |(_, r)| r);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
    let (host, port) = rest
        .rsplit_once(':')
        .and_then(|(h, p)| Some((h, p.trim_end_matches('/').parse::<u16>().ok()?)))
        .unwrap_or((rest, 4222));
    Endpoints::new(vec![Address {
        host: host.trim_matches(['[', ']']).to_string(),
        port,
    }])
}

impl JsConsumerRpc {
    /// The RPCs of `options.group` on `js`. Nothing is sent until a topic is bound.
    pub fn new(js: JetStream, options: JsConsumerOptions) -> Result<Self> {
        super::stream::validate_name("group", &options.group)?;
        if let Some(s) = &options.stream {
            super::stream::validate_name("stream", s)?;
        }
        Error::require_positive("ack_wait", options.ack_wait)?;
        Error::require_count("receive_batch_size", options.receive_batch_size)?;
        Error::require_count("max_attempts", options.retry_policy.max_attempts)?;
        let access = endpoints_of(&js)?;
        Ok(Self {
            js,
            options,
            access,
            consumers: Mutex::new(HashMap::new()),
        })
    }

    /// The options.
    pub fn options(&self) -> &JsConsumerOptions {
        &self.options
    }

    /// The connection.
    pub fn jetstream(&self) -> &JetStream {
        &self.js
    }

    /// Bind the durable consumer of `topic` (creating it when missing): checks the
    /// subscription at once, where a push consumer would only log it.
    pub async fn subscribe(&self, topic: &str) -> Result<PullConsumer> {
        let mut consumers = self.consumers.lock().await;
        if let Some(c) = consumers.get(topic) {
            return Ok(c.clone());
        }
        let consumer = bind_group(
            &self.js,
            &self.options.group,
            topic,
            self.options.stream.as_deref(),
            self.options.ack_wait,
        )
        .await?;
        consumers.insert(topic.to_string(), consumer.clone());
        Ok(consumer)
    }

    /// Settle one delivery: send `payload` to its reply subject and wait for the server's
    /// confirmation.
    async fn settle(&self, handle: &str, payload: Bytes) -> Result<()> {
        if !handle.starts_with("$JS.ACK.") {
            return Err(invalid_handle(handle));
        }
        self.js
            .client()
            .request(handle.to_string(), payload)
            .await
            .map(drop)
            .map_err(|e| Error::timeout(format!("settling {handle:?}: {e}")))
    }

    /// Convert a fetched message for the engines: the reply subject is its receipt handle.
    pub fn to_proto(topic: &str, m: JsMessage) -> proto::Message {
        let message_id = m.id();
        let stored = timestamp(m.published);
        let mut user_properties = HashMap::with_capacity(m.headers.len());
        for (k, v) in m.headers {
            user_properties.entry(k).or_insert(v);
        }
        proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: topic.to_string(),
            }),
            user_properties,
            system_properties: Some(proto::SystemProperties {
                message_id,
                receipt_handle: Some(m.reply),
                queue_id: 0,
                queue_offset: Some(i64::try_from(m.stream_sequence).unwrap_or(i64::MAX)),
                delivery_attempt: Some(i32::try_from(m.delivered.max(1)).unwrap_or(i32::MAX)),
                born_timestamp: Some(stored),
                store_timestamp: Some(stored),
                ..Default::default()
            }),
            body: m.body,
        }
    }
}

/// Bind the durable pull consumer of `group` that reads `topic` (a subject, wildcards allowed),
/// creating it with `ack_wait` when missing. The stream is `stream`, or else the one whose
/// subjects hold `topic`. A durable consumer of that name that filters another subject is
/// refused: the group would silently read something else.
pub async fn bind_group(
    js: &JetStream,
    group: &str,
    topic: &str,
    stream: Option<&str>,
    ack_wait: Duration,
) -> Result<PullConsumer> {
    super::stream::validate_name("group", group)?;
    let stream = match stream {
        Some(s) => s.to_string(),
        None => js.context().stream_by_subject(topic).await.map_err(|e| {
            Error::invalid(
                "subscriptions",
                format!("no stream holds subject {topic:?}: {e}"),
            )
        })?,
    };
    let config = PullConsumerConfig {
        durable: Some(group.to_string()),
        filter_subject: Some(topic.to_string()),
        ack_wait,
        ..PullConsumerConfig::default()
    };
    let consumer = js.pull_consumer(&stream, &config).await?;
    if consumer.filter_subject() != topic {
        return Err(Error::invalid(
            "subscriptions",
            format!(
                "durable consumer {group:?} of stream {stream:?} already reads subject {:?}, not \
                 {topic:?} (a group reads one subject per stream; wildcards allowed)",
                consumer.filter_subject()
            ),
        ));
    }
    Ok(consumer)
}

/// JetStream filters by subject only: the topic is the filter.
fn check_filter(filter: &FilterExpression) -> Result<()> {
    if filter.is_all() {
        Ok(())
    } else {
        Err(Error::invalid(
            "subscriptions",
            format!(
                "JetStream filters by subject: subscribe to a subject with the filter \"*\", \
                 not {:?}",
                filter.expression()
            ),
        ))
    }
}

fn timestamp(t: SystemTime) -> prost_types::Timestamp {
    let d = t.duration_since(SystemTime::UNIX_EPOCH).unwrap_or_default();
    prost_types::Timestamp {
        seconds: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
        nanos: i32::try_from(d.subsec_nanos()).unwrap_or(0),
    }
}

/// `-NAK` with a redelivery delay (nats-server 2.7.1 and later read it).
fn nak_with_delay(delay: Duration) -> Bytes {
    let nanos = u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX);
    Bytes::from(format!("-NAK {{\"delay\":{nanos}}}"))
}

const ACK: &[u8] = b"+ACK";
const TERM: &[u8] = b"+TERM";

impl ConsumerRpc for JsConsumerRpc {
    fn settings(&self) -> ConsumerSettings {
        ConsumerSettings {
            fifo: false,
            receive_batch_size: self.options.receive_batch_size,
            long_polling_timeout: self.options.long_polling_timeout,
            retry_policy: self.options.retry_policy.clone(),
        }
    }

    fn access_endpoints(&self) -> Endpoints {
        self.access.clone()
    }

    async fn query_assignment(&self, topic: &str) -> Result<Vec<proto::MessageQueue>> {
        let consumer = self.subscribe(topic).await?;
        let stream = consumer.stream();
        Ok(vec![leader_queue(
            topic,
            0,
            proto::Permission::ReadWrite,
            stream,
        )])
    }

    async fn receive(&self, request: ReceiveRequest) -> Result<Received> {
        check_filter(&request.filter)?;
        if let Some(d) = request
            .invisible_duration
            .filter(|d| *d != self.options.ack_wait)
        {
            return Err(Error::invalid(
                "invisible_duration",
                format!(
                    "on JetStream it is the durable consumer's ack_wait ({} s, set with \
                     nats_options={{'ack_wait': …}}), not {} s",
                    self.options.ack_wait.as_secs_f64(),
                    d.as_secs_f64()
                ),
            ));
        }
        let topic = request
            .queue
            .topic
            .as_ref()
            .map(|t| t.name.clone())
            .unwrap_or_default();
        let consumer = self.subscribe(&topic).await?;
        let max = usize::try_from(request.batch_size.max(1)).unwrap_or(usize::MAX);
        let got = consumer.fetch(max, request.long_polling_timeout).await?;
        Ok(Received::from(
            got.into_iter()
                .map(|m| Self::to_proto(&topic, m))
                .collect::<Vec<_>>(),
        ))
    }

    /// A fetch returns with the first messages, so several subjects are polled in turn.
    fn receive_slice(&self) -> Option<Duration> {
        Some(Duration::from_secs(1))
    }

    async fn ack(
        &self,
        _source: &MessageSource,
        messages: &[&MessageView],
    ) -> Result<Vec<Result<()>>> {
        let acks = messages.iter().map(|m| async move {
            self.settle(&m.receipt_handle(), Bytes::from_static(ACK))
                .await
        });
        Ok(futures::future::join_all(acks).await)
    }

    async fn change_invisible_duration(
        &self,
        message: &MessageView,
        duration: Duration,
    ) -> Result<String> {
        let handle = message.receipt_handle();
        let attempt = u32::try_from(message.delivery_attempt()).unwrap_or(0);
        // The broker moves a message failed on its last attempt to the DLQ; JetStream has none.
        let payload = if attempt >= self.options.retry_policy.max_attempts {
            Bytes::from_static(TERM)
        } else {
            nak_with_delay(duration)
        };
        self.settle(&handle, payload).await?;
        Ok(handle.to_string())
    }

    async fn forward_to_dead_letter_queue(
        &self,
        message: &MessageView,
        _max_delivery_attempts: u32,
    ) -> Result<()> {
        self.settle(&message.receipt_handle(), Bytes::from_static(TERM))
            .await
    }

    /// Every filter must be `*` and every topic bind a durable consumer; topics dropped are
    /// forgotten here (their durable consumers stay on the server, where the group resumes).
    async fn update_subscriptions(
        &self,
        subscriptions: &[(String, FilterExpression)],
    ) -> Result<()> {
        for (topic, filter) in subscriptions {
            check_filter(filter)?;
            self.subscribe(topic).await?;
        }
        self.consumers
            .lock()
            .await
            .retain(|topic, _| subscriptions.iter().any(|(t, _)| t == topic));
        Ok(())
    }
}

#[cfg(test)]
#[path = "consumer_rpc_tests.rs"]
mod tests;
