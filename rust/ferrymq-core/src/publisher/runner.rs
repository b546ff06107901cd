//! The runner task that owns a publisher's window: sends in submission order, acks as they
//! arrive, holds and refills, timeouts, retries and stop. Also the state it shares with the
//! [`Publisher`](super::Publisher) handle.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;
use tokio::sync::{mpsc, watch, Notify};
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::metrics::Operation;

use super::backend::{AckFuture, AckSink, PublishBackend, SendFuture, SendToFuture};
use super::config::PublisherConfig;
use super::flight::{
    is_retriable_publish_error, Event, EventKind, Events, Flight, Outcome, PublishAck, RetryPolicy,
};

pub(super) const IDLE: u8 = 0;
pub(super) const RUNNING: u8 = 1;
pub(super) const DRAINING: u8 = 2;
pub(super) const STOPPING: u8 = 3;
pub(super) const FINISHED: u8 = 4;

pub(super) struct Shared {
    pub(super) state: AtomicU8,
    pub(super) in_flight: AtomicUsize,
    pub(super) held: AtomicBool,
    pub(super) next_seq: AtomicU64,
    pub(super) control: Notify,
    pub(super) finished_tx: watch::Sender<bool>,
}

pub(super) struct RunnerParts {
    pub(super) intake: mpsc::Receiver<Arc<Flight>>,
    pub(super) events: Option<mpsc::Sender<Event>>,
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
pub(super) struct InFlight {
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

pub(super) struct Runner {
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
pub(super) const COMPLETION_BATCH: usize = 256;

impl Runner {
    pub(super) fn new(
        shared: Arc<Shared>,
        config: Arc<PublisherConfig>,
        backend: Arc<dyn PublishBackend>,
        parts: RunnerParts,
    ) -> Runner {
        let use_sink = config.retry.is_none();
        Runner {
            shared,
            config,
            backend,
            intake: parts.intake,
            events: parts.events,
            in_flight: 0,
            held: false,
            flights: FuturesUnordered::new(),
            use_sink,
            sink: AckSink::new(),
            delivered: Vec::new(),
            deadlines: VecDeque::new(),
            expiry: None,
            expiry_armed: false,
            sending: None,
            intake_done: false,
            intake_closed: false,
        }
    }

    pub(super) async fn run(mut self) {
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

/// Count a retry of a flight in the backend's metrics.
fn count_retry(backend: &dyn PublishBackend) {
    if let Some(m) = backend.metrics() {
        m.retried(Operation::Send, 1);
    }
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
                        count_retry(backend.as_ref());
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
                        count_retry(backend.as_ref());
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
