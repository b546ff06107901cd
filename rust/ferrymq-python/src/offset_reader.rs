//! `_native.OffsetReader`: the one offset-range reader of every protocol, the replayable path
//! of the PySpark source. A constructor per protocol builds a core
//! [`RangeSource`]: `OffsetReader.rocketmq` (gRPC `PullMessage` / `QueryOffset` of a proxy
//! that serves them), `.remoting` (name server + brokers), `.jmq` (FETCH_INDEX,
//! FETCH_PARTITION_MESSAGE) and `.nats` (JetStream stream sequences). The methods are the same
//! for all; partitions are strings: a RocketMQ queue `"<broker>:<queue id>"`, a JMQ4
//! partition number, `"0"` for a JetStream stream.

use ferrymq_core::jmq::range::JmqRangeReader;
use ferrymq_core::nats::range::StreamReader;
use ferrymq_core::nats::JetStream;
use ferrymq_core::range::RangeSource;
use ferrymq_core::remoting::RemotingReader;
use ferrymq_core::rocketmq::pull::PullReader;
use pyo3::prelude::*;

use crate::client_options::client_options;
use crate::columns::PyMessageColumns;
use crate::errors::{invalid, to_pyerr};
use crate::jmq::cluster_options;
use crate::runtime::RuntimeRef;

/// The reader of one protocol.
#[derive(Clone)]
enum Reader {
    Grpc(PullReader),
    Remoting(RemotingReader),
    Jmq(JmqRangeReader),
    Nats(StreamReader),
}

/// Await the [`RangeSource`] method `$method` of whichever protocol's reader `$reader` is.
macro_rules! dispatch {
    ($reader:expr, $method:ident($($arg:expr),*)) => {
        match $reader {
            Reader::Grpc(r) => RangeSource::$method(&r, $($arg),*).await,
            Reader::Remoting(r) => RangeSource::$method(&r, $($arg),*).await,
            Reader::Jmq(r) => RangeSource::$method(&r, $($arg),*).await,
            Reader::Nats(r) => RangeSource::$method(&r, $($arg),*).await,
        }
    };
}

/// Call the [`RangeSource`] method `$method` of `$self`'s reader with the GIL released.
macro_rules! call {
    ($self:ident, $py:ident, $method:ident($($arg:expr),*)) => {{
        if $self.closed.load(std::sync::atomic::Ordering::Acquire) {
            return Err(crate::errors::to_pyerr(ferrymq_core::Error::closed(
                "the reader is closed",
            )));
        }
        let reader = $self.reader.clone();
        $self
            .rt
            .block_on($py, async move { dispatch!(reader, $method($($arg),*)) })
    }};
}

/// Offset-range reader of one protocol's topics.
#[pyclass(name = "OffsetReader", module = "ferrymq._native", frozen)]
pub struct PyOffsetReader {
    rt: RuntimeRef,
    reader: Reader,
    endpoints: String,
    /// `close()` was called: every later call raises `ClientClosedError`.
    closed: std::sync::atomic::AtomicBool,
}

impl PyOffsetReader {
    fn of(rt: RuntimeRef, reader: Reader, endpoints: String) -> Self {
        Self {
            rt,
            reader,
            endpoints,
            closed: std::sync::atomic::AtomicBool::new(false),
        }
    }
}

#[pymethods]
impl PyOffsetReader {
    /// A reader over gRPC (a proxy serving the pull API) for a consumer group.
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
        let endpoints = reader.client().options().endpoints.to_string();
        Ok(Self::of(rt, Reader::Grpc(reader), endpoints))
    }

    /// A reader over the remoting protocol (`remoting://` name servers) for a consumer group.
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
        let endpoints = reader.client().options().endpoints.clone();
        Ok(Self::of(rt, Reader::Remoting(reader), endpoints))
    }

    /// A reader of JMQ4 partitions: connects to `endpoint` (`jmq://host:port`) as `app`
    /// (failing fast on a wrong address, app or token). No consumer registration: the app's
    /// ack indices on the broker are left alone.
    #[staticmethod]
    #[pyo3(signature = (endpoint, *, app, token, region=None, namespace=None, request_timeout=None, max_body=3145728, metadata_refresh=None, client_ip=None), text_signature = "(endpoint, *, app, token, region=None, namespace=None, request_timeout=10.0, max_body=3145728, metadata_refresh=30.0, client_ip=None)")]
    #[allow(clippy::too_many_arguments)]
    fn jmq(
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
            app,
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
        Ok(Self::of(rt, Reader::Jmq(reader), endpoint.to_string()))
    }

    /// A reader of JetStream streams by sequence (a topic is a stream; `filter_subject`
    /// narrows it to a subject, wildcards allowed): connects to `endpoints`
    /// (`nats://host:port[,nats://…]`).
    #[staticmethod]
    #[pyo3(signature = (endpoints, *, user=None, password=None, token=None, connect_timeout=None, request_timeout=None, filter_subject=None), text_signature = "(endpoints, *, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0, filter_subject=None)")]
    #[allow(clippy::too_many_arguments)]
    fn nats(
        py: Python<'_>,
        endpoints: &Bound<'_, PyAny>,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        filter_subject: Option<String>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let (opts, shown) = crate::nats::options(
            endpoints,
            Some("ferrymq-spark".to_string()),
            user,
            password,
            token,
            connect_timeout,
            request_timeout,
        )?;
        let js = rt.block_on(py, async move { JetStream::connect(opts).await })?;
        Ok(Self::of(
            rt,
            Reader::Nats(StreamReader::new(js, filter_subject)),
            shown,
        ))
    }

    /// Connect where the protocol connects lazily (gRPC: telemetry settings; remoting: check
    /// the name servers). Raises on any failure.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        call!(self, py, start())
    }

    /// The readable partitions of `topic`, sorted.
    fn partitions(&self, py: Python<'_>, topic: String) -> PyResult<Vec<String>> {
        call!(self, py, partitions(&topic))
    }

    /// The first offset still stored in `partition`.
    fn earliest(&self, py: Python<'_>, topic: String, partition: String) -> PyResult<i64> {
        call!(self, py, earliest(&topic, &partition))
    }

    /// The next offset to be written to `partition`.
    fn latest(&self, py: Python<'_>, topic: String, partition: String) -> PyResult<i64> {
        call!(self, py, latest(&topic, &partition))
    }

    /// The first offset of `partition` stored at or after `timestamp_ms` (RocketMQ only).
    fn offset_for_time(
        &self,
        py: Python<'_>,
        topic: String,
        partition: String,
        #[pyo3(from_py_with = crate::ints::timestamp_ms)] timestamp_ms: i64,
    ) -> PyResult<i64> {
        call!(self, py, offset_for_time(&topic, &partition, timestamp_ms))
    }

    /// `[(partition, offset)]`: the earliest or latest offset of every partition of `topic`.
    fn snapshot(&self, py: Python<'_>, topic: String, which: &str) -> PyResult<Vec<(String, i64)>> {
        let latest = match which {
            "earliest" => false,
            "latest" => true,
            other => {
                return Err(invalid(
                    "which",
                    format!("{other:?} is not \"earliest\" or \"latest\""),
                ))
            }
        };
        call!(self, py, snapshot(&topic, latest))
    }

    /// The messages with `start <= offset < end` (at most `max_rows`; continue from
    /// `next_offset`), as Arrow buffers.
    #[pyo3(signature = (topic, partition, start, end, max_rows=10_000))]
    fn read_range(
        &self,
        py: Python<'_>,
        topic: String,
        partition: String,
        #[pyo3(from_py_with = crate::ints::start)] start: i64,
        #[pyo3(from_py_with = crate::ints::end)] end: i64,
        #[pyo3(from_py_with = crate::ints::max_rows)] max_rows: usize,
    ) -> PyResult<PyMessageColumns> {
        if max_rows == 0 {
            return Err(invalid("max_rows", "must be at least 1"));
        }
        let read = call!(self, py, read(&topic, &partition, start, end, max_rows))?;
        Ok(PyMessageColumns::new(
            read.columns,
            read.next_offset,
            read.first_offset,
        ))
    }

    /// Record `offset` (the next one to read) as this reader's progress on `partition` where
    /// the protocol keeps one for lag tools (RocketMQ: the group's offset); elsewhere nothing.
    fn commit(
        &self,
        py: Python<'_>,
        topic: String,
        partition: String,
        #[pyo3(from_py_with = crate::ints::offset)] offset: i64,
    ) -> PyResult<()> {
        call!(self, py, commit(&topic, &partition, offset))
    }

    /// `"rocketmq"` (gRPC), `"remoting"`, `"jmq"` or `"nats"`.
    #[getter]
    fn protocol(&self) -> &'static str {
        match &self.reader {
            Reader::Grpc(r) => r.protocol(),
            Reader::Remoting(r) => r.protocol(),
            Reader::Jmq(r) => r.protocol(),
            Reader::Nats(r) => r.protocol(),
        }
    }

    /// Close the client (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let reader = self.reader.clone();
        if self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(());
        }
        self.rt
            .block_on(py, async move { dispatch!(reader, close()) })
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
            "OffsetReader(protocol={:?}, endpoints={:?})",
            self.protocol(),
            self.endpoints
        )
    }
}
