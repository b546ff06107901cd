//! The bridges from the core's push engine to Python listeners: plain callables on consumption
//! threads, `async def` listeners on an event loop, and the completions they report through.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrymq_core::rocketmq::listener::{
    wait_until_finished, BatchListener, ConsumeResult, Delivery, Listener, Stopped,
};
use ferrymq_core::rocketmq::message_view::MessageView;
use ferrymq_core::Error;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyList};

use crate::errors::to_pyerr;
use crate::message_view::PyMessageView;

use super::PyConsumeResult;

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

// ---------------------------------------------------------------------------------------------
// The process hook of `ferrymq.telemetry`

/// Whether a process hook is set: read once per batch, so that no hook costs one relaxed load.
static HOOK_SET: AtomicBool = AtomicBool::new(false);

/// The hook `ferrymq.telemetry` sets while tracing: its process span around one batch of
/// listener calls. Called once per batch as `hook(messages, attributes)` (`messages`: the
/// batch's `MessageView`s, a list; `attributes`: the consumer's span attributes, a dict made
/// once per consumer) before the listener runs, it returns `end`; the listener is then called
/// for each message as without a hook, on the same thread under the same GIL acquisition
/// (so a span the hook made current is current in the listener), and `end(failed)` is called
/// once after it, with the number of messages that failed.
static PROCESS_HOOK: Mutex<Option<Py<PyAny>>> = parking_lot::const_mutex(None);

/// Set (or, with None, remove) the process hook of every plain-callable listener; an
/// `async def` listener's is set in `ferrymq._consumer`. Takes effect from the next batch.
#[pyfunction]
pub(crate) fn set_process_hook(hook: Option<Bound<'_, PyAny>>) -> PyResult<()> {
    if let Some(h) = &hook {
        if !h.is_callable() {
            return Err(crate::errors::invalid("hook", "must be callable or None"));
        }
    }
    let old = {
        let mut slot = PROCESS_HOOK.lock();
        HOOK_SET.store(hook.is_some(), Ordering::Release);
        std::mem::replace(&mut *slot, hook.map(Bound::unbind))
    };
    // Released outside the lock: its finaliser may run Python.
    drop(old);
    Ok(())
}

/// The hook for one batch, if set.
fn process_hook(py: Python<'_>) -> Option<Py<PyAny>> {
    if !HOOK_SET.load(Ordering::Acquire) {
        return None;
    }
    PROCESS_HOOK.lock().as_ref().map(|h| h.clone_ref(py))
}

/// A plain callable, run on the consumption threads.
pub(super) struct PySyncListener {
    pub(super) callback: Py<PyAny>,
    /// The consumer's span attributes, for the process hook.
    pub(super) attributes: Py<PyAny>,
}

fn new_view<'py>(py: Python<'py>, m: &Arc<MessageView>) -> PyResult<Bound<'py, PyMessageView>> {
    Bound::new(
        py,
        PyMessageView {
            inner: m.clone(),
            transaction_id: None,
        },
    )
}

/// Call the listener with one message (its view made, or failed to be made, beforehand);
/// exceptions are logged and count as failure.
fn consume_view(
    py: Python<'_>,
    f: &Bound<'_, PyAny>,
    view: &PyResult<Bound<'_, PyMessageView>>,
    m: &Arc<MessageView>,
) -> ConsumeResult {
    match view {
        Ok(view) => match f.call1((view,)) {
            Ok(r) => interpret(py, &r, m),
            Err(e) => {
                // `into_value` attaches the traceback, which the fetched value lacks.
                log_listener_error(py, e.into_value(py).bind(py).as_any(), m);
                ConsumeResult::Failure
            }
        },
        Err(e) => {
            e.clone_ref(py).write_unraisable(py, None);
            ConsumeResult::Failure
        }
    }
}

fn consume_one(py: Python<'_>, f: &Bound<'_, PyAny>, m: &Arc<MessageView>) -> ConsumeResult {
    consume_view(py, f, &new_view(py, m), m)
}

/// The process hook's start for a batch: `end`, or None when the hook failed (reported as
/// unraisable; the batch is consumed all the same, without a span).
fn begin_span<'a, 'py: 'a>(
    py: Python<'py>,
    hook: &Bound<'py, PyAny>,
    attributes: &Bound<'py, PyAny>,
    views: impl Iterator<Item = &'a PyResult<Bound<'py, PyMessageView>>>,
) -> Option<Bound<'py, PyAny>> {
    let views: Vec<_> = views.filter_map(|v| v.as_ref().ok()).collect();
    let started = PyList::new(py, views).and_then(|list| hook.call1((list, attributes)));
    started.map_err(|e| e.write_unraisable(py, None)).ok()
}

fn end_span(py: Python<'_>, end: Option<Bound<'_, PyAny>>, failed: usize) {
    if let Some(end) = end {
        if let Err(e) = end.call1((failed,)) {
            e.write_unraisable(py, None);
        }
    }
}

thread_local! {
    /// How long this consumption thread's last batch held the GIL (its callbacks' time, without
    /// the wait for the GIL): read by the pool through `last_busy` right after the batch.
    static LAST_BUSY: std::cell::Cell<Option<std::time::Duration>> =
        const { std::cell::Cell::new(None) };
}

/// Run `f` with the GIL and note how long it held it for `last_busy`.
fn attach_timed<R>(f: impl FnOnce(Python<'_>) -> R) -> R {
    Python::attach(|py| {
        let started = std::time::Instant::now();
        let r = f(py);
        LAST_BUSY.with(|b| b.set(Some(started.elapsed())));
        r
    })
}

impl BatchListener for PySyncListener {
    fn last_busy(&self) -> Option<std::time::Duration> {
        LAST_BUSY.with(std::cell::Cell::take)
    }

    fn gather_wait(&self) -> Option<std::time::Duration> {
        // A process span per batch costs about what 10-30 trivial listener calls cost: spread
        // it over fuller batches while tracing.
        HOOK_SET
            .load(Ordering::Acquire)
            .then_some(ferrymq_core::rocketmq::worker_pool::GATHER_WAIT)
    }

    fn consume_batch(&self, messages: &[Arc<MessageView>], results: &mut Vec<ConsumeResult>) {
        crate::exit::park_if_exiting();
        attach_timed(|py| {
            let f = self.callback.bind(py);
            let Some(hook) = process_hook(py) else {
                results.extend(messages.iter().map(|m| consume_one(py, f, m)));
                return;
            };
            let views: Vec<_> = messages.iter().map(|m| new_view(py, m)).collect();
            let end = begin_span(py, hook.bind(py), self.attributes.bind(py), views.iter());
            let first = results.len();
            results.extend(
                views
                    .iter()
                    .zip(messages)
                    .map(|(v, m)| consume_view(py, f, v, m)),
            );
            let failed = results[first..]
                .iter()
                .filter(|r| **r == ConsumeResult::Failure)
                .count();
            end_span(py, end, failed);
        });
    }

    fn consume_runs(&self, runs: &[&[Arc<MessageView>]], results: &mut [Vec<ConsumeResult>]) {
        // All runs under one GIL acquisition (and, traced, in one process span); each stops at
        // its first failure.
        crate::exit::park_if_exiting();
        attach_timed(|py| {
            let f = self.callback.bind(py);
            let hook = process_hook(py);
            let views: Option<Vec<Vec<_>>> = hook.as_ref().map(|_| {
                runs.iter()
                    .map(|run| run.iter().map(|m| new_view(py, m)).collect())
                    .collect()
            });
            let end = match (&hook, &views) {
                (Some(h), Some(vs)) => begin_span(
                    py,
                    h.bind(py),
                    self.attributes.bind(py),
                    vs.iter().flatten(),
                ),
                _ => None,
            };
            let mut failed = 0;
            for (i, (run, out)) in runs.iter().zip(results.iter_mut()).enumerate() {
                for (j, m) in run.iter().enumerate() {
                    let r = match &views {
                        Some(vs) => consume_view(py, f, &vs[i][j], m),
                        None => consume_one(py, f, m),
                    };
                    out.push(r);
                    if r == ConsumeResult::Failure {
                        failed += 1;
                        break;
                    }
                }
            }
            end_span(py, end, failed);
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
pub(super) struct PyAsyncListener {
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
    pub(super) fn start(
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
    fn schedule(&self, mut batch: Vec<Delivery>) {
        let n = batch.len();
        // Their coroutines start on the loop right after: close enough to time their calls.
        let now = std::time::Instant::now();
        batch.iter_mut().for_each(|d| d.started_at(now));
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
        let st = self.shared.lock();
        stopped.finished =
            wait_until_finished(st, &self.shared.finished, &self.shared.inflight, deadline);
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
