//! The one place where core errors become Python exceptions.
//!
//! The exception classes are defined in `python/ferrymq/exceptions.py` (a rooted tree under
//! `ferrymq.FerryError`, with multiple inheritance from builtins where that helps callers);
//! [`to_pyerr`] picks the class from the error kind and attaches the broker status.

use ferrymq_core::error::Protocol;
use ferrymq_core::{Error, ErrorKind};
use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyModule};

static EXCEPTIONS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

fn class_name(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::Connection => "FerryConnectionError",
        ErrorKind::Timeout => "FerryTimeoutError",
        ErrorKind::Protocol => "ProtocolError",
        ErrorKind::Broker => "BrokerError",
        ErrorKind::FlowControl => "FlowControlError",
        ErrorKind::InvalidArgument => "InvalidArgumentError",
        ErrorKind::Closed => "ClientClosedError",
        ErrorKind::Internal => "InternalError",
    }
}

/// Convert a core error into the matching `ferrymq` exception.
pub fn to_pyerr(err: Error) -> PyErr {
    Python::attach(|py| match build(py, &err) {
        Ok(e) => e,
        Err(import_failure) => {
            let e = PyRuntimeError::new_err(err.to_string());
            e.set_cause(py, Some(import_failure));
            e
        }
    })
}

fn build(py: Python<'_>, err: &Error) -> PyResult<PyErr> {
    let module = EXCEPTIONS.get_or_try_init(py, || {
        PyModule::import(py, "ferrymq.exceptions").map(Bound::unbind)
    })?;
    let cls = module.bind(py).getattr(class_name(err.kind()))?;
    let kwargs = PyDict::new(py);
    if let Some(s) = err.status() {
        kwargs.set_item("code", s.code)?;
        kwargs.set_item("code_name", s.name)?;
        kwargs.set_item(
            "protocol",
            match s.protocol {
                Protocol::RocketMq => "rocketmq",
                Protocol::Jmq => "jmq",
                Protocol::Nats => "nats",
                Protocol::Remoting => "remoting",
            },
        )?;
    }
    kwargs.set_item("retriable", err.is_retriable())?;
    let instance = cls.call((err.to_string(),), Some(&kwargs))?;
    Ok(PyErr::from_value(instance))
}

/// Like [`to_pyerr`], for an error the caller keeps (e.g. a flight's stored outcome).
pub fn to_pyerr_ref(err: &Error) -> PyErr {
    Python::attach(|py| match build(py, err) {
        Ok(e) => e,
        Err(import_failure) => {
            let e = PyRuntimeError::new_err(err.to_string());
            e.set_cause(py, Some(import_failure));
            e
        }
    })
}

/// Shorthand for an invalid-argument exception naming `field`.
pub fn invalid(field: &str, why: impl std::fmt::Display) -> PyErr {
    to_pyerr(Error::invalid(field, why))
}

/// Like [`to_pyerr`], for a core call that names the value `core_field` where the Python
/// parameter is `field`: an invalid-argument error about `core_field` names `field` instead.
pub fn renamed(field: &'static str, core_field: &'static str) -> impl Fn(Error) -> PyErr {
    move |err| {
        let prefix = format!("{core_field}: ");
        match err.message().strip_prefix(&prefix) {
            Some(why) if err.kind() == ErrorKind::InvalidArgument => invalid(field, why),
            _ => to_pyerr(err),
        }
    }
}

/// The text of the `str` argument `field`, or an invalid-argument error naming it when the
/// string cannot be UTF-8 (a lone surrogate such as `"\ud800"`).
pub fn text(field: &str, s: &Bound<'_, pyo3::types::PyString>) -> PyResult<String> {
    s.to_str().map(str::to_owned).map_err(|_| {
        invalid(
            field,
            "is not valid Unicode text (it holds a lone surrogate)",
        )
    })
}
