//! The life of a RocketMQ consumer class (`SimpleConsumer`, `PushConsumer`): created, started
//! once by one caller, running with its core consumer, closed once. The moves are here, under
//! one lock that is never held while Python code runs.

use ferrymq_core::Error;
use parking_lot::Mutex;
use pyo3::prelude::*;

use crate::errors::to_pyerr;

enum Phase<T> {
    Created,
    Starting,
    Running(T),
    Closed,
}

/// The phase of a consumer, `T` being what it holds while running.
pub(super) struct Life<T>(Mutex<Phase<T>>);

impl<T> Life<T> {
    pub(super) fn new() -> Self {
        Self(Mutex::new(Phase::Created))
    }

    /// `f` of what the running consumer holds, or None when it is not running.
    pub(super) fn map_running<R>(&self, f: impl FnOnce(&T) -> R) -> Option<R> {
        match &*self.0.lock() {
            Phase::Running(t) => Some(f(t)),
            _ => None,
        }
    }

    /// `f` of what the running consumer holds, or the error of a call that needs it running.
    pub(super) fn running<R>(&self, f: impl FnOnce(&T) -> R) -> PyResult<R> {
        match &*self.0.lock() {
            Phase::Running(t) => Ok(f(t)),
            Phase::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
            _ => Err(to_pyerr(Error::closed(
                "the consumer is not started; call start() (or use it as a context manager)",
            ))),
        }
    }

    /// Claim the start: true for the caller that is to start it, false when it is running.
    pub(super) fn begin_start(&self) -> PyResult<bool> {
        let mut phase = self.0.lock();
        match &*phase {
            Phase::Created => {
                *phase = Phase::Starting;
                Ok(true)
            }
            Phase::Running(_) => Ok(false),
            Phase::Starting => Err(to_pyerr(Error::closed(
                "the consumer is being started by another call",
            ))),
            Phase::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
        }
    }

    /// The end of a start: running with `t`, or (None: it failed) created again. If `close()`
    /// ran meanwhile, the consumer stays closed and `t` comes back: the caller shuts it down and
    /// raises [`closed_during_start`].
    #[must_use]
    pub(super) fn finish_start(&self, t: Option<T>) -> Option<T> {
        let mut phase = self.0.lock();
        if matches!(*phase, Phase::Closed) {
            return t;
        }
        *phase = t.map_or(Phase::Created, Phase::Running);
        None
    }

    /// Close: what the running consumer held, to shut down, if it was running.
    pub(super) fn close(&self) -> Option<T> {
        match std::mem::replace(&mut *self.0.lock(), Phase::Closed) {
            Phase::Running(t) => Some(t),
            _ => None,
        }
    }

    /// "created", "starting", "running" or "closed" (for reprs).
    pub(super) fn name(&self) -> &'static str {
        match &*self.0.lock() {
            Phase::Created => "created",
            Phase::Starting => "starting",
            Phase::Running(_) => "running",
            Phase::Closed => "closed",
        }
    }
}

/// The error of a start that `close()` overtook.
pub(super) fn closed_during_start() -> Error {
    Error::closed("the consumer was closed while it was starting")
}
