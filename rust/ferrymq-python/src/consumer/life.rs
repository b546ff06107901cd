//! The life of a consumer class (`SimpleConsumer`, `PushConsumer`): created, started once by one
//! caller, running with its core consumer, closed once. The moves are here, under one lock that
//! is never held while Python code runs. A start that never finishes (interrupted by Ctrl-C,
//! its awaitable cancelled, or failed before it connected) leaves the consumer created again.

use std::sync::Arc;

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
pub(super) struct Life<T>(Arc<Mutex<Phase<T>>>);

/// A start claimed by one call: [`Starting::finish`] records its outcome; dropped unfinished,
/// the consumer is created again, so that a later start can run.
pub(super) struct Starting<T>(Option<Arc<Mutex<Phase<T>>>>);

impl<T> Life<T> {
    pub(super) fn new() -> Self {
        Self(Arc::new(Mutex::new(Phase::Created)))
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

    /// Claim the start: the claim for the caller that is to start it, None when it is running.
    pub(super) fn begin_start(&self) -> PyResult<Option<Starting<T>>> {
        let mut phase = self.0.lock();
        match &*phase {
            Phase::Created => {
                *phase = Phase::Starting;
                Ok(Some(Starting(Some(Arc::clone(&self.0)))))
            }
            Phase::Running(_) => Ok(None),
            Phase::Starting => Err(to_pyerr(Error::closed(
                "the consumer is being started by another call",
            ))),
            Phase::Closed => Err(to_pyerr(Error::closed("the consumer is closed"))),
        }
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

impl<T> Starting<T> {
    /// The end of a start: running with `t`, or (None: it failed) created again. If `close()`
    /// ran meanwhile, the consumer stays closed and `t` comes back: the caller shuts it down and
    /// raises [`closed_during_start`].
    #[must_use]
    pub(super) fn finish(mut self, t: Option<T>) -> Option<T> {
        let Some(life) = self.0.take() else {
            return t;
        };
        let mut phase = life.lock();
        if matches!(*phase, Phase::Closed) {
            return t;
        }
        *phase = t.map_or(Phase::Created, Phase::Running);
        None
    }
}

impl<T> Drop for Starting<T> {
    fn drop(&mut self) {
        if let Some(life) = self.0.take() {
            let mut phase = life.lock();
            if matches!(*phase, Phase::Starting) {
                *phase = Phase::Created;
            }
        }
    }
}

/// The error of a start that `close()` overtook.
pub(super) fn closed_during_start() -> Error {
    Error::closed("the consumer was closed while it was starting")
}
