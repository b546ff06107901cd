//! The consumers of every protocol: `ferrymq.SimpleConsumer`, `ferrymq.PushConsumer`, the
//! message view they deliver, `ferrymq.FilterExpression` and `ferrymq.ConsumeResult`.
//!
//! All network I/O runs in the core on the tokio runtime without the GIL. The push consumer's
//! listener runs
//! * for a plain callable: on dedicated consumption threads (never tokio workers) that keep a
//!   Python thread state for their whole life and take the GIL once per batch of messages;
//! * for an `async def`: on the user's event loop (captured by `start_async`, or a private loop
//!   thread when started from blocking code); a feeder thread schedules one batch of
//!   coroutines per `call_soon_threadsafe`, keeping at most `consumption_threads` running.
//!
//! No Python code runs while a Rust lock is held.
//!
//! One file per concern: argument parsing and the small value classes here, the listener
//! bridges in `listener.rs`, the consumers in `simple.rs` and `push.rs`, where they connect
//! (RocketMQ, JMQ4 or JetStream) in `target.rs`, their shared life (created, started once,
//! running, closed) in `life.rs`.

mod life;
mod listener;
mod push;
mod simple;
mod target;

pub(crate) use listener::set_process_hook;

use std::sync::Arc;

use ferrymq_core::rocketmq::filter::{FilterExpression, FilterType};
use ferrymq_core::rocketmq::message_view::MessageView;
use ferrymq_core::rocketmq::push::StatsSnapshot;
use ferrymq_core::Error;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

use crate::errors::{invalid, to_pyerr};
use crate::message_view::PyMessageView;

// ---------------------------------------------------------------------------------------------
// Argument helpers

fn extract_filter(v: Option<&Bound<'_, PyAny>>, topic: &str) -> PyResult<FilterExpression> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(FilterExpression::all());
    };
    if let Ok(f) = v.cast::<PyFilterExpression>() {
        return Ok(f.get().inner.clone());
    }
    if let Ok(s) = v.extract::<String>() {
        return FilterExpression::tag(&s).map_err(to_pyerr);
    }
    Err(invalid(
        "subscriptions",
        format!(
            "the filter of topic {topic:?} must be a tag expression (str), a \
             ferrymq.FilterExpression or None"
        ),
    ))
}

/// `{topic: filter}`, a single topic, or a sequence of topics (filter `*`); the names are
/// checked with the target ([`validate_topics`]).
fn extract_subscriptions(
    v: Option<&Bound<'_, PyAny>>,
) -> PyResult<Vec<(String, FilterExpression)>> {
    let Some(v) = v.filter(|v| !v.is_none()) else {
        return Ok(Vec::new());
    };
    let mut out: Vec<(String, FilterExpression)> = Vec::new();
    if let Ok(d) = v.cast::<PyDict>() {
        for (k, f) in d.iter() {
            let topic: String = k
                .extract()
                .map_err(|_| invalid("subscriptions", "topics must be str"))?;
            let filter = extract_filter(Some(&f), &topic)?;
            out.push((topic, filter));
        }
    } else if v.is_instance_of::<PyString>() {
        out.push((v.extract()?, FilterExpression::all()));
    } else if let Ok(topics) = v.extract::<Vec<String>>() {
        out.extend(topics.into_iter().map(|t| (t, FilterExpression::all())));
    } else {
        return Err(invalid(
            "subscriptions",
            "must be a dict {topic: filter}, a topic or a list of topics",
        ));
    }
    Ok(out)
}

/// Check the topic names of `subscriptions` (a JetStream subject may hold wildcards, which
/// its server checks).
fn validate_topics(subscriptions: &[(String, FilterExpression)], nats: bool) -> PyResult<()> {
    if nats {
        return Ok(());
    }
    for (t, _) in subscriptions {
        ferrymq_core::message::validate_topic(t)
            .map_err(|e| to_pyerr(Error::invalid("subscriptions", e.message())))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// FilterExpression, ConsumeResult, MessageView

/// A subscription filter: a TAG expression (`"TagA || TagB"`, `"*"`) or an SQL92 expression.
#[pyclass(
    name = "FilterExpression",
    module = "ferrymq",
    frozen,
    skip_from_py_object
)]
#[derive(Clone)]
pub struct PyFilterExpression {
    inner: FilterExpression,
}

#[pymethods]
impl PyFilterExpression {
    /// A TAG expression: `"*"`, one tag, or tags joined by `||`.
    #[staticmethod]
    fn tag(expression: &str) -> PyResult<Self> {
        Ok(Self {
            inner: FilterExpression::tag(expression)
                .map_err(crate::errors::renamed("expression", "filter"))?,
        })
    }

    /// An SQL92 expression over user properties, e.g. `"a > 1 AND region = 'eu'"` (the broker
    /// needs `enablePropertyFilter=true`).
    #[staticmethod]
    fn sql(expression: &str) -> PyResult<Self> {
        Ok(Self {
            inner: FilterExpression::sql(expression)
                .map_err(crate::errors::renamed("expression", "filter"))?,
        })
    }

    /// The filter that matches every message (`TAG *`).
    #[staticmethod]
    fn all() -> Self {
        Self {
            inner: FilterExpression::all(),
        }
    }

    /// `"TAG"` or `"SQL"`.
    #[getter]
    fn r#type(&self) -> &'static str {
        self.inner.kind().as_str()
    }

    /// The normalised expression.
    #[getter]
    fn expression(&self) -> &str {
        self.inner.expression()
    }

    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<PyFilterExpression>()
            .is_ok_and(|o| o.get().inner == self.inner)
    }

    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.inner.hash(&mut h);
        h.finish()
    }

    fn __repr__(&self) -> String {
        match self.inner.kind() {
            FilterType::Tag => format!("FilterExpression.tag({:?})", self.inner.expression()),
            FilterType::Sql => format!("FilterExpression.sql({:?})", self.inner.expression()),
        }
    }
}

/// What a push consumer listener returns. Returning `None` counts as `SUCCESS`; raising counts
/// as `FAILURE`.
#[pyclass(
    name = "ConsumeResult",
    module = "ferrymq",
    frozen,
    eq,
    eq_int,
    skip_from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PyConsumeResult {
    /// Consumed: the message is acknowledged.
    #[pyo3(name = "SUCCESS")]
    Success,
    /// Not consumed: redelivered later by the broker's retry policy (FIFO: retried locally).
    #[pyo3(name = "FAILURE")]
    Failure,
}

fn message_arg(message: &Bound<'_, PyAny>) -> PyResult<Arc<MessageView>> {
    message
        .cast::<PyMessageView>()
        .map(|m| m.get().inner.clone())
        .map_err(|_| {
            invalid(
                "message",
                "must be a ferrymq.MessageView received by a consumer",
            )
        })
}

/// One `MessageView` or an iterable of them.
fn messages_arg(message: &Bound<'_, PyAny>) -> PyResult<Vec<Arc<MessageView>>> {
    if message.is_instance_of::<PyMessageView>() {
        return Ok(vec![message_arg(message)?]);
    }
    let wanted = || {
        invalid(
            "message",
            "must be a ferrymq.MessageView received by a consumer, or an iterable of them",
        )
    };
    let mut out = Vec::new();
    for m in message.try_iter().map_err(|_| wanted())? {
        out.push(message_arg(&m?).map_err(|_| wanted())?);
    }
    Ok(out)
}

/// `{topic: FilterExpression}`.
fn subscriptions_dict(
    py: Python<'_>,
    subscriptions: Vec<(String, FilterExpression)>,
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (t, f) in subscriptions {
        d.set_item(t, PyFilterExpression { inner: f })?;
    }
    Ok(d)
}

fn stats_dict<'py>(py: Python<'py>, s: &StatsSnapshot) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("process_queues", s.process_queues)?;
    d.set_item("cached_messages", s.cached_messages)?;
    d.set_item("cached_bytes", s.cached_bytes)?;
    d.set_item("max_cached_messages", s.max_cached_messages)?;
    d.set_item("max_cached_bytes", s.max_cached_bytes)?;
    d.set_item("received", s.received)?;
    d.set_item("consumed_ok", s.consumed_ok)?;
    d.set_item("consumed_failed", s.consumed_failed)?;
    d.set_item("local_retries", s.local_retries)?;
    d.set_item("acked", s.acked)?;
    d.set_item("nacked", s.nacked)?;
    d.set_item("dead_lettered", s.dead_lettered)?;
    d.set_item("invalid_receipt_handles", s.invalid_receipt_handles)?;
    d.set_item("settle_retries", s.settle_retries)?;
    d.set_item("settle_abandoned", s.settle_abandoned)?;
    d.set_item("left_for_redelivery", s.left_for_redelivery)?;
    d.set_item("receive_failures", s.receive_failures)?;
    d.set_item("receive_throttled", s.receive_throttled)?;
    d.set_item("cache_full_waits", s.cache_full_waits)?;
    d.set_item("expired_process_queues", s.expired_process_queues)?;
    d.set_item("listener_queued", s.listener_queued)?;
    d.set_item("listener_running", s.listener_running)?;
    Ok(d)
}

pub use listener::PyCompletion;
pub use push::PyPushConsumer;
pub use simple::PySimpleConsumer;
