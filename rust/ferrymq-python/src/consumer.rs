//! RocketMQ consumers: `ferrymq.SimpleConsumer`, `ferrymq.PushConsumer`, the message view they
//! deliver, `ferrymq.FilterExpression` and `ferrymq.ConsumeResult`.
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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrymq_core::rocketmq::client::ClientOptions;
use ferrymq_core::rocketmq::consumer_rpc::ClientRpc;
use ferrymq_core::rocketmq::filter::{FilterExpression, FilterType};
use ferrymq_core::rocketmq::listener::{
    BatchListener, ConsumeResult, Delivery, Listener, Stopped, WorkerPool,
};
use ferrymq_core::rocketmq::message_view::MessageView;
use ferrymq_core::rocketmq::push::{PushConsumer, PushConsumerConfig, StatsSnapshot};
use ferrymq_core::rocketmq::simple_consumer::{SimpleConsumer, SimpleConsumerConfig};
use ferrymq_core::Error;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList, PyString, PyTuple};

use crate::client_options::{client_options, extract_duration};
use crate::errors::{invalid, to_pyerr};
use crate::message_view::PyMessageView;
use crate::runtime::{future_into_py, RuntimeRef};

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

/// `{topic: filter}`, a single topic, or a sequence of topics (filter `*`).
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
    for (t, _) in &out {
        ferrymq_core::message::validate_topic(t)
            .map_err(|e| to_pyerr(Error::invalid("subscriptions", e.message())))?;
    }
    Ok(out)
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

/// The default invisible duration of `SimpleConsumer.receive`.
const DEFAULT_INVISIBLE_DURATION: Duration = Duration::from_secs(30);

fn invisible_arg(v: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
    match v.filter(|v| !v.is_none()) {
        Some(v) => extract_duration("invisible_duration", v),
        None => Ok(DEFAULT_INVISIBLE_DURATION),
    }
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

// ---------------------------------------------------------------------------------------------
// Listener results and errors

static LOGGER: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn logger(py: Python<'_>) -> PyResult<&Bound<'_, PyAny>> {
    Ok(LOGGER
        .get_or_try_init(py, || {
            py.import("logging")?
                .call_method1("getLogger", ("ferrymq.consumer",))
                .map(Bound::unbind)
        })?
        .bind(py))
}

/// Log an exception raised by the listener, with its traceback.
fn log_listener_error(py: Python<'_>, err: &Bound<'_, PyAny>, message: &MessageView) {
    let result = logger(py).and_then(|log| {
        let kwargs = PyDict::new(py);
        kwargs.set_item("exc_info", err)?;
        log.call_method(
            "error",
            (
                "listener raised an exception consuming message %s of topic %s (attempt %d)",
                message.message_id(),
                message.topic(),
                message.delivery_attempt(),
            ),
            Some(&kwargs),
        )
        .map(drop)
    });
    if let Err(e) = result {
        e.write_unraisable(py, None);
    }
}

/// `None` or `SUCCESS` → success, `FAILURE` → failure; anything else is a failure and logged.
fn interpret(py: Python<'_>, r: &Bound<'_, PyAny>, message: &MessageView) -> ConsumeResult {
    if r.is_none() {
        return ConsumeResult::Success;
    }
    if let Ok(c) = r.cast::<PyConsumeResult>() {
        return match *c.get() {
            PyConsumeResult::Success => ConsumeResult::Success,
            PyConsumeResult::Failure => ConsumeResult::Failure,
        };
    }
    let what = r
        .repr()
        .map_or_else(|_| "<unprintable>".to_string(), |s| s.to_string());
    let _ = logger(py).and_then(|log| {
        log.call_method1(
            "error",
            (
                "listener returned %s for message %s; expected ferrymq.ConsumeResult or None \
                 (counted as FAILURE)",
                what,
                message.message_id(),
            ),
        )
        .map(drop)
    });
    ConsumeResult::Failure
}

/// A plain callable, run on the consumption threads.
struct PySyncListener {
    callback: Py<PyAny>,
}

/// Call the listener with one message; exceptions are logged and count as failure.
fn consume_one(py: Python<'_>, f: &Bound<'_, PyAny>, m: &Arc<MessageView>) -> ConsumeResult {
    match Bound::new(
        py,
        PyMessageView {
            inner: m.clone(),
            transaction_id: None,
        },
    ) {
        Ok(view) => match f.call1((view,)) {
            Ok(r) => interpret(py, &r, m),
            Err(e) => {
                log_listener_error(py, e.value(py).as_any(), m);
                ConsumeResult::Failure
            }
        },
        Err(e) => {
            e.write_unraisable(py, None);
            ConsumeResult::Failure
        }
    }
}

impl BatchListener for PySyncListener {
    fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
        crate::exit::park_if_exiting();
        Python::attach(|py| {
            let f = self.callback.bind(py);
            results.extend(messages.iter().map(|m| consume_one(py, f, m)));
        });
    }

    fn consume_runs(&self, runs: &[&[Arc<MessageView>]], results: &mut [Vec<ConsumeResult>]) {
        // All runs under one GIL acquisition; each stops at its first failure.
        crate::exit::park_if_exiting();
        Python::attach(|py| {
            let f = self.callback.bind(py);
            for (run, out) in runs.iter().zip(results.iter_mut()) {
                for m in *run {
                    let r = consume_one(py, f, m);
                    out.push(r);
                    if r == ConsumeResult::Failure {
                        break;
                    }
                }
            }
        });
    }

    fn run_thread(&self, run: &mut (dyn FnMut() + Send)) {
        // The outer attach creates this thread's Python thread state; detaching keeps it, so
        // each batch only re-takes the GIL instead of creating and destroying a thread state.
        Python::attach(|py| {
            py.detach(|| {
                run();
                // Leaving re-takes the GIL: not once the interpreter is past `atexit`.
                crate::exit::park_if_exiting();
            });
        });
    }
}

struct AsyncState {
    queue: VecDeque<Delivery>,
    closed: bool,
}

struct AsyncShared {
    state: std::sync::Mutex<AsyncState>,
    wake: Condvar,
    finished: Condvar,
    inflight: AtomicUsize,
    max_inflight: usize,
}

impl AsyncShared {
    fn lock(&self) -> std::sync::MutexGuard<'_, AsyncState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn done(&self, n: usize) {
        let left = self.inflight.fetch_sub(n, Ordering::AcqRel) - n;
        let _g = self.lock();
        self.wake.notify_one();
        if left == 0 {
            self.finished.notify_all();
        }
    }
}

/// An `async def` listener, run on an asyncio event loop.
struct PyAsyncListener {
    shared: Arc<AsyncShared>,
    feeder: Mutex<Option<JoinHandle<()>>>,
}

struct Feeder {
    shared: Arc<AsyncShared>,
    event_loop: Py<PyAny>,
    callback: Py<PyAny>,
    runner: Py<PyAny>,
}

impl PyAsyncListener {
    fn start(
        event_loop: Py<PyAny>,
        callback: Py<PyAny>,
        runner: Py<PyAny>,
        max_inflight: usize,
    ) -> PyResult<Self> {
        let shared = Arc::new(AsyncShared {
            state: std::sync::Mutex::new(AsyncState {
                queue: VecDeque::new(),
                closed: false,
            }),
            wake: Condvar::new(),
            finished: Condvar::new(),
            inflight: AtomicUsize::new(0),
            max_inflight,
        });
        let feeder = Feeder {
            shared: shared.clone(),
            event_loop,
            callback,
            runner,
        };
        let handle = std::thread::Builder::new()
            .name("ferrymq-consume-async".into())
            .spawn(move || feeder.run())
            .map_err(|e| {
                to_pyerr(Error::internal(format!(
                    "cannot start the listener thread: {e}"
                )))
            })?;
        Ok(Self {
            shared,
            feeder: Mutex::new(Some(handle)),
        })
    }
}

impl Feeder {
    fn run(self) {
        Python::attach(|py| {
            py.detach(|| {
                self.feed();
                crate::exit::park_if_exiting();
            });
        });
    }

    /// Hand batches to the event loop until the listener is closed.
    fn feed(&self) {
        let shared = &self.shared;
        loop {
            let batch: Vec<Delivery> = {
                let mut st = shared.lock();
                loop {
                    if st.closed {
                        return;
                    }
                    let room = shared
                        .max_inflight
                        .saturating_sub(shared.inflight.load(Ordering::Acquire));
                    if !st.queue.is_empty() && room > 0 {
                        let n = room.min(st.queue.len());
                        shared.inflight.fetch_add(n, Ordering::AcqRel);
                        break st.queue.drain(..n).collect();
                    }
                    st = shared
                        .wake
                        .wait(st)
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                }
            };
            self.schedule(batch);
        }
    }

    /// Hand one batch to the event loop: a single `call_soon_threadsafe`.
    fn schedule(&self, batch: Vec<Delivery>) {
        let n = batch.len();
        crate::exit::park_if_exiting();
        let rejected = Python::attach(|py| -> Option<Vec<Delivery>> {
            let views: Vec<Py<PyMessageView>> = match batch
                .iter()
                .map(|d| {
                    Py::new(
                        py,
                        PyMessageView {
                            inner: d.message().clone(),
                            transaction_id: None,
                        },
                    )
                })
                .collect::<PyResult<_>>()
            {
                Ok(v) => v,
                Err(e) => {
                    e.write_unraisable(py, None);
                    return Some(batch);
                }
            };
            let completion = match Py::new(
                py,
                PyCompletion {
                    deliveries: Mutex::new(batch.into_iter().map(Some).collect()),
                    shared: self.shared.clone(),
                },
            ) {
                Ok(c) => c,
                Err(e) => {
                    e.write_unraisable(py, None);
                    return None;
                }
            };
            let call = PyList::new(py, views).and_then(|views| {
                self.event_loop.bind(py).call_method1(
                    "call_soon_threadsafe",
                    (
                        &self.runner,
                        &self.callback,
                        views,
                        completion.clone_ref(py),
                    ),
                )
            });
            match call {
                Ok(_) => None,
                Err(e) => {
                    // The loop is closed: nothing was consumed; let the broker redeliver.
                    let _ = logger(py).and_then(|log| {
                        log.call_method1(
                            "warning",
                            (
                                "cannot schedule the async listener on its event loop (%s); \
                                 %d messages left for redelivery",
                                e.value(py).to_string(),
                                n,
                            ),
                        )
                        .map(drop)
                    });
                    Some(completion.get().take_all())
                }
            }
        });
        if let Some(batch) = rejected {
            for d in batch {
                d.abandon();
            }
            self.shared.done(n);
        }
    }
}

impl Listener for PyAsyncListener {
    fn submit(&self, batch: Vec<Delivery>) {
        if batch.is_empty() {
            return;
        }
        let mut st = self.shared.lock();
        if st.closed {
            drop(st);
            batch.into_iter().for_each(Delivery::abandon);
            return;
        }
        st.queue.extend(batch);
        self.shared.wake.notify_one();
    }

    fn shutdown(&self, timeout: Duration) -> Stopped {
        let deadline = ferrymq_core::duration::deadline(Instant::now(), timeout);
        let mut stopped = {
            let mut st = self.shared.lock();
            st.closed = true;
            self.shared.wake.notify_all();
            Stopped {
                deliveries: st.queue.drain(..).collect(),
                ..Stopped::default()
            }
        };
        if let Some(h) = self.feeder.lock().take() {
            let _ = h.join();
        }
        let mut st = self.shared.lock();
        while self.shared.inflight.load(Ordering::Acquire) > 0 {
            let now = Instant::now();
            if now >= deadline {
                return stopped;
            }
            st = self
                .shared
                .finished
                .wait_timeout(st, deadline - now)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        stopped.finished = true;
        stopped
    }

    fn queued(&self) -> usize {
        self.shared.lock().queue.len()
    }

    fn running(&self) -> usize {
        self.shared.inflight.load(Ordering::Acquire)
    }
}

/// Receives the results of one batch of coroutines (called on the event loop).
#[pyclass(module = "ferrymq._native", frozen)]
pub struct PyCompletion {
    deliveries: Mutex<Vec<Option<Delivery>>>,
    shared: Arc<AsyncShared>,
}

impl PyCompletion {
    fn take(&self, i: usize) -> Option<Delivery> {
        self.deliveries.lock().get_mut(i).and_then(Option::take)
    }

    fn take_all(&self) -> Vec<Delivery> {
        self.deliveries
            .lock()
            .iter_mut()
            .filter_map(Option::take)
            .collect()
    }
}

#[pymethods]
impl PyCompletion {
    /// Coroutine `i` returned `result`.
    fn done(&self, py: Python<'_>, i: usize, result: &Bound<'_, PyAny>) {
        if let Some(d) = self.take(i) {
            let r = interpret(py, result, d.message());
            d.complete(r);
            self.shared.done(1);
        }
    }

    /// Coroutine `i` raised `error` (or could not be started).
    fn error(&self, py: Python<'_>, i: usize, error: &Bound<'_, PyAny>) {
        if let Some(d) = self.take(i) {
            log_listener_error(py, error, d.message());
            d.complete(ConsumeResult::Failure);
            self.shared.done(1);
        }
    }
}

impl Drop for PyCompletion {
    fn drop(&mut self) {
        // Coroutines that never reported (their loop stopped): failures, not silence.
        let left = self.take_all();
        let n = left.len();
        drop(left);
        if n > 0 {
            self.shared.done(n);
        }
    }
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
    d.set_item("listener_queued", s.listener_queued)?;
    d.set_item("listener_running", s.listener_running)?;
    Ok(d)
}

// ---------------------------------------------------------------------------------------------
// SimpleConsumer

enum SimpleState {
    Created,
    Starting,
    Running(Arc<SimpleConsumer>),
    Closed,
}

/// A RocketMQ simple consumer: `receive`, `ack`, `change_invisible_duration`. Thin wrappers
/// over the RPCs; nothing is retried internally.
#[pyclass(name = "SimpleConsumer", module = "ferrymq", frozen)]
pub struct PySimpleConsumer {
    rt: RuntimeRef,
    options: ClientOptions,
    config: SimpleConsumerConfig,
    state: Mutex<SimpleState>,
}

impl PySimpleConsumer {
    fn running(&self) -> PyResult<Arc<SimpleConsumer>> {
        match &*self.state.lock() {
            SimpleState::Running(c) => Ok(c.clone()),
            SimpleState::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
            _ => Err(to_pyerr(Error::closed(
                "the consumer is not started; call start() (or use it as a context manager)",
            ))),
        }
    }

    fn begin_start(&self) -> PyResult<bool> {
        let mut st = self.state.lock();
        match &*st {
            SimpleState::Created => {
                *st = SimpleState::Starting;
                Ok(true)
            }
            SimpleState::Running(_) => Ok(false),
            SimpleState::Starting => Err(to_pyerr(Error::closed(
                "the consumer is being started by another call",
            ))),
            SimpleState::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
        }
    }

    fn start_future(
        &self,
    ) -> impl std::future::Future<Output = Result<Arc<SimpleConsumer>, Error>> + Send + 'static
    {
        let options = self.options.clone();
        let config = self.config.clone();
        async move { SimpleConsumer::connect(options, config).await.map(Arc::new) }
    }

    fn finish_start(&self, r: &Result<Arc<SimpleConsumer>, Error>) {
        let mut st = self.state.lock();
        *st = match r {
            Ok(c) => SimpleState::Running(c.clone()),
            Err(_) => SimpleState::Created,
        };
    }

    fn take_for_close(&self) -> Option<Arc<SimpleConsumer>> {
        let mut st = self.state.lock();
        match std::mem::replace(&mut *st, SimpleState::Closed) {
            SimpleState::Running(c) => Some(c),
            _ => None,
        }
    }
}

#[pymethods]
impl PySimpleConsumer {
    #[new]
    #[pyo3(signature = (endpoints, group, *, subscriptions=None, await_duration=None, credentials=None, namespace=None, tls=None, request_timeout=None, route_refresh_interval=None, settings_sync_interval=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        group: String,
        subscriptions: Option<&Bound<'_, PyAny>>,
        await_duration: Option<&Bound<'_, PyAny>>,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        tls: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        route_refresh_interval: Option<&Bound<'_, PyAny>>,
        settings_sync_interval: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = client_options(
            endpoints,
            credentials,
            namespace,
            tls,
            request_timeout,
            None,
            None,
            route_refresh_interval,
            settings_sync_interval,
        )?;
        if group.trim().is_empty() {
            return Err(invalid("group", "must not be blank"));
        }
        let mut config = SimpleConsumerConfig::new(group);
        config.subscriptions = extract_subscriptions(subscriptions)?;
        if let Some(a) = await_duration.filter(|a| !a.is_none()) {
            config.await_duration = extract_duration("await_duration", a)?;
        }
        Ok(Self {
            rt: RuntimeRef::current()?,
            options,
            config,
            state: Mutex::new(SimpleState::Created),
        })
    }

    /// Connect: send the client settings, wait for the broker's, fetch the routes.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        if !self.begin_start()? {
            return Ok(());
        }
        let fut = self.start_future();
        let r = self.rt.block_on(py, async move { Ok(fut.await) })?;
        self.finish_start(&r);
        r.map(drop).map_err(to_pyerr)
    }

    /// Async form of `start`.
    fn start_async<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        if !me.begin_start()? {
            return future_into_py(py, me.rt, async { Ok(()) });
        }
        let fut = me.start_future();
        let this = slf.clone().unbind();
        future_into_py(py, me.rt, async move {
            let r = fut.await;
            Python::attach(|_| this.get().finish_start(&r));
            r.map(drop)
        })
    }

    /// Receive up to `max_messages` messages that stay invisible to other consumers for
    /// `invisible_duration` seconds. Returns an empty list when the await duration passes
    /// without a message.
    #[pyo3(signature = (max_messages=16, invisible_duration=None))]
    fn receive(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: u32,
        invisible_duration: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Vec<PyMessageView>> {
        let d = invisible_arg(invisible_duration)?;
        let c = self.running()?;
        let msgs = self
            .rt
            .block_on(py, async move { c.receive(max_messages, d).await })?;
        Ok(msgs
            .into_iter()
            .map(|inner| PyMessageView {
                inner,
                transaction_id: None,
            })
            .collect())
    }

    /// Async form of `receive`.
    #[pyo3(signature = (max_messages=16, invisible_duration=None))]
    fn receive_async<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: u32,
        invisible_duration: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let d = invisible_arg(invisible_duration)?;
        let c = self.running()?;
        future_into_py(py, self.rt, async move {
            let msgs = c.receive(max_messages, d).await?;
            Ok(msgs
                .into_iter()
                .map(|inner| PyMessageView {
                    inner,
                    transaction_id: None,
                })
                .collect::<Vec<_>>())
        })
    }

    /// Acknowledge `message`: it is not delivered again.
    fn ack(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<()> {
        let m = message_arg(message)?;
        let c = self.running()?;
        self.rt.block_on(py, async move { c.ack(&m).await })
    }

    /// Async form of `ack`.
    fn ack_async<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = message_arg(message)?;
        let c = self.running()?;
        future_into_py(py, self.rt, async move { c.ack(&m).await })
    }

    /// Make `message` invisible for `duration` seconds from now. Later acks use the new receipt
    /// handle the broker returned.
    fn change_invisible_duration(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        duration: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        let m = message_arg(message)?;
        let d = extract_duration("duration", duration)?;
        let c = self.running()?;
        self.rt
            .block_on(py, async move { c.change_invisible_duration(&m, d).await })
    }

    /// Async form of `change_invisible_duration`.
    fn change_invisible_duration_async<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'py, PyAny>,
        duration: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = message_arg(message)?;
        let d = extract_duration("duration", duration)?;
        let c = self.running()?;
        future_into_py(py, self.rt, async move {
            c.change_invisible_duration(&m, d).await
        })
    }

    /// Subscribe to `topic` with `filter` (a tag expression, a FilterExpression or None = all).
    #[pyo3(signature = (topic, filter=None))]
    fn subscribe(
        &self,
        py: Python<'_>,
        topic: String,
        filter: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let f = extract_filter(filter, &topic)?;
        let c = self.running()?;
        self.rt
            .block_on(py, async move { c.subscribe(&topic, f).await })
    }

    /// Stop receiving from `topic`.
    fn unsubscribe(&self, py: Python<'_>, topic: String) -> PyResult<()> {
        let c = self.running()?;
        self.rt
            .block_on(py, async move { c.unsubscribe(&topic).await })
    }

    /// `{topic: FilterExpression}` of the current subscriptions.
    #[getter]
    fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let subs = match &*self.state.lock() {
            SimpleState::Running(c) => c.subscriptions(),
            _ => self.config.subscriptions.clone(),
        };
        let d = PyDict::new(py);
        for (t, f) in subs {
            d.set_item(t, PyFilterExpression { inner: f })?;
        }
        Ok(d)
    }

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        &self.config.group
    }

    /// The client id sent to brokers (`x-mq-client-id`), once started.
    #[getter]
    fn client_id(&self) -> Option<String> {
        match &*self.state.lock() {
            SimpleState::Running(c) => Some(c.client().client_id().to_string()),
            _ => None,
        }
    }

    /// Tell the brokers this consumer is gone. Idempotent.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        match self.take_for_close() {
            Some(c) => self.rt.block_on(py, async move {
                c.close().await;
                Ok(())
            }),
            None => Ok(()),
        }
    }

    /// Async form of `close`.
    fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let c = self.take_for_close();
        future_into_py(py, self.rt, async move {
            if let Some(c) = c {
                c.close().await;
            }
            Ok(())
        })
    }

    fn __enter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, Self>> {
        slf.get().start(py)?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        if !me.begin_start()? {
            let s = slf.clone().unbind();
            return future_into_py(py, me.rt, async move { Ok(s) });
        }
        let fut = me.start_future();
        let this = slf.clone().unbind();
        future_into_py(py, me.rt, async move {
            let r = fut.await;
            let ok = Python::attach(|py| {
                this.get().finish_start(&r);
                this.clone_ref(py)
            });
            r.map(|_| ok)
        })
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.take_for_close();
        future_into_py(py, self.rt, async move {
            if let Some(c) = c {
                c.close().await;
            }
            Ok(false)
        })
    }

    fn __repr__(&self) -> String {
        let state = match &*self.state.lock() {
            SimpleState::Created => "created",
            SimpleState::Starting => "starting",
            SimpleState::Running(_) => "running",
            SimpleState::Closed => "closed",
        };
        format!(
            "SimpleConsumer(endpoints={:?}, group={:?}, {state})",
            self.options.endpoints, self.config.group
        )
    }
}

// ---------------------------------------------------------------------------------------------
// PushConsumer

/// How long `PushConsumer.close` waits for running callbacks and their acks by default.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The most listener threads a `PushConsumer` runs.
const MAX_CONSUMPTION_THREADS: usize = 1024;

/// The event loop thread started for an async listener run from blocking code, if any.
type PrivateLoop = Option<Py<PyAny>>;

enum PushState {
    Created,
    Starting,
    Running {
        consumer: Arc<PushConsumer<ClientRpc>>,
        private_loop: Option<Py<PyAny>>,
    },
    Closed,
}

/// A RocketMQ push consumer: receives continuously and calls `listener` for each message.
#[pyclass(name = "PushConsumer", module = "ferrymq", frozen)]
pub struct PyPushConsumer {
    rt: RuntimeRef,
    options: ClientOptions,
    config: PushConsumerConfig,
    listener: Py<PyAny>,
    is_async: bool,
    consumption_threads: usize,
    shutdown_timeout: Duration,
    state: Mutex<PushState>,
    last_stats: Mutex<Option<StatsSnapshot>>,
}

impl PyPushConsumer {
    fn begin_start(&self) -> PyResult<bool> {
        let mut st = self.state.lock();
        match &*st {
            PushState::Created => {
                *st = PushState::Starting;
                Ok(true)
            }
            PushState::Running { .. } => Ok(false),
            PushState::Starting => Err(to_pyerr(Error::closed(
                "the consumer is being started by another call",
            ))),
            PushState::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
        }
    }

    /// Build the listener side. `event_loop` is the loop of an async listener (None: start a
    /// private loop thread).
    fn make_listener(
        &self,
        py: Python<'_>,
        event_loop: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(Arc<dyn Listener>, PrivateLoop)> {
        if !self.is_async {
            let pool = WorkerPool::start(
                Arc::new(PySyncListener {
                    callback: self.listener.clone_ref(py),
                }),
                self.consumption_threads,
                1024,
            )
            .map_err(to_pyerr)?;
            return Ok((Arc::new(pool), None));
        }
        let helpers = py.import("ferrymq._consumer")?;
        let (event_loop, private) = match event_loop {
            Some(l) => (l, None),
            None => {
                let l = helpers.call_method0("start_private_loop")?;
                (l.clone(), Some(l.unbind()))
            }
        };
        let listener = PyAsyncListener::start(
            event_loop.unbind(),
            self.listener.clone_ref(py),
            helpers.getattr("run_batch")?.unbind(),
            self.consumption_threads,
        )?;
        Ok((Arc::new(listener), private))
    }

    /// Record the outcome of a start.
    fn finish_start(
        &self,
        py: Python<'_>,
        r: &Result<Arc<PushConsumer<ClientRpc>>, Error>,
        private_loop: Option<Py<PyAny>>,
    ) {
        match r {
            Ok(consumer) => {
                *self.state.lock() = PushState::Running {
                    consumer: consumer.clone(),
                    private_loop,
                };
            }
            Err(_) => {
                *self.state.lock() = PushState::Created;
                if let Some(l) = private_loop {
                    stop_private_loop(py, &l);
                }
            }
        }
    }

    fn connect_future(
        &self,
        listener: Arc<dyn Listener>,
    ) -> impl std::future::Future<Output = Result<Arc<PushConsumer<ClientRpc>>, Error>> + Send + 'static
    {
        let options = self.options.clone();
        let config = self.config.clone();
        async move {
            PushConsumer::connect(options, config, listener)
                .await
                .map(Arc::new)
        }
    }

    fn take_for_close(&self) -> Option<(Arc<PushConsumer<ClientRpc>>, PrivateLoop)> {
        let mut st = self.state.lock();
        match std::mem::replace(&mut *st, PushState::Closed) {
            PushState::Running {
                consumer,
                private_loop,
            } => Some((consumer, private_loop)),
            _ => None,
        }
    }
}

fn stop_private_loop(py: Python<'_>, l: &Py<PyAny>) {
    let r = py
        .import("ferrymq._consumer")
        .and_then(|h| h.call_method1("stop_private_loop", (l,)));
    if let Err(e) = r {
        e.write_unraisable(py, None);
    }
}

fn is_coroutine_function(py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<bool> {
    let inspect = py.import("inspect")?;
    if inspect
        .call_method1("iscoroutinefunction", (f,))?
        .is_truthy()?
    {
        return Ok(true);
    }
    // A callable object whose __call__ is `async def`.
    if !f.is_instance_of::<pyo3::types::PyFunction>() && f.hasattr("__call__")? {
        return inspect
            .call_method1("iscoroutinefunction", (f.getattr("__call__")?,))?
            .is_truthy();
    }
    Ok(false)
}

#[pymethods]
impl PyPushConsumer {
    #[new]
    #[pyo3(signature = (endpoints, group, *, subscriptions, listener, consumption_threads=20, max_cache_messages=4096, max_cache_bytes=67108864, fifo_accelerator=false, fifo_pipelining=false, receive_batch_size=None, max_concurrent_receives=4, shutdown_timeout=None, credentials=None, namespace=None, tls=None, request_timeout=None, route_refresh_interval=None, settings_sync_interval=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: &Bound<'_, PyAny>,
        group: String,
        subscriptions: &Bound<'_, PyAny>,
        listener: Bound<'_, PyAny>,
        #[pyo3(from_py_with = crate::ints::consumption_threads)] consumption_threads: i128,
        #[pyo3(from_py_with = crate::ints::max_cache_messages)] max_cache_messages: usize,
        #[pyo3(from_py_with = crate::ints::max_cache_bytes)] max_cache_bytes: usize,
        fifo_accelerator: bool,
        fifo_pipelining: bool,
        #[pyo3(from_py_with = crate::ints::receive_batch_size)] receive_batch_size: Option<u32>,
        #[pyo3(from_py_with = crate::ints::max_concurrent_receives)] max_concurrent_receives: usize,
        shutdown_timeout: Option<&Bound<'_, PyAny>>,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        tls: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        route_refresh_interval: Option<&Bound<'_, PyAny>>,
        settings_sync_interval: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let options = client_options(
            endpoints,
            credentials,
            namespace,
            tls,
            request_timeout,
            None,
            None,
            route_refresh_interval,
            settings_sync_interval,
        )?;
        if !listener.is_callable() {
            return Err(invalid(
                "listener",
                "must be a callable (or an async function) taking a ferrymq.MessageView",
            ));
        }
        let consumption_threads = usize::try_from(consumption_threads)
            .ok()
            .filter(|n| (1..=MAX_CONSUMPTION_THREADS).contains(n))
            .ok_or_else(|| {
                invalid(
                    "consumption_threads",
                    format!(
                        "{consumption_threads} is not from 1 to {MAX_CONSUMPTION_THREADS} threads"
                    ),
                )
            })?;
        let config = PushConsumerConfig {
            group,
            subscriptions: extract_subscriptions(Some(subscriptions))?,
            max_cache_messages,
            max_cache_bytes,
            fifo_accelerator,
            fifo_pipelining,
            receive_batch_size,
            max_concurrent_receives,
            ..Default::default()
        };
        config.validate().map_err(to_pyerr)?;
        Ok(Self {
            rt: RuntimeRef::current()?,
            options,
            config,
            is_async: is_coroutine_function(py, &listener)?,
            listener: listener.unbind(),
            consumption_threads,
            shutdown_timeout: match shutdown_timeout.filter(|t| !t.is_none()) {
                Some(t) => extract_duration("shutdown_timeout", t)?,
                None => DEFAULT_SHUTDOWN_TIMEOUT,
            },
            state: Mutex::new(PushState::Created),
            last_stats: Mutex::new(None),
        })
    }

    /// Connect and start consuming. An `async def` listener started this way runs on a private
    /// event loop thread; use `start_async` (or `async with`) to run it on your own loop.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        if !self.begin_start()? {
            return Ok(());
        }
        let (listener, private) = match self.make_listener(py, None) {
            Ok(l) => l,
            Err(e) => {
                *self.state.lock() = PushState::Created;
                return Err(e);
            }
        };
        let fut = self.connect_future(listener);
        let r = self.rt.block_on(py, async move { Ok(fut.await) });
        match r {
            Ok(r) => {
                self.finish_start(py, &r, private);
                r.map(drop).map_err(to_pyerr)
            }
            Err(e) => {
                // Interrupted (Ctrl-C): back to created.
                *self.state.lock() = PushState::Created;
                if let Some(l) = private {
                    stop_private_loop(py, &l);
                }
                Err(e)
            }
        }
    }

    /// Async form of `start`; an `async def` listener runs on the calling event loop.
    fn start_async<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        if !me.begin_start()? {
            return future_into_py(py, me.rt, async { Ok(()) });
        }
        let event_loop = if me.is_async {
            Some(crate::aio::running_loop(py)?)
        } else {
            None
        };
        let (listener, private) = match me.make_listener(py, event_loop) {
            Ok(l) => l,
            Err(e) => {
                *me.state.lock() = PushState::Created;
                return Err(e);
            }
        };
        let fut = me.connect_future(listener);
        let this = slf.clone().unbind();
        future_into_py(py, me.rt, async move {
            let r = fut.await;
            Python::attach(|py| this.get().finish_start(py, &r, private));
            r.map(drop)
        })
    }

    /// Live counters: cache (`cached_messages`, `cached_bytes` and their maxima), `received`,
    /// `consumed_ok`, `consumed_failed`, `acked`, `nacked`, `dead_lettered`, receive failures
    /// and throttling, listener queue and running callbacks.
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = match &*self.state.lock() {
            PushState::Running { consumer, .. } => Some(consumer.stats()),
            _ => None,
        };
        let s = match s {
            Some(s) => s,
            None => self.last_stats.lock().clone().unwrap_or_default(),
        };
        stats_dict(py, &s)
    }

    /// Whether the broker configured the group for FIFO consumption (known once started).
    #[getter]
    fn fifo(&self) -> Option<bool> {
        match &*self.state.lock() {
            PushState::Running { consumer, .. } => Some(consumer.is_fifo()),
            _ => None,
        }
    }

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        &self.config.group
    }

    /// The client id sent to brokers (`x-mq-client-id`), once started.
    #[getter]
    fn client_id(&self) -> Option<String> {
        match &*self.state.lock() {
            PushState::Running { consumer, .. } => Some(consumer.client().client_id().to_string()),
            _ => None,
        }
    }

    /// Stop: no new receives, running callbacks finish (up to `timeout`, default the
    /// consumer's `shutdown_timeout`), their acks are settled, the brokers are told. Messages
    /// received but not yet consumed are redelivered by the broker. Idempotent.
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let t = match timeout.filter(|t| !t.is_none()) {
            Some(t) => extract_duration("timeout", t)?,
            None => self.shutdown_timeout,
        };
        let Some((c, private)) = self.take_for_close() else {
            return Ok(());
        };
        let c2 = c.clone();
        let r = self.rt.block_on(py, async move {
            c2.close(t).await;
            Ok(())
        });
        *self.last_stats.lock() = Some(c.stats());
        if let Some(l) = private {
            stop_private_loop(py, &l);
        }
        r
    }

    /// Async form of `close`.
    #[pyo3(signature = (timeout=None))]
    fn close_async<'py>(
        slf: Bound<'py, Self>,
        py: Python<'py>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let t = match timeout.filter(|t| !t.is_none()) {
            Some(t) => extract_duration("timeout", t)?,
            None => me.shutdown_timeout,
        };
        let taken = me.take_for_close();
        let this = slf.clone().unbind();
        future_into_py(py, me.rt, async move {
            if let Some((c, private)) = taken {
                c.close(t).await;
                let stats = c.stats();
                Python::attach(|py| {
                    *this.get().last_stats.lock() = Some(stats);
                    if let Some(l) = private {
                        stop_private_loop(py, &l);
                    }
                });
            }
            Ok(())
        })
    }

    fn __enter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, Self>> {
        slf.get().start(py)?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        self.close(py, None)?;
        Ok(false)
    }

    fn __aenter__<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let start = Self::start_async(slf.clone(), py)?;
        let helpers = py.import("ferrymq._consumer")?;
        helpers.call_method1("returning", (start, slf))
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        slf: Bound<'py, Self>,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let close = Self::close_async(slf, py, None)?;
        let helpers = py.import("ferrymq._consumer")?;
        helpers.call_method1("returning", (close, false))
    }

    fn __repr__(&self) -> String {
        let state = match &*self.state.lock() {
            PushState::Created => "created",
            PushState::Starting => "starting",
            PushState::Running { .. } => "running",
            PushState::Closed => "closed",
        };
        format!(
            "PushConsumer(endpoints={:?}, group={:?}, {state})",
            self.options.endpoints, self.config.group
        )
    }
}

impl Drop for PyPushConsumer {
    fn drop(&mut self) {
        if let PushState::Running { consumer, .. } = &*self.state.lock() {
            tracing::warn!(
                target: "ferrymq::consumer",
                "PushConsumer of group {} dropped without close(); unsettled messages will be \
                 redelivered after their invisibility",
                consumer.config().group
            );
        }
    }
}
