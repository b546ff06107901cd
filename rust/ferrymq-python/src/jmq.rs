//! JMQ4 (JoyQueue) classes: `JmqProducer`, `JmqTransaction`, `JmqConsumer`, their results, and
//! `JmqServer` (the embedded JMQ4 server used by `ferrymq.testing`).
//!
//! Every method comes in a blocking form (GIL released through `RuntimeRef::block_on`) and an
//! asyncio form (`*_async`, through `future_into_py`). Clients connect lazily on first use, or
//! eagerly with `start()` / `start_async()` (also called by the context managers).

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::jmq::client::ConnectOptions;
use ferrymq_core::jmq::cluster::ClusterOptions;
use ferrymq_core::jmq::codec::{command_type, QosLevel};
use ferrymq_core::jmq::command::{Feedback, RetryType};
use ferrymq_core::jmq::compress::Compression;
use ferrymq_core::jmq::consumer::{
    ConsumeMode, ConsumerOptions, JmqConsumer as CoreConsumer, ReceivedMessage,
};
use ferrymq_core::jmq::producer::{
    JmqProducer as CoreProducer, JmqTransaction as CoreTransaction, ProducerOptions, SendReceipt,
    TransactionChecker, TxResolution,
};
use ferrymq_core::jmq::server::{JmqServer as CoreServer, JmqServerConfig};
use ferrymq_core::{Error, Message};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple};
use tokio::sync::OnceCell;

use crate::durations::{self, Lower};
use crate::errors::{invalid, text, to_pyerr};
use crate::message::PyMessage;
use crate::runtime::{future_into_py, RuntimeRef};

/// Extract one `ferrymq.Message`.
fn extract_message(m: &Bound<'_, PyAny>) -> PyResult<Message> {
    m.cast::<PyMessage>()
        .map(|m| m.get().inner.clone())
        .map_err(|_| invalid("message", "must be a ferrymq.Message"))
}

/// Extract a `Message` or an iterable of them.
fn extract_messages(v: &Bound<'_, PyAny>) -> PyResult<Vec<Message>> {
    if let Ok(m) = v.cast::<PyMessage>() {
        return Ok(vec![m.get().inner.clone()]);
    }
    let mut out = Vec::new();
    for item in v.try_iter().map_err(|_| {
        invalid(
            "messages",
            "must be a ferrymq.Message or an iterable of them",
        )
    })? {
        out.push(extract_message(&item?)?);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_options(
    endpoint: &str,
    app: String,
    token: String,
    region: Option<String>,
    namespace: Option<String>,
    client_ip: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    metadata_refresh: Option<&Bound<'_, PyAny>>,
) -> PyResult<ClusterOptions> {
    let addr = ferrymq_core::jmq::parse_endpoint(endpoint).map_err(to_pyerr)?;
    let connect = ConnectOptions {
        app,
        token,
        region,
        namespace,
        client_ip,
        request_timeout: durations::or(
            "request_timeout",
            request_timeout,
            Lower::Positive,
            Duration::from_secs(10),
        )?,
        ..ConnectOptions::default()
    };
    connect.validate().map_err(to_pyerr)?;
    let mut o = ClusterOptions::new(addr, connect);
    o.metadata_refresh = durations::or(
        "metadata_refresh",
        metadata_refresh,
        Lower::Positive,
        Duration::from_secs(30),
    )?
    .max(Duration::from_millis(100));
    Ok(o)
}

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

struct ProducerState {
    cluster: ClusterOptions,
    options: ProducerOptions,
    client: OnceCell<CoreProducer>,
    closed: std::sync::atomic::AtomicBool,
}

impl ProducerState {
    async fn get(self: &Arc<Self>) -> Result<CoreProducer, Error> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::closed("the JmqProducer is closed"));
        }
        self.client
            .get_or_try_init(|| CoreProducer::connect(self.cluster.clone(), self.options.clone()))
            .await
            .cloned()
    }

    async fn close(self: &Arc<Self>) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(p) = self.client.get() {
            p.close().await;
        }
    }
}

fn python_checker(callback: Py<PyAny>) -> TransactionChecker {
    let callback = Arc::new(callback);
    Arc::new(move |f: Feedback| {
        let cb = callback.clone();
        Box::pin(async move {
            // The callback runs on a blocking-pool thread, never on a tokio worker.
            let r = tokio::task::spawn_blocking(move || {
                if crate::exit::is_exiting() {
                    // No interpreter to ask any more; the broker will check again.
                    return Ok(TxResolution::Unknown);
                }
                Python::attach(|py| -> PyResult<TxResolution> {
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
                })
            })
            .await;
            match r {
                Ok(Ok(v)) => v,
                Ok(Err(e)) => {
                    tracing::warn!(target: "ferrymq::jmq", "transaction_checker raised: {e}");
                    TxResolution::Unknown
                }
                Err(_) => TxResolution::Unknown,
            }
        })
    })
}

/// The managed publisher's backend over a (lazily connected) JMQ4 producer.
pub struct PublishBackendJmq(Arc<ProducerState>);

impl ferrymq_core::publisher::PublishBackend for PublishBackendJmq {
    fn send(
        &self,
        flight: &Arc<ferrymq_core::publisher::Flight>,
    ) -> ferrymq_core::publisher::SendFuture {
        use futures::FutureExt;
        let state = Arc::clone(&self.0);
        let flight = Arc::clone(flight);
        async move {
            let producer = state.get().await?;
            ferrymq_core::publisher::jmq::send_with(producer, &flight).await
        }
        .boxed()
    }
    fn validate(&self, out: &ferrymq_core::publisher::Outgoing) -> Result<(), Error> {
        ferrymq_core::publisher::jmq::validate_for_jmq(out)
    }
    fn describe(&self) -> String {
        "JMQ4 producer".to_string()
    }
}

/// A JMQ4 producer (`jmq://host:port`).
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqProducer {
    state: Arc<ProducerState>,
    rt: RuntimeRef,
    endpoint: String,
}

impl JmqProducer {
    /// This producer as a backend of the managed publisher.
    pub fn publish_backend(&self) -> PublishBackendJmq {
        PublishBackendJmq(Arc::clone(&self.state))
    }
}

/// The JMQ4 endpoint of a constructor: `endpoints`, or the older spelling `endpoint` (accepted
/// with a `DeprecationWarning`).
fn endpoints_arg(
    py: Python<'_>,
    endpoints: Option<&Bound<'_, PyAny>>,
    endpoint: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let endpoints = endpoints.filter(|v| !v.is_none());
    let endpoint = endpoint.filter(|v| !v.is_none());
    let (field, value) = match (endpoints, endpoint) {
        (Some(e), None) => ("endpoints", e),
        (None, Some(e)) => {
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyDeprecationWarning>(),
                c"endpoint= is deprecated: pass endpoints=",
                1,
            )?;
            ("endpoint", e)
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "endpoint",
                "pass endpoints= only (endpoint= is its deprecated spelling)",
            ))
        }
        (None, None) => return Err(invalid("endpoints", "is required (\"jmq://host:port\")")),
    };
    let s = value
        .cast::<PyString>()
        .map_err(|_| invalid(field, "must be a str (\"jmq://host:port\")"))?;
    text(field, s)
}

#[pymethods]
impl JmqProducer {
    #[new]
    #[pyo3(signature = (endpoints=None, *, app, token, region=None, namespace=None, qos="replication", compression="zlib", compress_threshold=100, max_attempts=3, send_timeout=None, request_timeout=None, max_body=3145728, transaction_timeout=None, transaction_checker=None, transaction_topics=None, feedback_interval=None, metadata_refresh=None, client_ip=None, endpoint=None), text_signature = "(endpoints=None, *, app, token, region=None, namespace=None, qos=\"replication\", compression=\"zlib\", compress_threshold=100, max_attempts=3, send_timeout=5.0, request_timeout=10.0, max_body=3145728, transaction_timeout=600.0, transaction_checker=None, transaction_topics=None, feedback_interval=5.0, metadata_refresh=30.0, client_ip=None, endpoint=None)")]
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
        endpoint: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
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
            send_timeout: durations::or(
                "send_timeout",
                send_timeout,
                Lower::Positive,
                Duration::from_secs(5),
            )?,
            max_body,
            transaction_timeout: durations::or(
                "transaction_timeout",
                transaction_timeout,
                Lower::Positive,
                Duration::from_secs(600),
            )?,
            feedback_interval: durations::or(
                "feedback_interval",
                feedback_interval,
                Lower::Positive,
                Duration::from_secs(5),
            )?,
            checker: transaction_checker.map(python_checker),
            transaction_topics: transaction_topics.unwrap_or_default(),
        };
        Ok(Self {
            state: Arc::new(ProducerState {
                cluster,
                options,
                client: OnceCell::new(),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
            rt: RuntimeRef::current()?,
            endpoint: endpoint.to_string(),
        })
    }

    /// Connect now (bootstrap + ADD_CONNECTION), failing fast on a wrong address, app or token.
    fn start(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        let me = slf.get();
        let s = me.state.clone();
        me.rt
            .block_on(py, async move { s.get().await.map(|_| ()) })?;
        Ok(slf)
    }

    /// Async form of `start`; the awaitable gives the client back.
    fn start_async<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let s = slf.get().state.clone();
        let rt = slf.get().rt;
        let me = slf.unbind();
        future_into_py(py, rt, async move {
            s.get().await?;
            Ok(me)
        })
    }

    /// Send one message.
    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<PyJmqSendReceipt> {
        let m = extract_message(message)?;
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            let inner = s.get().await?.send(&m).await?;
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
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            let inner = s.get().await?.send(&m).await?;
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
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            Ok(receipts(s.get().await?.send_batch(&ms).await?))
        })
    }

    /// Async form of `send_batch`.
    fn send_batch_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_messages(messages)?;
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            Ok(receipts(s.get().await?.send_batch(&ms).await?))
        })
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
        let s = self.state.clone();
        let rt = self.rt;
        self.rt.block_on(py, async move {
            let inner = s
                .get()
                .await?
                .begin_transaction(&topic, transaction_id)
                .await?;
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
        let s = self.state.clone();
        let rt = self.rt;
        future_into_py(py, self.rt, async move {
            let inner = s
                .get()
                .await?
                .begin_transaction(&topic, transaction_id)
                .await?;
            Ok(JmqTransaction { inner, rt })
        })
    }

    /// One compensation pass over `topic` (FETCH_PRODUCE_FEEDBACK → checker → commit or
    /// rollback); returns how many transactions were resolved.
    fn resolve_feedback(&self, py: Python<'_>, topic: String) -> PyResult<usize> {
        let s = self.state.clone();
        self.rt.block_on(
            py,
            async move { s.get().await?.resolve_feedback(&topic).await },
        )
    }

    /// Async form of `resolve_feedback`.
    fn resolve_feedback_async<'py>(
        &self,
        py: Python<'py>,
        topic: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.get().await?.resolve_feedback(&topic).await
        })
    }

    /// Close: REMOVE_PRODUCER and REMOVE_CONNECTION, then the sockets. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            s.close().await;
            Ok(())
        })
    }

    /// Async form of `close`.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.close().await;
            Ok(())
        })
    }

    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The endpoint, as every client spells it.
    #[getter]
    fn endpoints(&self) -> &str {
        &self.endpoint
    }

    #[getter]
    fn closed(&self) -> bool {
        self.state.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    fn __enter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        Self::start(slf, py)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let s = slf.get().state.clone();
        let me: Py<Self> = slf.clone().unbind();
        future_into_py(py, slf.get().rt, async move {
            s.get().await?;
            Ok(me)
        })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.close().await;
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "JmqProducer(endpoint={:?}, app={:?})",
            self.endpoint, self.state.cluster.connect.app
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

/// A message received from a JMQ4 broker.
#[pyclass(name = "JmqMessage", module = "ferrymq", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyJmqMessage {
    inner: ReceivedMessage,
}

#[pymethods]
impl PyJmqMessage {
    #[getter]
    fn topic(&self) -> &str {
        &self.inner.topic
    }
    /// The partition (32767 for deliveries from the retry queue).
    #[getter]
    fn partition(&self) -> i16 {
        self.inner.partition
    }
    #[getter]
    fn index(&self) -> i64 {
        self.inner.index
    }
    #[getter]
    fn body<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        PyBytes::new(py, &self.inner.body)
    }
    /// The businessId (the first key when sent by ferrymq).
    #[getter]
    fn business_id(&self) -> Option<&str> {
        self.inner.business_id.as_deref()
    }
    #[getter]
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.business_id.iter())
    }
    #[getter]
    fn tag(&self) -> Option<&str> {
        self.inner.tag.as_deref()
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        for (k, v) in &self.inner.properties {
            d.set_item(k, v)?;
        }
        Ok(d)
    }
    #[getter]
    fn flag(&self) -> i16 {
        self.inner.flag
    }
    #[getter]
    fn priority(&self) -> i8 {
        self.inner.priority
    }
    /// Producer send time, Unix seconds.
    #[getter]
    fn send_time(&self) -> f64 {
        self.inner.send_time as f64 / 1000.0
    }
    /// Broker store time, Unix seconds.
    #[getter]
    fn store_time(&self) -> f64 {
        self.inner.store_time as f64 / 1000.0
    }
    #[getter]
    fn app(&self) -> Option<&str> {
        self.inner.app.as_deref()
    }
    #[getter]
    fn broker_id(&self) -> i32 {
        self.inner.broker_id
    }
    #[getter]
    fn is_retry(&self) -> bool {
        self.inner.is_retry()
    }
    /// `topic/partition/index`.
    #[getter]
    fn message_id(&self) -> String {
        self.inner.message_id()
    }
    /// The partition, under its `ferrymq.MessageView` name.
    #[getter]
    fn queue_id(&self) -> i32 {
        i32::from(self.inner.partition)
    }
    /// The index, under its `ferrymq.MessageView` name.
    #[getter]
    fn offset(&self) -> i64 {
        self.inner.index
    }
    /// 1 for a first delivery, 2 for one from the retry queue (JMQ4 does not count retries,
    /// so 2 means "at least the second").
    #[getter]
    fn delivery_attempt(&self) -> i32 {
        if self.inner.is_retry() {
            2
        } else {
            1
        }
    }
    /// Always `None`: JMQ4 has no message groups.
    #[getter]
    fn message_group(&self) -> Option<&str> {
        None
    }
    /// `send_time`, under its `ferrymq.MessageView` name.
    #[getter]
    fn born_timestamp(&self) -> f64 {
        self.send_time()
    }
    /// `store_time`, under its `ferrymq.MessageView` name.
    #[getter]
    fn store_timestamp(&self) -> f64 {
        self.store_time()
    }
    fn __len__(&self) -> usize {
        self.inner.body.len()
    }
    fn __repr__(&self) -> String {
        format!(
            "JmqMessage(topic={:?}, partition={}, index={}, body=<{} bytes>)",
            self.inner.topic,
            self.inner.partition,
            self.inner.index,
            self.inner.body.len()
        )
    }
}

fn extract_received(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Vec<ReceivedMessage>> {
    if let Ok(m) = v.cast::<PyJmqMessage>() {
        return Ok(vec![m.get().inner.clone()]);
    }
    let mut out = Vec::new();
    for item in v
        .try_iter()
        .map_err(|_| invalid(field, "must be a JmqMessage or an iterable of them"))?
    {
        let item = item?;
        let m = item
            .cast::<PyJmqMessage>()
            .map_err(|_| invalid(field, "must contain JmqMessage objects"))?;
        out.push(m.get().inner.clone());
    }
    Ok(out)
}

fn wrap(v: Vec<ReceivedMessage>) -> Vec<PyJmqMessage> {
    v.into_iter().map(|inner| PyJmqMessage { inner }).collect()
}

struct ConsumerState {
    cluster: ClusterOptions,
    options: ConsumerOptions,
    client: OnceCell<CoreConsumer>,
    closed: std::sync::atomic::AtomicBool,
}

impl ConsumerState {
    async fn get(self: &Arc<Self>) -> Result<CoreConsumer, Error> {
        if self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(Error::closed("the JmqConsumer is closed"));
        }
        self.client
            .get_or_try_init(|| CoreConsumer::connect(self.cluster.clone(), self.options.clone()))
            .await
            .cloned()
    }

    async fn close(self: &Arc<Self>) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        if let Some(c) = self.client.get() {
            c.close().await;
        }
    }
}

fn ack_timeout_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Duration>> {
    match durations::optional("ack_timeout", v, Lower::Positive)? {
        None => Ok(None),
        Some(d) => {
            if d < Duration::from_millis(1) || d.as_millis() > i32::MAX as u128 {
                return Err(invalid(
                    "ack_timeout",
                    "must be between 0.001 s and 24 days",
                ));
            }
            Ok(Some(d))
        }
    }
}

fn check_max(max_messages: usize) -> PyResult<()> {
    if max_messages == 0 || max_messages > 32767 {
        return Err(invalid("max_messages", "must be between 1 and 32767"));
    }
    Ok(())
}

/// A JMQ4 consumer (`jmq://host:port`) in one of three modes: `"clustering"` (the broker
/// balances partitions), `"coordinator"` (the coordinator assigns them) or `"broadcast"`
/// (every consumer reads everything; positions kept by the client).
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqConsumer {
    state: Arc<ConsumerState>,
    rt: RuntimeRef,
    endpoint: String,
}

#[pymethods]
impl JmqConsumer {
    #[new]
    #[pyo3(signature = (endpoints=None, topics=None, *, app, token, mode="clustering", region=None, namespace=None, ack_timeout=None, long_poll=None, session_timeout=None, request_timeout=None, metadata_refresh=None, client_ip=None, endpoint=None), text_signature = "(endpoints=None, topics=None, *, app, token, mode=\"clustering\", region=None, namespace=None, ack_timeout=30.0, long_poll=5.0, session_timeout=60.0, request_timeout=10.0, metadata_refresh=30.0, client_ip=None, endpoint=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: Option<&Bound<'_, PyAny>>,
        topics: Option<&Bound<'_, PyAny>>,
        app: String,
        token: String,
        mode: &str,
        region: Option<String>,
        namespace: Option<String>,
        ack_timeout: Option<&Bound<'_, PyAny>>,
        long_poll: Option<&Bound<'_, PyAny>>,
        session_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        metadata_refresh: Option<&Bound<'_, PyAny>>,
        client_ip: Option<String>,
        endpoint: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let endpoint = &endpoints_arg(py, endpoints, endpoint)?;
        let topics =
            topics.ok_or_else(|| invalid("topics", "is required (a str or a list of str)"))?;
        let topics: Vec<String> = if let Ok(t) = topics.extract::<String>() {
            vec![t]
        } else {
            topics
                .extract()
                .map_err(|_| invalid("topics", "must be a str or a list of str"))?
        };
        if topics.is_empty() {
            return Err(invalid("topics", "subscribe to at least one topic"));
        }
        for t in &topics {
            ferrymq_core::message::validate_topic(t).map_err(to_pyerr)?;
        }
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
        let options = ConsumerOptions {
            topics,
            mode: ConsumeMode::parse(mode).map_err(to_pyerr)?,
            ack_timeout: ack_timeout_arg(ack_timeout)?.unwrap_or(Duration::from_secs(30)),
            long_poll: durations::or(
                "long_poll",
                long_poll,
                Lower::NonNegative,
                Duration::from_secs(5),
            )?,
            session_timeout: durations::or(
                "session_timeout",
                session_timeout,
                Lower::Positive,
                Duration::from_secs(60),
            )?,
            ..ConsumerOptions::default()
        };
        Ok(Self {
            state: Arc::new(ConsumerState {
                cluster,
                options,
                client: OnceCell::new(),
                closed: std::sync::atomic::AtomicBool::new(false),
            }),
            rt: RuntimeRef::current()?,
            endpoint: endpoint.to_string(),
        })
    }

    /// Connect now and check every topic exists and is readable.
    fn start(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        let me = slf.get();
        let s = me.state.clone();
        me.rt
            .block_on(py, async move { s.get().await.map(|_| ()) })?;
        Ok(slf)
    }

    /// Async form of `start`; the awaitable gives the client back.
    fn start_async<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let s = slf.get().state.clone();
        let rt = slf.get().rt;
        let me = slf.unbind();
        future_into_py(py, rt, async move {
            s.get().await?;
            Ok(me)
        })
    }

    /// Receive up to `max_messages`, waiting up to `wait` seconds for the first (long poll).
    /// `ack_timeout` (seconds) overrides the consumer's for this fetch: how long the partition
    /// (or retry message) stays occupied without an ack.
    #[pyo3(signature = (max_messages=32, wait=None, *, ack_timeout=None), text_signature = "($self, max_messages=32, wait=5.0, *, ack_timeout=None)")]
    fn receive(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: usize,
        wait: Option<&Bound<'_, PyAny>>,
        ack_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyJmqMessage>> {
        check_max(max_messages)?;
        let wait = durations::or("wait", wait, Lower::NonNegative, Duration::from_secs(5))?;
        let ack_timeout = ack_timeout_arg(ack_timeout)?;
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            let c = s.get().await?;
            Ok(wrap(c.receive_with(max_messages, wait, ack_timeout).await?))
        })
    }

    /// Async form of `receive`.
    #[pyo3(signature = (max_messages=32, wait=None, *, ack_timeout=None), text_signature = "($self, max_messages=32, wait=5.0, *, ack_timeout=None)")]
    fn receive_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: usize,
        wait: Option<&Bound<'_, PyAny>>,
        ack_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_max(max_messages)?;
        let wait = durations::or("wait", wait, Lower::NonNegative, Duration::from_secs(5))?;
        let ack_timeout = ack_timeout_arg(ack_timeout)?;
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            let c = s.get().await?;
            Ok(wrap(c.receive_with(max_messages, wait, ack_timeout).await?))
        })
    }

    /// Settle the messages of one receive in a single COMMIT_ACK: `acks` consumed, `nacks` to
    /// the retry queue with `retry_type`. An ack releases the partition, so settling a fetch
    /// in two requests lets another fetch deliver its unsettled rest again.
    #[pyo3(signature = (acks, nacks, retry_type="exception"))]
    fn settle(
        &self,
        py: Python<'_>,
        acks: &Bound<'_, PyAny>,
        nacks: &Bound<'_, PyAny>,
        retry_type: &str,
    ) -> PyResult<()> {
        let a = extract_received("acks", acks)?;
        let n = extract_received("nacks", nacks)?;
        let rt_ = RetryType::parse(retry_type).map_err(to_pyerr)?;
        let s = self.state.clone();
        self.rt
            .block_on(py, async move { s.get().await?.settle(&a, &n, rt_).await })
    }

    /// Async form of `settle`.
    #[pyo3(signature = (acks, nacks, retry_type="exception"))]
    fn settle_async<'py>(
        &self,
        py: Python<'py>,
        acks: &Bound<'py, PyAny>,
        nacks: &Bound<'py, PyAny>,
        retry_type: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let a = extract_received("acks", acks)?;
        let n = extract_received("nacks", nacks)?;
        let rt_ = RetryType::parse(retry_type).map_err(to_pyerr)?;
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.get().await?.settle(&a, &n, rt_).await
        })
    }

    /// Acknowledge one message or a list of them (COMMIT_ACK).
    fn ack(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        let ms = extract_received("messages", messages)?;
        let s = self.state.clone();
        self.rt
            .block_on(py, async move { s.get().await?.ack(&ms).await })
    }

    /// Async form of `ack`.
    fn ack_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_received("messages", messages)?;
        let s = self.state.clone();
        future_into_py(py, self.rt, async move { s.get().await?.ack(&ms).await })
    }

    /// Negative acknowledgement with a retry type (`"timeout"`, `"exception"` or `"other"`):
    /// the broker redelivers the messages from its retry queue.
    #[pyo3(signature = (messages, retry_type="exception"))]
    fn nack(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, retry_type: &str) -> PyResult<()> {
        let ms = extract_received("messages", messages)?;
        let rt_ = RetryType::parse(retry_type).map_err(to_pyerr)?;
        let s = self.state.clone();
        self.rt
            .block_on(py, async move { s.get().await?.nack(&ms, rt_).await })
    }

    /// Async form of `nack`.
    #[pyo3(signature = (messages, retry_type="exception"))]
    fn nack_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        retry_type: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_received("messages", messages)?;
        let rt_ = RetryType::parse(retry_type).map_err(to_pyerr)?;
        let s = self.state.clone();
        future_into_py(
            py,
            self.rt,
            async move { s.get().await?.nack(&ms, rt_).await },
        )
    }

    /// FETCH_INDEX: `(ack_index, min_index, max_index)` of a partition for this app.
    fn fetch_index(
        &self,
        py: Python<'_>,
        topic: String,
        #[pyo3(from_py_with = crate::ints::partition)] partition: i16,
    ) -> PyResult<(i64, i64, i64)> {
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            let e = s.get().await?.fetch_index(&topic, partition).await?;
            Ok((e.index, e.left_index, e.right_index))
        })
    }

    /// COMMIT_ACK_INDEX: set this app's ack index of a partition.
    fn commit_index(
        &self,
        py: Python<'_>,
        topic: String,
        #[pyo3(from_py_with = crate::ints::partition)] partition: i16,
        #[pyo3(from_py_with = crate::ints::index)] index: i64,
    ) -> PyResult<()> {
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            s.get().await?.commit_index(&topic, partition, index).await
        })
    }

    /// Broadcast mode: the next index per `(topic, partition)`.
    fn positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        if let Some(c) = self.state.client.get() {
            for ((t, p), i) in c.positions() {
                d.set_item((t, p), i)?;
            }
        }
        Ok(d)
    }

    /// Close: REMOVE_CONSUMER and REMOVE_CONNECTION, then the sockets. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let s = self.state.clone();
        self.rt.block_on(py, async move {
            s.close().await;
            Ok(())
        })
    }

    /// Async form of `close`.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.close().await;
            Ok(())
        })
    }

    #[getter]
    fn topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.state.options.topics)
    }

    #[getter]
    fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The endpoint, as every client spells it.
    #[getter]
    fn endpoints(&self) -> &str {
        &self.endpoint
    }

    #[getter]
    fn closed(&self) -> bool {
        self.state.closed.load(std::sync::atomic::Ordering::Acquire)
    }

    fn __enter__(slf: Py<Self>, py: Python<'_>) -> PyResult<Py<Self>> {
        Self::start(slf, py)
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let s = slf.get().state.clone();
        let me: Py<Self> = slf.clone().unbind();
        future_into_py(slf.py(), slf.get().rt, async move {
            s.get().await?;
            Ok(me)
        })
    }

    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let s = self.state.clone();
        future_into_py(py, self.rt, async move {
            s.close().await;
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        format!(
            "JmqConsumer(endpoint={:?}, topics={:?}, mode={:?})",
            self.endpoint, self.state.options.topics, self.state.options.mode
        )
    }
}

fn command_of(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i8>> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(i) = v.extract::<i8>() {
        return Ok(Some(i));
    }
    let name: String = v
        .extract()
        .map_err(|_| invalid("command", "must be a command name, a command id or None"))?;
    let upper = name.to_ascii_uppercase();
    command_type::KNOWN
        .iter()
        .copied()
        .find(|t| command_type::name(*t) == upper)
        .map(Some)
        .ok_or_else(|| invalid("command", format!("unknown JMQ4 command {name:?}")))
}

/// The embedded JMQ4 server (one or more broker nodes on loopback ports sharing one store).
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqServer {
    inner: Arc<CoreServer>,
    rt: RuntimeRef,
}

#[pymethods]
impl JmqServer {
    #[new]
    #[pyo3(signature = (*, broker=None, nodes=1, port=None, host="127.0.0.1", advertised_host=None, regions=None, apps=None, retry_delay=None, max_body=3145728), text_signature = "(*, broker=None, nodes=1, port=None, host=\"127.0.0.1\", advertised_host=None, regions=None, apps=None, retry_delay=0.0, max_body=3145728)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        broker: Option<Bound<'_, crate::broker::EmbeddedBroker>>,
        #[pyo3(from_py_with = crate::ints::nodes)] nodes: usize,
        #[pyo3(from_py_with = crate::ints::port)] port: Option<u16>,
        host: &str,
        advertised_host: Option<String>,
        regions: Option<Vec<String>>,
        apps: Option<std::collections::HashMap<String, String>>,
        retry_delay: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_body)] max_body: usize,
    ) -> PyResult<Self> {
        if nodes == 0 || nodes > 64 {
            return Err(invalid("nodes", "must be between 1 and 64"));
        }
        let mut cfg = JmqServerConfig {
            bind_host: host.to_string(),
            advertised_host,
            nodes,
            ports: port.map(|p| vec![p]).unwrap_or_default(),
            regions: regions.unwrap_or_default(),
            ..JmqServerConfig::default()
        };
        if let Some(apps) = apps {
            cfg.apps.extend(apps);
        }
        cfg.store.retry_delay = durations::or(
            "retry_delay",
            retry_delay,
            Lower::NonNegative,
            Duration::ZERO,
        )?;
        cfg.store.max_body = max_body;
        let rt = RuntimeRef::server()?;
        let broker = broker.map(|b| b.get().inner.clone());
        let server = rt.block_on(py, async move {
            match broker {
                Some(b) => CoreServer::start_for_broker(&b, cfg).await,
                None => CoreServer::start(cfg).await,
            }
        })?;
        Ok(Self {
            inner: Arc::new(server),
            rt,
        })
    }

    /// `jmq://127.0.0.1:PORT` of the first node.
    #[getter]
    fn endpoint(&self) -> String {
        self.inner.endpoint()
    }

    /// `[(broker_id, "host:port", region), ...]`.
    #[getter]
    fn nodes(&self) -> Vec<(i32, String, String)> {
        self.inner
            .nodes()
            .iter()
            .map(|n| (n.id, n.addr.to_string(), n.region.clone()))
            .collect()
    }

    /// Create a topic with `partitions` partitions (idempotent for the same count).
    #[pyo3(signature = (name, partitions=4, *, broadcast=false))]
    fn create_topic(
        &self,
        name: &str,
        #[pyo3(from_py_with = crate::ints::partitions)] partitions: u16,
        broadcast: bool,
    ) -> PyResult<()> {
        self.inner
            .store()
            .create_topic(name, partitions, broadcast)
            .map_err(crate::errors::renamed("name", "topic"))
    }

    /// Register an app and its token.
    fn add_app(&self, app: &str, token: &str) {
        self.inner.add_app(app, token);
    }

    /// Messages (indices) stored in `topic`.
    fn message_count(&self, topic: &str) -> u64 {
        self.inner.store().message_count(topic)
    }

    /// Answer the next `times` requests of `command` (a name like "PRODUCE_MESSAGE", an id, or
    /// None for any) with JMQ4 code `code`.
    #[pyo3(signature = (code, *, command=None, times=1))]
    fn fail_next(
        &self,
        #[pyo3(from_py_with = crate::ints::code)] code: i32,
        command: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::times)] times: u32,
    ) -> PyResult<()> {
        let c = command_of(command)?;
        self.inner.fail_next(c, code, times);
        Ok(())
    }

    /// Delay every request by `seconds`.
    fn set_latency(&self, seconds_: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner
            .set_latency(durations::non_negative("seconds", seconds_)?);
        Ok(())
    }

    /// While true, drop every connection at once.
    fn set_unavailable(&self, unavailable: bool) {
        self.inner.set_unavailable(unavailable);
    }

    /// The FETCH_HEALTH point of `node` (0 healthy; ferrymq divides weights by 1 + point).
    fn set_health(&self, #[pyo3(from_py_with = crate::ints::node)] node: i32, point: f64) {
        self.inner.set_health(node, point);
    }

    /// Whether FIND_COORDINATOR finds a coordinator.
    fn set_coordinator_available(&self, available: bool) {
        self.inner.set_coordinator_available(available);
    }

    /// Move the leader of partition group `group` of `topic` to broker `node`.
    fn set_leader(
        &self,
        topic: &str,
        #[pyo3(from_py_with = crate::ints::group)] group: i32,
        #[pyo3(from_py_with = crate::ints::node)] node: i32,
    ) -> PyResult<()> {
        self.inner.set_leader(topic, group, node).map_err(to_pyerr)
    }

    /// Drop every connection (data kept), as a broker restart does.
    fn restart(&self) {
        self.inner.restart();
    }

    /// Connections open now.
    #[getter]
    fn connection_count(&self) -> usize {
        self.inner.connection_count()
    }

    /// Stop serving.
    fn shutdown(&self) {
        let _ = self.rt;
        self.inner.shutdown();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(&self, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) -> bool {
        self.inner.shutdown();
        false
    }

    fn __repr__(&self) -> String {
        format!("JmqServer(endpoint={:?})", self.inner.endpoint())
    }
}
