//! `ferrymq.JetStream` and `ferrymq.StreamInfo`: the NATS JetStream client over `nats://`
//! endpoints (consuming is `ferrymq.SimpleConsumer` / `ferrymq.PushConsumer` over `nats://`).

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

/// The connect options of `endpoints` and the endpoints as shown (credentials removed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn options(
    endpoints: &Bound<'_, PyAny>,
    name: Option<String>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    request_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<(NatsOptions, String)> {
    let timeout = |field, v| durations::timeout_or(field, v, Duration::from_secs(5));
    let opts = NatsOptions {
        connect_timeout: timeout("connect_timeout", connect_timeout)?,
        request_timeout: timeout("request_timeout", request_timeout)?,
        endpoints: extract_endpoints(endpoints)?,
        name,
        user,
        password,
        token,
    };
    let shown = opts
        .endpoints
        .iter()
        .map(|e| nats::redact(e))
        .collect::<Vec<_>>()
        .join(",");
    Ok((opts, shown))
}

/// The state of a JetStream stream.
#[pyclass(
    name = "StreamInfo",
    module = "ferrymq",
    frozen,
    get_all,
    skip_from_py_object
)]
pub struct PyStreamInfo {
    name: String,
    subjects: Vec<String>,
    messages: u64,
    bytes: u64,
    first_sequence: u64,
    last_sequence: u64,
    consumer_count: usize,
    /// The de-duplication window in seconds.
    duplicate_window: f64,
}

impl From<StreamInfo> for PyStreamInfo {
    fn from(i: StreamInfo) -> Self {
        Self {
            name: i.name,
            subjects: i.subjects,
            messages: i.messages,
            bytes: i.bytes,
            first_sequence: i.first_sequence,
            last_sequence: i.last_sequence,
            consumer_count: i.consumer_count,
            duplicate_window: i.duplicate_window.as_secs_f64(),
        }
    }
}

#[pymethods]
impl PyStreamInfo {
    fn __repr__(&self) -> String {
        format!(
            "StreamInfo(name={:?}, subjects={:?}, messages={}, last_sequence={})",
            self.name, self.subjects, self.messages, self.last_sequence
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

/// A client of NATS with JetStream: stream and consumer admin (`ferrymq.Producer("nats://…")`
/// publishes). `close()` flushes and closes the connection.
#[pyclass(name = "JetStream", module = "ferrymq", frozen, extends = LazyClient)]
pub struct PyJetStream {
    /// Connected by `start()` (or the first call that needs it), never by the constructor;
    /// its endpoint is the endpoints with credentials removed.
    h: Handle<JetStream>,
}

impl PyJetStream {
    /// The options it connects with (a push consumer opens its own connection with them).
    pub fn options(&self) -> NatsOptions {
        self.h.state.options.clone()
    }

    /// The connected client (connecting now if needed).
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
    #[pyo3(signature = (endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=None, request_timeout=None), text_signature = "(endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0)")]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        name: Option<String>,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        let rt = RuntimeRef::current()?;
        let (opts, shown) = options(
            endpoints,
            name,
            user,
            password,
            token,
            connect_timeout,
            request_timeout,
        )?;
        let h = Handle::new(shown, opts, rt);
        let base = LazyClient::of(&h);
        Ok(PyClassInitializer::from(base).add_subclass(Self { h }))
    }

    /// Connect without blocking the event loop: `js = await JetStream.connect_async(...)`.
    #[staticmethod]
    #[pyo3(signature = (endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=None, request_timeout=None), text_signature = "(endpoints, *, name=None, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0)")]
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
    ) -> PyResult<Bound<'py, PyAny>> {
        let js = Self::new(
            endpoints,
            name,
            user,
            password,
            token,
            connect_timeout,
            request_timeout,
        )?;
        let js = Py::new(py, js)?;
        js.get().h.start_async(py, js.clone_ref(py))
    }

    /// The server's version, e.g. "2.9.10".
    #[getter]
    fn server_version(&self, py: Python<'_>) -> PyResult<String> {
        Ok(self.connected(py)?.server_version())
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
            Ok(js.create_stream(&cfg).await?.into())
        })
    }

    /// The state of stream `name`.
    fn stream_info(&self, py: Python<'_>, name: String) -> PyResult<PyStreamInfo> {
        ferrymq_core::nats::stream::validate_name("name", &name).map_err(to_pyerr)?;
        self.h.block(py, move |js| async move {
            Ok(js.stream_info(&name).await?.into())
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

    fn __repr__(&self) -> String {
        format!("JetStream({:?})", self.h.endpoint)
    }
}
