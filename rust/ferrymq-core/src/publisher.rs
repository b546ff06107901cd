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

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, Notify};

use crate::error::{Error, Result};

mod backend;
mod config;
mod flight;
mod runner;

pub use backend::{AckFuture, AckSink, PublishBackend, SendFuture, SendToFuture};
pub use config::{PublisherConfig, MAX_IN_FLIGHT};
pub use flight::{
    is_expectation_failure, is_retriable_publish_error, Event, EventKind, Events, Flight, Outcome,
    Outgoing, PublishAck, PublishOptions, RetryPolicy,
};
use runner::{Runner, RunnerParts, Shared, DRAINING, FINISHED, IDLE, RUNNING, STOPPING};

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
    /// The metrics of the backend producer (every attempt a `send`, the retries counted
    /// there), if it records any: the publisher's sends are recorded once, by its producer.
    pub fn backend_metrics(&self) -> Option<crate::metrics::ClientMetrics> {
        self.backend.metrics()
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
        let runner = Runner::new(
            Arc::clone(&self.shared),
            Arc::clone(&self.config),
            Arc::clone(&self.backend),
            parts,
        );
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

pub mod messages;

#[cfg(test)]
mod tests;
