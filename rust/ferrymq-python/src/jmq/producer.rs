//! `_native.jmq_producer` (what `ferrymq.Producer("jmq://…")` calls), its transactions
//! (`_native.JmqTransaction`, on the topic of their first message), the orphans its checker is
//! asked about (`_native.JmqOrphan`) and `ferrymq.JmqSendReceipt`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::jmq::codec::QosLevel;
use ferrymq_core::jmq::command::Feedback;
use ferrymq_core::jmq::compress::Compression;
use ferrymq_core::jmq::producer::{
    JmqProducer as CoreProducer, ProducerOptions, SendReceipt, TransactionChecker, TxResolution,
};
use ferrymq_core::jmq::transaction::JmqTransaction as CoreTransaction;
use ferrymq_core::rocketmq::producer::TransactionResolution;
use ferrymq_core::{Error, Message};
use parking_lot::Mutex;
use pyo3::prelude::*;
use tokio::sync::OnceCell;

use ferrymq_core::publisher::PublishBackend;
use futures::future::BoxFuture;

use crate::durations;
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Handle, LazyClient};
use crate::message::extract_message;
use crate::produce::Produce;
use crate::protocol_producer::{Facts, Protocol, ProtocolProducer, Receipt};
use crate::runtime::RuntimeRef;

use super::{cluster_options, endpoints_arg};

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

impl From<SendReceipt> for PyJmqSendReceipt {
    fn from(inner: SendReceipt) -> Self {
        Self { inner }
    }
}

/// An expired JMQ4 transaction offered to the transaction checker.
#[pyclass(module = "ferrymq._native", frozen, get_all, skip_from_py_object)]
pub struct JmqOrphan {
    topic: String,
    tx_id: String,
    transaction_id: String,
}

#[pymethods]
impl JmqOrphan {
    fn __repr__(&self) -> String {
        format!(
            "JmqOrphan(topic={:?}, tx_id={:?}, transaction_id={:?})",
            self.topic, self.tx_id, self.transaction_id
        )
    }
}

/// Asks `checker(JmqOrphan) -> TransactionResolution` (as for RocketMQ) on a blocking thread.
fn python_checker(callback: Py<PyAny>) -> TransactionChecker {
    let callback = Arc::new(callback);
    Arc::new(move |f: Feedback| {
        let cb = callback.clone();
        Box::pin(crate::exit::ask_checker(TxResolution::Unknown, move |py| {
            let orphan = JmqOrphan {
                topic: f.topic,
                tx_id: f.tx_id,
                transaction_id: f.transaction_id,
            };
            let out = cb.call1(py, (orphan,))?;
            Ok(match crate::producer::resolution_of(out.bind(py))? {
                TransactionResolution::Commit => TxResolution::Commit,
                TransactionResolution::Rollback => TxResolution::Rollback,
                TransactionResolution::Unknown => TxResolution::Unknown,
            })
        }))
    })
}

fn receipt_to_py(py: Python<'_>, inner: SendReceipt) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyJmqSendReceipt { inner })?.into_any())
}

/// The managed publisher drives a JMQ4 producer through its lazily connected client.
impl PublishBackend for Handle<CoreProducer> {
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
    fn metrics(&self) -> Option<ferrymq_core::metrics::ClientMetrics> {
        self.state.connected().map(|p| p.metrics().clone())
    }
}

/// A JMQ4 producer (`jmq://host:port`); `ferrymq.Producer` makes it. `start()` connects
/// (bootstrap + ADD_CONNECTION), failing fast on a wrong address, app or token; `close()`
/// flushes produced messages (running their callbacks), then REMOVE_PRODUCER and
/// REMOVE_CONNECTION, then the sockets.
#[pyfunction]
#[pyo3(signature = (endpoints=None, *, app=None, token=None, region=None, namespace=None, qos="replication", compression="zlib", compress_threshold=100, max_attempts=3, send_timeout=None, request_timeout=None, max_body=3145728, transaction_timeout=None, transaction_checker=None, transaction_topics=None, feedback_interval=None, metadata_refresh=None, client_ip=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING), text_signature = "(endpoints=None, *, app=None, token=None, region=None, namespace=None, qos=\"replication\", compression=\"zlib\", compress_threshold=100, max_attempts=3, send_timeout=5.0, request_timeout=10.0, max_body=3145728, transaction_timeout=600.0, transaction_checker=None, transaction_topics=None, feedback_interval=5.0, metadata_refresh=30.0, client_ip=None, max_pending=65536)")]
#[allow(clippy::too_many_arguments)]
pub fn jmq_producer(
    py: Python<'_>,
    endpoints: Option<&Bound<'_, PyAny>>,
    app: Option<String>,
    token: Option<String>,
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
) -> PyResult<Py<ProtocolProducer>> {
    let endpoint = &endpoints_arg(py, endpoints, None)?;
    let needs = "a jmq:// endpoint needs app= and token=";
    let app = app
        .filter(|a| !a.is_empty())
        .ok_or_else(|| invalid("app", needs))?;
    let token = token
        .filter(|t| !t.is_empty())
        .ok_or_else(|| invalid("token", needs))?;
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
        send_timeout: durations::timeout_or("send_timeout", send_timeout, Duration::from_secs(5))?,
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
    let h: Handle<CoreProducer> = Handle::new(
        endpoint.to_string(),
        (cluster, options),
        RuntimeRef::current()?,
    );
    let produce = Arc::new(Produce::new(h.clone(), max_pending, h.rt, receipt_to_py)?);
    let connect = &h.state.options.0.connect;
    let facts = Facts {
        protocol: "jmq",
        refused: "JMQ4 has no delayed messages to recall",
        client_id: format!("jmq:{}", connect.app),
        namespace: connect.namespace.clone().unwrap_or_default(),
        shown: vec![
            ("endpoint", h.endpoint.clone()),
            ("app", connect.app.clone()),
        ],
    };
    let base = LazyClient::producer(&h, &produce);
    ProtocolProducer::create(py, base, h.clone(), Some(produce), h.rt, facts)
}

/// Single and batch sends: one batch per topic, one request per leader broker, each message
/// keeping its businessId. A transaction takes the topic of its first message (PREPARE is sent
/// with that message, under a fresh transaction id the checker is told about if it expires
/// unresolved).
impl Protocol for Handle<CoreProducer> {
    fn send(&self, m: Message) -> BoxFuture<'static, Result<Receipt, Error>> {
        self.run(move |p| async move { Ok(Receipt::Jmq(p.send(&m).await?.into())) })
    }

    fn send_batch(&self, ms: Vec<Message>) -> BoxFuture<'static, Result<Vec<Receipt>, Error>> {
        self.run(move |p| async move {
            let sent = p.send_batch(&ms).await?;
            Ok(sent.into_iter().map(|r| Receipt::Jmq(r.into())).collect())
        })
    }

    fn begin_transaction(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let tx = JmqTransaction {
            rt: self.rt,
            h: self.clone(),
            state: Arc::default(),
        };
        Ok(Py::new(py, tx)?.into_any())
    }

    fn publish_backend(&self) -> PyResult<Arc<dyn PublishBackend>> {
        Ok(Arc::new(self.clone()))
    }

    fn metrics(&self) -> Option<ferrymq_core::metrics::ClientMetrics> {
        self.state.connected().map(|p| p.metrics().clone())
    }
}

/// What a transaction holds once its first message opened it.
#[derive(Default)]
struct TxState {
    tx: OnceCell<CoreTransaction>,
    receipts: Mutex<Vec<SendReceipt>>,
    done: AtomicBool,
}

impl TxState {
    /// Open the transaction on the topic of `m` if needed, then send `m` in it.
    async fn send(&self, p: CoreProducer, m: Message) -> Result<PyJmqSendReceipt, Error> {
        let tx = self
            .tx
            .get_or_try_init(|| {
                let id = ferrymq_core::message_id::generate();
                let topic = m.topic().to_string();
                async move { p.begin_transaction(&topic, Some(id)).await }
            })
            .await?;
        let inner = tx
            .send(std::slice::from_ref(&m))
            .await?
            .pop()
            .ok_or_else(|| Error::internal("a transactional message got no receipt"))?;
        self.receipts.lock().push(inner.clone());
        Ok(PyJmqSendReceipt { inner })
    }

    async fn end(self: Arc<Self>, commit: bool) -> Result<(), Error> {
        if let Some(tx) = self.tx.get() {
            if commit {
                tx.commit().await?;
            } else {
                tx.rollback().await?;
            }
        }
        self.done.store(true, Ordering::Release);
        Ok(())
    }
}

/// A JMQ4 transaction whose topic is set by its first `send`. As a context manager it commits
/// on success and rolls back on an exception.
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqTransaction {
    rt: RuntimeRef,
    h: Handle<CoreProducer>,
    state: Arc<TxState>,
}

pymethods_with_async! {
    impl JmqTransaction {
        /// Receipts of the messages sent so far.
        #[getter]
        fn receipts(&self) -> Vec<PyJmqSendReceipt> {
            self.state
                .receipts
                .lock()
                .iter()
                .cloned()
                .map(Into::into)
                .collect()
        }

        fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
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
            if !self.state.done.load(Ordering::Acquire) {
                if exc_type.is_some_and(|t| !t.is_none()) {
                    self.rollback(py)?;
                } else {
                    self.commit(py)?;
                }
            }
            Ok(false)
        }

        fn __repr__(&self) -> String {
            let topic = self.state.tx.get().map(|t| t.topic().to_string());
            format!("JmqTransaction(topic={topic:?})")
        }
    }

    /// Send a message inside the transaction (invisible until commit).
    fn send / send_async(&self, py, message: &Bound<'_, PyAny>) -> PyJmqSendReceipt {
        let (m, st) = (extract_message(message)?, Arc::clone(&self.state));
        self.h.run(move |p| async move { st.send(p, m).await })
    }

    fn commit / commit_async(&self, py) -> () {
        Arc::clone(&self.state).end(true)
    }

    fn rollback / rollback_async(&self, py) -> () {
        Arc::clone(&self.state).end(false)
    }
}
