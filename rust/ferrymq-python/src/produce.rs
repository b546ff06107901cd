//! `produce` / `poll` / `flush` of the binding's producers (RocketMQ, JMQ4, JetStream): the
//! core's [`ProduceQueue`] with the delivery callbacks as tokens. Callbacks run on the caller's
//! thread inside `poll()` / `flush()` (and inside `produce()` when the queue is full:
//! back-pressure), one batch of reports at a time, never while a Rust lock is held.

use std::time::{Duration, Instant};

use ferrymq_core::produce::{ProduceBackend, ProduceQueue, Refused};
use ferrymq_core::Message;
use pyo3::prelude::*;

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::runtime::RuntimeRef;

/// The longest a blocked `produce` or `flush` waits before it looks again (and checks signals).
const SLICE: Duration = Duration::from_millis(100);

/// A receipt of the backend as the Python object its callbacks receive.
pub type ToPy<R> = fn(Python<'_>, R) -> PyResult<Py<PyAny>>;

/// `produce` / `poll` / `flush` / `pending`, whatever the backend (so one Python class can
/// hold the produce path of any protocol).
pub trait Produces: Send + Sync {
    /// Queue `message`; `on_delivery(err, receipt)` runs later in `poll()` / `flush()`. Serves
    /// reports while `max_pending` messages are unreported.
    fn produce(
        &self,
        py: Python<'_>,
        message: Message,
        on_delivery: Option<Py<PyAny>>,
    ) -> PyResult<()>;
    /// `poll(timeout)`: run the callbacks of finished deliveries, waiting up to `timeout`
    /// seconds for one; returns how many were reported.
    fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize>;
    /// `flush(timeout)`: wait until every produced message is reported (or `timeout` seconds
    /// pass), running the callbacks; returns how many are still pending.
    fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize>;
    /// Messages produced and not yet reported.
    fn pending(&self) -> usize;
}

impl<B: ProduceBackend> Produces for Produce<B> {
    fn produce(
        &self,
        py: Python<'_>,
        message: Message,
        on_delivery: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        if let Some(cb) = &on_delivery {
            if !cb.bind(py).is_callable() {
                return Err(invalid("on_delivery", "must be callable"));
            }
        }
        let (mut message, mut on_delivery) = (message, on_delivery);
        loop {
            match self.queue.push(message, on_delivery) {
                Ok(()) => return Ok(()),
                Err(Refused::Closed(e)) => return Err(to_pyerr(e)),
                Err(Refused::Full(m, cb)) => {
                    (message, on_delivery) = (*m, cb);
                    self.serve(py, SLICE)?;
                }
            }
        }
    }

    fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let wait = durations::or("timeout", timeout, Lower::NonNegative, Duration::ZERO)?;
        self.serve(py, wait)
    }

    fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let t = durations::optional("timeout", timeout, Lower::NonNegative)?;
        self.flush_for(py, t)
    }

    fn pending(&self) -> usize {
        self.queue.pending()
    }
}

/// The produce path of one client.
pub struct Produce<B: ProduceBackend> {
    queue: ProduceQueue<B, Option<Py<PyAny>>>,
    rt: RuntimeRef,
    receipt: ToPy<B::Receipt>,
}

impl<B: ProduceBackend> Drop for Produce<B> {
    /// A client dropped without `close()` stops its batcher once the queue is sent.
    fn drop(&mut self) {
        self.queue.close();
    }
}

impl<B: ProduceBackend> Produce<B> {
    pub fn new(
        backend: B,
        max_pending: usize,
        rt: RuntimeRef,
        receipt: ToPy<B::Receipt>,
    ) -> PyResult<Self> {
        Ok(Self {
            queue: ProduceQueue::new(backend, max_pending, rt.handle().clone())
                .map_err(to_pyerr)?,
            rt,
            receipt,
        })
    }

    /// [`flush`](Produces::flush) with the timeout converted (`None`: wait for all).
    pub fn flush_for(&self, py: Python<'_>, timeout: Option<Duration>) -> PyResult<usize> {
        let deadline = timeout.map(|t| ferrymq_core::duration::deadline(Instant::now(), t));
        loop {
            let remaining = deadline.map(|d| d.saturating_duration_since(Instant::now()));
            let wait = remaining.map_or(SLICE, |r| r.min(SLICE));
            self.serve(py, wait)?;
            let pending = self.queue.pending();
            if pending == 0 || remaining.is_some_and(|r| r.is_zero()) {
                return Ok(pending);
            }
        }
    }

    /// Refuse new messages; what is queued is still sent.
    pub fn close(&self) {
        self.queue.close();
    }

    /// Resolves once every produced message has its report ready (for `close_async`).
    pub fn drained(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        self.queue.drained()
    }

    /// Take the ready reports (waiting up to `wait` for one) and run their callbacks here.
    fn serve(&self, py: Python<'_>, wait: Duration) -> PyResult<usize> {
        let mut batch = self.queue.take_ready();
        if batch.is_empty() && !wait.is_zero() && self.queue.pending() > 0 {
            let ready = self.queue.ready(wait);
            self.rt.block_on(py, async move {
                ready.await;
                Ok(())
            })?;
            batch = self.queue.take_ready();
        }
        let n = batch.len();
        let mut first_error: Option<PyErr> = None;
        for d in batch {
            match (d.token, d.result) {
                (Some(cb), result) => {
                    let args = match result {
                        Ok(r) => (py.None(), (self.receipt)(py, r)?),
                        Err(e) => (to_pyerr(e).into_value(py).into_any(), py.None()),
                    };
                    if let Err(e) = cb.call1(py, args) {
                        if first_error.is_none() {
                            first_error = Some(e);
                        } else {
                            tracing::warn!(target: "ferrymq::producer", error = %e, "on_delivery callback raised");
                        }
                    }
                }
                (None, Err(e)) => {
                    tracing::warn!(target: "ferrymq::producer", error = %e, "produce() delivery failed (no on_delivery callback)");
                }
                (None, Ok(_)) => {}
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }
}
