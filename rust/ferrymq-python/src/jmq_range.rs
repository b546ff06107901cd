//! `_native.JmqRangeReader`: index-range reads of JMQ4 partitions as Arrow buffers
//! (FETCH_INDEX bounds, FETCH_PARTITION_MESSAGE), the replayable path of the PySpark source.

use std::collections::BTreeMap;

use ferrymq_core::jmq::range::JmqRangeReader;
use pyo3::prelude::*;

use crate::columns::PyMessageColumns;
use crate::errors::invalid;
use crate::jmq::cluster_options;
use crate::runtime::RuntimeRef;

/// Reads `[start, end)` index ranges of JMQ4 partitions (one cluster session of one app).
#[pyclass(name = "JmqRangeReader", module = "ferrymq._native", frozen)]
pub struct PyJmqRangeReader {
    rt: RuntimeRef,
    reader: JmqRangeReader,
    endpoint: String,
    app: String,
}

#[pymethods]
impl PyJmqRangeReader {
    /// Connect to `endpoint` (`jmq://host:port`) as `app` (failing fast on a wrong address,
    /// app or token).
    #[new]
    #[pyo3(signature = (endpoint, *, app, token, region=None, namespace=None, request_timeout=None, max_body=3145728, metadata_refresh=None, client_ip=None), text_signature = "(endpoint, *, app, token, region=None, namespace=None, request_timeout=10.0, max_body=3145728, metadata_refresh=30.0, client_ip=None)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoint: &str,
        app: String,
        token: String,
        region: Option<String>,
        namespace: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_body)] max_body: usize,
        metadata_refresh: Option<&Bound<'_, PyAny>>,
        client_ip: Option<String>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        if max_body == 0 {
            return Err(invalid("max_body", "must be at least 1"));
        }
        let options = cluster_options(
            endpoint,
            app.clone(),
            token,
            region,
            namespace,
            client_ip,
            request_timeout,
            metadata_refresh,
        )?;
        let reader = rt.block_on(py, async move {
            JmqRangeReader::connect(options, max_body).await
        })?;
        Ok(Self {
            rt,
            reader,
            endpoint: endpoint.to_string(),
            app,
        })
    }

    /// The partitions of `topic`, sorted.
    fn partitions(&self, py: Python<'_>, topic: String) -> PyResult<Vec<i16>> {
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.partitions(&topic).await })
    }

    /// `{partition: (left index, right index)}` of `partitions` of `topic` (all when `None`):
    /// the first index still stored and the next one to be written.
    #[pyo3(signature = (topic, partitions=None))]
    fn bounds(
        &self,
        py: Python<'_>,
        topic: String,
        partitions: Option<Vec<i16>>,
    ) -> PyResult<BTreeMap<i16, (i64, i64)>> {
        let r = self.reader.clone();
        let parts = partitions.unwrap_or_default();
        let b = self
            .rt
            .block_on(py, async move { r.bounds(&topic, &parts).await })?;
        Ok(b.into_iter()
            .map(|b| (b.partition, (b.left, b.right)))
            .collect())
    }

    /// The messages of `topic`/`partition` with `start <= index < end`, at most `max_rows` of
    /// them (continue from `next_offset`), as Arrow buffers.
    #[pyo3(signature = (topic, partition, start, end, max_rows=10_000))]
    fn read_range(
        &self,
        py: Python<'_>,
        topic: String,
        #[pyo3(from_py_with = crate::ints::partition)] partition: i16,
        #[pyo3(from_py_with = crate::ints::start)] start: i64,
        #[pyo3(from_py_with = crate::ints::end)] end: i64,
        #[pyo3(from_py_with = crate::ints::max_rows)] max_rows: usize,
    ) -> PyResult<PyMessageColumns> {
        if max_rows == 0 {
            return Err(invalid("max_rows", "must be at least 1"));
        }
        let r = self.reader.clone();
        let got = self.rt.block_on(py, async move {
            r.read_range(&topic, partition, start, end, max_rows).await
        })?;
        Ok(PyMessageColumns::new(
            got.columns,
            got.next_offset,
            got.first_offset,
        ))
    }

    /// Close the session.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.reader.clone();
        self.rt.block_on(py, async move {
            r.close().await;
            Ok(())
        })
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(
        &self,
        py: Python<'_>,
        _t: Py<PyAny>,
        _v: Py<PyAny>,
        _tb: Py<PyAny>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "JmqRangeReader(endpoint={:?}, app={:?})",
            self.endpoint, self.app
        )
    }
}
