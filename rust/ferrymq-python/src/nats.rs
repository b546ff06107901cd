//! `ferrymq.JetStream` and `ferrymq.StreamInfo`: the NATS JetStream client over `nats://`
//! endpoints (consuming is `ferrymq.SimpleConsumer` / `ferrymq.PushConsumer` over `nats://`).

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::error::Error;
use ferrymq_core::nats::consumer_rpc::{bind_group, JsConsumerOptions};
use ferrymq_core::nats::{
    self, JetStream, NatsOptions, Retention, Storage, StreamConfig, StreamInfo,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Connect, Handle, LazyClient};
use crate::message::extract_message;
use crate::produce::Produce;
use crate::publish_args::{extract_outgoing, PyPublishAck};
use crate::runtime::RuntimeRef;

fn extract_endpoints(endpoints: &Bound<'_, PyAny>) -> PyResult<Vec<String>> {
    let joined = if let Ok(s) = endpoints.cast::<PyString>() {
        crate::errors::text("endpoints", s)?
    } else if let Ok(list) = endpoints.extract::<Vec<String>>() {
        list.join(",")
    } else {
        return Err(invalid(
            "endpoints",
            "must be a str (comma-separated nats:// URLs) or a list of str",
        ));
    };
    nats::parse_endpoints(&joined).map_err(to_pyerr)
}

/// The state of a JetStream stream.
#[pyclass(name = "StreamInfo", module = "ferrymq", frozen, skip_from_py_object)]
pub struct PyStreamInfo {
    inner: StreamInfo,
}

#[pymethods]
impl PyStreamInfo {
    #[getter]
    fn name(&self) -> &str {
        &self.inner.name
    }
    #[getter]
    fn subjects(&self) -> Vec<String> {
        self.inner.subjects.clone()
    }
    #[getter]
    fn messages(&self) -> u64 {
        self.inner.messages
    }
    #[getter]
    fn bytes(&self) -> u64 {
        self.inner.bytes
    }
    #[getter]
    fn first_sequence(&self) -> u64 {
        self.inner.first_sequence
    }
    #[getter]
    fn last_sequence(&self) -> u64 {
        self.inner.last_sequence
    }
    #[getter]
    fn consumer_count(&self) -> usize {
        self.inner.consumer_count
    }
    /// The de-duplication window in seconds.
    #[getter]
    fn duplicate_window(&self) -> f64 {
        self.inner.duplicate_window.as_secs_f64()
    }
    fn __repr__(&self) -> String {
        let i = &self.inner;
        format!(
            "StreamInfo(name={:?}, subjects={:?}, messages={}, last_sequence={})",
            i.name, i.subjects, i.messages, i.last_sequence
        )
    }
}

impl Connect for JetStream {
    type Options = NatsOptions;
    const CLOSED: &'static str = "the JetStream client is closed";
    fn open(options: NatsOptions) -> impl std::future::Future<Output = Result<Self, Error>> + Send {
        JetStream::connect(options)
    }
    fn shut(&self) -> impl std::future::Future<Output = Result<(), Error>> + Send {
        self.close()
    }
}

fn ack_to_py(py: Python<'_>, inner: ferrymq_core::publisher::PublishAck) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, PyPublishAck { inner })?.into_any())
}

/// A client of NATS with JetStream. `close()` flushes produced messages (running their
/// callbacks), then flushes and closes the connection.
#[pyclass(name = "JetStream", module = "ferrymq", frozen, extends = LazyClient)]
pub struct PyJetStream {
    /// Connected by `start()` (or the first call that needs it), never by the constructor;
    /// its endpoint is the endpoints with credentials removed.
    h: Handle<JetStream>,
    produce: Arc<Produce<Handle<JetStream>>>,
}

impl PyJetStream {
    /// The options it connects with (a push consumer opens its own connection with them).
    pub fn options(&self) -> NatsOptions {
        self.h.state.options.clone()
    }

    /// The connected client (connecting now if needed), for the managed publisher.
    pub fn connected(&self, py: Python<'_>) -> PyResult<JetStream> {
        self.h.connect(py)
    }
}

#[allow(clippy::too_many_arguments)]
fn stream_config(
    name: String,
    subjects: Vec<String>,
    storage: &str,
    retention: &str,
    duplicate_window: Option<&Bound<'_, PyAny>>,
    max_messages: Option<i64>,
    max_bytes: Option<i64>,
    max_age: Option<&Bound<'_, PyAny>>,
    replicas: usize,
) -> PyResult<StreamConfig> {
    Ok(StreamConfig {
        name,
        subjects,
        storage: Storage::parse(storage).map_err(to_pyerr)?,
        retention: Retention::parse(retention).map_err(to_pyerr)?,
        duplicate_window: durations::optional(
            "duplicate_window",
            duplicate_window,
            Lower::Positive,
        )?,
        max_messages,
        max_bytes,
        max_age: durations::optional("max_age", max_age, Lower::Positive)?,
        replicas,
    })
}

#[pymethods]
impl PyJetStream {
    /// Check the arguments; `start()` (or `with`, or the first call that needs it) connects.
    #[new]
    #[pyo3(signature = (endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=None, request_timeout=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING), text_signature = "(endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0, max_pending=65536)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        name: Option<String>,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
        let rt = RuntimeRef::current()?;
        let opts = NatsOptions {
            connect_timeout: durations::timeout_or(
                "connect_timeout",
                connect_timeout,
                Duration::from_secs(5),
            )?,
            request_timeout: durations::timeout_or(
                "request_timeout",
                request_timeout,
                Duration::from_secs(5),
            )?,
            endpoints: extract_endpoints(endpoints)?,
            name,
            user,
            password,
            token,
        };
        let endpoints = opts
            .endpoints
            .iter()
            .map(|e| nats::redact(e))
            .collect::<Vec<_>>()
            .join(",");
        let h = Handle::new(endpoints, opts, rt);
        let produce = Arc::new(Produce::new(h.clone(), max_pending, rt, ack_to_py)?);
        let base = LazyClient::producer(&h, &produce);
        Ok(PyClassInitializer::from(base).add_subclass(Self { h, produce }))
    }

    /// Connect without blocking the event loop: `js = await JetStream.connect_async(...)`.
    #[staticmethod]
    #[pyo3(signature = (endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=None, request_timeout=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING), text_signature = "(endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0, max_pending=65536)")]
    #[allow(clippy::too_many_arguments)]
    fn connect_async<'py>(
        py: Python<'py>,
        endpoints: &Bound<'_, PyAny>,
        name: Option<String>,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let js = Self::new(
            endpoints,
            name,
            user,
            password,
            token,
            connect_timeout,
            request_timeout,
            max_pending,
        )?;
        let js = Py::new(py, js)?;
        js.get().h.start_async(py, js.clone_ref(py))
    }

    /// The server's version, e.g. "2.9.10".
    #[getter]
    fn server_version(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.connected(py)?.server_version())
    }

    /// Publish and wait for the JetStream ack (blocking, GIL released).
    #[pyo3(signature = (subject, body=None, *, headers=None, message_id=None, expected_stream=None, expected_last_sequence=None, expected_last_subject_sequence=None, expected_last_msg_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn publish(
        &self,
        py: Python<'_>,
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
    ) -> PyResult<PyPublishAck> {
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
        self.h.block(py, move |js| async move {
            let inner = js.publish(None, &out).await?;
            Ok(PyPublishAck { inner })
        })
    }

    /// Publish and await the JetStream ack.
    #[pyo3(signature = (subject, body=None, *, headers=None, message_id=None, expected_stream=None, expected_last_sequence=None, expected_last_subject_sequence=None, expected_last_msg_id=None))]
    #[allow(clippy::too_many_arguments)]
    fn publish_async<'py>(
        &self,
        py: Python<'py>,
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
    ) -> PyResult<Bound<'py, PyAny>> {
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
        self.h.spawn(py, move |js| async move {
            let inner = js.publish(None, &out).await?;
            Ok(PyPublishAck { inner })
        })
    }

    /// Create a stream (or return the existing one with the same settings).
    #[pyo3(signature = (name, subjects, *, storage="file", retention="limits", duplicate_window=None, max_messages=None, max_bytes=None, max_age=None, replicas=1))]
    #[allow(clippy::too_many_arguments)]
    fn create_stream(
        &self,
        py: Python<'_>,
        name: String,
        subjects: &Bound<'_, PyAny>,
        storage: &str,
        retention: &str,
        duplicate_window: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: Option<i64>,
        #[pyo3(from_py_with = crate::ints::max_bytes)] max_bytes: Option<i64>,
        max_age: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::replicas)] replicas: usize,
    ) -> PyResult<PyStreamInfo> {
        let subjects: Vec<String> = if let Ok(s) = subjects.cast::<PyString>() {
            vec![crate::errors::text("subjects", s)?]
        } else {
            subjects
                .extract()
                .map_err(|_| invalid("subjects", "must be a str or a list of str"))?
        };
        let cfg = stream_config(
            name,
            subjects,
            storage,
            retention,
            duplicate_window,
            max_messages,
            max_bytes,
            max_age,
            replicas,
        )?;
        self.h.block(py, move |js| async move {
            let inner = js.create_stream(&cfg).await?;
            Ok(PyStreamInfo { inner })
        })
    }

    /// The state of stream `name`.
    fn stream_info(&self, py: Python<'_>, name: String) -> PyResult<PyStreamInfo> {
        ferrymq_core::nats::stream::validate_name("name", &name).map_err(to_pyerr)?;
        self.h.block(py, move |js| async move {
            let inner = js.stream_info(&name).await?;
            Ok(PyStreamInfo { inner })
        })
    }

    /// Delete stream `name`; False when it did not exist.
    fn delete_stream(&self, py: Python<'_>, name: String) -> PyResult<bool> {
        ferrymq_core::nats::stream::validate_name("name", &name).map_err(to_pyerr)?;
        self.h
            .block(py, move |js| async move { js.delete_stream(&name).await })
    }

    /// The counters of consumer group `group`'s durable consumer of `subject` (what
    /// `SimpleConsumer` and `PushConsumer` read over `nats://`, created with the default
    /// `ack_wait` when missing): num_pending, num_ack_pending, num_redelivered, num_waiting,
    /// delivered_stream_sequence, ack_floor_stream_sequence. The stream is `stream`, or else
    /// the one whose subjects hold `subject`.
    #[pyo3(signature = (group, subject, *, stream=None))]
    fn consumer_state<'py>(
        &self,
        py: Python<'py>,
        group: String,
        subject: String,
        stream: Option<String>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let s = self.h.block(py, move |js| async move {
            let ack_wait = JsConsumerOptions::new(&group).ack_wait;
            let c = bind_group(&js, &group, &subject, stream.as_deref(), ack_wait).await?;
            c.state().await
        })?;
        let d = PyDict::new(py);
        d.set_item("num_pending", s.num_pending)?;
        d.set_item("num_ack_pending", s.num_ack_pending)?;
        d.set_item("num_redelivered", s.num_redelivered)?;
        d.set_item("num_waiting", s.num_waiting)?;
        d.set_item("delivered_stream_sequence", s.delivered_stream_sequence)?;
        d.set_item("ack_floor_stream_sequence", s.ack_floor_stream_sequence)?;
        Ok(d)
    }

    /// Delete consumer `name` of `stream`; False when it did not exist.
    fn delete_consumer(&self, py: Python<'_>, stream: String, name: String) -> PyResult<bool> {
        self.h.block(py, move |js| async move {
            js.delete_consumer(&stream, &name).await
        })
    }

    /// Wait until every produced message is reported (or `timeout` seconds pass), running the
    /// callbacks here, then flush pending writes to the server; returns how many produced
    /// messages are still pending.
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let left = self.produce.flush(py, timeout)?;
        self.h.block(py, |js| async move { js.flush().await })?;
        Ok(left)
    }

    /// Queue `message` (a `ferrymq.Message`: subject = topic, properties as headers, a fresh
    /// `Nats-Msg-Id`) for a batched publish; `on_delivery(err, ack)` runs later, on this
    /// thread, inside `poll()`/`flush()`. Blocks (serving callbacks) while `max_pending` are
    /// pending.
    #[pyo3(signature = (message, on_delivery=None))]
    fn produce(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        on_delivery: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        self.produce
            .produce(py, extract_message(message)?, on_delivery)
    }

    /// Run the callbacks of finished deliveries (waiting up to `timeout` seconds for one);
    /// returns how many were reported.
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=0.0)")]
    fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        self.produce.poll(py, timeout)
    }

    /// Messages produced and not yet reported.
    #[getter]
    fn pending(&self) -> usize {
        self.produce.pending()
    }

    fn __repr__(&self) -> String {
        format!("JetStream({:?})", self.h.endpoint)
    }
}
