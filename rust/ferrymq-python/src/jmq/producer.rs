//! `ferrymq.JmqProducer`, `ferrymq.JmqTransaction` and `ferrymq.JmqSendReceipt`.

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::jmq::codec::QosLevel;
use ferrymq_core::jmq::command::Feedback;
use ferrymq_core::jmq::compress::Compression;
use ferrymq_core::jmq::producer::{
    JmqProducer as CoreProducer, ProducerOptions, SendReceipt, TransactionChecker, TxResolution,
};
use ferrymq_core::jmq::transaction::JmqTransaction as CoreTransaction;
use ferrymq_core::Error;
use pyo3::prelude::*;

use crate::aio::future_into_py;
use crate::durations;
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Handle, LazyClient};
use crate::produce::Produce;
use crate::runtime::RuntimeRef;

use super::{cluster_options, endpoints_arg, extract_messages};
use crate::message::extract_message;

/// Where a message was stored.
#[pyclass(
    name = "JmqSendReceipt",
    module = "ferrymq",
    frozen,
    skip_from_py_object
)]
#[derive(Clone)]
pub struct PyJmqSendReceipt {
    inner: SendReceipt,
}

#[pymethods]
impl PyJmqSendReceipt {
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    #[getter]
    fn partition(&self) -> i16 {
        self.inner.partition
    }
    /// Index in the partition (-1 for one-way sends and inside a transaction).
    #[getter]
    fn index(&self) -> i64 {
        self.inner.index
    }
    /// `topic/partition/index`.
    #[getter]
    fn message_id(&self) -> String {
        self.inner.message_id()
    }
    /// When the broker started handling the message, Unix seconds.
    #[getter]
    fn start_time(&self) -> f64 {
        self.inner.start_time as f64 / 1000.0
    }
    #[getter]
    fn broker_id(&self) -> i32 {
        self.inner.broker_id
    }
    fn __repr__(&self) -> String {
        format!(
            "JmqSendReceipt(topic={:?}, partition={}, index={})",
            self.inner.topic, self.inner.partition, self.inner.index
        )
    }
}

fn receipts(v: Vec<SendReceipt>) -> Vec<PyJmqSendReceipt> {
    v.into_iter()
        .map(|inner| PyJmqSendReceipt { inner })
        .collect()
}

fn python_checker(callback: Py<PyAny>) -> TransactionChecker {
    let callback = Arc::new(callback);
    Arc::new(move |f: Feedback| {
        let cb = callback.clone();
        Box::pin(crate::exit::ask_checker(TxResolution::Unknown, move |py| {
            let out = cb.call1(
                py,
                (f.topic.clone(), f.tx_id.clone(), f.transaction_id.clone()),
            )?;
            let out = out.bind(py);
            if out.is_none() {
                return Ok(TxResolution::Unknown);
            }
            if let Ok(b) = out.extract::<bool>() {
                return Ok(if b {
                    TxResolution::Commit
                } else {
                    TxResolution::Rollback
                });
            }
            let s: String = out.extract()?;
            Ok(match s.to_ascii_lowercase().as_str() {
                "commit" => TxResolution::Commit,
                "rollback" => TxResolution::Rollback,
                _ => TxResolution::Unknown,
            })
        }))
    })
}

fn receipt_to_py(py: Python<'_>, inner: SendReceipt) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyJmqSendReceipt { inner })?.into_any())
}

/// The managed publisher drives a JMQ4 producer through its lazily connected client.
impl ferrymq_core::publisher::PublishBackend for Handle<CoreProducer> {
    fn send(
        &self,
        flight: &Arc<ferrymq_core::publisher::Flight>,
    ) -> ferrymq_core::publisher::SendFuture {
        use futures::FutureExt;
        let state = Arc::clone(&self.state);
        let flight = Arc::clone(flight);
        async move {
            let producer = state.get().await?;
            ferrymq_core::publisher::messages::send_jmq(producer, &flight).await
        }
        .boxed()
    }
    fn validate(&self, out: &ferrymq_core::publisher::Outgoing) -> Result<(), Error> {
        ferrymq_core::publisher::messages::validate(out)
    }
    fn describe(&self) -> String {
        "JMQ4 producer".to_string()
    }
}

/// A JMQ4 producer (`jmq://host:port`). `start()` connects (bootstrap + ADD_CONNECTION),
/// failing fast on a wrong address, app or token; `close()` flushes produced messages (running
/// their callbacks), then REMOVE_PRODUCER and REMOVE_CONNECTION, then the sockets.
#[pyclass(module = "ferrymq._native", frozen, extends = LazyClient)]
pub struct JmqProducer {
    h: Handle<CoreProducer>,
    produce: Arc<Produce<Handle<CoreProducer>>>,
}

impl JmqProducer {
    /// This producer as a backend of the managed publisher.
    pub(crate) fn publish_backend(&self) -> Handle<CoreProducer> {
        self.h.clone()
    }
}

#[pymethods]
impl JmqProducer {
    #[new]
    #[pyo3(signature = (endpoints=None, *, app, token, region=None, namespace=None, qos="replication", compression="zlib", compress_threshold=100, max_attempts=3, send_timeout=None, request_timeout=None, max_body=3145728, transaction_timeout=None, transaction_checker=None, transaction_topics=None, feedback_interval=None, metadata_refresh=None, client_ip=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING, endpoint=None), text_signature = "(endpoints=None, *, app, token, region=None, namespace=None, qos=\"replication\", compression=\"zlib\", compress_threshold=100, max_attempts=3, send_timeout=5.0, request_timeout=10.0, max_body=3145728, transaction_timeout=600.0, transaction_checker=None, transaction_topics=None, feedback_interval=5.0, metadata_refresh=30.0, client_ip=None, max_pending=65536, endpoint=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: Option<&Bound<'_, PyAny>>,
        app: String,
        token: String,
        region: Option<String>,
        namespace: Option<String>,
        qos: &str,
        compression: &str,
        #[pyo3(from_py_with = crate::ints::compress_threshold)] compress_threshold: usize,
        #[pyo3(from_py_with = crate::ints::max_attempts)] max_attempts: u32,
        send_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_body)] max_body: usize,
        transaction_timeout: Option<&Bound<'_, PyAny>>,
        transaction_checker: Option<Py<PyAny>>,
        transaction_topics: Option<Vec<String>>,
        feedback_interval: Option<&Bound<'_, PyAny>>,
        metadata_refresh: Option<&Bound<'_, PyAny>>,
        client_ip: Option<String>,
        #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
        endpoint: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let endpoint = &endpoints_arg(py, endpoints, endpoint)?;
        let cluster = cluster_options(
            endpoint,
            app,
            token,
            region,
            namespace,
            client_ip,
            request_timeout,
            metadata_refresh,
        )?;
        if max_attempts == 0 {
            return Err(invalid("max_attempts", "must be at least 1"));
        }
        if let Some(cb) = &transaction_checker {
            if !Python::attach(|py| cb.bind(py).is_callable()) {
                return Err(invalid("transaction_checker", "must be callable"));
            }
        }
        let options = ProducerOptions {
            qos: QosLevel::parse(qos).map_err(to_pyerr)?,
            compression: Compression::parse(compression).map_err(to_pyerr)?,
            compress_threshold,
            max_attempts,
            send_timeout: durations::timeout_or(
                "send_timeout",
                send_timeout,
                Duration::from_secs(5),
            )?,
            max_body,
            transaction_timeout: durations::timeout_or(
                "transaction_timeout",
                transaction_timeout,
                Duration::from_secs(600),
            )?,
            feedback_interval: durations::timeout_or(
                "feedback_interval",
                feedback_interval,
                Duration::from_secs(5),
            )?,
            checker: transaction_checker.map(python_checker),
            transaction_topics: transaction_topics.unwrap_or_default(),
        };
        let h = Handle::new(
            endpoint.to_string(),
            (cluster, options),
            RuntimeRef::current()?,
        );
        let produce = Arc::new(Produce::new(h.clone(), max_pending, h.rt, receipt_to_py)?);
        let base = LazyClient::producer(&h, &produce);
        Ok(PyClassInitializer::from(base).add_subclass(Self { h, produce }))
    }

    /// Send one message.
    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<PyJmqSendReceipt> {
        let m = extract_message(message)?;
        self.h.block(py, move |p| async move {
            let inner = p.send(&m).await?;
            Ok(PyJmqSendReceipt { inner })
        })
    }

    /// Async form of `send`.
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = extract_message(message)?;
        self.h.spawn(py, move |p| async move {
            let inner = p.send(&m).await?;
            Ok(PyJmqSendReceipt { inner })
        })
    }

    /// Send several messages at once: one batch per topic, one request per leader broker.
    fn send_batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<PyJmqSendReceipt>> {
        let ms = extract_messages(messages)?;
        self.h.block(py, move |p| async move {
            Ok(receipts(p.send_batch(&ms).await?))
        })
    }

    /// Async form of `send_batch`.
    fn send_batch_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_messages(messages)?;
        self.h.spawn(py, move |p| async move {
            Ok(receipts(p.send_batch(&ms).await?))
        })
    }

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
        let m = extract_message(message)?;
        self.produce.produce(py, m, on_delivery)
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

    /// Begin a transaction on `topic` (PREPARE). `transaction_id` is reported back to the
    /// `transaction_checker` if the transaction expires unresolved.
    #[pyo3(signature = (topic, transaction_id=None))]
    fn begin_transaction(
        &self,
        py: Python<'_>,
        topic: String,
        transaction_id: Option<String>,
    ) -> PyResult<JmqTransaction> {
        let rt = self.h.rt;
        self.h.block(py, move |p| async move {
            let inner = p.begin_transaction(&topic, transaction_id).await?;
            Ok(JmqTransaction { inner, rt })
        })
    }

    /// Async form of `begin_transaction`.
    #[pyo3(signature = (topic, transaction_id=None))]
    fn begin_transaction_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
        transaction_id: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let rt = self.h.rt;
        self.h.spawn(py, move |p| async move {
            let inner = p.begin_transaction(&topic, transaction_id).await?;
            Ok(JmqTransaction { inner, rt })
        })
    }

    /// One compensation pass over `topic` (FETCH_PRODUCE_FEEDBACK → checker → commit or
    /// rollback); returns how many transactions were resolved.
    fn resolve_feedback(&self, py: Python<'_>, topic: String) -> PyResult<usize> {
        self.h
            .block(py, move |p| async move { p.resolve_feedback(&topic).await })
    }

    /// Async form of `resolve_feedback`.
    fn resolve_feedback_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.h
            .spawn(py, move |p| async move { p.resolve_feedback(&topic).await })
    }

    #[getter]
    fn endpoint(&self) -> &str {
        &self.h.endpoint
    }

    #[getter]
    fn closed(&self) -> bool {
        self.h.is_closed()
    }

    fn __repr__(&self) -> String {
        format!(
            "JmqProducer(endpoint={:?}, app={:?})",
            self.h.endpoint, self.h.state.options.0.connect.app
        )
    }
}

/// An open JMQ4 transaction. As a context manager it commits on success and rolls back on an
/// exception.
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqTransaction {
    inner: CoreTransaction,
    rt: RuntimeRef,
}

#[pymethods]
impl JmqTransaction {
    #[getter]
    fn tx_id(&self) -> &str {
        self.inner.tx_id()
    }
    #[getter]
    fn transaction_id(&self) -> Option<&str> {
        self.inner.transaction_id()
    }
    #[getter]
    fn topic(&self) -> &str {
        self.inner.topic()
    }
    #[getter]
    fn finished(&self) -> bool {
        self.inner.is_finished()
    }

    /// Send messages inside the transaction (invisible until commit).
    fn send(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<Vec<PyJmqSendReceipt>> {
        let ms = extract_messages(messages)?;
        let t = self.inner.clone();
        self.rt
            .block_on(py, async move { Ok(receipts(t.send(&ms).await?)) })
    }

    /// Async form of `send`.
    fn send_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_messages(messages)?;
        let t = self.inner.clone();
        future_into_py(py, self.rt, async move { Ok(receipts(t.send(&ms).await?)) })
    }

    fn commit(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.inner.clone();
        self.rt.block_on(py, async move { t.commit().await })
    }

    fn commit_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.inner.clone();
        future_into_py(py, self.rt, async move { t.commit().await })
    }

    fn rollback(&self, py: Python<'_>) -> PyResult<()> {
        let t = self.inner.clone();
        self.rt.block_on(py, async move { t.rollback().await })
    }

    fn rollback_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let t = self.inner.clone();
        future_into_py(py, self.rt, async move { t.rollback().await })
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<bool> {
        if self.inner.is_finished() {
            return Ok(false);
        }
        if t.is_none(py) {
            self.commit(py)?;
        } else {
            self.rollback(py)?;
        }
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let me: Py<Self> = slf.clone().unbind();
        future_into_py(slf.py(), slf.get().rt, async move { Ok(me) })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let failed = !t.is_none(py);
        let tx = self.inner.clone();
        future_into_py(py, self.rt, async move {
            if !tx.is_finished() {
                if failed {
                    tx.rollback().await?;
                } else {
                    tx.commit().await?;
                }
            }
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "JmqTransaction(topic={:?}, tx_id={:?})",
            self.inner.topic(),
            self.inner.tx_id()
        )
    }
}
