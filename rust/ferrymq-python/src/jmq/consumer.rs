//! `ferrymq.JmqConsumer` and the messages it receives (`ferrymq.JmqMessage`).

use std::time::Duration;

use ferrymq_core::jmq::cluster::ClusterOptions;
use ferrymq_core::jmq::command::RetryType;
use ferrymq_core::jmq::consumer::{
    ConsumeMode, ConsumerOptions, JmqConsumer as CoreConsumer, ReceivedMessage,
};
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyBytes, PyDict, PyList, PyTuple};

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Handle, LazyClient};
use crate::runtime::RuntimeRef;

use super::{cluster_options, endpoints_arg};

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
        (&self.inner.properties).into_py_dict(py)
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
/// (every consumer reads everything; positions kept by the client). `start()` connects and checks
/// every topic exists and is readable; `close()` sends REMOVE_CONSUMER and REMOVE_CONNECTION,
/// then closes the sockets.
#[pyclass(module = "ferrymq._native", frozen, extends = LazyClient)]
pub struct JmqConsumer {
    h: Handle<CoreConsumer>,
}

impl JmqConsumer {
    /// The cluster and consumer options, for a push consumer built from them.
    pub(crate) fn options(&self) -> (ClusterOptions, ConsumerOptions) {
        self.h.state.options.clone()
    }
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
    ) -> PyResult<PyClassInitializer<Self>> {
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
            session_timeout: durations::timeout_or(
                "session_timeout",
                session_timeout,
                Duration::from_secs(60),
            )?,
            ..ConsumerOptions::default()
        };
        let h = Handle::new(
            endpoint.to_string(),
            (cluster, options),
            RuntimeRef::current()?,
        );
        Ok(PyClassInitializer::from(LazyClient::of(&h)).add_subclass(Self { h }))
    }

    /// Receive up to `max_messages`, waiting up to `wait` seconds for the first (long poll).
    /// `ack_timeout` (seconds) overrides the consumer's for this fetch: how long the partition
    /// (or retry message) stays occupied without an ack.
    #[pyo3(signature = (max_messages=16, wait=None, *, ack_timeout=None), text_signature = "($self, max_messages=16, wait=20.0, *, ack_timeout=None)")]
    fn receive(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: usize,
        wait: Option<&Bound<'_, PyAny>>,
        ack_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyJmqMessage>> {
        check_max(max_messages)?;
        let wait = durations::or("wait", wait, Lower::NonNegative, durations::RECEIVE_WAIT)?;
        let ack_timeout = ack_timeout_arg(ack_timeout)?;
        self.h.block(py, move |c| async move {
            Ok(wrap(c.receive_with(max_messages, wait, ack_timeout).await?))
        })
    }

    /// Async form of `receive`.
    #[pyo3(signature = (max_messages=16, wait=None, *, ack_timeout=None), text_signature = "($self, max_messages=16, wait=20.0, *, ack_timeout=None)")]
    fn receive_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: usize,
        wait: Option<&Bound<'_, PyAny>>,
        ack_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        check_max(max_messages)?;
        let wait = durations::or("wait", wait, Lower::NonNegative, durations::RECEIVE_WAIT)?;
        let ack_timeout = ack_timeout_arg(ack_timeout)?;
        self.h.spawn(py, move |c| async move {
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
        self.h
            .block(py, move |c| async move { c.settle(&a, &n, rt_).await })
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
        self.h
            .spawn(py, move |c| async move { c.settle(&a, &n, rt_).await })
    }

    /// Acknowledge one message or a list of them (COMMIT_ACK).
    fn ack(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<()> {
        let ms = extract_received("messages", messages)?;
        self.h.block(py, move |c| async move { c.ack(&ms).await })
    }

    /// Async form of `ack`.
    fn ack_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let ms = extract_received("messages", messages)?;
        self.h.spawn(py, move |c| async move { c.ack(&ms).await })
    }

    /// Negative acknowledgement with a retry type (`"timeout"`, `"exception"` or `"other"`):
    /// the broker redelivers the messages from its retry queue.
    #[pyo3(signature = (messages, retry_type="exception"))]
    fn nack(&self, py: Python<'_>, messages: &Bound<'_, PyAny>, retry_type: &str) -> PyResult<()> {
        let ms = extract_received("messages", messages)?;
        let rt_ = RetryType::parse(retry_type).map_err(to_pyerr)?;
        self.h
            .block(py, move |c| async move { c.nack(&ms, rt_).await })
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
        self.h
            .spawn(py, move |c| async move { c.nack(&ms, rt_).await })
    }

    /// FETCH_INDEX: `(ack_index, min_index, max_index)` of a partition for this app.
    fn fetch_index(
        &self,
        py: Python<'_>,
        topic: String,
        #[pyo3(from_py_with = crate::ints::partition)] partition: i16,
    ) -> PyResult<(i64, i64, i64)> {
        self.h.block(py, move |c| async move {
            let e = c.fetch_index(&topic, partition).await?;
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
        self.h.block(py, move |c| async move {
            c.commit_index(&topic, partition, index).await
        })
    }

    /// Broadcast mode: the next index per `(topic, partition)`.
    fn positions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        if let Some(c) = self.h.state.connected() {
            for ((t, p), i) in c.positions() {
                d.set_item((t, p), i)?;
            }
        }
        Ok(d)
    }

    #[getter]
    fn topics<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        PyList::new(py, &self.h.state.options.1.topics)
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
            "JmqConsumer(endpoint={:?}, topics={:?}, mode={:?})",
            self.h.endpoint, self.h.state.options.1.topics, self.h.state.options.1.mode
        )
    }
}
