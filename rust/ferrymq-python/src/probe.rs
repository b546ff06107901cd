//! `_native.Probe`: a tiny runtime-bound object used by the test-suite to exercise the blocking
//! and async helpers, the error mapping, panics and fork safety without a broker.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use ferrymq_core::{Error, ErrorKind};
use pyo3::prelude::*;

use crate::aio::future_into_py;
use crate::runtime::RuntimeRef;

/// Test helper bound to the runtime of the process that created it.
#[pyclass(module = "ferrymq._native", frozen)]
pub struct Probe {
    rt: RuntimeRef,
    /// `sleep_async` futures alive on the runtime (started, not yet finished or dropped).
    sleeping: Arc<AtomicUsize>,
}

/// Counts one live `sleep_async` future until it is dropped (finished or aborted).
struct Alive(Arc<AtomicUsize>);

impl Alive {
    fn new(count: &Arc<AtomicUsize>) -> Self {
        count.fetch_add(1, Ordering::SeqCst);
        Alive(count.clone())
    }
}

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn kind_of(name: &str) -> PyResult<ErrorKind> {
    Ok(match name {
        "connection" => ErrorKind::Connection,
        "timeout" => ErrorKind::Timeout,
        "protocol" => ErrorKind::Protocol,
        "broker" => ErrorKind::Broker,
        "flow_control" => ErrorKind::FlowControl,
        "invalid" => ErrorKind::InvalidArgument,
        "closed" => ErrorKind::Closed,
        "internal" => ErrorKind::Internal,
        other => {
            return Err(crate::errors::invalid(
                "kind",
                format!("unknown kind {other:?}"),
            ))
        }
    })
}

#[pymethods]
impl Probe {
    #[new]
    fn new() -> PyResult<Self> {
        Ok(Self {
            rt: RuntimeRef::current()?,
            sleeping: Arc::default(),
        })
    }

    /// Sleep on the runtime with the GIL released; returns the seconds slept.
    fn sleep(&self, py: Python<'_>, seconds: &Bound<'_, PyAny>) -> PyResult<f64> {
        let d = crate::durations::non_negative("seconds", seconds)?;
        self.rt.block_on(py, async move {
            tokio::time::sleep(d).await;
            Ok(d.as_secs_f64())
        })
    }

    /// Async form of `sleep`.
    fn sleep_async<'py>(
        &self,
        py: Python<'py>,
        seconds: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let d = crate::durations::non_negative("seconds", seconds)?;
        let alive = Alive::new(&self.sleeping);
        future_into_py(py, self.rt, async move {
            let _alive = alive;
            tokio::time::sleep(d).await;
            Ok(d.as_secs_f64())
        })
    }

    /// How many `sleep_async` futures of this probe are alive on the runtime.
    fn live_tasks(&self) -> usize {
        self.sleeping.load(Ordering::SeqCst)
    }

    /// Raise the exception mapped from a core error of `kind` (and RocketMQ `code`, if given).
    #[pyo3(signature = (kind, code=None))]
    fn fail(&self, py: Python<'_>, kind: &str, code: Option<i32>) -> PyResult<()> {
        let err = match code {
            Some(c) => Error::rocketmq_status(c, "injected by Probe.fail"),
            None => Error::new(kind_of(kind)?, "injected by Probe.fail"),
        };
        self.rt.block_on(py, async move { Err::<(), _>(err) })
    }

    /// Panic inside the runtime (blocking path).
    fn panic(&self, py: Python<'_>) -> PyResult<()> {
        self.rt.block_on(py, async move {
            if std::hint::black_box(true) {
                panic!("probe panic");
            }
            Ok(())
        })
    }

    /// Panic inside the runtime (async path).
    fn panic_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        future_into_py(py, self.rt, async move {
            if std::hint::black_box(true) {
                panic!("probe panic");
            }
            Ok(())
        })
    }

    /// Emit a Rust tracing event at `level` ("error" … "trace") to test log forwarding.
    fn log(&self, level: &str, message: String) {
        match level {
            "error" => tracing::error!(target: "ferrymq::probe", "{message}"),
            "warning" | "warn" => tracing::warn!(target: "ferrymq::probe", "{message}"),
            "info" => tracing::info!(target: "ferrymq::probe", "{message}"),
            "debug" => tracing::debug!(target: "ferrymq::probe", "{message}"),
            _ => tracing::trace!(target: "ferrymq::probe", "{message}"),
        }
    }
}
