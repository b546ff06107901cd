//! Interpreter exit: after Python's `atexit` phase no ferrymq thread may touch the interpreter.
//!
//! Once `Py_FinalizeEx` is past the `atexit` callbacks, a thread that takes the GIL is ended
//! by CPython in the middle of whatever it was running (3.10-3.13 `pthread_exit` it), which
//! through Rust frames aborts the process ("PyGILState_Release: thread state must be current").
//! The Python side (`ferrymq/_exit.py`) first closes every running client whose threads call
//! into Python (push consumers, publishers), and then, as the last `atexit` callback of
//! ferrymq, calls [`python_exiting`]. From then on:
//!
//! * a listener thread of a consumer whose `close` timed out (its listener is stuck) parks
//!   instead of taking the GIL for the next call ([`park_if_exiting`]);
//! * the log forwarder and the transaction checkers stop calling into Python.
//!
//! The flag is set while other `atexit` callbacks (those registered before ferrymq was
//! imported, such as `logging`'s) may still run and use ferrymq, so it must never stop a
//! thread such a callback could wait for: blocking calls (`runtime::enter`) and async methods'
//! tasks are not affected.

use std::sync::atomic::{AtomicBool, Ordering};

use pyo3::prelude::*;

static EXITING: AtomicBool = AtomicBool::new(false);

/// The interpreter is exiting (the last `atexit` callback).
pub fn python_exiting() {
    EXITING.store(true, Ordering::SeqCst);
}

/// Whether the interpreter is exiting.
pub fn is_exiting() -> bool {
    EXITING.load(Ordering::SeqCst)
}

/// Never return while the interpreter is exiting: the caller, a consumer's listener thread,
/// was about to take the GIL. Never call it on a runtime worker.
pub fn park_if_exiting() {
    while is_exiting() {
        std::thread::park();
    }
}

/// Ask a user's transaction checker: `ask` runs with the GIL on a blocking-pool thread, never
/// on a runtime worker. `unknown` is the answer while the interpreter is exiting (the broker
/// will check again) and when the checker raised or failed (logged).
pub async fn ask_checker<T: Send + 'static>(
    unknown: T,
    ask: impl FnOnce(Python<'_>) -> PyResult<T> + Send + 'static,
) -> T {
    let asked = tokio::task::spawn_blocking(move || (!is_exiting()).then(|| Python::attach(ask)));
    match asked.await {
        Ok(Some(Ok(answer))) => answer,
        Ok(None) => unknown,
        Ok(Some(Err(e))) => {
            tracing::warn!(target: "ferrymq::producer", error = %e, "transaction_checker raised; answering UNKNOWN");
            unknown
        }
        Err(e) => {
            tracing::warn!(target: "ferrymq::producer", error = %e, "transaction_checker failed; answering UNKNOWN");
            unknown
        }
    }
}
