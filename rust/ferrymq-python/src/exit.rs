//! Interpreter exit: after Python's `atexit` phase no ferrymq thread may touch the interpreter.
//!
//! Once `Py_FinalizeEx` is past the `atexit` callbacks, a thread that takes the GIL is ended
//! by CPython in the middle of whatever it was running (3.10-3.13 `pthread_exit` it), which
//! through Rust frames aborts the process ("PyGILState_Release: thread state must be current").
//! The Python side (`ferrymq/_exit.py`) first closes every running client whose threads call
//! into Python (push consumers, publishers), and then, as the last `atexit` callback, calls
//! [`python_exiting`]. From then on:
//!
//! * a thread coming back from a blocking ferrymq call ([`crate::runtime::enter`]) or about to
//!   call a listener parks instead of taking the GIL ([`park_if_exiting`]): only daemon threads
//!   and ferrymq's own threads are left at that point, and the process is about to end;
//! * the log forwarder and the transaction checkers stop calling into Python.

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

/// Never return while the interpreter is exiting: the caller was about to take the GIL. For
/// threads that may wait forever (Python threads in a blocking call, listener threads); never
/// call it on a runtime worker.
pub fn park_if_exiting() {
    while is_exiting() {
        std::thread::park();
    }
}
