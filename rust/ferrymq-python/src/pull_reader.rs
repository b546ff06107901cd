//! `_native.PullReader`: offset-based reads of RocketMQ queues (`PullMessage` / `QueryOffset`),
//! the replayable path of the PySpark source. Queues are named by their key
//! `"<broker>:<queue id>"`.

use ferrymq_core::rocketmq::pull::{is_unimplemented, OffsetPolicy, PullReader, QueueRef};
use pyo3::prelude::*;

use crate::client_options::client_options;
use crate::columns::PyMessageColumns;
use crate::errors::{invalid, to_pyerr};
use crate::runtime::RuntimeRef;

/// Offset-based reader of RocketMQ queues (a pull consumer of one group).
#[pyclass(name = "PullReader", module = "ferrymq._native", frozen)]
pub struct PyPullReader {
    rt: RuntimeRef,
    reader: PullReader,
}

/// The offset policy of `query_offset` (shared with the remoting reader).
pub(crate) fn policy(policy: &str, timestamp_ms: Option<i64>) -> PyResult<OffsetPolicy> {
    match (policy, timestamp_ms) {
        ("beginning", None) => Ok(OffsetPolicy::Beginning),
        ("end", None) => Ok(OffsetPolicy::End),
        ("timestamp", Some(ms)) => Ok(OffsetPolicy::Timestamp(ms)),
        ("timestamp", None) => Err(invalid(
            "timestamp_ms",
            "is required by policy \"timestamp\"",
        )),
        ("beginning" | "end", Some(_)) => Err(invalid(
            "timestamp_ms",
            "is only allowed with policy \"timestamp\"",
        )),
        (other, _) => Err(invalid(
            "policy",
            format!("{other:?} is not \"beginning\", \"end\" or \"timestamp\""),
        )),
    }
}

/// A queue key `"<broker>:<queue id>"` (shared with the remoting reader).
pub(crate) fn queue(key: &str) -> PyResult<QueueRef> {
    QueueRef::parse(key).map_err(to_pyerr)
}

#[pymethods]
impl PyPullReader {
    #[new]
    #[pyo3(signature = (endpoints, group, *, topics=Vec::new(), tag_filter=None, pull_batch_size=256, credentials=None, namespace=None, tls=None, request_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        group: String,
        topics: Vec<String>,
        tag_filter: Option<String>,
        #[pyo3(from_py_with = crate::ints::pull_batch_size)] pull_batch_size: i32,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        tls: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let options = client_options(
            endpoints,
            credentials,
            namespace,
            tls,
            request_timeout,
            None,
            None,
            None,
            None,
        )?;
        let _guard = rt.handle().enter();
        let reader = PullReader::new(options, group, &topics, tag_filter, pull_batch_size)
            .map_err(to_pyerr)?;
        Ok(Self { rt, reader })
    }

    /// Connect (telemetry settings). Raises on any failure.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.reader.clone();
        self.rt.block_on(py, async move { r.start().await })
    }

    /// The readable queues of `topic` as `"<broker>:<queue id>"`, sorted.
    fn queues(&self, py: Python<'_>, topic: String) -> PyResult<Vec<String>> {
        let r = self.reader.clone();
        self.rt.block_on(py, async move {
            Ok(r.queues(&topic).await?.iter().map(QueueRef::key).collect())
        })
    }

    /// `QueryOffset`: `policy` is `"beginning"`, `"end"` (the next offset to be written) or
    /// `"timestamp"` with `timestamp_ms`.
    #[pyo3(signature = (topic, queue, policy, timestamp_ms=None))]
    fn query_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
        policy: &str,
        #[pyo3(from_py_with = crate::ints::timestamp_ms)] timestamp_ms: Option<i64>,
    ) -> PyResult<i64> {
        let p = self::policy(policy, timestamp_ms)?;
        let q = self::queue(queue)?;
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.query_offset(&topic, &q, p).await })
    }

    /// `GetOffset`: the offset this group committed on the queue, or None.
    fn committed_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
    ) -> PyResult<Option<i64>> {
        let q = self::queue(queue)?;
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.committed_offset(&topic, &q).await })
    }

    /// `UpdateOffset`: record this group's progress on the queue.
    fn commit_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
        #[pyo3(from_py_with = crate::ints::offset)] offset: i64,
    ) -> PyResult<()> {
        let q = self::queue(queue)?;
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.commit_offset(&topic, &q, offset).await })
    }

    /// The messages with `start <= offset < end` (at most `max_rows`; continue from
    /// `next_offset`), as Arrow buffers.
    #[pyo3(signature = (topic, queue, start, end, max_rows=10_000))]
    fn read_range(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
        #[pyo3(from_py_with = crate::ints::start)] start: i64,
        #[pyo3(from_py_with = crate::ints::end)] end: i64,
        #[pyo3(from_py_with = crate::ints::max_rows)] max_rows: usize,
    ) -> PyResult<PyMessageColumns> {
        if max_rows == 0 {
            return Err(invalid("max_rows", "must be at least 1"));
        }
        let q = self::queue(queue)?;
        let r = self.reader.clone();
        let read = self.rt.block_on(py, async move {
            r.read_range(&topic, &q, start, end, max_rows).await
        })?;
        Ok(PyMessageColumns::new(
            read.columns,
            read.next_offset,
            read.first_offset,
        ))
    }

    /// Whether `error` (a ferrymq exception) is the `UNIMPLEMENTED` answer of a server without
    /// the pull API (the stock RocketMQ proxy).
    #[staticmethod]
    fn is_unimplemented(error: &Bound<'_, PyAny>) -> PyResult<bool> {
        let code: Option<i32> = error.getattr("code").ok().and_then(|c| c.extract().ok());
        Ok(code.is_some_and(|c| {
            is_unimplemented(&ferrymq_core::Error::rocketmq_status(c, String::new()))
        }))
    }

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        self.reader.group()
    }

    /// Stop the client (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let r = self.reader.clone();
        self.rt.block_on(py, async move {
            r.shutdown().await;
            Ok(())
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (_exc_type=None, _exc=None, _tb=None))]
    fn __exit__(
        &self,
        py: Python<'_>,
        _exc_type: Option<&Bound<'_, PyAny>>,
        _exc: Option<&Bound<'_, PyAny>>,
        _tb: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<bool> {
        self.close(py)?;
        Ok(false)
    }

    fn __repr__(&self) -> String {
        format!(
            "PullReader(endpoints={:?}, group={:?})",
            self.reader.client().options().endpoints,
            self.reader.group()
        )
    }
}
