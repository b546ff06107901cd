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
