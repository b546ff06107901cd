//! `ferrymq.Message`: the validated message shared by every backend.

use std::time::UNIX_EPOCH;

use bytes::Bytes;
use ferrymq_core::Message;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyByteArray, PyBytes, PyDict, PyString, PyTuple};

use crate::errors::{invalid, to_pyerr};

/// A message to publish. Immutable; validated when created.
#[pyclass(name = "Message", module = "ferrymq", frozen, skip_from_py_object)]
#[derive(Clone)]
pub struct PyMessage {
    pub inner: Message,
}

/// Read a body argument: `bytes`, `bytearray` or `memoryview`, never `str`.
pub fn extract_body(body: &Bound<'_, PyAny>) -> PyResult<Bytes> {
    if let Ok(b) = body.cast::<PyBytes>() {
        return Ok(Bytes::copy_from_slice(b.as_bytes()));
    }
    if let Ok(b) = body.cast::<PyByteArray>() {
        return Ok(Bytes::from(b.to_vec()));
    }
    if body.is_instance_of::<PyString>() {
        return Err(invalid(
            "body",
            "must be bytes, not str (encode it, e.g. body.encode())",
        ));
    }
    if let Ok(v) = body.extract::<Vec<u8>>() {
        if !body.hasattr("__len__")? || body.get_type().name()? == "memoryview" {
            return Ok(Bytes::from(v));
        }
    }
    Err(invalid(
        "body",
        format!(
            "must be bytes, bytearray or memoryview, not {}",
            body.get_type().name()?
        ),
    ))
}

/// Read the optional `dict` of str to str given as `param`, keeping its order (`keys`: what
/// its keys are called in errors).
pub(crate) fn str_pairs(
    param: &str,
    keys: &str,
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, String)>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let d = v
        .cast::<PyDict>()
        .map_err(|_| invalid(param, "must be a dict of str to str"))?;
    let mut out = Vec::with_capacity(d.len());
    for (k, v) in d.iter() {
        let k: String = k
            .extract()
            .map_err(|_| invalid(param, format!("{keys} must be str")))?;
        let v: String = v
            .extract()
            .map_err(|_| invalid(param, format!("value of {k:?} must be str")))?;
        out.push((k, v));
    }
    Ok(out)
}

/// Read an optional str argument named `param` (`None` = not given).
fn opt_text(param: &str, v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<String>> {
    match v.filter(|v| !v.is_none()) {
        None => Ok(None),
        Some(v) => {
            let s = v
                .cast::<PyString>()
                .map_err(|_| invalid(param, format!("must be a str, not {}", v.get_type())))?;
            crate::errors::text(param, s).map(Some)
        }
    }
}

/// Read a `ferrymq.Message` argument.
pub(crate) fn extract_message(m: &Bound<'_, PyAny>) -> PyResult<Message> {
    m.cast::<PyMessage>()
        .map(|m| m.get().inner.clone())
        .map_err(|_| invalid("message", "must be a ferrymq.Message"))
}

#[pymethods]
impl PyMessage {
    #[new]
    #[pyo3(signature = (topic, body, *, keys=None, tag=None, properties=None, message_group=None, delivery_time=None, priority=None, trace_context=None, trace_state=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        topic: &Bound<'_, PyAny>,
        body: &Bound<'_, PyAny>,
        keys: Option<&Bound<'_, PyAny>>,
        tag: Option<String>,
        properties: Option<&Bound<'_, PyAny>>,
        message_group: Option<String>,
        delivery_time: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::priority)] priority: Option<i32>,
        trace_context: Option<&Bound<'_, PyAny>>,
        trace_state: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let topic: String = topic
            .extract()
            .map_err(|_| invalid("topic", "must be a str"))?;
        let mut b = Message::builder(topic, extract_body(body)?);
        if let Some(keys) = keys {
            let keys: Vec<String> = if let Ok(s) = keys.cast::<PyString>() {
                vec![crate::errors::text("keys", s)?]
            } else {
                keys.extract()
                    .map_err(|_| invalid("keys", "must be a str or a sequence of str"))?
            };
            b = b.keys(keys);
        }
        if let Some(tag) = tag {
            b = b.tag(tag);
        }
        for (k, v) in str_pairs("properties", "keys", properties)? {
            b = b.property(k, v);
        }
        if let Some(g) = message_group {
            b = b.message_group(g);
        }
        if let Some(t) = delivery_time {
            b = b.delivery_time(crate::durations::unix_time("delivery_time", t)?);
        }
        if let Some(p) = priority {
            b = b.priority(p);
        }
        if let Some(t) = opt_text("trace_context", trace_context)? {
            b = b.trace_context(t);
        }
        if let Some(t) = opt_text("trace_state", trace_state)? {
            b = b.trace_state(t);
        }
        Ok(Self {
            inner: b.build().map_err(to_pyerr)?,
        })
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
    fn keys<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.keys())
    }
    #[getter]
    fn tag(&self) -> Option<&str> {
        self.inner.tag()
    }
    #[getter]
    fn properties<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        self.inner.properties().into_py_dict(py)
    }
    #[getter]
    fn message_group(&self) -> Option<&str> {
        self.inner.message_group()
    }
    /// Delivery time in Unix seconds, or None.
    #[getter]
    fn delivery_time(&self) -> Option<f64> {
        self.inner.delivery_time().map(|t| {
            t.duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs_f64()
        })
    }
    #[getter]
    fn priority(&self) -> Option<i32> {
        self.inner.priority()
    }
    /// The W3C `traceparent` the message carries, or None.
    #[getter]
    fn trace_context(&self) -> Option<&str> {
        self.inner.trace_context().map(|t| t.parent())
    }
    /// The W3C `tracestate` that goes with the trace context, or None.
    #[getter]
    fn trace_state(&self) -> Option<&str> {
        self.inner.trace_context().and_then(|t| t.state())
    }
    /// A copy of this message carrying the W3C trace context `trace_context` (a
    /// `traceparent`) and `trace_state` (a `tracestate`, or None), replacing any it had; the
    /// body is shared, not copied. Invalid values raise `InvalidArgumentError` naming them.
    #[pyo3(signature = (trace_context, trace_state=None))]
    fn with_trace_context(
        &self,
        trace_context: &Bound<'_, PyAny>,
        trace_state: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let Some(parent) = opt_text("trace_context", Some(trace_context))? else {
            return Err(invalid("trace_context", "must be a traceparent str"));
        };
        let state = opt_text("trace_state", trace_state)?;
        let context =
            ferrymq_core::trace_context::TraceContext::new(parent, state).map_err(to_pyerr)?;
        Ok(Self {
            inner: self.inner.clone().with_trace_context(context),
        })
    }
    /// "NORMAL", "FIFO", "DELAY" or "PRIORITY".
    #[getter]
    fn kind(&self) -> &'static str {
        self.inner.kind().as_str()
    }

    fn __len__(&self) -> usize {
        self.inner.body().len()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyMessage>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __repr__(&self) -> String {
        let m = &self.inner;
        let mut s = format!(
            "Message(topic={:?}, body=<{} bytes>",
            m.topic(),
            m.body().len()
        );
        if let Some(t) = m.tag() {
            s += &format!(", tag={t:?}");
        }
        if !m.keys().is_empty() {
            s += &format!(", keys={:?}", m.keys());
        }
        if let Some(g) = m.message_group() {
            s += &format!(", message_group={g:?}");
        }
        if let Some(t) = m.delivery_time_millis() {
            s += &format!(", delivery_time_ms={t}");
        }
        if let Some(p) = m.priority() {
            s += &format!(", priority={p}");
        }
        if let Some(t) = m.trace_context() {
            s += &format!(", trace_context={:?}", t.parent());
        }
        s + ")"
    }
}
