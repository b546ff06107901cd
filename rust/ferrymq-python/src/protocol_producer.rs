//! `_native.Producer`: the one native producer class behind `ferrymq.Producer` for JMQ4, NATS
//! JetStream and RocketMQ remoting. Its Python methods are stated once here over a
//! [`Protocol`], which each protocol's file implements next to its constructor function
//! (`jmq_producer`, `nats_producer`, `remoting_producer`: their options differ). The lifecycle
//! comes from `LazyClient`, `produce` / `poll` / `flush` from `produce.rs`.

use std::sync::Arc;

use ferrymq_core::metrics::ClientMetrics;
use ferrymq_core::publisher::PublishBackend;
use ferrymq_core::{Error, Message};
use futures::future::BoxFuture;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::jmq::PyJmqSendReceipt;
use crate::lazy::LazyClient;
use crate::message::extract_message;
use crate::metrics::{percentiles_arg, producer_stats, snapshot_dict};
use crate::nats_producer::PyNatsSendReceipt;
use crate::produce::Produces;
use crate::producer::{extract_messages, PySendReceipt};
use crate::runtime::RuntimeRef;

/// Where a message was stored, as the protocol tells it.
#[derive(IntoPyObject)]
pub(crate) enum Receipt {
    Jmq(PyJmqSendReceipt),
    Nats(PyNatsSendReceipt),
    Remoting(PySendReceipt),
}

/// What one protocol's producer does behind `_native.Producer`.
pub(crate) trait Protocol: Send + Sync + 'static {
    /// Refuse sending now, before the arguments are looked at (NATS before `start()`).
    fn ready(&self) -> PyResult<()> {
        Ok(())
    }
    /// Refuse a message this protocol cannot carry whole, before it is queued.
    fn check(&self, message: &Message) -> Result<(), Error> {
        let _ = message;
        Ok(())
    }
    fn send(&self, message: Message) -> BoxFuture<'static, Result<Receipt, Error>>;
    /// One receipt per message, in order.
    fn send_batch(&self, messages: Vec<Message>)
        -> BoxFuture<'static, Result<Vec<Receipt>, Error>>;
    /// A transaction of this protocol, or the error saying it has none.
    fn begin_transaction(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;
    /// Called by `flush` once the produced messages are reported.
    fn flushed(&self, py: Python<'_>) -> PyResult<()> {
        let _ = py;
        Ok(())
    }
    /// This producer as the backend of a managed publisher.
    fn publish_backend(&self) -> PyResult<Arc<dyn PublishBackend>>;
    /// The metrics of the connected client (`None` before it connects).
    fn metrics(&self) -> Option<ClientMetrics>;
}

/// The facts of one producer that `settings`, `repr` and the refusals show.
pub(crate) struct Facts {
    /// `jmq`, `nats` or `remoting` (as `ferrymq._endpoints.protocol_of` names them).
    pub(crate) protocol: &'static str,
    /// Why `recall` (and `produce`, where there is no produce path) is refused.
    pub(crate) refused: &'static str,
    pub(crate) client_id: String,
    pub(crate) namespace: String,
    /// What `settings` and `repr` show besides the protocol, e.g. `("endpoints", …)`.
    pub(crate) shown: Vec<(&'static str, String)>,
}

/// A JMQ4, NATS or remoting producer; made by the protocol's constructor function.
#[pyclass(name = "Producer", module = "ferrymq._native", frozen, extends = LazyClient)]
pub struct ProtocolProducer {
    protocol: Box<dyn Protocol>,
    /// `None`: `produce` is refused (remoting).
    produce: Option<Arc<dyn Produces>>,
    rt: RuntimeRef,
    facts: Facts,
}

impl ProtocolProducer {
    /// The Python object over `base` (the lifecycle, see `LazyClient::producer`).
    pub(crate) fn create(
        py: Python<'_>,
        base: LazyClient,
        protocol: impl Protocol,
        produce: Option<Arc<dyn Produces>>,
        rt: RuntimeRef,
        facts: Facts,
    ) -> PyResult<Py<Self>> {
        let me = Self {
            protocol: Box::new(protocol),
            produce,
            rt,
            facts,
        };
        Py::new(py, PyClassInitializer::from(base).add_subclass(me))
    }

    /// This producer as the backend of a managed publisher.
    pub(crate) fn publish_backend(&self) -> PyResult<Arc<dyn PublishBackend>> {
        self.protocol.publish_backend()
    }

    fn one(
        &self,
        message: &Bound<'_, PyAny>,
    ) -> PyResult<BoxFuture<'static, Result<Receipt, Error>>> {
        self.protocol.ready()?;
        let message = extract_message(message)?;
        self.protocol.check(&message).map_err(to_pyerr)?;
        Ok(self.protocol.send(message))
    }

    fn many(
        &self,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<BoxFuture<'static, Result<Vec<Receipt>, Error>>> {
        self.protocol.ready()?;
        let messages = extract_messages(messages)?;
        for m in &messages {
            self.protocol.check(m).map_err(to_pyerr)?;
        }
        Ok(self.protocol.send_batch(messages))
    }
}

pymethods_with_async! {
    impl ProtocolProducer {
        /// Queue `message` for a batched send; `on_delivery(err, receipt)` runs later, on this
        /// thread, inside `poll()`/`flush()`. Blocks (serving callbacks) while `max_pending` are
        /// pending.
        #[pyo3(signature = (message, on_delivery=None))]
        fn produce(
            &self,
            py: Python<'_>,
            message: &Bound<'_, PyAny>,
            on_delivery: Option<Py<PyAny>>,
        ) -> PyResult<()> {
            let p = self
                .produce
                .as_ref()
                .ok_or_else(|| invalid("produce", self.facts.refused))?;
            self.protocol.ready()?;
            let message = extract_message(message)?;
            self.protocol.check(&message).map_err(to_pyerr)?;
            p.produce(py, message, on_delivery)
        }

        /// Run the callbacks of finished deliveries (waiting up to `timeout` seconds for one);
        /// returns how many were reported.
        #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=0.0)")]
        fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
            match &self.produce {
                Some(p) => p.poll(py, timeout),
                None => nothing_produced(timeout),
            }
        }

        /// Wait until every produced message is reported (or `timeout` seconds pass), running the
        /// callbacks here; returns how many are still pending.
        #[pyo3(signature = (timeout=None))]
        fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
            let Some(p) = &self.produce else {
                return nothing_produced(timeout);
            };
            let left = p.flush(py, timeout)?;
            self.protocol.flushed(py)?;
            Ok(left)
        }

        /// Messages produced and not yet reported.
        #[getter]
        fn pending(&self) -> usize {
            self.produce.as_ref().map_or(0, |p| p.pending())
        }

        /// Live statistics as a plain dict (see `producer_stats`); `client` is None and the
        /// counts zero until the client connects.
        #[pyo3(signature = (percentiles=None))]
        fn stats<'py>(
            &self,
            py: Python<'py>,
            percentiles: Option<&Bound<'py, PyAny>>,
        ) -> PyResult<Bound<'py, PyDict>> {
            let qs = percentiles_arg(percentiles)?;
            let pending = self.produce.as_ref().map(|p| p.pending());
            producer_stats(py, self.protocol.metrics().as_ref(), &qs, pending)
        }

        /// The producer's metrics as plain data for exporters (`ferrymq.telemetry`; the layout
        /// of `metrics.rs`'s `snapshot_dict`): None until the client connects.
        fn metrics_snapshot<'py>(
            slf: PyRef<'py, Self>,
            py: Python<'py>,
        ) -> PyResult<Option<Bound<'py, PyDict>>> {
            let closed = slf.as_super().is_closed();
            slf.protocol
                .metrics()
                .map(|m| snapshot_dict(py, &m, closed, &[]))
                .transpose()
        }

        fn begin_transaction(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
            self.protocol.begin_transaction(py)
        }

        fn recall(&self, topic: &str, recall_handle: &str) -> PyResult<String> {
            let _ = (topic, recall_handle);
            Err(invalid("recall", self.facts.refused))
        }

        fn recall_async(&self, topic: &str, recall_handle: &str) -> PyResult<String> {
            self.recall(topic, recall_handle)
        }

        #[getter]
        fn client_id(&self) -> &str {
            &self.facts.client_id
        }

        #[getter]
        fn namespace(&self) -> &str {
            &self.facts.namespace
        }

        /// None: these protocols isolate no endpoint.
        #[getter]
        fn isolated_endpoints(&self) -> Vec<String> {
            Vec::new()
        }

        #[getter]
        fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            let d = PyDict::new(py);
            d.set_item("protocol", self.facts.protocol)?;
            for (k, v) in &self.facts.shown {
                d.set_item(k, v)?;
            }
            Ok(d)
        }

        fn __repr__(&self) -> String {
            let mut s = String::from("Producer(");
            for (k, v) in &self.facts.shown {
                s += &format!("{k}={v:?}, ");
            }
            s + &format!("protocol='{}')", self.facts.protocol)
        }
    }

    /// Send one message; returns where it was stored.
    fn send / send_async(&self, py, message: &Bound<'_, PyAny>) -> Receipt {
        self.one(message)?
    }

    /// Send many messages; one receipt per message, in order, each message keeping its own
    /// metadata (these protocols batch without merging messages: `packed` changes nothing).
    #[pyo3(signature = (messages, *, packed=false))]
    fn send_batch / send_batch_async(
        &self,
        py,
        messages: &Bound<'_, PyAny>,
        packed: bool,
    ) -> Vec<Receipt> {
        let _ = packed;
        self.many(messages)?
    }
}

/// `poll` / `flush` without a produce path: the argument is still checked as everywhere.
fn nothing_produced(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
    durations::optional("timeout", timeout, Lower::NonNegative)?;
    Ok(0)
}
