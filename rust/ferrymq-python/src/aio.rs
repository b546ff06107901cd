//! The asyncio bridge: how a Rust future becomes an awaitable, and how many of them travel
//! between the event loop and the runtime — in batches, both ways.
//!
//! Each async method returns a plain asyncio future of the running loop (`loop.create_future()`).
//! Its Rust future is not spawned as a task of its own: it is queued on the loop's [`Hub`], and
//! one driver task per hub runs every queued future of that loop side by side (a
//! `FuturesUnordered`). A running driver is woken once per loop iteration (`loop.call_soon` of a
//! flush, scheduled by the iteration's first call), so the burst of calls that follows a batch of
//! completions costs one wake-up of the runtime, not one task and one cross-thread hand-off each.
//! When futures finish, the runtime thread does not touch Python: the driver pushes their
//! outcomes onto the hub and, after its pass over the running futures and only if the hub was
//! idle, writes one byte to a socket the loop watches (`loop.add_reader`). The loop then runs the hub's reader once, on its own
//! thread and with the GIL it already holds, and completes every future finished since: one loop
//! wake-up and no GIL hand-off for many completions.
//!
//! * One hub per event loop, found through a per-thread list (a loop runs on one thread; the
//!   list's first entry is the loop of the last call, so the lookup is one pointer comparison).
//!   Entries of closed loops and of the parent of a forked process are dropped on the slow path.
//!   The loop's reader holds the hub, so the hub lives as long as the loop watches its socket;
//!   the driver task ends whenever it has nothing left to run and is spawned again by the next
//!   call.
//! * A loop without `add_reader` (Windows' proactor loop) is woken with `call_soon_threadsafe`,
//!   once per batch, from the runtime thread.
//! * Cancelling the awaitable aborts the Rust future (a done-callback on the future); a result
//!   that arrives for a cancelled future is dropped.
//! * A panic in the Rust future becomes `InternalError`; errors are mapped by
//!   [`crate::errors::to_pyerr`] on the loop's thread.

use std::cell::RefCell;
use std::future::Future;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::task::Poll;

use ferrymq_core::Error;
use futures::future::{AbortHandle, Abortable};
use futures::stream::FuturesUnordered;
use futures::task::AtomicWaker;
use futures::{FutureExt, StreamExt};
use parking_lot::Mutex;
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::{intern, IntoPyObjectExt};

use crate::errors::to_pyerr;
use crate::runtime::{panic_error, pid, RuntimeRef};

/// An outcome waiting for the loop: set it on its future (under the GIL, on the loop's thread).
trait Outcome: Send {
    fn settle(self: Box<Self>, py: Python<'_>);
}

/// The finished Rust future's result and the asyncio future it belongs to.
struct Finished<T> {
    future: Py<PyAny>,
    result: Result<T, Error>,
}

impl<T> Outcome for Finished<T>
where
    T: for<'a> IntoPyObject<'a> + Send,
{
    fn settle(self: Box<Self>, py: Python<'_>) {
        let Finished { future, result } = *self;
        let future = future.bind(py);
        let set = match result.map(|v| v.into_py_any(py)) {
            Ok(Ok(value)) => future.call_method1(intern!(py, "set_result"), (value,)),
            Ok(Err(conversion)) => {
                future.call_method1(intern!(py, "set_exception"), (conversion.into_value(py),))
            }
            Err(e) => {
                future.call_method1(intern!(py, "set_exception"), (to_pyerr(e).into_value(py),))
            }
        };
        // The only failure is InvalidStateError: the future was cancelled meanwhile, and its
        // result is no longer wanted.
        drop(set);
    }
}

/// How the runtime wakes the loop when the first outcome of a batch arrives.
enum Wake {
    /// Write a byte to the socket the loop watches (no GIL needed).
    Socket(UnixStream),
    /// `loop.call_soon_threadsafe(reader)` under the GIL (loops without `add_reader`).
    CallSoon(PyOnceLock<Py<PyAny>>),
}

/// A queued Rust future, wrapped so that it hands its outcome to the hub itself.
type Job = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The futures of one event loop: those waiting to run, and the outcomes waiting for the loop.
struct Hub {
    /// Futures queued by the loop's thread, not yet taken by the driver.
    intake: Mutex<Vec<Job>>,
    /// A driver task is running (it ends when it has nothing left to run).
    driving: AtomicBool,
    /// The driver was woken for the intake and has not taken it yet.
    signalled: AtomicBool,
    /// A wake-up of the driver is scheduled on the loop for the end of this iteration.
    flush_due: AtomicBool,
    driver: AtomicWaker,
    /// The loop, and the callable it runs to wake the driver (`loop.call_soon`).
    event_loop: Py<PyAny>,
    flusher: PyOnceLock<Py<PyAny>>,
    queue: Mutex<Vec<Box<dyn Outcome>>>,
    /// A wake-up is on its way (a byte written, or a call scheduled) and the reader has not yet
    /// taken the queue.
    armed: AtomicBool,
    wake: Wake,
    /// The read end of the socket (`Wake::Socket` only).
    readable: Option<UnixStream>,
    pid: u32,
}

impl Hub {
    /// Called on the loop's thread: queue `job` and make sure a driver will run it. A running
    /// driver is woken once per loop iteration, for everything the iteration queued (the calls
    /// that follow a batch of completions come in a burst).
    fn submit(self: &Arc<Self>, py: Python<'_>, rt: RuntimeRef, job: Job) -> PyResult<()> {
        self.intake.lock().push(job);
        if !self.driving.swap(true, Ordering::AcqRel) {
            self.signalled.store(true, Ordering::Release);
            rt.spawn(drive(self.clone()));
        } else if !self.flush_due.swap(true, Ordering::AcqRel) {
            let flusher = self.flusher.get_or_try_init(py, || {
                Py::new(
                    py,
                    IntakeFlusher {
                        hub: Arc::downgrade(self),
                    },
                )
                .map(Py::into_any)
            })?;
            if let Err(e) = self
                .event_loop
                .bind(py)
                .call_method1(intern!(py, "call_soon"), (flusher,))
            {
                self.flush_due.store(false, Ordering::Release);
                self.wake_driver();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Wake the running driver for the intake, unless it is already due to look at it.
    fn wake_driver(&self) {
        if !self.signalled.swap(true, Ordering::AcqRel) {
            self.driver.wake();
        }
    }

    /// Called by the driver: queue `outcome` for the loop (woken by [`Hub::wake_loop`] once the
    /// driver has finished its pass over the running futures).
    fn push(&self, outcome: Box<dyn Outcome>) {
        self.queue.lock().push(outcome);
    }

    /// Called by the driver after a pass that finished futures: wake the loop, unless it is
    /// already woken and has not taken the queue yet.
    fn wake_loop(&self) {
        if !self.armed.swap(true, Ordering::AcqRel) {
            match &self.wake {
                // A full socket buffer means bytes are already waiting: the loop will run.
                Wake::Socket(tx) => drop((&*tx).write(&[1])),
                Wake::CallSoon(reader) => Python::attach(|py| {
                    if let Some(reader) = reader.get(py) {
                        if let Err(e) = self
                            .event_loop
                            .bind(py)
                            .call_method1(intern!(py, "call_soon_threadsafe"), (reader,))
                        {
                            // The loop is closed: nobody awaits these futures any more.
                            tracing::debug!(target: "ferrymq", "event loop not woken: {e}");
                        }
                    }
                }),
            }
        }
    }

    /// Called by the loop: complete every queued future.
    fn drain(&self, py: Python<'_>) {
        if let Some(rx) = &self.readable {
            let mut buf = [0u8; 64];
            while matches!((&*rx).read(&mut buf), Ok(n) if n == buf.len()) {}
        }
        self.armed.store(false, Ordering::Release);
        let batch = std::mem::take(&mut *self.queue.lock());
        for outcome in batch {
            outcome.settle(py);
        }
    }
}

/// The driver task of a hub: runs every queued future of its loop side by side, takes new ones
/// as they are queued, and ends when none is left (the next call spawns it again).
async fn drive(hub: Arc<Hub>) {
    let mut running: FuturesUnordered<Job> = FuturesUnordered::new();
    std::future::poll_fn(|cx| loop {
        hub.driver.register(cx.waker());
        hub.signalled.store(false, Ordering::Release);
        running.extend(std::mem::take(&mut *hub.intake.lock()));
        let mut finished = false;
        loop {
            match running.poll_next_unpin(cx) {
                Poll::Ready(Some(())) => finished = true,
                Poll::Ready(None) => break,
                Poll::Pending => {
                    if finished {
                        hub.wake_loop();
                    }
                    return Poll::Pending;
                }
            }
        }
        if finished {
            hub.wake_loop();
        }
        // Nothing left to run: stop, unless a future was queued after the intake was taken and
        // its caller saw this driver still running.
        hub.driving.store(false, Ordering::SeqCst);
        if hub.intake.lock().is_empty() || hub.driving.swap(true, Ordering::SeqCst) {
            return Poll::Ready(());
        }
    })
    .await;
}

/// The reader the loop calls (`add_reader` or `call_soon_threadsafe`).
#[pyclass(frozen, name = "_CompletionHub", module = "ferrymq._native")]
struct HubReader {
    hub: Weak<Hub>,
}

#[pymethods]
impl HubReader {
    fn __call__(&self, py: Python<'_>) {
        if let Some(hub) = self.hub.upgrade() {
            hub.drain(py);
        }
    }
}

/// What the loop runs (`call_soon`) at the end of an iteration that queued futures for a
/// running driver: wakes the driver once for all of them.
#[pyclass(frozen, name = "_IntakeFlush", module = "ferrymq._native")]
struct IntakeFlusher {
    hub: Weak<Hub>,
}

#[pymethods]
impl IntakeFlusher {
    fn __call__(&self) {
        if let Some(hub) = self.hub.upgrade() {
            hub.flush_due.store(false, Ordering::Release);
            hub.wake_driver();
        }
    }
}

/// Aborts the Rust future when its asyncio future is cancelled.
#[pyclass(frozen, name = "_CancelGuard", module = "ferrymq._native")]
struct CancelGuard {
    task: AbortHandle,
}

#[pymethods]
impl CancelGuard {
    fn __call__(&self, future: &Bound<'_, PyAny>) -> PyResult<()> {
        if future
            .call_method0(intern!(future.py(), "cancelled"))?
            .is_truthy()?
        {
            self.task.abort();
        }
        Ok(())
    }
}

thread_local! {
    /// The hubs of the loops that ran on this thread, the last used first.
    static HUBS: RefCell<Vec<(Py<PyAny>, Arc<Hub>)>> = const { RefCell::new(Vec::new()) };
}

static GET_RUNNING_LOOP: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

/// The running event loop of this thread (`RuntimeError` outside of one, as asyncio raises).
pub fn running_loop<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
    GET_RUNNING_LOOP
        .get_or_try_init(py, || {
            Ok::<_, PyErr>(py.import("asyncio")?.getattr("get_running_loop")?.unbind())
        })?
        .bind(py)
        .call0()
}

/// The hub of `event_loop`, created (and registered with the loop) on first use.
fn hub_of(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Hub>> {
    let me = pid();
    let hit = HUBS.with(|hubs| {
        let hubs = hubs.borrow();
        hubs.first()
            .filter(|(l, h)| l.is(event_loop) && h.pid == me)
            .map(|(_, h)| h.clone())
    });
    if let Some(hub) = hit {
        return Ok(hub);
    }
    // Slow path: another loop than last time, or the first call on this thread.
    let known: Vec<(Py<PyAny>, Arc<Hub>)> =
        HUBS.with(|hubs| std::mem::take(&mut *hubs.borrow_mut()));
    let mut kept = Vec::with_capacity(known.len() + 1);
    let mut found = None;
    for (l, h) in known {
        if h.pid != me
            || l.bind(py)
                .call_method0(intern!(py, "is_closed"))?
                .is_truthy()?
        {
            continue;
        }
        if l.is(event_loop) {
            found = Some(h);
        } else {
            kept.push((l, h));
        }
    }
    let hub = match found {
        Some(h) => h,
        None => new_hub(py, event_loop)?,
    };
    kept.insert(0, (event_loop.clone().unbind(), hub.clone()));
    HUBS.with(|hubs| *hubs.borrow_mut() = kept);
    Ok(hub)
}

fn new_hub(py: Python<'_>, event_loop: &Bound<'_, PyAny>) -> PyResult<Arc<Hub>> {
    let io = |e: std::io::Error| to_pyerr(Error::internal(format!("asyncio bridge: {e}")));
    let (rx, tx) = UnixStream::pair().map_err(io)?;
    rx.set_nonblocking(true).map_err(io)?;
    tx.set_nonblocking(true).map_err(io)?;
    let fd = rx.as_raw_fd();
    let hub = |wake: Wake, readable: Option<UnixStream>| {
        Arc::new(Hub {
            intake: Mutex::new(Vec::new()),
            driving: AtomicBool::new(false),
            signalled: AtomicBool::new(false),
            flush_due: AtomicBool::new(false),
            driver: AtomicWaker::new(),
            event_loop: event_loop.clone().unbind(),
            flusher: PyOnceLock::new(),
            queue: Mutex::new(Vec::new()),
            armed: AtomicBool::new(false),
            wake,
            readable,
            pid: pid(),
        })
    };
    let socket = hub(Wake::Socket(tx), Some(rx));
    let reader = Py::new(
        py,
        HubReader {
            hub: Arc::downgrade(&socket),
        },
    )?;
    match event_loop.call_method1(intern!(py, "add_reader"), (fd, reader)) {
        Ok(_) => Ok(socket),
        Err(e) if e.is_instance_of::<pyo3::exceptions::PyNotImplementedError>(py) => {
            let fallback = hub(Wake::CallSoon(PyOnceLock::new()), None);
            let reader = Py::new(
                py,
                HubReader {
                    hub: Arc::downgrade(&fallback),
                },
            )?
            .into_any();
            if let Wake::CallSoon(slot) = &fallback.wake {
                let _ = slot.set(py, reader);
            }
            Ok(fallback)
        }
        Err(e) => Err(e),
    }
}

/// The single shape of async methods: run `fut` on the ferrymq runtime and return an asyncio
/// future of the running loop, completed in a batch with the others that finished meanwhile
/// (see the module docs). The output is converted to Python objects on the loop's thread.
pub fn future_into_py<'py, F, T>(
    py: Python<'py>,
    rt: RuntimeRef,
    fut: F,
) -> PyResult<Bound<'py, PyAny>>
where
    F: Future<Output = Result<T, Error>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    rt.check().map_err(to_pyerr)?;
    let event_loop = running_loop(py).map_err(|_| {
        PyRuntimeError::new_err("an async ferrymq method must be awaited in a running event loop")
    })?;
    let hub = hub_of(py, &event_loop)?;
    let future = event_loop.call_method0(intern!(py, "create_future"))?;
    let target = future.clone().unbind();
    let (abort, registration) = AbortHandle::new_pair();
    let done = hub.clone();
    let job = Abortable::new(
        async move {
            let result = match AssertUnwindSafe(fut).catch_unwind().await {
                Ok(r) => r,
                Err(panic) => Err(panic_error(&*panic)),
            };
            done.push(Box::new(Finished {
                future: target,
                result,
            }));
        },
        registration,
    )
    .map(drop);
    hub.submit(py, rt, Box::pin(job))?;
    future.call_method1(
        intern!(py, "add_done_callback"),
        (CancelGuard { task: abort },),
    )?;
    Ok(future)
}
