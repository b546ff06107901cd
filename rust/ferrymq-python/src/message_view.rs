//! `ferrymq.MessageView`: a message as a RocketMQ broker delivered it (consumers, and the
//! orphaned-transaction checks of producers). Read-only.

use std::sync::Arc;

use ferrymq_core::rocketmq::MessageView;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyTuple};

/// A received message. Read-only.
#[pyclass(name = "MessageView", module = "ferrymq", frozen)]
pub struct PyMessageView {
    pub inner: Arc<MessageView>,
    /// Set for orphaned-transaction checks.
    pub transaction_id: Option<String>,
}

fn secs(ms: Option<i64>) -> Option<f64> {
    #[allow(clippy::cast_precision_loss)]
    ms.map(|m| m as f64 / 1000.0)
}

impl PyMessageView {
    /// The Python view of a received message.
    pub fn new(inner: Arc<MessageView>) -> Self {
        Self {
            inner,
            transaction_id: None,
        }
    }
}

#[pymethods]
impl PyMessageView {
    #[getter]
    fn message_id(&self) -> &str {
        self.inner.message_id()
    }
    #[getter]
    fn topic(&self) -> &str {
        self.inner.topic()
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, self.inner.body())
    }
    #[getter]
    fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.keys())
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.inner.properties().into_py_dict(py)
    }
    #[getter]
    fn message_group(&self) -> Option<&str> {
        self.inner.message_group()
    }
    /// Delivery attempt, 1-based.
    #[getter]
    fn delivery_attempt(&self) -> i32 {
        self.inner.delivery_attempt()
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.inner.queue_id()
    }
    /// The broker holding the queue (queue ids are per broker), or `""` when unknown.
    #[getter]
    fn broker_name(&self) -> &str {
        &self.inner.source().broker_name
    }
    #[getter]
    fn offset(&self) -> i64 {
        self.inner.offset()
    }
    /// When the producer created it, in Unix seconds.
    #[getter]
    fn born_timestamp(&self) -> Option<f64> {
        secs(self.inner.born_timestamp_ms())
    }
    /// When the broker stored it, in Unix seconds.
    #[getter]
    fn store_timestamp(&self) -> Option<f64> {
        secs(self.inner.store_timestamp_ms())
    }
    /// When a delayed message becomes visible, in Unix seconds.
    #[getter]
    fn delivery_timestamp(&self) -> Option<f64> {
        secs(self.inner.delivery_timestamp_ms())
    }
    #[getter]
    fn born_host(&self) -> &str {
        self.inner.born_host()
    }
    /// The transaction id, for orphaned-transaction checks.
    #[getter]
    fn transaction_id(&self) -> Option<&str> {
        self.transaction_id.as_deref()
    }
    /// The W3C `traceparent` the producer propagated (RocketMQ `trace_context`, or a
    /// `traceparent` property, header or attribute), as received, or None.
    #[getter]
    fn trace_context(&self) -> Option<&str> {
        self.inner.trace_context()
    }
    /// The W3C `tracestate` that came with the trace context, or None.
    #[getter]
    fn trace_state(&self) -> Option<&str> {
        self.inner.trace_state()
    }
    /// Whether the body failed its digest check.
    #[getter]
    fn corrupted(&self) -> bool {
        self.inner.is_corrupted()
    }

    fn __len__(&self) -> usize {
        self.inner.body().len()
    }

    fn __repr__(&self) -> String {
        format!(
            "MessageView(message_id={:?}, topic={:?}, body=<{} bytes>)",
            self.inner.message_id(),
            self.inner.topic(),
            self.inner.body().len()
        )
    }
}
