//! The managed async publisher ("Managed Async Publisher" design, seed 004), over any backend.
//!
//! The observable semantics are the design's: a window of at most `max_in_flight` messages
//! waiting for their publish ack; when the window is full a *hold* stops publishing until the
//! number in flight falls to `refill_allowed_at`; every message becomes a [`Flight`] with an id
//! `<id_prefix>-<n>`, a publish time and an outcome; listener events `published`, `acked`,
//! `completed_exceptionally` and `timeout`; `start` / `stop` / `drain`.
//!
//! The implementation follows the lessons of managed-publisher.md §8 rather than the polling
//! loops of the design:
//!
//! * **Bounded intake.** Submissions go through a bounded channel of `max_in_flight` slots; a
//!   caller that outruns the window waits ([`Publisher::enqueue`]) or is told the intake is full
//!   ([`Publisher::try_enqueue`]). Memory stays bounded under overload.
//! * **One runner task.** A single tokio task owns the window: it sends messages in submission
//!   order and reacts to acks as they arrive (no head-of-line blocking, no sleeping while on
//!   hold). Backends that can ([`PublishBackend::send_to`], NATS) deliver acks into the runner's
//!   one [`AckSink`], and `wait_timeout` is enforced by one timer over a queue of deadlines in
//!   send order; otherwise (and with a retry policy) each flight's ack future waits in a
//!   `FuturesUnordered`.
//! * **Every flight completes** exactly once: acked, failed, timed out (`wait_timeout` counted
//!   from the moment the message was sent), or closed by [`Publisher::stop`].
//! * **Stable ids.** The id is stamped when the flight is created and sent on every attempt
//!   (as `Nats-Msg-Id` on JetStream), so the broker can de-duplicate retries. A caller-supplied
//!   message id wins.
//! * **Retries** only for retriable errors, never for expectation failures (JetStream 10060,
//!   10070, 10071).
//! * **Events are never dropped**: they go through a bounded channel; when its consumer is slow
//!   the runner waits, which in turn stops the window from refilling (back-pressure).
//! * No lock is held while an event is handed over, so consumers may run arbitrary code.

use std::any::Any;
use std::collections::VecDeque;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::task::AtomicWaker;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Protocol, Result};
use crate::message::Message;

/// The future of one attempt's acknowledgement.
pub type AckFuture = BoxFuture<'static, Result<PublishAck>>;
/// The future of handing one attempt to the connection; it yields the ack future.
pub type SendFuture = BoxFuture<'static, Result<AckFuture>>;
/// The future of handing one attempt to the connection when its ack goes to an [`AckSink`].
pub type SendToFuture = BoxFuture<'static, Result<()>>;

/// A producer the managed publisher can drive: NATS JetStream, RocketMQ, JMQ4.
///
/// [`send`](PublishBackend::send) makes **one attempt**. Its future resolves once the message
/// has been handed to the connection (that instant is the flight's publish time) and yields the
/// future of the broker's acknowledgement. Backends must put [`Flight::id`] on the wire as the
/// de-duplication id when the protocol has one, so that retries are idempotent.
pub trait PublishBackend: Send + Sync + 'static {
    /// Start one attempt to publish `flight`.
    fn send(&self, flight: &Arc<Flight>) -> SendFuture;
    /// Start one attempt to publish `flight` whose outcome the backend delivers to `acks`
    /// ([`AckSink::deliver`]) instead of returning a future of it: exactly once for every
    /// attempt whose future resolved `Ok` (ack, error, the backend's own time-out, or the
    /// connection closing). An attempt whose future fails or is dropped may still deliver.
    ///
    /// `None` (the default): not supported, the runner uses [`send`](PublishBackend::send).
    /// The runner uses this only for publishers without a retry policy.
    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        let _ = (flight, acks);
        None
    }
    /// Check what the backend needs of a message (subject syntax, header names, …) before it is
    /// accepted, so that bad input fails at the call with an error naming the field.
    fn validate(&self, out: &Outgoing) -> Result<()> {
        let _ = out;
        Ok(())
    }
    /// A short description for logs and reprs (endpoints, never credentials).
    fn describe(&self) -> String;
}

impl<T: PublishBackend + ?Sized> PublishBackend for Arc<T> {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        (**self).send(flight)
    }
    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        (**self).send_to(flight, acks)
    }
    fn validate(&self, out: &Outgoing) -> Result<()> {
        (**self).validate(out)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
}

/// The runner's one inbox of acks, for backends that deliver them
/// ([`PublishBackend::send_to`]) rather than returning a future per message: no oneshot, boxed
/// future or timer entry per flight, and one wake-up of the runner per batch of acks.
///
/// It holds at most one result per attempt sent, so it is bounded by the window (plus late
/// results of attempts the runner already finished, which it ignores).
#[derive(Clone)]
pub struct AckSink(Arc<SinkQueue>);

struct SinkQueue {
    ready: Mutex<Vec<(Arc<Flight>, Result<PublishAck>)>>,
    waker: AtomicWaker,
}

impl fmt::Debug for AckSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckSink")
            .field("ready", &self.0.ready.lock().len())
            .finish()
    }
}

impl AckSink {
    pub(crate) fn new() -> Self {
        Self(Arc::new(SinkQueue {
            ready: Mutex::new(Vec::new()),
            waker: AtomicWaker::new(),
        }))
    }

    /// Hand the outcome of an attempt of `flight` to the runner.
    pub fn deliver(&self, flight: Arc<Flight>, result: Result<PublishAck>) {
        self.0.ready.lock().push((flight, result));
        self.0.waker.wake();
    }

    /// Everything delivered so far.
    #[cfg(test)]
    pub(crate) fn take_all(&self) -> Vec<(Arc<Flight>, Result<PublishAck>)> {
        std::mem::take(&mut *self.0.ready.lock())
    }

    /// Swap what was delivered into `out` (which must be empty); `Pending` when nothing was.
    fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut Vec<(Arc<Flight>, Result<PublishAck>)>,
    ) -> Poll<()> {
        for attempt in 0..2 {
            {
                let mut ready = self.0.ready.lock();
                if !ready.is_empty() {
                    std::mem::swap(&mut *ready, out);
                    return Poll::Ready(());
                }
            }
            if attempt == 0 {
                // Register, then look again: a delivery in between is not missed.
                self.0.waker.register(cx.waker());
            }
        }
        Poll::Pending
    }
}

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
    /// Whether any expectation is set.
    pub fn has_expectations(&self) -> bool {
        self.first_expectation().is_some()
    }

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
    seq: u64,
    id: String,
    out: Outgoing,
    attempts: AtomicU32,
    publish_time: OnceLock<SystemTime>,
    outcome: OnceLock<Outcome>,
    done: Notify,
    watched: AtomicBool,
    attachment: OnceLock<Box<dyn Any + Send + Sync>>,
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
    fn new(seq: u64, id: String, out: Outgoing) -> Self {
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

    /// Whether [`watch`](Flight::watch) was called.
    pub fn is_watched(&self) -> bool {
        self.watched.load(Ordering::SeqCst)
    }

    /// Set the outcome (once) and wake waiters; returns whether the flight is watched.
    fn finish(&self, outcome: Outcome) -> bool {
        let _ = self.outcome.set(outcome);
        fence(Ordering::SeqCst);
        self.done.notify_waiters();
        self.watched.load(Ordering::SeqCst)
    }

    fn start_attempt(&self) -> u32 {
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
    fn validate(&self) -> Result<()> {
        if self.attempts == 0 {
            return Err(Error::invalid("retry.attempts", "must be at least 1"));
        }
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

/// The largest `max_in_flight`: the intake and event channels are sized from it.
pub const MAX_IN_FLIGHT: usize = 1_000_000;

/// Settings of a [`Publisher`] (the design's optional properties).
#[derive(Debug, Clone)]
pub struct PublisherConfig {
    /// Prefix of generated ids; a NUID when `None`.
    pub id_prefix: Option<String>,
    /// Most messages waiting for their ack at once (default 50).
    pub max_in_flight: usize,
    /// Once the window is full, publishing resumes when at most this many are in flight
    /// (default 0: full sawtooth).
    pub refill_allowed_at: usize,
    /// Retries; `None` attempts each message once.
    pub retry: Option<RetryPolicy>,
    /// Longest the runner sleeps without re-checking its state (default 100 ms). The runner is
    /// event driven; this is only a safety net.
    pub poll_time: Duration,
    /// Longest the runner waits between checks of the hold (default 100 ms). The hold is lifted
    /// as soon as an ack brings the count to `refill_allowed_at`; this is only a safety net.
    pub hold_pause_time: Duration,
    /// How long after its publish a message may wait for its ack (default 5 s).
    pub wait_timeout: Duration,
    /// Which events to emit.
    pub events: Events,
    /// Capacity of the event channel (0: `2 * max_in_flight + 64`).
    pub event_capacity: usize,
}

impl Default for PublisherConfig {
    fn default() -> Self {
        Self {
            id_prefix: None,
            max_in_flight: 50,
            refill_allowed_at: 0,
            retry: None,
            poll_time: Duration::from_millis(100),
            hold_pause_time: Duration::from_millis(100),
            wait_timeout: Duration::from_secs(5),
            events: Events::None,
            event_capacity: 0,
        }
    }
}

impl PublisherConfig {
    /// Check every field; errors name the field.
    pub fn validate(&self) -> Result<()> {
        if self.max_in_flight == 0 || self.max_in_flight > MAX_IN_FLIGHT {
            return Err(Error::invalid(
                "max_in_flight",
                format!("{} is not from 1 to {MAX_IN_FLIGHT}", self.max_in_flight),
            ));
        }
        if self.refill_allowed_at >= self.max_in_flight {
            return Err(Error::invalid(
                "refill_allowed_at",
                format!(
                    "{} must be less than max_in_flight ({})",
                    self.refill_allowed_at, self.max_in_flight
                ),
            ));
        }
        for (field, d) in [
            ("poll_time", self.poll_time),
            ("hold_pause_time", self.hold_pause_time),
            ("wait_timeout", self.wait_timeout),
        ] {
            if d.is_zero() {
                return Err(Error::invalid(field, "must be positive"));
            }
            if d > crate::duration::MAX {
                return Err(Error::invalid(
                    field,
                    format!("must be at most {} s", crate::duration::MAX_SECS),
                ));
            }
        }
        if let Some(p) = &self.id_prefix {
            if p.is_empty() || p.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(Error::invalid(
                    "id_prefix",
                    "must be non-empty, without whitespace or control characters",
                ));
            }
        }
        if let Some(r) = &self.retry {
            r.validate()?;
        }
        Ok(())
    }
}

const IDLE: u8 = 0;
const RUNNING: u8 = 1;
const DRAINING: u8 = 2;
const STOPPING: u8 = 3;
const FINISHED: u8 = 4;

/// The lifecycle state of a publisher.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Created; messages queue up (until the intake is full) but nothing is sent.
    Idle,
    /// Publishing.
    Running,
    /// No new messages accepted; finishing the queued and in-flight ones.
    Draining,
    /// Stop requested; remaining flights are being closed.
    Stopping,
    /// The runner has exited; every flight is done.
    Finished,
}

struct Shared {
    state: AtomicU8,
    in_flight: AtomicUsize,
    held: AtomicBool,
    next_seq: AtomicU64,
    control: Notify,
    finished_tx: watch::Sender<bool>,
}

struct RunnerParts {
    intake: mpsc::Receiver<Arc<Flight>>,
    events: Option<mpsc::Sender<Event>>,
}

/// The managed async publisher.
pub struct Publisher {
    shared: Arc<Shared>,
    config: Arc<PublisherConfig>,
    id_prefix: String,
    backend: Arc<dyn PublishBackend>,
    intake: mpsc::Sender<Arc<Flight>>,
    parts: Mutex<Option<RunnerParts>>,
    events: Mutex<Option<mpsc::Receiver<Event>>>,
    runtime: tokio::runtime::Handle,
}

impl fmt::Debug for Publisher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Publisher")
            .field("backend", &self.backend.describe())
            .field("state", &self.state())
            .field("in_flight", &self.in_flight())
            .field("max_in_flight", &self.config.max_in_flight)
            .finish_non_exhaustive()
    }
}

impl Publisher {
    /// A new, not yet started publisher on `backend`; its runner will run on `runtime`.
    pub fn new<B: PublishBackend>(
        backend: B,
        config: PublisherConfig,
        runtime: tokio::runtime::Handle,
    ) -> Result<Self> {
        config.validate()?;
        let id_prefix = config
            .id_prefix
            .clone()
            .unwrap_or_else(|| nuid::next().to_string());
        let (intake_tx, intake_rx) = mpsc::channel(config.max_in_flight);
        let (events_tx, events_rx) = if config.events == Events::None {
            (None, None)
        } else {
            let cap = if config.event_capacity == 0 {
                config.max_in_flight.saturating_mul(2).saturating_add(64)
            } else {
                config.event_capacity
            };
            let (tx, rx) = mpsc::channel(cap);
            (Some(tx), Some(rx))
        };
        Ok(Self {
            shared: Arc::new(Shared {
                state: AtomicU8::new(IDLE),
                in_flight: AtomicUsize::new(0),
                held: AtomicBool::new(false),
                next_seq: AtomicU64::new(1),
                control: Notify::new(),
                finished_tx: watch::channel(false).0,
            }),
            config: Arc::new(config),
            id_prefix,
            backend: Arc::new(backend),
            intake: intake_tx,
            parts: Mutex::new(Some(RunnerParts {
                intake: intake_rx,
                events: events_tx,
            })),
            events: Mutex::new(events_rx),
            runtime,
        })
    }

    /// The settings.
    pub fn config(&self) -> &PublisherConfig {
        &self.config
    }
    /// The prefix of generated ids.
    pub fn id_prefix(&self) -> &str {
        &self.id_prefix
    }
    /// The backend's description.
    pub fn describe_backend(&self) -> String {
        self.backend.describe()
    }
    /// Messages published and not yet done.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Relaxed)
    }
    /// Whether the hold is on (the window filled up and has not refilled yet).
    pub fn is_held(&self) -> bool {
        self.shared.held.load(Ordering::Relaxed)
    }
    /// Messages accepted and not yet taken by the runner.
    pub fn queued(&self) -> usize {
        self.intake.max_capacity() - self.intake.capacity()
    }
    /// The lifecycle state.
    pub fn state(&self) -> State {
        match self.shared.state.load(Ordering::Acquire) {
            IDLE => State::Idle,
            RUNNING => State::Running,
            DRAINING => State::Draining,
            STOPPING => State::Stopping,
            _ => State::Finished,
        }
    }

    /// Take the event receiver (once). `None` with [`Events::None`] or when already taken.
    pub fn take_events(&self) -> Option<mpsc::Receiver<Event>> {
        self.events.lock().take()
    }

    /// Create the flight of `out`: validate it and stamp its id. Nothing is queued yet.
    pub fn prepare(&self, out: Outgoing) -> Result<Arc<Flight>> {
        if out.subject.is_empty() {
            return Err(Error::invalid("subject", "must not be empty"));
        }
        if let Some(id) = &out.options.message_id {
            if id.is_empty() {
                return Err(Error::invalid("message_id", "must not be empty"));
            }
        }
        self.backend.validate(&out)?;
        let seq = self.shared.next_seq.fetch_add(1, Ordering::Relaxed);
        let id = match &out.options.message_id {
            Some(id) => id.clone(),
            None => {
                let mut digits = itoa::Buffer::new();
                let digits = digits.format(seq);
                let mut s = String::with_capacity(self.id_prefix.len() + 1 + digits.len());
                s.push_str(&self.id_prefix);
                s.push('-');
                s.push_str(digits);
                s
            }
        };
        Ok(Arc::new(Flight::new(seq, id, out)))
    }

    fn check_open(&self) -> Result<()> {
        match self.shared.state.load(Ordering::Acquire) {
            IDLE | RUNNING => Ok(()),
            DRAINING => Err(Error::closed(
                "the publisher is draining; it accepts no new messages",
            )),
            _ => Err(Error::closed("the publisher is stopped")),
        }
    }

    /// Queue `flight` if the intake has room now. `Ok(false)`: full, try again later.
    pub fn try_enqueue(&self, flight: &Arc<Flight>) -> Result<bool> {
        self.check_open()?;
        match self.intake.try_send(Arc::clone(flight)) {
            Ok(()) => Ok(true),
            Err(mpsc::error::TrySendError::Full(_)) => Ok(false),
            Err(mpsc::error::TrySendError::Closed(_)) => Err(self
                .check_open()
                .err()
                .unwrap_or_else(|| Error::closed("the publisher is stopped"))),
        }
    }

    /// Queue `flight`, waiting while the intake is full (this is the caller's back-pressure).
    /// Cancel-safe: if the future is dropped before it resolves, the flight was not queued.
    ///
    /// When the intake is full, the caller is woken once a quarter of it is free, not at the
    /// first free slot: a producer that keeps the intake full then queues a run of messages per
    /// wake-up (with [`try_enqueue`](Publisher::try_enqueue)) instead of waiting once per slot
    /// the runner frees.
    pub fn enqueue(
        &self,
        flight: Arc<Flight>,
    ) -> impl Future<Output = Result<()>> + Send + 'static {
        let open = self.check_open();
        let tx = self.intake.clone();
        let shared = Arc::clone(&self.shared);
        let room = (tx.max_capacity() / 4).max(1);
        async move {
            open?;
            let flight = match tx.try_send(flight) {
                Ok(()) => return Ok(()),
                Err(mpsc::error::TrySendError::Full(f) | mpsc::error::TrySendError::Closed(f)) => f,
            };
            match tx.reserve_many(room).await {
                Ok(mut permits) => {
                    // The other permits go back to the intake when `permits` drops.
                    let permit = permits.next().expect("room >= 1 permits were reserved");
                    permit.send(flight);
                    Ok(())
                }
                Err(_) => Err(if shared.state.load(Ordering::Acquire) == DRAINING {
                    Error::closed("the publisher is draining; it accepts no new messages")
                } else {
                    Error::closed("the publisher is stopped")
                }),
            }
        }
    }

    /// Prepare and queue `out`, waiting for room in the intake; returns the flight.
    pub async fn publish(&self, out: Outgoing) -> Result<Arc<Flight>> {
        let flight = self.prepare(out)?;
        self.enqueue(Arc::clone(&flight)).await?;
        Ok(flight)
    }

    /// Start the runner. Messages queued before are published now. Starting twice is an error.
    pub fn start(&self) -> Result<()> {
        match self
            .shared
            .state
            .compare_exchange(IDLE, RUNNING, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                self.spawn_runner();
                Ok(())
            }
            Err(RUNNING) => Err(Error::invalid("start", "the publisher is already running")),
            Err(_) => Err(Error::closed(
                "the publisher was drained or stopped; create a new one",
            )),
        }
    }

    fn spawn_runner(&self) {
        let Some(parts) = self.parts.lock().take() else {
            return;
        };
        let runner = Runner {
            shared: Arc::clone(&self.shared),
            config: Arc::clone(&self.config),
            backend: Arc::clone(&self.backend),
            intake: parts.intake,
            events: parts.events,
            in_flight: 0,
            held: false,
            flights: FuturesUnordered::new(),
            use_sink: self.config.retry.is_none(),
            sink: AckSink::new(),
            delivered: Vec::new(),
            deadlines: VecDeque::new(),
            expiry: None,
            expiry_armed: false,
            sending: None,
            intake_done: false,
            intake_closed: false,
        };
        self.runtime.spawn(runner.run());
    }

    /// Refuse new messages and finish: publish what is queued, then wait until every flight is
    /// acked, failed or timed out. Starts the runner if it was never started.
    pub fn drain(&self) -> impl Future<Output = ()> + Send + 'static {
        self.request(DRAINING);
        self.finished()
    }

    /// Stop: refuse new messages, and close every queued and in-flight message with a
    /// `Closed` error (each flight still completes and reaches the listener). Returns at once;
    /// await [`finished`](Publisher::finished) to know when every flight is done.
    pub fn stop(&self) {
        self.request(STOPPING);
    }

    fn request(&self, target: u8) {
        let mut cur = self.shared.state.load(Ordering::Acquire);
        loop {
            // Draining never overrides a stop; a stop may override a drain.
            if cur == FINISHED || cur == STOPPING || (cur == DRAINING && target == DRAINING) {
                break;
            }
            match self.shared.state.compare_exchange(
                cur,
                target,
                Ordering::AcqRel,
                Ordering::Acquire,
            ) {
                Ok(_) => {
                    if cur == IDLE {
                        self.spawn_runner();
                    }
                    break;
                }
                Err(now) => cur = now,
            }
        }
        self.shared.control.notify_one();
    }

    /// Resolves when the runner has exited (after a drain or a stop); every flight is done.
    pub fn finished(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.shared.finished_tx.subscribe();
        async move {
            let _ = rx.wait_for(|done| *done).await;
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        // Nobody can submit any more: finish what was accepted (a started publisher drains;
        // one that never started has nothing the caller could still be waiting on but its
        // flights, which drain() also completes).
        if self.shared.state.load(Ordering::Acquire) != FINISHED {
            self.request(DRAINING);
        }
    }
}

/// How an attempt that reached the connection will be acknowledged.
enum Sent {
    /// By this future (it goes into the runner's `FuturesUnordered`).
    Ack(AckFuture),
    /// Through the runner's [`AckSink`].
    ToSink,
}

type SendStage = Pin<Box<dyn Future<Output = Result<Sent, Outcome>> + Send>>;

/// A flight's ack future plus the flight itself, so that the runner can find every flight it
/// holds (for `stop`).
struct InFlight {
    flight: Arc<Flight>,
    fut: Pin<Box<dyn Future<Output = Outcome> + Send>>,
}

impl Future for InFlight {
    type Output = (Arc<Flight>, Outcome);
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.fut.as_mut().poll(cx) {
            Poll::Ready(o) => Poll::Ready((Arc::clone(&self.flight), o)),
            Poll::Pending => Poll::Pending,
        }
    }
}

struct Runner {
    shared: Arc<Shared>,
    config: Arc<PublisherConfig>,
    backend: Arc<dyn PublishBackend>,
    intake: mpsc::Receiver<Arc<Flight>>,
    events: Option<mpsc::Sender<Event>>,
    in_flight: usize,
    held: bool,
    flights: FuturesUnordered<InFlight>,
    /// Whether sends go through [`PublishBackend::send_to`] (no retry policy).
    use_sink: bool,
    sink: AckSink,
    /// What the sink delivered, taken in one go (the buffers are swapped, not reallocated).
    delivered: Vec<(Arc<Flight>, Result<PublishAck>)>,
    /// Flights whose ack comes through the sink, with their `wait_timeout` deadlines, in send
    /// order (so in deadline order). Finished flights are dropped from the front as acks come
    /// in, and the whole queue is compacted when it grows past twice the window.
    deadlines: VecDeque<(Instant, Arc<Flight>)>,
    /// The timer of the first deadline (made on first use, inside the runtime).
    expiry: Option<Pin<Box<tokio::time::Sleep>>>,
    expiry_armed: bool,
    sending: Option<(Arc<Flight>, SendStage)>,
    intake_done: bool,
    intake_closed: bool,
}

/// Completions handled in one go before the runner looks at its other inputs again.
const COMPLETION_BATCH: usize = 256;

impl Runner {
    async fn run(mut self) {
        let mut tick = Box::pin(tokio::time::sleep(self.config.poll_time));
        loop {
            match self.shared.state.load(Ordering::Acquire) {
                STOPPING => {
                    self.stop_all().await;
                    break;
                }
                DRAINING if !self.intake_closed => {
                    // No new messages from now on; what is buffered is still published.
                    self.intake.close();
                    self.intake_closed = true;
                }
                _ => {}
            }

            // Publish everything the window allows without waiting.
            while self.sending.is_none() && !self.held && !self.intake_done {
                match self.intake.try_recv() {
                    Ok(f) => self.begin_send(f).await,
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => self.intake_done = true,
                }
            }

            let draining = self.shared.state.load(Ordering::Acquire) == DRAINING;
            if draining && self.intake_done && self.sending.is_none() && self.in_flight == 0 {
                break;
            }

            let can_take = self.sending.is_none() && !self.held && !self.intake_done;
            let has_flights = !self.flights.is_empty();
            tokio::select! {
                biased;
                () = self.shared.control.notified() => {}
                Some((flight, outcome)) = self.flights.next(), if has_flights => {
                    self.complete(flight, outcome).await;
                    for _ in 1..COMPLETION_BATCH {
                        match self.flights.next().now_or_never() {
                            Some(Some((flight, outcome))) => self.complete(flight, outcome).await,
                            _ => break,
                        }
                    }
                }
                () = std::future::poll_fn(|cx| self.sink.poll_take(cx, &mut self.delivered)) => {
                    self.take_delivered().await;
                }
                () = poll_timer(&mut self.expiry), if self.expiry_armed => {
                    self.expire().await;
                }
                r = poll_sending(&mut self.sending) => {
                    let (flight, result) = r;
                    self.after_send(flight, result, Instant::now()).await;
                }
                m = self.intake.recv(), if can_take => match m {
                    Some(f) => self.begin_send(f).await,
                    None => self.intake_done = true,
                },
                () = &mut tick => {
                    let period = if self.held {
                        self.config.hold_pause_time
                    } else {
                        self.config.poll_time
                    };
                    tick.as_mut().reset(crate::duration::tokio_deadline(Instant::now(), period));
                }
            }
        }
        self.shared.state.store(FINISHED, Ordering::Release);
        self.shared.in_flight.store(0, Ordering::Relaxed);
        self.shared.held.store(false, Ordering::Relaxed);
        self.shared.finished_tx.send_replace(true);
    }

    fn set_in_flight(&mut self, n: usize) {
        self.in_flight = n;
        self.shared.in_flight.store(n, Ordering::Relaxed);
    }

    /// Take `flight` into the window and start its first attempt.
    async fn begin_send(&mut self, flight: Arc<Flight>) {
        self.set_in_flight(self.in_flight + 1);
        if self.in_flight >= self.config.max_in_flight {
            self.held = true;
            self.shared.held.store(true, Ordering::Relaxed);
        }
        let now = Instant::now();
        let deadline = crate::duration::tokio_deadline(now, self.config.wait_timeout);
        // Fast path: the first attempt is started here and handing a message to the connection
        // rarely has to wait, so the retrying (boxed, timed) stage is only built when it does.
        let attempt = flight.start_attempt();
        if self.use_sink {
            match self.backend.send_to(&flight, &self.sink) {
                Some(mut send) => {
                    return match futures::poll!(send.as_mut()) {
                        Poll::Ready(Ok(())) => self.after_send(flight, Ok(Sent::ToSink), now).await,
                        Poll::Ready(Err(e)) => {
                            self.after_send(flight, Err(Outcome::Failed(e)), now).await;
                        }
                        Poll::Pending => {
                            let stage = sink_stage(send, deadline, self.config.wait_timeout);
                            self.sending = Some((flight, stage));
                        }
                    };
                }
                // Not supported by this backend: ack futures from now on.
                None => self.use_sink = false,
            }
        }
        let mut first = self.backend.send(&flight);
        let next = match futures::poll!(first.as_mut()) {
            Poll::Ready(Ok(ack)) => return self.after_send(flight, Ok(Sent::Ack(ack)), now).await,
            Poll::Ready(Err(e)) => match may_retry(self.config.retry.as_ref(), &e, attempt, now) {
                None => return self.after_send(flight, Err(Outcome::Failed(e)), now).await,
                Some(pause) => Err(pause),
            },
            Poll::Pending => Ok(first),
        };
        let stage = send_stage(
            Arc::clone(&self.backend),
            Arc::clone(&flight),
            self.config.retry.clone(),
            deadline,
            self.config.wait_timeout,
            now,
            next,
        );
        self.sending = Some((flight, stage));
    }

    /// `flight`'s attempt was handed to the connection at `sent_at` (or failed).
    async fn after_send(
        &mut self,
        flight: Arc<Flight>,
        r: Result<Sent, Outcome>,
        sent_at: Instant,
    ) {
        match r {
            Ok(sent) => {
                let _ = flight.publish_time.set(SystemTime::now());
                let deadline = sent_at + self.config.wait_timeout;
                self.emit(EventKind::Published, &flight, false).await;
                let ack = match sent {
                    Sent::Ack(ack) => ack,
                    Sent::ToSink => return self.expect_in_sink(deadline, flight),
                };
                let fut: Pin<Box<dyn Future<Output = Outcome> + Send>> = match &self.config.retry {
                    // Without retries an attempt's ack (or error) is the outcome.
                    None => Box::pin(wait_ack(ack, deadline, self.config.wait_timeout)),
                    Some(policy) => Box::pin(fly(
                        Arc::clone(&self.backend),
                        Arc::clone(&flight),
                        ack,
                        policy.clone(),
                        deadline,
                        self.config.wait_timeout,
                    )),
                };
                self.flights.push(InFlight { flight, fut });
            }
            Err(outcome) => self.complete(flight, outcome).await,
        }
    }

    /// Wait for `flight`'s ack in the sink, until `deadline`.
    fn expect_in_sink(&mut self, deadline: Instant, flight: Arc<Flight>) {
        if self.deadlines.len() >= 2 * self.config.max_in_flight + 64 {
            // Out-of-order acks left finished flights behind an unfinished one: compact. The
            // queue is then at most the window, so this runs at most once per window of sends.
            self.deadlines.retain(|(_, f)| !f.is_done());
        }
        self.deadlines.push_back((deadline, flight));
        if !self.expiry_armed {
            self.arm_expiry(deadline);
        }
    }

    fn arm_expiry(&mut self, at: Instant) {
        match &mut self.expiry {
            Some(timer) => timer.as_mut().reset(at),
            None => self.expiry = Some(Box::pin(tokio::time::sleep_until(at))),
        }
        self.expiry_armed = true;
    }

    /// Complete what the sink delivered. Results for flights already finished (timed out,
    /// stopped) are ignored.
    async fn take_delivered(&mut self) {
        let mut batch = std::mem::take(&mut self.delivered);
        for (flight, result) in batch.drain(..) {
            if flight.is_done() {
                continue;
            }
            let outcome = match result {
                Ok(ack) => Outcome::Acked(ack),
                Err(e) => Outcome::Failed(e),
            };
            self.complete(flight, outcome).await;
        }
        // Keep the (now empty) buffer's capacity for the next swap.
        self.delivered = batch;
        while self.deadlines.front().is_some_and(|(_, f)| f.is_done()) {
            self.deadlines.pop_front();
        }
    }

    /// Time out the sink flights whose deadline passed; re-arm for the next one.
    async fn expire(&mut self) {
        let now = Instant::now();
        loop {
            match self.deadlines.front() {
                Some((_, f)) if f.is_done() => {
                    self.deadlines.pop_front();
                }
                Some((deadline, _)) if *deadline <= now => {
                    let (_, flight) = self.deadlines.pop_front().expect("front exists");
                    self.complete(flight, timed_out(self.config.wait_timeout))
                        .await;
                }
                Some((deadline, _)) => {
                    let next = *deadline;
                    self.arm_expiry(next);
                    return;
                }
                None => {
                    self.expiry_armed = false;
                    return;
                }
            }
        }
    }

    async fn complete(&mut self, flight: Arc<Flight>, outcome: Outcome) {
        let kind = match &outcome {
            Outcome::Acked(_) => EventKind::Acked,
            Outcome::Failed(_) => EventKind::CompletedExceptionally,
            Outcome::TimedOut(_) => EventKind::Timeout,
        };
        let watched = flight.finish(outcome);
        self.set_in_flight(self.in_flight.saturating_sub(1));
        if self.held && self.in_flight <= self.config.refill_allowed_at {
            self.held = false;
            self.shared.held.store(false, Ordering::Relaxed);
        }
        self.emit(kind, &flight, watched).await;
    }

    /// Finish a flight that never entered the window (stop).
    async fn close_unsent(&mut self, flight: Arc<Flight>, why: &str) {
        let watched = flight.finish(Outcome::Failed(Error::closed(why.to_string())));
        self.emit(EventKind::CompletedExceptionally, &flight, watched)
            .await;
    }

    async fn emit(&mut self, kind: EventKind, flight: &Arc<Flight>, watched: bool) {
        let Some(tx) = &self.events else {
            return;
        };
        let wanted = match self.config.events {
            Events::None => false,
            Events::All => true,
            Events::Watched => watched && kind != EventKind::Published,
        };
        if !wanted {
            return;
        }
        let ev = Event {
            kind,
            flight: Arc::clone(flight),
        };
        match tx.try_send(ev) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(ev)) => {
                // Never drop an event: wait for the consumer (back-pressure on the window).
                if tx.send(ev).await.is_err() {
                    self.events = None;
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => self.events = None,
        }
    }

    async fn stop_all(&mut self) {
        const UNSENT: &str = "the publisher was stopped before this message was published";
        const UNACKED: &str = "the publisher was stopped before the ack arrived; the message \
                               may or may not have been stored";
        self.intake.close();
        if let Some((flight, _)) = self.sending.take() {
            let why = if flight.publish_time().is_some() {
                UNACKED
            } else {
                UNSENT
            };
            self.complete(flight, Outcome::Failed(Error::closed(why)))
                .await;
        }
        let mut flights: Vec<Arc<Flight>> =
            self.flights.iter().map(|f| Arc::clone(&f.flight)).collect();
        self.flights = FuturesUnordered::new();
        flights.extend(
            std::mem::take(&mut self.deadlines)
                .into_iter()
                .map(|(_, f)| f)
                .filter(|f| !f.is_done()),
        );
        for flight in flights {
            self.complete(flight, Outcome::Failed(Error::closed(UNACKED)))
                .await;
        }
        let mut queued = VecDeque::new();
        while let Some(f) = self.intake.recv().await {
            queued.push_back(f);
        }
        for flight in queued {
            self.close_unsent(flight, UNSENT).await;
        }
    }
}

async fn poll_timer(timer: &mut Option<Pin<Box<tokio::time::Sleep>>>) {
    match timer {
        Some(t) => t.as_mut().await,
        None => std::future::pending().await,
    }
}

async fn poll_sending(
    sending: &mut Option<(Arc<Flight>, SendStage)>,
) -> (Arc<Flight>, Result<Sent, Outcome>) {
    match sending {
        Some((_, stage)) => {
            let r = stage.as_mut().await;
            let (flight, _) = sending.take().expect("sending is set");
            (flight, r)
        }
        None => std::future::pending().await,
    }
}

fn timed_out(wait_timeout: Duration) -> Outcome {
    Outcome::TimedOut(Error::timeout(format!(
        "no publish ack within wait_timeout ({} ms)",
        wait_timeout.as_millis()
    )))
}

fn may_retry(
    policy: Option<&RetryPolicy>,
    err: &Error,
    attempts: u32,
    since: Instant,
) -> Option<Duration> {
    let p = policy?;
    if attempts >= p.attempts || !is_retriable_publish_error(err) {
        return None;
    }
    let pause = p.backoff(attempts);
    if let Some(deadline) = p.deadline {
        if since.elapsed() + pause > deadline {
            return None;
        }
    }
    Some(pause)
}

/// Hand `flight` to the connection, retrying retriable failures, within `deadline`. The first
/// attempt was started at `started` by the caller: `first` is its send future, or the pause
/// before the retry its failure called for.
fn send_stage(
    backend: Arc<dyn PublishBackend>,
    flight: Arc<Flight>,
    retry: Option<RetryPolicy>,
    deadline: Instant,
    wait_timeout: Duration,
    started: Instant,
    first: std::result::Result<SendFuture, Duration>,
) -> SendStage {
    Box::pin(async move {
        let attempt = async {
            let mut next = first;
            loop {
                let r = match next {
                    Ok(send) => send.await,
                    Err(pause) => {
                        tokio::time::sleep(pause).await;
                        flight.start_attempt();
                        backend.send(&flight).await
                    }
                };
                match r {
                    Ok(ack) => return Ok(Sent::Ack(ack)),
                    Err(e) => match may_retry(retry.as_ref(), &e, flight.attempts(), started) {
                        Some(pause) => next = Err(pause),
                        None => return Err(Outcome::Failed(e)),
                    },
                }
            }
        };
        match tokio::time::timeout_at(deadline, attempt).await {
            Ok(r) => r,
            Err(_) => Err(timed_out(wait_timeout)),
        }
    })
}

/// Hand a flight whose ack goes to the sink to the connection, within `deadline` (no retries:
/// the sink is used without a retry policy).
fn sink_stage(send: SendToFuture, deadline: Instant, wait_timeout: Duration) -> SendStage {
    Box::pin(async move {
        match tokio::time::timeout_at(deadline, send).await {
            Ok(Ok(())) => Ok(Sent::ToSink),
            Ok(Err(e)) => Err(Outcome::Failed(e)),
            Err(_) => Err(timed_out(wait_timeout)),
        }
    })
}

/// The outcome of a single attempt: its ack or error, or a time-out at `deadline`.
async fn wait_ack(ack: AckFuture, deadline: Instant, wait_timeout: Duration) -> Outcome {
    match tokio::time::timeout_at(deadline, ack).await {
        Ok(Ok(ack)) => Outcome::Acked(ack),
        Ok(Err(e)) => Outcome::Failed(e),
        Err(_) => timed_out(wait_timeout),
    }
}

/// Wait for the ack of `flight`, retrying retriable failures with the same message id.
async fn fly(
    backend: Arc<dyn PublishBackend>,
    flight: Arc<Flight>,
    first: AckFuture,
    retry: RetryPolicy,
    deadline: Instant,
    wait_timeout: Duration,
) -> Outcome {
    let attempt_timeout = retry.attempt_timeout;
    let started = Instant::now();
    let attempts = async {
        let mut pending: Result<AckFuture> = Ok(first);
        loop {
            let result = match pending {
                Ok(ack) => match attempt_timeout {
                    Some(t) => tokio::time::timeout(t, ack).await.unwrap_or_else(|_| {
                        Err(Error::timeout(format!(
                            "no publish ack within attempt_timeout ({} ms)",
                            t.as_millis()
                        )))
                    }),
                    None => ack.await,
                },
                Err(e) => Err(e),
            };
            match result {
                Ok(ack) => return Outcome::Acked(ack),
                Err(e) => match may_retry(Some(&retry), &e, flight.attempts(), started) {
                    Some(pause) => {
                        tokio::time::sleep(pause).await;
                        flight.start_attempt();
                        pending = backend.send(&flight).await;
                    }
                    None => return Outcome::Failed(e),
                },
            }
        }
    };
    match tokio::time::timeout_at(deadline, attempts).await {
        Ok(o) => o,
        Err(_) => timed_out(wait_timeout),
    }
}

pub mod jmq;
mod rocketmq;

#[cfg(test)]
mod tests;
