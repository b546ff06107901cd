//! `_native.LatencyHistogram`: the core's HDR latency histogram (nanoseconds, 1 ns .. 1 h,
//! three significant digits) for Python, fed a batch of values per call.
//!
//! `record_many` reads a whole list, tuple or buffer of integers in one call (one crossing per
//! batch, never one per value); every value is checked before any is recorded, so a bad batch
//! records nothing. `ferrymq bench` is its first user; the clients' live statistics are meant to
//! be the next.

use ferrymq_core::histogram::LatencyHistogram as Core;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyInt, PyList, PyMemoryView, PyString, PyTuple};

use crate::errors::{invalid, to_pyerr};

/// A latency histogram in nanoseconds; thread-safe.
#[pyclass(name = "LatencyHistogram", module = "ferrymq._native", frozen)]
pub struct PyLatencyHistogram {
    inner: Mutex<Core>,
}

/// One value of a list or tuple: an `int` (not a `bool`) from 0 up.
fn value_of(i: usize, item: &Bound<'_, PyAny>) -> PyResult<u64> {
    if item.is_instance_of::<PyBool>() || !item.is_instance_of::<PyInt>() {
        return Err(invalid(
            "values",
            format!(
                "item {i} is a {}, not an int (nanoseconds)",
                item.get_type().name()?
            ),
        ));
    }
    if let Ok(v) = item.extract::<u64>() {
        return Ok(v);
    }
    let shown = item.str()?.to_cow()?.chars().take(40).collect::<String>();
    if item.lt(0)? {
        Err(invalid(
            "values",
            format!("item {i} is negative ({shown}); latencies are from 0 ns up"),
        ))
    } else {
        // Beyond 64 bits: far above the tracked hour, recorded as clamped.
        Ok(u64::MAX)
    }
}

/// How to read one 8-byte item of a buffer, from its `struct` format.
#[derive(Clone, Copy)]
enum Item {
    Signed,
    Unsigned,
}

/// The values of a buffer of 64-bit integers (`array('q')`, a numpy `int64` array, ...).
fn buffer_values(view: &Bound<'_, PyMemoryView>) -> PyResult<Vec<u64>> {
    let format: String = view.getattr("format")?.extract()?;
    let itemsize: usize = view.getattr("itemsize")?.extract()?;
    let (order, code) = match format.as_bytes() {
        [o @ (b'@' | b'=' | b'<' | b'>' | b'!'), c] => (*o, *c),
        [c] => (b'@', *c),
        _ => (b'@', 0),
    };
    let item = match code {
        b'q' | b'l' | b'n' if itemsize == 8 => Item::Signed,
        b'Q' | b'L' | b'N' if itemsize == 8 => Item::Unsigned,
        _ => {
            return Err(invalid(
                "values",
                format!(
                    "a buffer of format {format:?} ({itemsize}-byte items); expected 64-bit \
                     integers (array('q'), numpy int64) or a list of int"
                ),
            ))
        }
    };
    let bytes = view.call_method0("tobytes")?;
    let bytes = bytes.cast::<PyBytes>()?.as_bytes();
    let mut out = Vec::with_capacity(bytes.len() / 8);
    for (i, chunk) in bytes.chunks_exact(8).enumerate() {
        let raw: [u8; 8] = chunk.try_into().unwrap_or_default();
        let word = match order {
            b'<' => u64::from_le_bytes(raw),
            b'>' | b'!' => u64::from_be_bytes(raw),
            _ => u64::from_ne_bytes(raw),
        };
        match item {
            Item::Unsigned => out.push(word),
            Item::Signed => {
                let v = word as i64;
                if v < 0 {
                    return Err(invalid(
                        "values",
                        format!("item {i} is negative ({v}); latencies are from 0 ns up"),
                    ));
                }
                out.push(v as u64);
            }
        }
    }
    Ok(out)
}

/// Every value of `values`, checked: a list or tuple of int, a buffer of 64-bit integers, or
/// any other iterable of int.
fn read_values(values: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    if let Ok(list) = values.cast::<PyList>() {
        return list
            .iter()
            .enumerate()
            .map(|(i, v)| value_of(i, &v))
            .collect();
    }
    if let Ok(tuple) = values.cast::<PyTuple>() {
        return tuple
            .iter()
            .enumerate()
            .map(|(i, v)| value_of(i, &v))
            .collect();
    }
    if let Ok(view) = PyMemoryView::from(values) {
        return buffer_values(&view);
    }
    let not_iterable = || {
        invalid(
            "values",
            format!(
                "expected a list, tuple or buffer of int (nanoseconds), not {}",
                values
                    .get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ),
        )
    };
    if values.is_instance_of::<PyInt>() || values.is_instance_of::<PyString>() {
        return Err(not_iterable());
    }
    let iter = values.try_iter().map_err(|_| not_iterable())?;
    iter.enumerate()
        .map(|(i, v)| value_of(i, &v?))
        .collect::<PyResult<Vec<u64>>>()
}

#[pymethods]
impl PyLatencyHistogram {
    #[new]
    fn new() -> Self {
        Self {
            inner: Mutex::new(Core::new()),
        }
    }

    /// Record a batch of latencies in nanoseconds (a list, tuple or buffer of int); values
    /// above one hour are recorded as one hour and counted in `clamped`. Returns how many were
    /// recorded. A bad value (negative, not an int) raises `InvalidArgumentError` naming
    /// `values` and records nothing.
    fn record_many(&self, values: &Bound<'_, PyAny>) -> PyResult<usize> {
        let values = read_values(values)?;
        self.inner.lock().record_many(values.iter().copied());
        Ok(values.len())
    }

    /// The value (ns) at percentile `q` (0 to 100), within three significant digits; `None`
    /// when empty.
    fn percentile(&self, q: f64) -> PyResult<Option<u64>> {
        self.inner.lock().percentile(q).map_err(to_pyerr)
    }

    /// How many values were recorded.
    #[getter]
    fn count(&self) -> u64 {
        self.inner.lock().count()
    }

    /// How many values were above one hour (recorded as one hour).
    #[getter]
    fn clamped(&self) -> u64 {
        self.inner.lock().clamped()
    }

    /// The smallest value (ns, exact); `None` when empty.
    #[getter]
    fn min(&self) -> Option<u64> {
        self.inner.lock().min()
    }

    /// The largest value (ns, exact); `None` when empty.
    #[getter]
    fn max(&self) -> Option<u64> {
        self.inner.lock().max()
    }

    /// The mean (ns, exact); `None` when empty.
    #[getter]
    fn mean(&self) -> Option<f64> {
        self.inner.lock().mean()
    }

    /// Add every value of `other` (which may be this histogram) to this one.
    fn merge(&self, other: &Bound<'_, PyAny>) -> PyResult<()> {
        let other = other.cast::<PyLatencyHistogram>().map_err(|_| {
            invalid(
                "other",
                format!(
                    "expected a LatencyHistogram, not {}",
                    other
                        .get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                ),
            )
        })?;
        // A copy first, so that no thread ever holds both locks (and `h.merge(h)` works).
        let copy = other.get().inner.lock().clone();
        self.inner.lock().merge(&copy).map_err(to_pyerr)
    }

    /// Forget every value.
    fn reset(&self) {
        self.inner.lock().reset();
    }

    fn __repr__(&self) -> String {
        let h = self.inner.lock();
        match (h.min(), h.percentile(50.0).ok().flatten(), h.max()) {
            (Some(min), Some(p50), Some(max)) => format!(
                "LatencyHistogram(count={}, min={min}, p50={p50}, max={max})",
                h.count()
            ),
            _ => "LatencyHistogram(count=0)".to_string(),
        }
    }
}
