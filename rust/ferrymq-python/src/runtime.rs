//! The tokio runtimes of ferrymq (one for the clients, one for embedded servers), owned on
//! purpose and aware of `fork()`.
//!
//! * Created lazily on first use, multi-threaded, threads named `ferrymq-rt`: half the cores
//!   (at least one; `FERRYMQ_WORKER_THREADS` overrides the count). The rest is left to the
//!   Python threads (listeners, the caller) and to a server on the same machine: the runtime's
//!   work is I/O multiplexing, and a worker per core spent its time waking and stealing from
//!   the others. On 2 cores, 1 worker took the FIFO consumer bench (broker in its own process)
//!   from 170k to 222k msg/s and normal consumption from 202k to 320k (CPU per message down by
//!   a quarter to a third on both sides).
//! * Servers embedded in the process (the broker, the JMQ4 server) run on a second runtime of the
//!   same size ([`RuntimeRef::server`], threads `ferrymq-broker`), as a remote server would run
//!   on its own cores: on one shared worker, the clients of an in-process benchmark or test and
//!   their broker would take turns (bench_producer on 2 cores, one worker each: produce + flush
//!   43.6k msg/s split, 32.6k shared; sync sends 6.1k split, 7.4k shared).
//! * Every client records the [`RuntimeRef`] it was created on. After `fork()` the child has no
//!   runtime threads, so a client from the parent refuses to run (a clear `ClientClosedError`)
//!   instead of hanging, and the first new client in the child builds a fresh runtime. The
//!   parent's runtime is leaked in the child: dropping it would wait for threads that do not exist.
//! * [`enter`] is the single place where blocking methods release the GIL; async methods all go
//!   through `aio::future_into_py`, which builds on this module (imports run `aio` → `runtime`,
//!   never back).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, Once};
use std::time::Duration;

use ferrymq_core::Error;
use futures::FutureExt;
use pyo3::prelude::*;
use tokio::runtime::Runtime;

use crate::errors::to_pyerr;

static CURRENT: Mutex<Option<RuntimeRef>> = Mutex::new(None);
static SERVER: Mutex<Option<RuntimeRef>> = Mutex::new(None);

/// This process's id, refreshed in a forked child by a `pthread_atfork` handler: the fork check
/// runs on every call (every publish, every blocking method), and `getpid` is a system call.
static PID: AtomicU32 = AtomicU32::new(0);
static AT_FORK: Once = Once::new();

extern "C" fn refresh_pid() {
    PID.store(std::process::id(), Ordering::Relaxed);
}

/// The id of this process (cached; correct after `fork()`).
pub(crate) fn pid() -> u32 {
    AT_FORK.call_once(|| {
        refresh_pid();
        // SAFETY: registers a child handler that only stores getpid() into an atomic, which is
        // async-signal-safe, as a handler run in a forked child must be.
        let rc = unsafe { libc::pthread_atfork(None, None, Some(refresh_pid)) };
        if rc != 0 {
            tracing::warn!(target: "ferrymq", "pthread_atfork failed ({rc}); fork detection may miss a fork");
        }
    });
    PID.load(Ordering::Relaxed)
}

/// A handle on the runtime of one process.
#[derive(Clone, Copy, Debug)]
pub struct RuntimeRef {
    rt: &'static Runtime,
    pid: u32,
}

/// Half the cores, at least one (see the module docs).
fn default_worker_threads() -> usize {
    std::thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1))
}

impl RuntimeRef {
    /// The runtime of this process's clients, created on first use (and again after `fork()`).
    pub fn current() -> PyResult<RuntimeRef> {
        Self::get(&CURRENT, "ferrymq-rt")
    }

    /// The runtime of the servers embedded in this process (the RocketMQ broker, the JMQ4
    /// server): a server is the far end of the clients under test, so it gets workers of its
    /// own instead of taking turns with theirs (same size, same fork rules).
    pub fn server() -> PyResult<RuntimeRef> {
        Self::get(&SERVER, "ferrymq-broker")
    }

    fn get(which: &Mutex<Option<RuntimeRef>>, name: &str) -> PyResult<RuntimeRef> {
        let pid = pid();
        let mut slot = which
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(r) = *slot {
            if r.pid == pid {
                return Ok(r);
            }
        }
        let threads = std::env::var("FERRYMQ_WORKER_THREADS")
            .ok()
            .and_then(|v| v.parse::<usize>().ok())
            .filter(|n| *n > 0)
            .unwrap_or_else(default_worker_threads);
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(threads)
            .thread_name(name)
            .enable_all()
            .build()
            .map_err(|e| {
                to_pyerr(Error::internal(format!(
                    "cannot start the tokio runtime: {e}"
                )))
            })?;
        let r = RuntimeRef {
            rt: Box::leak(Box::new(rt)),
            pid,
        };
        *slot = Some(r);
        Ok(r)
    }

    /// Fail if this handle belongs to the parent of a forked process.
    pub fn check(&self) -> Result<(), Error> {
        if self.pid == pid() {
            Ok(())
        } else {
            Err(Error::closed(
                "this ferrymq object was created before fork(); its connections live in the \
                 parent process. Create a new client in the child process.",
            ))
        }
    }

    /// The tokio handle.
    pub fn handle(&self) -> &'static tokio::runtime::Handle {
        self.rt.handle()
    }

    /// Spawn a task on this runtime.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.rt.spawn(fut)
    }

    /// Run `fut` to completion on this runtime with the GIL released (see [`enter`]).
    pub fn block_on<T, F>(&self, py: Python<'_>, fut: F) -> PyResult<T>
    where
        F: Future<Output = Result<T, Error>> + Send + 'static,
        T: Send + 'static,
    {
        enter(py, *self, fut)
    }
}

/// How often a blocking call wakes up to check for Ctrl-C.
const SIGNAL_POLL: Duration = Duration::from_millis(100);

/// The one helper every blocking method goes through.
///
/// Releases the GIL, drives `fut` on the runtime, checks for pending signals (so Ctrl-C raises
/// `KeyboardInterrupt` and cancels the operation), turns a panic into `ferrymq.InternalError`,
/// and maps the core error to the exception tree after re-attaching.
pub fn enter<T, F>(py: Python<'_>, rt: RuntimeRef, fut: F) -> PyResult<T>
where
    F: Future<Output = Result<T, Error>> + Send + 'static,
    T: Send + 'static,
{
    rt.check().map_err(to_pyerr)?;
    // Driven on this thread (inside the runtime's context; its workers run the connections),
    // not spawned: a blocking call then costs one thread hand-off less each way.
    let mut fut = Box::pin(AssertUnwindSafe(fut).catch_unwind());
    loop {
        let step = py.detach(|| {
            rt.handle().block_on(async {
                tokio::select! {
                    r = &mut fut => Some(r),
                    () = tokio::time::sleep(SIGNAL_POLL) => None,
                }
            })
        });
        match step {
            Some(Ok(v)) => return v.map_err(to_pyerr),
            Some(Err(panic)) => return Err(to_pyerr(panic_error(&*panic))),
            // A pending signal raises here; dropping the future cancels the operation.
            None => {
                if let Err(interrupted) = py.check_signals() {
                    py.detach(|| cancel(rt, fut));
                    return Err(interrupted);
                }
            }
        }
    }
}

/// Drop a cancelled operation inside the runtime's context: the state it held (a NATS
/// subscription, a pending call) may clean up by spawning a task, which needs a runtime, and
/// this thread is not one of its workers. A panic while dropping is logged, never raised
/// across the FFI.
fn cancel<F>(rt: RuntimeRef, fut: F) {
    let _context = rt.handle().enter();
    if std::panic::catch_unwind(AssertUnwindSafe(move || drop(fut))).is_err() {
        tracing::warn!(target: "ferrymq", "a cancelled operation panicked while being dropped");
    }
}

/// Describe a caught panic payload as an internal error.
pub fn panic_error(panic: &(dyn std::any::Any + Send)) -> Error {
    let what = panic
        .downcast_ref::<&str>()
        .map(ToString::to_string)
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic payload".to_string());
    Error::internal(format!(
        "internal error (a Rust panic inside ferrymq): {what}"
    ))
}
