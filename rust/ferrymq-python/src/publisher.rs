//! The native half of `ferrymq.AsyncPublisher`: the core publisher, its flights and acks.
//!
//! Python callbacks never run here. Events leave Rust through [`PublisherCore::next_events`],
//! which a Python thread calls with the GIL released and then dispatches in batches (on the
//! user's event loop when there is one); see `python/ferrymq/publisher.py`.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use ferrymq_core::publisher::{
    Event, EventKind, Events, Flight, Outcome, PublishBackend, Publisher, PublisherConfig,
    RetryPolicy, State, MAX_IN_FLIGHT,
};
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes, PyDict};
use tokio::sync::mpsc;

use crate::aio::future_into_py;
use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr, to_pyerr_ref};
use crate::message::PyMessage;
use crate::metrics::{percentiles_arg, producer_stats};
use crate::publish_args::{extract_outgoing, PyPublishAck};
use crate::runtime::RuntimeRef;

/// The native flight behind `ferrymq.Flight`.
#[pyclass(name = "FlightCore", module = "ferrymq._native", frozen)]
pub struct PyFlight {
    pub inner: Arc<Flight>,
    rt: RuntimeRef,
}

impl PyFlight {
    fn new(inner: Arc<Flight>, rt: RuntimeRef) -> Self {
        Self { inner, rt }
    }
}

fn unix_seconds(t: std::time::SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// Whether `fut` finished within `limit` (`None`: wait for it).
async fn done_within(
    limit: Option<Duration>,
    fut: impl std::future::Future<Output = ()>,
) -> ferrymq_core::Result<bool> {
    match limit {
        Some(t) => Ok(tokio::time::timeout(t, fut).await.is_ok()),
        None => {
            fut.await;
            Ok(true)
        }
    }
}

#[pymethods]
impl PyFlight {
    #[getter]
    fn id(&self) -> &str {
        self.inner.id()
    }
    #[getter]
    fn seq(&self) -> u64 {
        self.inner.seq()
    }
    #[getter]
    fn subject(&self) -> &str {
        self.inner.subject()
    }
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.inner.headers().into_py_dict(py)
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.body())
    }
    #[getter]
    fn options<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let o = self.inner.options();
        let d = PyDict::new(py);
        if let Some(v) = &o.message_id {
            d.set_item("message_id", v)?;
        }
        if let Some(v) = &o.expected_stream {
            d.set_item("expected_stream", v)?;
        }
        if let Some(v) = o.expected_last_sequence {
            d.set_item("expected_last_sequence", v)?;
        }
        if let Some(v) = o.expected_last_subject_sequence {
            d.set_item("expected_last_subject_sequence", v)?;
        }
        if let Some(v) = &o.expected_last_msg_id {
            d.set_item("expected_last_msg_id", v)?;
        }
        Ok(d)
    }
    #[getter]
    fn message(&self) -> Option<PyMessage> {
        self.inner.message().map(|m| PyMessage { inner: m.clone() })
    }
    /// Unix seconds of the first hand-over to the connection, or None.
    #[getter]
    fn publish_time(&self) -> Option<f64> {
        self.inner.publish_time().map(unix_seconds)
    }
    #[getter]
    fn attempts(&self) -> u32 {
        self.inner.attempts()
    }
    #[getter]
    fn done(&self) -> bool {
        self.inner.is_done()
    }
    /// "acked", "failed", "timeout", or None while in flight.
    #[getter]
    fn state(&self) -> Option<&'static str> {
        self.inner.outcome().map(|o| match o {
            Outcome::Acked(_) => "acked",
            Outcome::Failed(_) => "failed",
            Outcome::TimedOut(_) => "timeout",
        })
    }
    #[getter]
    fn ack(&self) -> Option<PyPublishAck> {
        self.inner
            .outcome()
            .and_then(Outcome::ack)
            .map(|a| PyPublishAck::from(a.clone()))
    }
    /// The exception of a failed or timed-out flight (a new instance each time), or None.
    #[getter]
    fn exception(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner
            .outcome()
            .and_then(Outcome::error)
            .map(|e| to_pyerr_ref(e).into_value(py).into_any())
    }
    /// Whether the failure was a JetStream expectation failure (never retried).
    #[getter]
    fn expectation_failed(&self) -> bool {
        self.inner
            .outcome()
            .and_then(Outcome::error)
            .is_some_and(ferrymq_core::publisher::is_expectation_failure)
    }
    /// The future attached by `_watch`, or None.
    #[getter]
    fn _waiter(&self, py: Python<'_>) -> Option<Py<PyAny>> {
        self.inner
            .attachment()
            .and_then(|a| a.downcast_ref::<Py<PyAny>>())
            .map(|f| f.clone_ref(py))
    }
    /// Attach `future` (the first attachment wins) and ask for the terminal event. Returns the
    /// attached future and whether the flight was already done (then the caller settles it).
    fn _watch(&self, py: Python<'_>, future: Py<PyAny>) -> (Py<PyAny>, bool) {
        let (att, done) = self.inner.watch(Box::new(future));
        let fut = att
            .downcast_ref::<Py<PyAny>>()
            .map_or_else(|| py.None(), |f| f.clone_ref(py));
        (fut, done)
    }
    /// Block (GIL released) until the flight is done or `timeout` seconds pass; returns `done`.
    #[pyo3(signature = (timeout=None))]
    fn wait(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let limit = durations::optional("timeout", timeout, Lower::NonNegative)?;
        let flight = Arc::clone(&self.inner);
        self.rt.block_on(
            py,
            done_within(limit, async move {
                flight.wait().await;
            }),
        )
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyFlight>()
            .is_ok_and(|o| Arc::ptr_eq(&o.get().inner, &self.inner))
    }
    fn __hash__(&self) -> usize {
        Arc::as_ptr(&self.inner) as usize
    }
    fn __repr__(&self) -> String {
        format!(
            "Flight(id={:?}, subject={:?}, body=<{} bytes>, attempts={}, state={})",
            self.inner.id(),
            self.inner.subject(),
            self.inner.body().len(),
            self.inner.attempts(),
            self.state().unwrap_or("in_flight")
        )
    }
}

/// A batch of publisher events, handed to Python as one object: the event thread creates no
/// per-event Python objects, and [`PyEventBatch::settle`] completes the callers' futures in
/// one native loop.
#[pyclass(name = "EventBatch", module = "ferrymq._native", frozen)]
pub struct PyEventBatch {
    events: Vec<Event>,
    rt: RuntimeRef,
}

#[pymethods]
impl PyEventBatch {
    fn __len__(&self) -> usize {
        self.events.len()
    }
    /// The events as `(kind, flight)` pairs, in order (for the listener).
    fn pairs(&self) -> Vec<(&'static str, PyFlight)> {
        self.events
            .iter()
            .map(|e| {
                (
                    e.kind.as_str(),
                    PyFlight::new(Arc::clone(&e.flight), self.rt),
                )
            })
            .collect()
    }
    /// Complete the future attached (`FlightCore._watch`) to the flight of every terminal
    /// event, in order: `set_result(ack)` or `set_exception(error)`. Call it where that is
    /// allowed: on the event loop of asyncio futures (any thread for `concurrent.futures`).
    /// Futures already done (cancelled by their owner) are left alone.
    fn settle(&self, py: Python<'_>) -> PyResult<()> {
        let done = intern!(py, "done");
        let mut first_error = None;
        for e in &self.events {
            if e.kind == EventKind::Published {
                continue;
            }
            let (Some(fut), Some(outcome)) = (
                e.flight
                    .attachment()
                    .and_then(|a| a.downcast_ref::<Py<PyAny>>()),
                e.flight.outcome(),
            ) else {
                continue;
            };
            let fut = fut.bind(py);
            if fut.call_method0(done)?.is_truthy()? {
                continue;
            }
            let r = match outcome.error() {
                Some(err) => fut.call_method1(
                    intern!(py, "set_exception"),
                    (to_pyerr_ref(err).into_value(py),),
                ),
                None => fut.call_method1(
                    intern!(py, "set_result"),
                    (outcome.ack().map(|a| PyPublishAck::from(a.clone())),),
                ),
            };
            // Cancelled meanwhile (a concurrent future, from another thread): nothing to do.
            if let Err(err) = r {
                if !fut.call_method0(done)?.is_truthy()? && first_error.is_none() {
                    first_error = Some(err);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// Which native producer classes can back a publisher.
fn backend_of(producer: &Bound<'_, PyAny>) -> PyResult<Arc<dyn PublishBackend>> {
    if let Ok(p) = producer.cast::<crate::protocol_producer::ProtocolProducer>() {
        return p.get().publish_backend();
    }
    if let Ok(p) = producer.cast::<crate::producer::PyProducer>() {
        return Ok(Arc::new(p.get().core().clone()));
    }
    Err(invalid(
        "producer",
        format!(
            "expected a ferrymq.Producer, not {}",
            producer.get_type().name()?
        ),
    ))
}

/// `RetryConfig` as passed by the Python facade: (attempts, backoff, deadline, attempt_timeout).
type RetryArgs<'py> = (
    i64,
    Vec<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
    Option<Bound<'py, PyAny>>,
);

type EventRx = Arc<tokio::sync::Mutex<Option<mpsc::Receiver<Event>>>>;

/// The native publisher; `ferrymq.AsyncPublisher` wraps it.
#[pyclass(name = "PublisherCore", module = "ferrymq._native", frozen)]
pub struct PublisherCore {
    inner: Arc<Publisher>,
    events: EventRx,
    rt: RuntimeRef,
}

#[pymethods]
impl PublisherCore {
    #[new]
    #[pyo3(signature = (producer, *, id_prefix=None, max_in_flight=50, refill_allowed_at=0, retry=None, poll_time=None, hold_pause_time=None, wait_timeout=None, listener=false), text_signature = "(producer, *, id_prefix=None, max_in_flight=50, refill_allowed_at=0, retry=None, poll_time=0.1, hold_pause_time=0.1, wait_timeout=5.0, listener=False)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        producer: &Bound<'_, PyAny>,
        id_prefix: Option<String>,
        #[pyo3(from_py_with = crate::ints::max_in_flight)] max_in_flight: i128,
        #[pyo3(from_py_with = crate::ints::refill_allowed_at)] refill_allowed_at: i128,
        retry: Option<RetryArgs<'_>>,
        poll_time: Option<&Bound<'_, PyAny>>,
        hold_pause_time: Option<&Bound<'_, PyAny>>,
        wait_timeout: Option<&Bound<'_, PyAny>>,
        listener: bool,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let backend = backend_of(producer)?;
        let max_in_flight = usize::try_from(max_in_flight)
            .ok()
            .filter(|n| (1..=MAX_IN_FLIGHT).contains(n))
            .ok_or_else(|| {
                invalid(
                    "max_in_flight",
                    format!("{max_in_flight} is not from 1 to {MAX_IN_FLIGHT}"),
                )
            })?;
        let refill_allowed_at = usize::try_from(refill_allowed_at).map_err(|_| {
            invalid(
                "refill_allowed_at",
                format!("{refill_allowed_at} is not from 0 to max_in_flight - 1"),
            )
        })?;
        let retry = match retry {
            None => None,
            Some((attempts, backoff, deadline, attempt_timeout)) => Some(RetryPolicy {
                attempts: u32::try_from(attempts)
                    .ok()
                    .filter(|n| *n >= 1)
                    .ok_or_else(|| {
                        invalid("retry.attempts", format!("{attempts} must be at least 1"))
                    })?,
                backoff: backoff
                    .iter()
                    .map(|s| durations::non_negative("retry.backoff", s))
                    .collect::<PyResult<_>>()?,
                deadline: durations::optional(
                    "retry.deadline",
                    deadline.as_ref(),
                    Lower::Positive,
                )?,
                attempt_timeout: durations::optional(
                    "retry.attempt_timeout",
                    attempt_timeout.as_ref(),
                    Lower::Positive,
                )?,
            }),
        };
        let config = PublisherConfig {
            id_prefix,
            max_in_flight,
            refill_allowed_at,
            retry,
            poll_time: durations::timeout_or("poll_time", poll_time, Duration::from_millis(100))?,
            hold_pause_time: durations::timeout_or(
                "hold_pause_time",
                hold_pause_time,
                Duration::from_millis(100),
            )?,
            wait_timeout: durations::timeout_or(
                "wait_timeout",
                wait_timeout,
                Duration::from_secs(5),
            )?,
            events: if listener {
                Events::All
            } else {
                Events::Watched
            },
            event_capacity: 0,
        };
        let inner = Publisher::new(backend, config, rt.handle().clone()).map_err(to_pyerr)?;
        let events = inner.take_events();
        Ok(Self {
            inner: Arc::new(inner),
            events: Arc::new(tokio::sync::Mutex::new(events)),
            rt,
        })
    }

    /// Validate a message, stamp its id and return its flight (not queued yet). Positional
    /// only: the Python facade owns the public signature.
    #[pyo3(signature = (subject, body, headers, message_id, expected_stream, expected_last_sequence, expected_last_subject_sequence, expected_last_msg_id, /))]
    #[allow(clippy::too_many_arguments)]
    fn prepare(
        &self,
        subject: &Bound<'_, PyAny>,
        body: Option<&Bound<'_, PyAny>>,
        headers: Option<&Bound<'_, PyAny>>,
        message_id: Option<String>,
        expected_stream: Option<String>,
        #[pyo3(from_py_with = crate::ints::expected_last_sequence)] expected_last_sequence: Option<
            u64,
        >,
        #[pyo3(from_py_with = crate::ints::expected_last_subject_sequence)]
        expected_last_subject_sequence: Option<u64>,
        expected_last_msg_id: Option<String>,
    ) -> PyResult<PyFlight> {
        let out = extract_outgoing(
            subject,
            body,
            headers,
            message_id,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
        )?;
        let flight = self.inner.prepare(out).map_err(to_pyerr)?;
        Ok(PyFlight::new(flight, self.rt))
    }

    /// `prepare` and `offer` in one call (the hot path of `publish_async`): returns the flight
    /// and None when it was queued at once, or an awaitable that resolves once it is queued.
    #[pyo3(signature = (subject, body, headers, message_id, expected_stream, expected_last_sequence, expected_last_subject_sequence, expected_last_msg_id, /))]
    #[allow(clippy::too_many_arguments)]
    fn publish<'py>(
        &self,
        py: Python<'py>,
        subject: &Bound<'py, PyAny>,
        body: Option<&Bound<'py, PyAny>>,
        headers: Option<&Bound<'py, PyAny>>,
        message_id: Option<String>,
        expected_stream: Option<String>,
        #[pyo3(from_py_with = crate::ints::expected_last_sequence)] expected_last_sequence: Option<
            u64,
        >,
        #[pyo3(from_py_with = crate::ints::expected_last_subject_sequence)]
        expected_last_subject_sequence: Option<u64>,
        expected_last_msg_id: Option<String>,
    ) -> PyResult<(PyFlight, Option<Bound<'py, PyAny>>)> {
        let flight = self.prepare(
            subject,
            body,
            headers,
            message_id,
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_msg_id,
        )?;
        let waiter = self.offer(py, &flight)?;
        Ok((flight, waiter))
    }

    /// Queue `flight` if the intake has room now (returns None); otherwise return an awaitable
    /// that resolves once it is queued.
    fn offer<'py>(
        &self,
        py: Python<'py>,
        flight: &PyFlight,
    ) -> PyResult<Option<Bound<'py, PyAny>>> {
        self.rt.check().map_err(to_pyerr)?;
        if self.inner.try_enqueue(&flight.inner).map_err(to_pyerr)? {
            return Ok(None);
        }
        let fut = self.inner.enqueue(Arc::clone(&flight.inner));
        future_into_py(py, self.rt, fut).map(Some)
    }

    /// Queue `flight` if the intake has room now; False when it is full.
    fn try_enqueue(&self, flight: &PyFlight) -> PyResult<bool> {
        self.rt.check().map_err(to_pyerr)?;
        self.inner.try_enqueue(&flight.inner).map_err(to_pyerr)
    }

    /// Queue `flight`, blocking (GIL released) while the intake is full.
    fn enqueue(&self, py: Python<'_>, flight: &PyFlight) -> PyResult<()> {
        if self.inner.try_enqueue(&flight.inner).map_err(to_pyerr)? {
            return Ok(());
        }
        let fut = self.inner.enqueue(Arc::clone(&flight.inner));
        self.rt.block_on(py, fut)
    }

    fn start(&self) -> PyResult<()> {
        self.rt.check().map_err(to_pyerr)?;
        self.inner.start().map_err(to_pyerr)
    }

    /// Stop and wait (GIL released) until every flight is closed.
    fn stop(&self, py: Python<'_>) -> PyResult<()> {
        self.rt.check().map_err(to_pyerr)?;
        self.inner.stop();
        let finished = self.inner.finished();
        self.rt.block_on(py, async move {
            finished.await;
            Ok(())
        })
    }

    /// Awaitable: drain, resolving when every flight is done.
    fn drain_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let fut = self.inner.drain();
        future_into_py(py, self.rt, async move {
            fut.await;
            Ok(())
        })
    }

    /// Drain, blocking (GIL released) up to `timeout` seconds; returns whether it finished.
    #[pyo3(signature = (timeout=None))]
    fn drain(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<bool> {
        let limit = durations::optional("timeout", timeout, Lower::NonNegative)?;
        self.rt.block_on(py, done_within(limit, self.inner.drain()))
    }

    /// Up to `max` events as an `EventBatch`, waiting up to `timeout` seconds for the first
    /// (GIL released). An empty batch on timeout; None once the publisher has finished and
    /// every event was delivered.
    fn next_events(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::max)] max: usize,
        timeout: &Bound<'_, PyAny>,
    ) -> PyResult<Option<PyEventBatch>> {
        let limit = durations::non_negative("timeout", timeout)?;
        let rx = Arc::clone(&self.events);
        let max = max.max(1);
        let events: Option<Vec<Event>> = self.rt.block_on(py, async move {
            let mut guard = rx.lock().await;
            let Some(rx) = guard.as_mut() else {
                return Ok(None);
            };
            let mut buf = Vec::with_capacity(max.min(1024));
            match tokio::time::timeout(limit, rx.recv_many(&mut buf, max)).await {
                Err(_) => Ok(Some(buf)),
                Ok(0) => {
                    *guard = None;
                    Ok(None)
                }
                Ok(_) => Ok(Some(buf)),
            }
        })?;
        Ok(events.map(|events| PyEventBatch {
            events,
            rt: self.rt,
        }))
    }

    #[getter]
    fn in_flight(&self) -> usize {
        self.inner.in_flight()
    }
    #[getter]
    fn held(&self) -> bool {
        self.inner.is_held()
    }
    #[getter]
    fn queued(&self) -> usize {
        self.inner.queued()
    }
    #[getter]
    fn id_prefix(&self) -> &str {
        self.inner.id_prefix()
    }
    #[getter]
    fn max_in_flight(&self) -> usize {
        self.inner.config().max_in_flight
    }
    #[getter]
    fn refill_allowed_at(&self) -> usize {
        self.inner.config().refill_allowed_at
    }
    /// "idle", "running", "draining", "stopping" or "finished".
    #[getter]
    fn state(&self) -> &'static str {
        match self.inner.state() {
            State::Idle => "idle",
            State::Running => "running",
            State::Draining => "draining",
            State::Stopping => "stopping",
            State::Finished => "finished",
        }
    }
    #[getter]
    fn backend(&self) -> String {
        self.inner.describe_backend()
    }

    /// Live statistics as a plain dict: the backend producer's (`producer_stats`, where every
    /// attempt is a `send` and the publisher's retries are counted) plus what only the
    /// publisher knows: `state`, `queued` (accepted, not yet sent), `in_flight_messages`
    /// (published and not yet done) and `max_in_flight` (the bound of its intake and window).
    #[pyo3(signature = (percentiles=None))]
    fn stats<'py>(
        &self,
        py: Python<'py>,
        percentiles: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let qs = percentiles_arg(percentiles)?;
        let d = producer_stats(py, self.inner.backend_metrics().as_ref(), &qs, None)?;
        d.set_item("state", self.state())?;
        d.set_item("queued", self.inner.queued())?;
        d.set_item("in_flight_messages", self.inner.in_flight())?;
        d.set_item("max_in_flight", self.inner.config().max_in_flight)?;
        Ok(d)
    }
}
