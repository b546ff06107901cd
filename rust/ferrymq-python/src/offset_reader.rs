//! `_native.OffsetReader`: offset-based reads of RocketMQ queues, the replayable path of the
//! PySpark source, over either protocol: gRPC (`PullMessage` / `QueryOffset` of a proxy that
//! serves them, `OffsetReader.rocketmq`) or classic remoting (name server + brokers,
//! `OffsetReader.remoting`). The same methods either way; queues are named by their key
//! `"<broker>:<queue id>"`.

use ferrymq_core::remoting::RemotingReader;
use ferrymq_core::rocketmq::pull::{is_unimplemented, OffsetPolicy, PullReader, QueueRef};
use pyo3::prelude::*;

use crate::client_options::client_options;
use crate::columns::PyMessageColumns;
use crate::errors::{invalid, to_pyerr};
use crate::runtime::RuntimeRef;

/// The reader of one protocol.
#[derive(Clone)]
enum Reader {
    Grpc(PullReader),
    Remoting(RemotingReader),
}

/// Run `$body` with `$r` bound to the reader of either protocol (their methods are the same).
macro_rules! with_reader {
    ($reader:expr, $r:ident => $body:expr) => {
        match $reader {
            Reader::Grpc($r) => $body,
            Reader::Remoting($r) => $body,
        }
    };
}

/// Offset-based reader of RocketMQ queues (a pull consumer of one group).
#[pyclass(name = "OffsetReader", module = "ferrymq._native", frozen)]
pub struct PyOffsetReader {
    rt: RuntimeRef,
    reader: Reader,
}

/// The offset policy of `query_offset`.
fn policy(policy: &str, timestamp_ms: Option<i64>) -> PyResult<OffsetPolicy> {
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

/// A queue key `"<broker>:<queue id>"`.
fn queue(key: &str) -> PyResult<QueueRef> {
    QueueRef::parse(key).map_err(to_pyerr)
}

#[pymethods]
impl PyOffsetReader {
    /// A reader over gRPC (a proxy serving the pull API).
    #[staticmethod]
    #[pyo3(signature = (endpoints, group, *, topics=Vec::new(), tag_filter=None, pull_batch_size=256, credentials=None, namespace=None, tls=None, request_timeout=None))]
    #[allow(clippy::too_many_arguments)]
    fn rocketmq(
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
        Ok(Self {
            rt,
            reader: Reader::Grpc(reader),
        })
    }

    /// A reader over the remoting protocol (`remoting://` name servers).
    #[staticmethod]
    #[pyo3(signature = (endpoints, group, *, tag_filter=None, pull_batch_size=32, credentials=None, namespace=None, request_timeout=None))]
    fn remoting(
        endpoints: &Bound<'_, PyAny>,
        group: String,
        tag_filter: Option<String>,
        #[pyo3(from_py_with = crate::ints::pull_batch_size)] pull_batch_size: i32,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let options = crate::remoting::options(endpoints, credentials, namespace, request_timeout)?;
        let _guard = rt.handle().enter();
        let reader =
            RemotingReader::new(options, group, tag_filter, pull_batch_size).map_err(to_pyerr)?;
        Ok(Self {
            rt,
            reader: Reader::Remoting(reader),
        })
    }

    /// Connect (gRPC: telemetry settings; remoting: check the name servers). Raises on any
    /// failure.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let reader = self.reader.clone();
        self.rt.block_on(
            py,
            async move { with_reader!(reader, r => r.start().await) },
        )
    }

    /// The readable queues of `topic` as `"<broker>:<queue id>"`, sorted.
    fn queues(&self, py: Python<'_>, topic: String) -> PyResult<Vec<String>> {
        let reader = self.reader.clone();
        self.rt.block_on(py, async move {
            let queues = with_reader!(reader, r => r.queues(&topic).await)?;
            Ok(queues.iter().map(QueueRef::key).collect())
        })
    }

    /// The first stored offset (`"beginning"`), the next offset to be written (`"end"`), or the
    /// first offset stored at or after `timestamp_ms` (`"timestamp"`).
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
        let reader = self.reader.clone();
        self.rt.block_on(py, async move {
            with_reader!(reader, r => r.query_offset(&topic, &q, p).await)
        })
    }

    /// The offset this group committed on the queue, or None.
    fn committed_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
    ) -> PyResult<Option<i64>> {
        let q = self::queue(queue)?;
        let reader = self.reader.clone();
        self.rt.block_on(py, async move {
            with_reader!(reader, r => r.committed_offset(&topic, &q).await)
        })
    }

    /// Commit this group's next offset to read on the queue (lag tools see it).
    fn commit_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
        #[pyo3(from_py_with = crate::ints::offset)] offset: i64,
    ) -> PyResult<()> {
        let q = self::queue(queue)?;
        let reader = self.reader.clone();
        self.rt.block_on(py, async move {
            with_reader!(reader, r => r.commit_offset(&topic, &q, offset).await)
        })
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
        let reader = self.reader.clone();
        let read = self.rt.block_on(py, async move {
            with_reader!(reader, r => r.read_range(&topic, &q, start, end, max_rows).await)
        })?;
        Ok(PyMessageColumns::new(
            read.columns,
            read.next_offset,
            read.first_offset,
        ))
    }

    /// Whether `error` (a ferrymq exception) is the `UNIMPLEMENTED` answer of a server without
    /// the gRPC pull API (the stock RocketMQ proxy).
    #[staticmethod]
    fn is_unimplemented(error: &Bound<'_, PyAny>) -> PyResult<bool> {
        let code: Option<i32> = error.getattr("code").ok().and_then(|c| c.extract().ok());
        Ok(code.is_some_and(|c| {
            is_unimplemented(&ferrymq_core::Error::rocketmq_status(c, String::new()))
        }))
    }

    /// `"rocketmq"` (gRPC) or `"remoting"`.
    #[getter]
    fn protocol(&self) -> &'static str {
        match self.reader {
            Reader::Grpc(_) => "rocketmq",
            Reader::Remoting(_) => "remoting",
        }
    }

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        with_reader!(&self.reader, r => r.group())
    }

    /// Close the client (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let reader = self.reader.clone();
        self.rt.block_on(py, async move {
            with_reader!(reader, r => r.shutdown().await);
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
        let endpoints = match &self.reader {
            Reader::Grpc(r) => r.client().options().endpoints.to_string(),
            Reader::Remoting(r) => r.client().options().endpoints.clone(),
        };
        format!(
            "OffsetReader(protocol={:?}, endpoints={endpoints:?}, group={:?})",
            self.protocol(),
            self.group()
        )
    }
}
