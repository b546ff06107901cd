//! Integer arguments that name themselves when they do not fit.
//!
//! PyO3 turns an `int` that does not fit the Rust type of a parameter into an `OverflowError`
//! ("can't convert negative int to unsigned", "out of range integral type conversion
//! attempted", ...) that does not say which parameter it was. Every integer parameter of the
//! public classes is therefore read with `#[pyo3(from_py_with = crate::ints::<name>)]`, one of
//! the functions below: the value is read exactly, and one outside the type's range is an
//! `InvalidArgumentError` naming the parameter and the accepted range. Anything but an `int`
//! stays a `TypeError` (PyO3 notes the parameter). `None` is accepted where the parameter is
//! an `Option`.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyInt;

use crate::errors::invalid;

/// A Rust type an integer argument can be read into (an integer type, or an `Option` of one).
pub trait IntArg: Sized {
    fn from_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Self>;
}

fn not_an_int(v: &Bound<'_, PyAny>) -> PyResult<PyErr> {
    Ok(PyTypeError::new_err(format!(
        "'{}' object cannot be interpreted as an integer",
        v.get_type().name()?
    )))
}

macro_rules! int_arg {
    ($($t:ty),*) => {$(
        impl IntArg for $t {
            fn from_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Self> {
                if !v.is_instance_of::<PyInt>() {
                    return Err(not_an_int(v)?);
                }
                if let Ok(n) = v.extract::<$t>() {
                    return Ok(n);
                }
                let shown = v.str()?.to_cow()?.chars().take(60).collect::<String>();
                Err(invalid(
                    field,
                    format!(
                        "{shown} is out of range (from {} to {})",
                        <$t>::MIN,
                        <$t>::MAX
                    ),
                ))
            }
        }
    )*};
}

int_arg!(u8, u16, u32, u64, usize, i16, i32, i64, i128);

impl<T: IntArg> IntArg for Option<T> {
    fn from_arg(field: &str, v: &Bound<'_, PyAny>) -> PyResult<Self> {
        if v.is_none() {
            Ok(None)
        } else {
            T::from_arg(field, v).map(Some)
        }
    }
}

macro_rules! named {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("The integer argument `", stringify!($name), "`.")]
        pub fn $name<T: IntArg>(v: &Bound<'_, PyAny>) -> PyResult<T> {
            T::from_arg(stringify!($name), v)
        }
    )*};
}

named!(
    code,
    compress_threshold,
    consumption_threads,
    count,
    end,
    endpoint,
    endpoints,
    expected_last_sequence,
    expected_last_subject_sequence,
    limit,
    max,
    max_attempts,
    max_body,
    max_body_size,
    max_bytes,
    max_cache_bytes,
    max_cache_messages,
    max_concurrent_receives,
    max_delivery_attempts,
    max_in_flight,
    max_messages,
    max_pending,
    max_rows,
    max_topic_bytes,
    nodes,
    offset,
    port,
    priority,
    producer_max_attempts,
    pull_batch_size,
    queue,
    queues,
    receive_batch_size,
    settle_events,
    refill_allowed_at,
    replicas,
    start,
    timestamp_ms,
    transaction_check_max,
    auto_create_queues,
    group,
    level,
    node,
    partitions,
    times,
);
