//! One message through the publisher: its options, the [`Flight`] (id, attempts, publish time,
//! outcome), the retry policy and the events the runner reports.

use std::any::Any;
use std::fmt;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use tokio::sync::Notify;

use crate::error::{Error, Protocol, Result};
use crate::message::Message;

/// Per-message publish options: the message id and the JetStream expectations.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PublishOptions {
    /// A caller-chosen message id; it replaces the generated `<id_prefix>-<n>`.
    pub message_id: Option<String>,
    /// `Nats-Expected-Stream`: the stream the subject must belong to.
    pub expected_stream: Option<String>,
    /// `Nats-Expected-Last-Sequence`.
    pub expected_last_sequence: Option<u64>,
    /// `Nats-Expected-Last-Subject-Sequence`.
    pub expected_last_subject_sequence: Option<u64>,
    /// `Nats-Expected-Last-Msg-Id`.
    pub expected_last_msg_id: Option<String>,
}

impl PublishOptions {
    /// The parameter name of the first expectation set, if any.
    pub fn first_expectation(&self) -> Option<&'static str> {
        [
            ("expected_stream", self.expected_stream.is_some()),
            (
                "expected_last_sequence",
                self.expected_last_sequence.is_some(),
            ),
            (
                "expected_last_subject_sequence",
                self.expected_last_subject_sequence.is_some(),
            ),
            ("expected_last_msg_id", self.expected_last_msg_id.is_some()),
        ]
        .into_iter()
        .find_map(|(name, set)| set.then_some(name))
    }
}

/// What the caller asks to publish.
#[derive(Debug, Clone, Default)]
pub struct Outgoing {
    /// The subject (NATS) or topic (RocketMQ, JMQ4).
    pub subject: String,
    /// Headers (NATS) or user properties (RocketMQ, JMQ4), in order.
    pub headers: Vec<(String, String)>,
    /// The payload.
    pub body: Bytes,
    /// Message id and expectations.
    pub options: PublishOptions,
    /// The full message model, when the caller built a [`Message`] (tag, keys, group, …).
    pub message: Option<Message>,
}

/// The broker's acknowledgement of a publish, common to every backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishAck {
    /// The id the message was published with (`Nats-Msg-Id`, or the broker's message id).
    pub message_id: String,
    /// The stream (JetStream) or topic (RocketMQ, JMQ4) that stored the message.
    pub stream: String,
    /// The stream sequence (JetStream) or queue offset (RocketMQ, JMQ4).
    pub sequence: u64,
    /// True when the broker recognised the message id as a duplicate and did not store it again.
    pub duplicate: bool,
    /// The JetStream domain, if any.
    pub domain: Option<String>,
}

/// How a flight ended.
#[derive(Debug)]
pub enum Outcome {
    /// The broker acknowledged the message.
    Acked(PublishAck),
    /// The publish failed (after any retries); the error says why.
    Failed(Error),
    /// No ack arrived within `wait_timeout` of the publish.
    TimedOut(Error),
}

impl Outcome {
    /// The error of a failed or timed-out flight.
    pub fn error(&self) -> Option<&Error> {
        match self {
            Outcome::Acked(_) => None,
            Outcome::Failed(e) | Outcome::TimedOut(e) => Some(e),
        }
    }
    /// The ack of an acked flight.
    pub fn ack(&self) -> Option<&PublishAck> {
        match self {
            Outcome::Acked(a) => Some(a),
            _ => None,
        }
    }
}

/// One message on its way through the publisher.
///
/// Created by [`Publisher::prepare`]; shared (`Arc`) between the caller, the runner and the
/// event consumer. Its outcome is set exactly once.
pub struct Flight {
    pub(super) seq: u64,
    pub(super) id: String,
    pub(super) out: Outgoing,
    pub(super) attempts: AtomicU32,
    pub(super) publish_time: OnceLock<SystemTime>,
    pub(super) outcome: OnceLock<Outcome>,
    pub(super) done: Notify,
    pub(super) watched: AtomicBool,
    pub(super) attachment: OnceLock<Box<dyn Any + Send + Sync>>,
}

impl fmt::Debug for Flight {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Flight")
            .field("id", &self.id)
            .field("subject", &self.out.subject)
            .field("body_len", &self.out.body.len())
            .field("attempts", &self.attempts())
            .field("outcome", &self.outcome.get())
            .finish_non_exhaustive()
    }
}

impl Flight {
    pub(super) fn new(seq: u64, id: String, out: Outgoing) -> Self {
        Self {
            seq,
            id,
            out,
            attempts: AtomicU32::new(0),
            publish_time: OnceLock::new(),
            outcome: OnceLock::new(),
            done: Notify::new(),
            watched: AtomicBool::new(false),
            attachment: OnceLock::new(),
        }
    }

    /// A flight of `id` with an empty message, for tests of backends.
    #[cfg(test)]
    pub(crate) fn for_test(id: &str) -> Arc<Self> {
        Arc::new(Self::new(1, id.to_string(), Outgoing::default()))
    }

    /// The position of this flight in submission order (1, 2, …).
    pub fn seq(&self) -> u64 {
        self.seq
    }
    /// The message id: `<id_prefix>-<seq>`, or the caller's `message_id`.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The subject (or topic).
    pub fn subject(&self) -> &str {
        &self.out.subject
    }
    /// The headers (or properties).
    pub fn headers(&self) -> &[(String, String)] {
        &self.out.headers
    }
    /// The payload.
    pub fn body(&self) -> &Bytes {
        &self.out.body
    }
    /// The publish options (expectations).
    pub fn options(&self) -> &PublishOptions {
        &self.out.options
    }
    /// The full message model, when the caller gave one.
    pub fn message(&self) -> Option<&Message> {
        self.out.message.as_ref()
    }
    /// When the message was first handed to the connection; `None` until then.
    pub fn publish_time(&self) -> Option<SystemTime> {
        self.publish_time.get().copied()
    }
    /// How many attempts were started (0 before the first).
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }
    /// The outcome, once the flight is done.
    pub fn outcome(&self) -> Option<&Outcome> {
        self.outcome.get()
    }
    /// Whether the flight is done.
    pub fn is_done(&self) -> bool {
        self.outcome.get().is_some()
    }

    /// Wait for the outcome.
    pub async fn wait(&self) -> &Outcome {
        loop {
            let notified = self.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(o) = self.outcome.get() {
                return o;
            }
            notified.await;
        }
    }

    /// Ask for this flight's terminal event (with [`Events::Watched`]) and attach a value for
    /// the event consumer (the Python binding stores the caller's future here).
    ///
    /// Returns the attachment in place (the first one wins) and whether the flight was already
    /// done; in that case the terminal event may or may not be delivered, so the caller should
    /// complete its future itself (idempotently).
    pub fn watch(
        &self,
        attachment: Box<dyn Any + Send + Sync>,
    ) -> (&(dyn Any + Send + Sync), bool) {
        let _ = self.attachment.set(attachment);
        self.watched.store(true, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        let done = self.outcome.get().is_some();
        let att = self
            .attachment
            .get()
            .map(AsRef::as_ref)
            .expect("attachment was just set");
        (att, done)
    }

    /// The value attached by [`watch`](Flight::watch), if any.
    pub fn attachment(&self) -> Option<&(dyn Any + Send + Sync)> {
        self.attachment.get().map(AsRef::as_ref)
    }

    /// Set the outcome (once) and wake waiters; returns whether the flight is watched.
    pub(super) fn finish(&self, outcome: Outcome) -> bool {
        let _ = self.outcome.set(outcome);
        fence(Ordering::SeqCst);
        self.done.notify_waiters();
        self.watched.load(Ordering::SeqCst)
    }

    pub(super) fn start_attempt(&self) -> u32 {
        self.attempts.fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// Retries of one message. Without a policy every message is attempted once.
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    /// Total attempts, the first included (at least 1).
    pub attempts: u32,
    /// Pause before the n-th retry; the last entry repeats. Empty means no pause.
    pub backoff: Vec<Duration>,
    /// No retry starts later than this after the first attempt (the flight's `wait_timeout`
    /// bounds everything anyway).
    pub deadline: Option<Duration>,
    /// Give up on one attempt's ack after this long and retry (the same message id is re-sent,
    /// so the broker de-duplicates). `None`: an attempt waits until `wait_timeout`.
    pub attempt_timeout: Option<Duration>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 2,
            backoff: [250, 250, 500, 500, 3000, 5000]
                .into_iter()
                .map(Duration::from_millis)
                .collect(),
            deadline: None,
            attempt_timeout: None,
        }
    }
}

impl RetryPolicy {
    pub(super) fn validate(&self) -> Result<()> {
        Error::require_count("retry.attempts", self.attempts)?;
        if self.attempt_timeout == Some(Duration::ZERO) {
            return Err(Error::invalid("retry.attempt_timeout", "must be positive"));
        }
        Ok(())
    }

    /// The pause before retry number `retry` (1-based).
    pub fn backoff(&self, retry: u32) -> Duration {
        if self.backoff.is_empty() {
            return Duration::ZERO;
        }
        let i = (retry as usize)
            .saturating_sub(1)
            .min(self.backoff.len() - 1);
        self.backoff[i]
    }
}

/// JetStream expectation failures: wrong stream (10060), wrong last message id (10070), wrong
/// last sequence (10071). Retrying cannot fix them, so the publisher never does.
pub fn is_expectation_failure(err: &Error) -> bool {
    err.status()
        .is_some_and(|s| s.protocol == Protocol::Nats && matches!(s.code, 10060 | 10070 | 10071))
}

/// Whether the publisher may retry after `err`.
pub fn is_retriable_publish_error(err: &Error) -> bool {
    err.is_retriable() && !is_expectation_failure(err)
}

/// Which events the publisher emits on its event channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// None: callers wait on [`Flight::wait`].
    None,
    /// Only the terminal event of flights that were [`watch`](Flight::watch)ed.
    Watched,
    /// Every event of every flight (a listener is installed).
    All,
}

/// What happened to a flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EventKind {
    /// The message was handed to the connection.
    Published,
    /// The ack arrived.
    Acked,
    /// The publish failed (including lower-level request timeouts).
    CompletedExceptionally,
    /// No ack within `wait_timeout`.
    Timeout,
}

impl EventKind {
    /// The listener method name of the design.
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Published => "published",
            EventKind::Acked => "acked",
            EventKind::CompletedExceptionally => "completed_exceptionally",
            EventKind::Timeout => "timeout",
        }
    }
}

/// One event for the listener.
#[derive(Debug, Clone)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// To which flight.
    pub flight: Arc<Flight>,
}
