//! `ferrymq._native.RocketMQProducer` (wrapped by `ferrymq.Producer`), `SendReceipt` and
//! `Transaction`.
//!
//! Three ways to send:
//! * `send` / `send_batch` block with the GIL released; `send_async` / `send_batch_async` return
//!   asyncio awaitables;
//! * `produce(message, on_delivery=cb)` never waits for the broker: the core's produce queue
//!   (see [`crate::produce`]) sends it in chunks with `Producer::send_each` (one `SendMessage`
//!   per message, many in flight on one HTTP/2 channel); callbacks run in `poll()` / `flush()`.

use std::sync::Arc;

use ferrymq_core::rocketmq::producer::{
    Producer, SendReceipt, Transaction, TransactionChecker, TransactionResolution,
};
use ferrymq_core::rocketmq::MessageView;
use ferrymq_core::Message;
use futures::future::BoxFuture;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::aio::future_into_py;
use crate::client_options::client_options;
use crate::errors::{invalid, to_pyerr};
use crate::message::PyMessage;
use crate::message_view::PyMessageView;
use crate::metrics::{percentiles_arg, producer_stats, snapshot_dict};
use crate::produce::{Produce, Produces};
use crate::runtime::RuntimeRef;

/// Where a message went.
#[pyclass(name = "SendReceipt", module = "ferrymq", frozen)]
pub struct PySendReceipt {
    inner: SendReceipt,
}

impl From<SendReceipt> for PySendReceipt {
    fn from(inner: SendReceipt) -> Self {
        Self { inner }
    }
}

#[pymethods]
impl PySendReceipt {
    #[getter]
    fn message_id(&self) -> &str {
        &self.inner.message_id
    }
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    #[getter]
    fn queue_id(&self) -> i32 {
        self.inner.queue_id
    }
    #[getter]
    fn broker_name(&self) -> &str {
        &self.inner.broker_name
    }
    /// The broker endpoints, `"host:port[;host:port]"`.
    #[getter]
    fn endpoint(&self) -> &str {
        self.inner.endpoints.key()
    }
    #[getter]
    fn offset(&self) -> i64 {
        self.inner.offset
    }
    #[getter]
    fn transaction_id(&self) -> Option<&str> {
        self.inner.transaction_id.as_deref()
    }
    #[getter]
    fn recall_handle(&self) -> Option<&str> {
        self.inner.recall_handle.as_deref()
    }
    fn __repr__(&self) -> String {
        let r = &self.inner;
        let mut s = format!(
            "SendReceipt(message_id={:?}, topic={:?}, queue_id={}, broker_name={:?}, \
             endpoint={:?}, offset={}",
            r.message_id,
            r.topic,
            r.queue_id,
            r.broker_name,
            r.endpoints.key(),
            r.offset
        );
        if let Some(t) = &r.transaction_id {
            s += &format!(", transaction_id={t:?}");
        }
        if let Some(h) = &r.recall_handle {
            s += &format!(", recall_handle={h:?}");
        }
        s + ")"
    }
}

/// Calls the user's `transaction_checker(view) -> TransactionResolution` on a blocking thread.
struct PyChecker {
    callable: Arc<Py<PyAny>>,
}

pub(crate) fn resolution_of(v: &Bound<'_, PyAny>) -> PyResult<TransactionResolution> {
    if v.is_none() {
        return Ok(TransactionResolution::Unknown);
    }
    if let Ok(b) = v.extract::<bool>() {
        return Ok(if b {
            TransactionResolution::Commit
        } else {
            TransactionResolution::Rollback
        });
    }
    let v = if v.is_instance_of::<PyString>() {
        v.clone()
    } else {
        v.getattr("value")?
    };
    let s: String = v.extract()?;
    match s.to_ascii_lowercase().as_str() {
        "commit" => Ok(TransactionResolution::Commit),
        "rollback" => Ok(TransactionResolution::Rollback),
        "unknown" => Ok(TransactionResolution::Unknown),
        other => Err(invalid(
            "transaction_checker",
            format!("returned {other:?}; expected a ferrymq.TransactionResolution"),
        )),
    }
}

impl TransactionChecker for PyChecker {
    fn check(
        &self,
        message: MessageView,
        transaction_id: String,
    ) -> BoxFuture<'static, TransactionResolution> {
        let callable = Arc::clone(&self.callable);
        Box::pin(crate::exit::ask_checker(
            TransactionResolution::Unknown,
            move |py| {
                let view = Py::new(
                    py,
                    PyMessageView {
                        inner: Arc::new(message),
                        transaction_id: Some(transaction_id),
                    },
                )?;
                let out = callable.call1(py, (view,))?;
                resolution_of(out.bind(py))
            },
        ))
    }
}

/// A RocketMQ 5 producer (see `ferrymq.Producer`).
#[pyclass(name = "RocketMQProducer", module = "ferrymq._native", frozen)]
pub struct PyProducer {
    rt: RuntimeRef,
    producer: Producer,
    produce: Produce<Producer>,
}

fn receipt_to_py(py: Python<'_>, r: SendReceipt) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PySendReceipt::from(r))?.into_any())
}

fn install_stack_trace_provider() {
    ferrymq_core::rocketmq::telemetry::set_stack_trace_provider(|| {
        Python::attach(|py| {
            py.import("ferrymq._diagnostics")
                .and_then(|m| m.call_method0("thread_stacks"))
                .and_then(|s| s.extract::<String>())
                .unwrap_or_else(|e| format!("cannot collect Python stacks: {e}"))
        })
    });
}

impl PyProducer {
    /// The core producer (the managed publisher drives it as a backend).
    pub fn core(&self) -> &Producer {
        &self.producer
    }
}

pub(crate) fn extract_messages(messages: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
    let mut out = Vec::with_capacity(messages.len().unwrap_or(0));
    for m in messages
        .try_iter()
        .map_err(|_| invalid("messages", "must be an iterable of ferrymq.Message"))?
    {
        let m = m?;
        let m = m
            .cast::<PyMessage>()
            .map_err(|_| invalid("messages", "every item must be a ferrymq.Message"))?;
        out.push(m.get().inner.clone());
    }
    Ok(out)
}

async fn batch(
    p: &Producer,
    msgs: Vec<Message>,
    packed: bool,
) -> ferrymq_core::Result<Vec<SendReceipt>> {
    if packed {
        p.send_packed(msgs).await
    } else {
        p.send_batch(msgs).await
    }
}

pymethods_with_async! {
    impl PyProducer {
        #[new]
        #[pyo3(signature = (endpoints, *, topics=Vec::new(), credentials=None, namespace=None, tls=None, request_timeout=None, max_attempts=None, transaction_checker=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING, heartbeat_interval=None, route_refresh_interval=None, settings_sync_interval=None))]
        #[allow(clippy::too_many_arguments)]
        fn new(
            endpoints: &Bound<'_, PyAny>,
            topics: Vec<String>,
            credentials: Option<&Bound<'_, PyAny>>,
            namespace: Option<String>,
            tls: Option<&Bound<'_, PyAny>>,
            request_timeout: Option<&Bound<'_, PyAny>>,
            #[pyo3(from_py_with = crate::ints::max_attempts)] max_attempts: Option<i64>,
            transaction_checker: Option<Py<PyAny>>,
            #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
            heartbeat_interval: Option<&Bound<'_, PyAny>>,
            route_refresh_interval: Option<&Bound<'_, PyAny>>,
            settings_sync_interval: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<Self> {
            let rt = RuntimeRef::current()?;
            let options = client_options(
                endpoints,
                credentials,
                namespace,
                tls,
                request_timeout,
                max_attempts,
                heartbeat_interval,
                route_refresh_interval,
                settings_sync_interval,
            )?;
            let checker: Option<Arc<dyn TransactionChecker>> = match transaction_checker {
                None => None,
                Some(c) => {
                    let callable = Python::attach(|py| c.bind(py).is_callable());
                    if !callable {
                        return Err(invalid("transaction_checker", "must be callable"));
                    }
                    Some(Arc::new(PyChecker {
                        callable: Arc::new(c),
                    }))
                }
            };
            install_stack_trace_provider();
            // Construction spawns nothing, but the client layer needs a runtime context for timers.
            let _guard = rt.handle().enter();
            let producer = Producer::new(options, topics, checker).map_err(to_pyerr)?;
            let produce = Produce::new(producer.clone(), max_pending, rt, receipt_to_py)?;
            Ok(Self {
                rt,
                producer,
                produce,
            })
        }

        /// Connect: telemetry settings and the routes of `topics`. Raises on any failure.
        fn start(&self, py: Python<'_>) -> PyResult<()> {
            let p = self.producer.clone();
            self.rt.block_on(py, async move { p.start().await })
        }

        fn start_async<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
            let py = slf.py();
            let this = slf.get();
            let p = this.producer.clone();
            future_into_py(py, this.rt, async move { p.start().await })
        }

        /// Queue `message` for a batched send; `on_delivery(err, receipt)` runs later, on this thread,
        /// inside `poll()`/`flush()`. Blocks (serving callbacks) while `max_pending` are pending.
        #[pyo3(signature = (message, on_delivery=None))]
        fn produce(
            &self,
            py: Python<'_>,
            message: PyRef<'_, PyMessage>,
            on_delivery: Option<Py<PyAny>>,
        ) -> PyResult<()> {
            self.producer.client().check_running().map_err(to_pyerr)?;
            self.produce.produce(py, message.inner.clone(), on_delivery)
        }

        /// Run the callbacks of finished deliveries (waiting up to `timeout` seconds for one);
        /// returns how many were reported.
        #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=0.0)")]
        fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
            self.produce.poll(py, timeout)
        }

        /// Wait until every produced message is reported (or `timeout` seconds pass), running the
        /// callbacks here; returns how many are still pending.
        #[pyo3(signature = (timeout=None))]
        fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
            self.produce.flush(py, timeout)
        }

        /// Messages produced and not yet reported.
        #[getter]
        fn pending(&self) -> usize {
            self.produce.pending()
        }

        /// Live statistics as a plain dict (see `producer_stats`).
        #[pyo3(signature = (percentiles=None))]
        fn stats<'py>(
            &self,
            py: Python<'py>,
            percentiles: Option<&Bound<'py, PyAny>>,
        ) -> PyResult<Bound<'py, PyDict>> {
            let qs = percentiles_arg(percentiles)?;
            producer_stats(
                py,
                Some(self.producer.metrics()),
                &qs,
                Some(self.produce.pending()),
            )
        }

        /// The producer's metrics as plain data for exporters (`ferrymq.telemetry`; the layout
        /// of `metrics.rs`'s `snapshot_dict`).
        fn metrics_snapshot<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
            let closed = self.producer.is_closed();
            snapshot_dict(py, self.producer.metrics(), closed, &[]).map(Some)
        }

        /// Start a transaction.
        fn begin_transaction(&self) -> PyResult<PyTransaction> {
            Ok(PyTransaction {
                rt: self.rt,
                inner: Arc::new(self.producer.begin_transaction().map_err(to_pyerr)?),
            })
        }

        /// Flush produced messages (running their callbacks), wait for in-flight sends, then tell
        /// the brokers (`NotifyClientTermination`). Idempotent.
        fn close(&self, py: Python<'_>) -> PyResult<()> {
            self.produce.close();
            let flushed = self.produce.flush_for(py, None);
            let p = self.producer.clone();
            self.rt.block_on(py, async move {
                p.close().await;
                Ok(())
            })?;
            flushed.map(|_| ())
        }

        /// Async `close`: waits for produced messages and in-flight sends; the facade then runs the
        /// remaining delivery callbacks with `poll(0)`.
        fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            self.produce.close();
            let drained = self.produce.drained();
            let p = self.producer.clone();
            future_into_py(py, self.rt, async move {
                drained.await;
                p.close().await;
                Ok(())
            })
        }

        #[getter]
        fn closed(&self) -> bool {
            self.producer.is_closed()
        }
        #[getter]
        fn started(&self) -> bool {
            self.producer.client().is_running()
        }
        #[getter]
        fn client_id(&self) -> &str {
            self.producer.client().client_id()
        }
        #[getter]
        fn endpoints(&self) -> &str {
            self.producer.client().access_endpoints().key()
        }
        #[getter]
        fn namespace(&self) -> &str {
            self.producer.client().namespace()
        }
        /// Endpoints currently isolated after failures.
        #[getter]
        fn isolated_endpoints(&self) -> Vec<String> {
            self.producer
                .client()
                .isolation()
                .snapshot()
                .into_iter()
                .map(|e| e.key().to_string())
                .collect()
        }
        /// The settings in force (server-merged once started).
        #[getter]
        fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            let s = self.producer.client().settings();
            let d = PyDict::new(py);
            d.set_item("max_attempts", s.retry_policy.max_attempts)?;
            d.set_item("request_timeout", s.request_timeout.as_secs_f64())?;
            d.set_item("max_body_size", s.max_body_size)?;
            d.set_item("validate_message_type", s.validate_message_type)?;
            d.set_item("from_server", s.from_server)?;
            let delays: Vec<f64> = (1..=4)
                .map(|a| s.retry_policy.delay(a).as_secs_f64())
                .collect();
            d.set_item("backoff", delays)?;
            Ok(d)
        }

        fn __repr__(&self) -> String {
            let c = self.producer.client();
            format!(
                "RocketMQProducer(endpoints={:?}, client_id={:?}, namespace={:?}, started={}, closed={})",
                c.access_endpoints().key(),
                c.client_id(),
                c.namespace(),
                c.is_running(),
                self.producer.is_closed()
            )
        }
    }

        /// Send one message and wait for the broker's receipt.
        fn send / send_async(&self, py, message: PyRef<'_, PyMessage>) -> PySendReceipt {
            let p = self.producer.clone();
            let m = message.inner.clone();
            async move { p.send(m).await.map(PySendReceipt::from) }
        }

        /// Send many messages of one topic: one `SendMessage` each, many in flight, or `packed`
        /// many to a request under one message id (messages that differ only in their bodies).
        #[pyo3(signature = (messages, *, packed=false))]
        fn send_batch / send_batch_async(
            &self,
            py,
            messages: &Bound<'_, PyAny>,
            packed: bool,
        ) -> Vec<PySendReceipt> {
            let msgs = extract_messages(messages)?;
            let p = self.producer.clone();
            async move {
                Ok(batch(&p, msgs, packed)
                    .await?
                    .into_iter()
                    .map(PySendReceipt::from)
                    .collect::<Vec<_>>())
            }
        }

        /// Recall a delayed message by the `recall_handle` of its receipt; returns its message id.
        fn recall / recall_async(&self, py, topic: String, recall_handle: String) -> String {
            let p = self.producer.clone();
            async move { p.recall(&topic, &recall_handle).await }
        }
}

/// A transaction: half messages become visible on `commit()`, or are dropped on `rollback()`.
/// As a context manager it commits on success and rolls back on an exception.
#[pyclass(name = "Transaction", module = "ferrymq", frozen)]
pub struct PyTransaction {
    rt: RuntimeRef,
    inner: Arc<Transaction>,
}

pymethods_with_async! {
    impl PyTransaction {
        /// Receipts of the half messages sent so far.
        #[getter]
        fn receipts(&self) -> Vec<PySendReceipt> {
            self.inner
                .receipts()
                .into_iter()
                .map(PySendReceipt::from)
                .collect()
        }
        fn __enter__(slf: Py<Self>) -> Py<Self> {
            slf
        }
        #[pyo3(signature = (exc_type=None, _exc=None, _tb=None))]
        fn __exit__(
            &self,
            py: Python<'_>,
            exc_type: Option<&Bound<'_, PyAny>>,
            _exc: Option<&Bound<'_, PyAny>>,
            _tb: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<bool> {
            if self.inner.ended().is_some() {
                return Ok(false);
            }
            if exc_type.is_some_and(|t| !t.is_none()) {
                self.rollback(py)?;
            } else {
                self.commit(py)?;
            }
            Ok(false)
        }
        fn __repr__(&self) -> String {
            format!("Transaction(messages={})", self.inner.receipts().len())
        }
    }

    /// Send a half message (never retried).
    fn send / send_async(&self, py, message: PyRef<'_, PyMessage>) -> PySendReceipt {
        let t = Arc::clone(&self.inner);
        let m = message.inner.clone();
        async move { t.send(m).await.map(PySendReceipt::from) }
    }

    fn commit / commit_async(&self, py) -> () {
        let t = Arc::clone(&self.inner);
        async move { t.commit().await }
    }

    fn rollback / rollback_async(&self, py) -> () {
        let t = Arc::clone(&self.inner);
        async move { t.rollback().await }
    }
}
