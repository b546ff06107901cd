//! `ferrymq.JsPullConsumer` (a JetStream pull consumer) and `ferrymq.JsMessage`, made by
//! `ferrymq.JetStream` (`nats.rs`).

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use ferrymq_core::nats::{AckKind, JsMessage, PullConsumer};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::aio::future_into_py;
use crate::durations::{self, Lower};
use crate::errors::invalid;
use crate::runtime::RuntimeRef;

/// A JetStream pull consumer.
#[pyclass(name = "JsPullConsumer", module = "ferrymq", frozen)]
pub struct PyPullConsumer {
    pub(crate) inner: Arc<PullConsumer>,
    pub(crate) rt: RuntimeRef,
}

fn wrap_messages(msgs: Vec<JsMessage>, rt: RuntimeRef) -> Vec<PyJsMessage> {
    msgs.into_iter()
        .map(|m| PyJsMessage {
            inner: Arc::new(m),
            rt,
        })
        .collect()
}

fn batch_args(
    max_messages: i64,
    timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<(usize, Duration)> {
    let max = usize::try_from(max_messages)
        .ok()
        .filter(|n| *n >= 1)
        .ok_or_else(|| invalid("max_messages", format!("{max_messages} must be at least 1")))?;
    Ok((
        max,
        durations::or(
            "timeout",
            timeout,
            Lower::NonNegative,
            durations::RECEIVE_WAIT,
        )?,
    ))
}

#[pymethods]
impl PyPullConsumer {
    #[getter]
    fn stream(&self) -> &str {
        self.inner.stream()
    }
    #[getter]
    fn name(&self) -> &str {
        self.inner.name()
    }
    /// The subject it reads (empty: every subject of the stream).
    #[getter]
    fn filter_subject(&self) -> &str {
        self.inner.filter_subject()
    }

    /// Up to `max_messages` messages: what is available now, or whatever arrives within
    /// `timeout` seconds (possibly none). Blocking, GIL released.
    #[pyo3(signature = (max_messages=16, timeout=None), text_signature = "($self, max_messages=16, timeout=20.0)")]
    fn fetch(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: i64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyJsMessage>> {
        let (max, timeout) = batch_args(max_messages, timeout)?;
        let c = Arc::clone(&self.inner);
        let rt = self.rt;
        let msgs = self
            .rt
            .block_on(py, async move { c.fetch(max, timeout).await })?;
        Ok(wrap_messages(msgs, rt))
    }

    /// Awaitable form of `fetch`.
    #[pyo3(signature = (max_messages=16, timeout=None), text_signature = "($self, max_messages=16, timeout=20.0)")]
    fn fetch_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: i64,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (max, timeout) = batch_args(max_messages, timeout)?;
        let c = Arc::clone(&self.inner);
        let rt = self.rt;
        future_into_py(py, self.rt, async move {
            let msgs = c.fetch(max, timeout).await?;
            Ok(wrap_messages(msgs, rt))
        })
    }

    /// Ack every message of `messages` and wait until the server has them all (one flush
    /// instead of a round trip per message).
    fn ack_all(&self, py: Python<'_>, messages: &Bound<'_, PyList>) -> PyResult<()> {
        let mut all = Vec::with_capacity(messages.len());
        for m in messages.iter() {
            let m = m
                .cast::<PyJsMessage>()
                .map_err(|_| invalid("messages", "must be a list of ferrymq.JsMessage"))?;
            all.push(Arc::clone(&m.get().inner));
        }
        self.rt.block_on(py, async move {
            let mut last = None;
            for m in &all {
                m.ack_nowait().await?;
                last = Some(m);
            }
            if let Some(m) = last {
                // A double ack of the last message confirms that every earlier ack was
                // received (the server processes one connection's messages in order).
                m.acknowledge(AckKind::Ack).await?;
            }
            Ok(())
        })
    }

    /// The consumer's counters: num_pending, num_ack_pending, num_redelivered,
    /// delivered_stream_sequence, ack_floor_stream_sequence.
    fn state<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = Arc::clone(&self.inner);
        let s = self.rt.block_on(py, async move { c.state().await })?;
        let d = PyDict::new(py);
        d.set_item("num_pending", s.num_pending)?;
        d.set_item("num_ack_pending", s.num_ack_pending)?;
        d.set_item("num_redelivered", s.num_redelivered)?;
        d.set_item("num_waiting", s.num_waiting)?;
        d.set_item("delivered_stream_sequence", s.delivered_stream_sequence)?;
        d.set_item("ack_floor_stream_sequence", s.ack_floor_stream_sequence)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "PullConsumer(stream={:?}, name={:?})",
            self.inner.stream(),
            self.inner.name()
        )
    }
}

/// A message fetched from a pull consumer.
#[pyclass(name = "JsMessage", module = "ferrymq", frozen)]
pub struct PyJsMessage {
    inner: Arc<JsMessage>,
    rt: RuntimeRef,
}

fn ack_kind(kind: &str, delay: Option<&Bound<'_, PyAny>>) -> PyResult<AckKind> {
    Ok(match kind {
        "ack" => AckKind::Ack,
        "nak" => AckKind::Nak(durations::optional("delay", delay, Lower::NonNegative)?),
        "in_progress" => AckKind::InProgress,
        _ => AckKind::Term,
    })
}

impl PyJsMessage {
    fn ack_blocking(&self, py: Python<'_>, kind: AckKind) -> PyResult<()> {
        let m = Arc::clone(&self.inner);
        self.rt
            .block_on(py, async move { m.acknowledge(kind).await })
    }
    fn ack_future<'py>(&self, py: Python<'py>, kind: AckKind) -> PyResult<Bound<'py, PyAny>> {
        let m = Arc::clone(&self.inner);
        future_into_py(py, self.rt, async move { m.acknowledge(kind).await })
    }
}

#[pymethods]
impl PyJsMessage {
    #[getter]
    fn subject(&self) -> &str {
        &self.inner.subject
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body)
    }
    /// Headers as a dict (the first value of a repeated name).
    #[getter]
    fn headers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.inner.headers {
            if !d.contains(k)? {
                d.set_item(k, v)?;
            }
        }
        Ok(d)
    }
    /// The `Nats-Msg-Id` it was published with, or else its stream sequence in decimal.
    #[getter]
    fn message_id(&self) -> String {
        self.inner.id()
    }
    /// The subject (the `ReceivedMessage` name).
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.subject
    }
    /// Always None: JetStream has no tags.
    #[getter]
    fn tag(&self) -> Option<&str> {
        None
    }
    /// Always empty: JetStream has no business keys.
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> Bound<'py, PyTuple> {
        PyTuple::empty(py)
    }
    /// The headers (the `ReceivedMessage` name).
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.headers(py)
    }
    /// Always None: JetStream has no message groups.
    #[getter]
    fn message_group(&self) -> Option<&str> {
        None
    }
    /// The delivery count (the `ReceivedMessage` name of `num_delivered`).
    #[getter]
    fn delivery_attempt(&self) -> i64 {
        self.inner.delivered
    }
    /// When the server stored it (JetStream records no producer time).
    #[getter]
    fn born_timestamp(&self) -> f64 {
        self.timestamp()
    }
    /// When the server stored it, in Unix seconds.
    #[getter]
    fn store_timestamp(&self) -> f64 {
        self.timestamp()
    }
    #[getter]
    fn stream(&self) -> &str {
        &self.inner.stream
    }
    /// The stream sequence.
    #[getter]
    fn sequence(&self) -> u64 {
        self.inner.stream_sequence
    }
    #[getter]
    fn consumer_sequence(&self) -> u64 {
        self.inner.consumer_sequence
    }
    /// How many times it was delivered (1 the first time).
    #[getter]
    fn num_delivered(&self) -> i64 {
        self.inner.delivered
    }
    #[getter]
    fn pending(&self) -> u64 {
        self.inner.pending
    }
    /// When the server stored it, in Unix seconds.
    #[getter]
    fn timestamp(&self) -> f64 {
        self.inner
            .published
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs_f64()
    }

    /// Acknowledge and wait for the server's confirmation.
    fn ack(&self, py: Python<'_>) -> PyResult<()> {
        self.ack_blocking(py, AckKind::Ack)
    }
    /// Ask for redelivery, after `delay` seconds if given.
    #[pyo3(signature = (delay=None))]
    fn nak(&self, py: Python<'_>, delay: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let k = ack_kind("nak", delay)?;
        self.ack_blocking(py, k)
    }
    /// Never deliver this message again.
    fn term(&self, py: Python<'_>) -> PyResult<()> {
        self.ack_blocking(py, AckKind::Term)
    }
    /// Still working on it: reset the ack timer.
    fn in_progress(&self, py: Python<'_>) -> PyResult<()> {
        self.ack_blocking(py, AckKind::InProgress)
    }
    fn ack_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ack_future(py, AckKind::Ack)
    }
    #[pyo3(signature = (delay=None))]
    fn nak_async<'py>(
        &self,
        py: Python<'py>,
        delay: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let k = ack_kind("nak", delay)?;
        self.ack_future(py, k)
    }
    fn term_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ack_future(py, AckKind::Term)
    }
    fn in_progress_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.ack_future(py, AckKind::InProgress)
    }

    fn __len__(&self) -> usize {
        self.inner.body.len()
    }

    fn __repr__(&self) -> String {
        format!(
            "JsMessage(subject={:?}, sequence={}, body=<{} bytes>, num_delivered={})",
            self.inner.subject,
            self.inner.stream_sequence,
            self.inner.body.len(),
            self.inner.delivered
        )
    }
}
