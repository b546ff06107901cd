//! The one converter for duration and time arguments of every class.
//!
//! A duration is `int` or `float` seconds, or a `datetime.timedelta` (read exactly from its
//! days, seconds and microseconds); `bool` and anything else are refused. The bounds are the
//! core's (`ferrymq_core::duration`): finite, not negative, more than zero for a
//! [`Lower::Positive`] timeout, and at most ten years — larger values are refused, never
//! clamped. Every error is an `InvalidArgumentError` naming the parameter.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use ferrymq_core::duration as rule;
pub use ferrymq_core::duration::Lower;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyFloat, PyInt, PyType};

use crate::errors::{invalid, to_pyerr};

static TIMEDELTA: PyOnceLock<Py<PyType>> = PyOnceLock::new();
static DATETIME: PyOnceLock<Py<PyType>> = PyOnceLock::new();

/// How long a receive waits by default on every protocol (`SimpleConsumer`'s long-polling time,
/// and the default `timeout` of `PullConsumer.poll`); their default batch is 16 messages, as
/// `SimpleConsumer.receive`'s.
pub(crate) const RECEIVE_WAIT: Duration =
    ferrymq_core::rocketmq::simple_consumer::DEFAULT_AWAIT_DURATION;

const WANTED: &str = "must be seconds (int or float) or a datetime.timedelta";

fn is_timedelta(v: &Bound<'_, PyAny>) -> PyResult<bool> {
    v.is_instance(TIMEDELTA.import(v.py(), "datetime", "timedelta")?)
}

/// Microseconds of a `timedelta`, exactly (its range fits an `i128` with room to spare).
fn timedelta_micros(v: &Bound<'_, PyAny>) -> PyResult<i128> {
    let days: i64 = v.getattr("days")?.extract()?;
    let secs: i64 = v.getattr("seconds")?.extract()?;
    let us: i64 = v.getattr("microseconds")?.extract()?;
    Ok((i128::from(days) * 86_400 + i128::from(secs)) * 1_000_000 + i128::from(us))
}

/// A duration argument named `field`, bounded below by `bound` and above by ten years.
pub fn duration(field: &str, v: &Bound<'_, PyAny>, bound: Lower) -> PyResult<Duration> {
    if v.is_instance_of::<PyBool>() {
        return Err(invalid(field, format!("{WANTED}, not bool")));
    }
    if v.is_instance_of::<PyInt>() {
        return match v.extract::<i128>() {
            Ok(n) => rule::seconds_int(field, n, bound).map_err(to_pyerr),
            // beyond an i128: far past the maximum either way
            Err(_) if v.gt(0)? => rule::seconds_f64(field, f64::INFINITY, bound).map_err(to_pyerr),
            Err(_) => rule::seconds_int(field, -1, bound).map_err(to_pyerr),
        };
    }
    if is_timedelta(v)? {
        return rule::micros(field, timedelta_micros(v)?, bound).map_err(to_pyerr);
    }
    // floats, and number types that convert to one (numpy scalars, Decimal, ...)
    if v.is_instance_of::<PyFloat>() || v.hasattr("__float__")? {
        if let Ok(s) = v.extract::<f64>() {
            return rule::seconds_f64(field, s, bound).map_err(to_pyerr);
        }
    }
    Err(invalid(
        field,
        format!("{WANTED}, not {}", v.get_type().name()?),
    ))
}

/// A timeout: more than zero, at most ten years.
pub fn positive(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    duration(field, v, Lower::Positive)
}

/// A wait or delay: zero allowed, at most ten years.
pub fn non_negative(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Duration> {
    duration(field, v, Lower::NonNegative)
}

/// An optional duration: an omitted argument and `None` both give `None`.
pub fn optional(
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
    bound: Lower,
) -> PyResult<Option<Duration>> {
    v.filter(|v| !v.is_none())
        .map(|v| duration(field, v, bound))
        .transpose()
}

fn now_unix() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// A point in time: a `datetime` (naive means local time), a `timedelta` from now, or Unix
/// seconds; from the epoch to the end of year 9999.
pub fn unix_time(field: &str, v: &Bound<'_, PyAny>) -> PyResult<SystemTime> {
    let secs: f64 = if v.is_instance(DATETIME.import(v.py(), "datetime", "datetime")?)? {
        // `timestamp()` itself raises for a naive datetime the platform cannot place
        v.call_method0("timestamp")
            .and_then(|t| t.extract())
            .map_err(|e| invalid(field, format!("not a usable datetime ({e})")))?
    } else if is_timedelta(v)? {
        now_unix() + timedelta_micros(v)? as f64 / 1e6
    } else if v.is_instance_of::<PyBool>() {
        return Err(invalid(
            field,
            "must be a datetime, a timedelta from now or Unix seconds, not bool",
        ));
    } else if v.is_instance_of::<PyInt>() {
        // an int too large for f64 is far out of range anyway
        v.extract::<f64>().unwrap_or(f64::INFINITY)
    } else if let Ok(f) = v.extract::<f64>() {
        f
    } else {
        return Err(invalid(
            field,
            format!(
                "must be a datetime, a timedelta from now or Unix seconds, not {}",
                v.get_type().name()?
            ),
        ));
    };
    rule::unix_time(field, secs).map_err(to_pyerr)
}

/// A duration with a default: an omitted argument or `None` gives `default`.
pub fn or(
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
    bound: Lower,
    default: Duration,
) -> PyResult<Duration> {
    Ok(optional(field, v, bound)?.unwrap_or(default))
}

/// A timeout or interval with a default (the most common argument): [`or`] with
/// [`Lower::Positive`].
pub fn timeout_or(
    field: &str,
    v: Option<&Bound<'_, PyAny>>,
    default: Duration,
) -> PyResult<Duration> {
    or(field, v, Lower::Positive, default)
}

/// Check a duration argument the Python facades use themselves; returns it as float seconds.
/// `zero` allows 0 (a wait); otherwise it must be positive (a timeout).
#[pyfunction]
#[pyo3(signature = (field, value, *, zero=false))]
pub fn seconds(field: &str, value: &Bound<'_, PyAny>, zero: bool) -> PyResult<f64> {
    let bound = if zero {
        Lower::NonNegative
    } else {
        Lower::Positive
    };
    Ok(duration(field, value, bound)?.as_secs_f64())
}
