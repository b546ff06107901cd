//! `_native.MessageColumns`: a batch of received messages in Arrow column layout, handed to
//! Python as raw buffers that `pyarrow` wraps without one Python object per message
//! (`ferrymq.spark` builds its record batches from them).

use ferrymq_core::columnar::{as_le_bytes, FixedColumn, MessageColumns, VarColumn};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyTuple};

/// Received messages as Arrow buffers, with where the read stopped.
#[pyclass(name = "MessageColumns", module = "ferrymq._native", frozen)]
pub struct PyMessageColumns {
    columns: MessageColumns,
    next_offset: i64,
    first_offset: Option<i64>,
}

impl PyMessageColumns {
    pub fn new(columns: MessageColumns, next_offset: i64, first_offset: Option<i64>) -> Self {
        Self {
            columns,
            next_offset,
            first_offset,
        }
    }
}

fn bytes<'py>(py: Python<'py>, b: &[u8]) -> Bound<'py, PyAny> {
    PyBytes::new(py, b).into_any()
}

fn opt_bytes<'py>(py: Python<'py>, b: Option<&[u8]>) -> Bound<'py, PyAny> {
    match b {
        Some(b) => bytes(py, b),
        None => py.None().into_bound(py),
    }
}

/// `(validity | None, offsets, data, null_count)`.
fn var<'py>(py: Python<'py>, c: &VarColumn) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            opt_bytes(py, c.validity()),
            bytes(py, &as_le_bytes(c.offsets())),
            bytes(py, c.data()),
            c.null_count().into_pyobject(py)?.into_any(),
        ],
    )
}

/// `(validity | None, values, null_count)`.
fn fixed<'py>(py: Python<'py>, c: &FixedColumn<i64>) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(
        py,
        [
            opt_bytes(py, c.validity()),
            bytes(py, &as_le_bytes(c.values())),
            c.null_count().into_pyobject(py)?.into_any(),
        ],
    )
}

#[pymethods]
impl PyMessageColumns {
    /// Number of messages.
    #[getter]
    fn num_rows(&self) -> usize {
        self.columns.len()
    }
    /// Payload bytes held.
    #[getter]
    fn nbytes(&self) -> usize {
        self.columns.byte_len()
    }
    /// Where the next read continues.
    #[getter]
    fn next_offset(&self) -> i64 {
        self.next_offset
    }
    /// Offset of the first message returned, if any.
    #[getter]
    fn first_offset(&self) -> Option<i64> {
        self.first_offset
    }
    fn __len__(&self) -> usize {
        self.columns.len()
    }

    /// The Arrow buffers, by column: variable-width columns are
    /// `(validity | None, offsets, data, null_count)`; `partition` and `offset` are the
    /// little-endian values; `timestamp` is `(validity | None, microseconds, null_count)`;
    /// `properties` is `(offsets, keys, values)` with `keys`/`values` as variable-width columns.
    fn arrow_buffers<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let c = &self.columns;
        let d = PyDict::new(py);
        d.set_item("key", var(py, &c.key)?)?;
        d.set_item("value", var(py, &c.value)?)?;
        d.set_item("topic", var(py, &c.topic)?)?;
        d.set_item("partition", bytes(py, &as_le_bytes(&c.partition)))?;
        d.set_item("offset", bytes(py, &as_le_bytes(&c.offset)))?;
        d.set_item("timestamp", fixed(py, &c.timestamp_us)?)?;
        d.set_item(
            "properties",
            PyTuple::new(
                py,
                [
                    bytes(py, &as_le_bytes(&c.property_offsets)),
                    var(py, &c.property_keys)?.into_any(),
                    var(py, &c.property_values)?.into_any(),
                ],
            )?,
        )?;
        d.set_item("tag", var(py, &c.tag)?)?;
        d.set_item("message_group", var(py, &c.message_group)?)?;
        d.set_item("message_id", var(py, &c.message_id)?)?;
        d.set_item("trace_context", var(py, &c.trace_context)?)?;
        d.set_item("trace_state", var(py, &c.trace_state)?)?;
        Ok(d)
    }

    fn __repr__(&self) -> String {
        format!(
            "MessageColumns(num_rows={}, next_offset={})",
            self.columns.len(),
            self.next_offset
        )
    }
}
