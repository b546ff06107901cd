//! A JetStream pull consumer: fetch batches, then ack / nak / term each message.
//!
//! Explicit acks only (the consume side of ferrymq never loses a message silently). A durable
//! consumer is bound if it exists and created otherwise; without a durable name an ephemeral
//! consumer is created with an `inactive_threshold`, which nats-server 2.9 supports for pull
//! consumers.

use std::time::{Duration, SystemTime};

use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::{self, pull};
use async_nats::jetstream::message::Acker;
use bytes::Bytes;
use futures::StreamExt;

use super::stream::validate_name;
use super::{error, JetStream};
use crate::error::{Error, Result};

/// Where a new consumer starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliverPolicy {
    /// From the first message in the stream.
    #[default]
    All,
    /// Only messages published after the consumer was created.
    New,
    /// From the last message.
    Last,
    /// From this stream sequence.
    ByStartSequence(u64),
}

/// Settings of a pull consumer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PullConsumerConfig {
    /// Durable name; `None` creates an ephemeral consumer.
    pub durable: Option<String>,
    /// Only messages on this subject (wildcards allowed).
    pub filter_subject: Option<String>,
    /// Where to start.
    pub deliver: DeliverPolicy,
    /// How long the server waits for an ack before redelivering.
    pub ack_wait: Duration,
    /// Most deliveries of one message (`None`: unlimited).
    pub max_deliver: Option<i64>,
    /// Most messages delivered and not yet acked (`None`: server default).
    pub max_ack_pending: Option<i64>,
    /// An ephemeral consumer is removed after this long without a pull.
    pub inactive_threshold: Duration,
}

impl Default for PullConsumerConfig {
    fn default() -> Self {
        Self {
            durable: None,
            filter_subject: None,
            deliver: DeliverPolicy::All,
            ack_wait: Duration::from_secs(30),
            max_deliver: None,
            max_ack_pending: None,
            inactive_threshold: Duration::from_secs(300),
        }
    }
}

/// A pull consumer bound to a stream.
#[derive(Clone, Debug)]
pub struct PullConsumer {
    consumer: consumer::Consumer<pull::Config>,
    stream: String,
    name: String,
    filter_subject: String,
}

/// Counters of a consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsumerState {
    /// Messages in the stream not yet delivered to this consumer.
    pub num_pending: u64,
    /// Messages delivered and not yet acked.
    pub num_ack_pending: usize,
    /// Messages redelivered at least once.
    pub num_redelivered: usize,
    /// Pull requests waiting on the server for messages.
    pub num_waiting: usize,
    /// The last stream sequence delivered.
    pub delivered_stream_sequence: u64,
    /// The stream sequence below which everything is acked.
    pub ack_floor_stream_sequence: u64,
}

/// How to acknowledge a message.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum AckKind {
    /// Processed: do not deliver again.
    Ack,
    /// Not processed: deliver again, after `delay` if given.
    Nak(Option<Duration>),
    /// Still working on it: reset the ack timer.
    InProgress,
    /// Never deliver again (and do not count it as processed).
    Term,
}

impl JetStream {
    /// Bind to (or create) a pull consumer on `stream`.
    pub async fn pull_consumer(
        &self,
        stream: &str,
        cfg: &PullConsumerConfig,
    ) -> Result<PullConsumer> {
        validate_name("stream", stream)?;
        if let Some(d) = &cfg.durable {
            validate_name("durable", d)?;
        }
        Error::require_positive("ack_wait", cfg.ack_wait)?;
        if let Some(f) = &cfg.filter_subject {
            if f.is_empty() || f.split('.').any(str::is_empty) || f.contains(char::is_whitespace) {
                return Err(Error::invalid(
                    "filter_subject",
                    format!("{f:?} is not a valid subject"),
                ));
            }
        }
        let what = format!("pull consumer on stream {stream:?}");
        let ephemeral_name = nuid::next().to_string();
        let config = pull::Config {
            durable_name: cfg.durable.clone(),
            name: cfg.durable.clone().or(Some(ephemeral_name)),
            filter_subject: cfg.filter_subject.clone().unwrap_or_default(),
            deliver_policy: match cfg.deliver {
                DeliverPolicy::All => consumer::DeliverPolicy::All,
                DeliverPolicy::New => consumer::DeliverPolicy::New,
                DeliverPolicy::Last => consumer::DeliverPolicy::Last,
                DeliverPolicy::ByStartSequence(s) => {
                    consumer::DeliverPolicy::ByStartSequence { start_sequence: s }
                }
            },
            ack_policy: consumer::AckPolicy::Explicit,
            ack_wait: cfg.ack_wait,
            max_deliver: cfg.max_deliver.unwrap_or(-1),
            max_ack_pending: cfg.max_ack_pending.unwrap_or(0),
            inactive_threshold: if cfg.durable.is_some() {
                Duration::ZERO
            } else {
                cfg.inactive_threshold
            },
            ..pull::Config::default()
        };
        let s = self
            .context()
            .get_stream(stream)
            .await
            .map_err(|e| error::map(&what, e))?;
        let consumer = match &cfg.durable {
            Some(d) => s.get_or_create_consumer(d, config).await,
            None => s.create_consumer(config).await,
        }
        .map_err(|e| error::map(&what, e))?;
        let name = consumer.cached_info().name.clone();
        let filter_subject = consumer.cached_info().config.filter_subject.clone();
        Ok(PullConsumer {
            consumer,
            stream: stream.to_string(),
            name,
            filter_subject,
        })
    }

    /// Delete consumer `name` of `stream`; `false` when it did not exist.
    pub async fn delete_consumer(&self, stream: &str, name: &str) -> Result<bool> {
        validate_name("stream", stream)?;
        validate_name("name", name)?;
        match self
            .context()
            .delete_consumer_from_stream(name, stream)
            .await
        {
            Ok(s) => Ok(s.success),
            Err(e) => {
                let err = error::map(&format!("delete consumer {name:?}"), e);
                if err.status().is_some_and(|s| s.code == 10014) {
                    Ok(false)
                } else {
                    Err(err)
                }
            }
        }
    }
}

impl PullConsumer {
    /// The stream.
    pub fn stream(&self) -> &str {
        &self.stream
    }

    /// The consumer's name (its durable name, or the generated name of an ephemeral one).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Fetch up to `max` messages. Returns as soon as some are available: what the stream holds
    /// for this consumer right now, or else the first messages that arrive within `timeout`
    /// (an empty batch when none does). It never waits for the batch to fill.
    ///
    /// Three pull requests at most: a `no_wait` pull of `max` (answered at once, with what is
    /// there or a 404); when it brought nothing, a pull of one message that the server holds
    /// until `timeout` expires; when that one brings a message, a `no_wait` pull of the rest.
    /// Each request ends on the server (full, 404 or 408), so none is left pending to deliver
    /// messages to an inbox nobody reads.
    pub async fn fetch(&self, max: usize, timeout: Duration) -> Result<Vec<JsMessage>> {
        Error::require_count("max_messages", max)?;
        let got = self.fetch_now(max).await?;
        if !got.is_empty() || timeout.is_zero() {
            return Ok(got);
        }
        // Nothing right now: wait (server-side) up to `timeout` for the first message.
        // nats-server 2.9 rejects pull expiries below 1 ms.
        let expires = timeout.max(Duration::from_millis(10));
        let batch = self
            .consumer
            .batch()
            .max_messages(1)
            .expires(expires)
            .messages()
            .await
            .map_err(|e| error::map("fetch", e))?;
        let mut got = collect(batch, 1).await?;
        if got.is_empty() || max == 1 {
            return Ok(got);
        }
        got.extend(self.fetch_now(max - 1).await?);
        Ok(got)
    }

    /// A `no_wait` pull: up to `max` messages available now, none when there are none.
    async fn fetch_now(&self, max: usize) -> Result<Vec<JsMessage>> {
        let batch = self
            .consumer
            .fetch()
            .max_messages(max)
            .messages()
            .await
            .map_err(|e| error::map("fetch", e))?;
        collect(batch, max).await
    }

    /// The subject it reads (as the server has it; empty: every subject of the stream).
    pub fn filter_subject(&self) -> &str {
        &self.filter_subject
    }

    /// The consumer's counters, read from the server.
    pub async fn state(&self) -> Result<ConsumerState> {
        let info = self
            .consumer
            .get_info()
            .await
            .map_err(|e| Error::connection(format!("consumer info {:?}: {e}", self.name)))?;
        Ok(ConsumerState {
            num_pending: info.num_pending,
            num_ack_pending: info.num_ack_pending,
            num_redelivered: info.num_redelivered,
            num_waiting: info.num_waiting,
            delivered_stream_sequence: info.delivered.stream_sequence,
            ack_floor_stream_sequence: info.ack_floor.stream_sequence,
        })
    }
}

async fn collect(batch: pull::Batch, max: usize) -> Result<Vec<JsMessage>> {
    let mut out = Vec::with_capacity(max.min(1024));
    futures::pin_mut!(batch);
    while let Some(m) = batch.next().await {
        let m = m.map_err(|e| error::map_boxed("fetch", &e))?;
        out.push(JsMessage::from_nats(m)?);
    }
    Ok(out)
}

/// One message fetched from a pull consumer.
pub struct JsMessage {
    /// The subject it was published to.
    pub subject: String,
    /// The payload.
    pub body: Bytes,
    /// Headers, in order (a name may repeat).
    pub headers: Vec<(String, String)>,
    /// The stream sequence.
    pub stream_sequence: u64,
    /// The consumer sequence.
    pub consumer_sequence: u64,
    /// How many times it was delivered (1 the first time).
    pub delivered: i64,
    /// Messages still pending for the consumer after this one.
    pub pending: u64,
    /// When the server stored it.
    pub published: SystemTime,
    /// The stream.
    pub stream: String,
    /// The reply subject of this delivery (`$JS.ACK.…`): where acks of it are sent.
    pub reply: String,
    acker: Acker,
}

impl std::fmt::Debug for JsMessage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JsMessage")
            .field("subject", &self.subject)
            .field("body_len", &self.body.len())
            .field("stream_sequence", &self.stream_sequence)
            .field("delivered", &self.delivered)
            .finish_non_exhaustive()
    }
}

impl JsMessage {
    fn from_nats(m: async_nats::jetstream::Message) -> Result<Self> {
        let info = m
            .info()
            .map_err(|e| Error::protocol(format!("fetch: bad JetStream reply subject: {e}")))?;
        let stream = info.stream.to_string();
        let (stream_sequence, consumer_sequence, delivered, pending) = (
            info.stream_sequence,
            info.consumer_sequence,
            info.delivered,
            info.pending,
        );
        let nanos = info.published.unix_timestamp_nanos();
        let published = u64::try_from(nanos)
            .map(|n| SystemTime::UNIX_EPOCH + Duration::from_nanos(n))
            .unwrap_or(SystemTime::UNIX_EPOCH);
        let reply = m
            .reply
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let (msg, acker) = m.split();
        let mut headers = Vec::new();
        if let Some(h) = &msg.headers {
            for (name, values) in h.iter() {
                for v in values {
                    headers.push((name.to_string(), v.as_str().to_string()));
                }
            }
        }
        Ok(Self {
            subject: msg.subject.to_string(),
            body: msg.payload,
            headers,
            stream_sequence,
            consumer_sequence,
            delivered,
            pending,
            published,
            stream,
            reply,
            acker,
        })
    }

    /// The `Nats-Msg-Id` it was published with.
    pub fn message_id(&self) -> Option<&str> {
        let name: &str = NATS_MESSAGE_ID.as_ref();
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The id consumers see: the `Nats-Msg-Id`, or else the stream sequence in decimal.
    pub fn id(&self) -> String {
        self.message_id()
            .map_or_else(|| self.stream_sequence.to_string(), str::to_string)
    }

    /// Acknowledge. `Ack` waits for the server's confirmation (a double ack), so that a
    /// returned `Ok` means the ack was recorded; the others are sent without waiting.
    pub async fn acknowledge(&self, kind: AckKind) -> Result<()> {
        use async_nats::jetstream::AckKind as K;
        let r = match kind {
            AckKind::Ack => self.acker.double_ack().await,
            AckKind::Nak(d) => self.acker.ack_with(K::Nak(d)).await,
            AckKind::InProgress => self.acker.ack_with(K::Progress).await,
            AckKind::Term => self.acker.ack_with(K::Term).await,
        };
        r.map_err(|e| error::map_boxed("ack", &e))
    }
}
