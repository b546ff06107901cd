//! `_native.RemotingReader` and `_native.RemotingProducer`: RocketMQ over the classic remoting
//! protocol (name server + brokers). The reader is the remoting twin of `PullReader` (the same
//! methods and queue keys `"<broker>:<queue id>"`), so the PySpark source uses either the same
//! way; the producer sends batches in one request, each message with its own metadata.

use std::time::Duration;

use ferrymq_core::remoting::{BatchReceipt, RemotingClient, RemotingOptions, RemotingReader};
use ferrymq_core::rocketmq::endpoints::Endpoints;
use ferrymq_core::rocketmq::producer::SendReceipt;
use ferrymq_core::rocketmq::pull::QueueRef;
use ferrymq_core::Message;
use pyo3::prelude::*;

use crate::aio::future_into_py;
use crate::client_options::{extract_credentials, extract_duration};
use crate::columns::PyMessageColumns;
use crate::errors::{invalid, to_pyerr};
use crate::message::PyMessage;
use crate::producer::{extract_messages, PySendReceipt};
use crate::pull_reader;
use crate::runtime::RuntimeRef;

/// Default time a remoting request may take (the broker answers within milliseconds).
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) fn options(
    endpoints: &Bound<'_, PyAny>,
    credentials: Option<&Bound<'_, PyAny>>,
    namespace: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<RemotingOptions> {
    let endpoints: String = if let Ok(s) = endpoints.extract::<String>() {
        s
    } else if let Ok(list) = endpoints.extract::<Vec<String>>() {
        list.join(";")
    } else {
        return Err(invalid(
            "endpoints",
            "must be a str \"remoting://host:port[;host:port]\" or a list of them",
        ));
    };
    Ok(RemotingOptions {
        endpoints,
        credentials: credentials
            .filter(|c| !c.is_none())
            .map(extract_credentials)
            .transpose()?,
        request_timeout: request_timeout
            .filter(|t| !t.is_none())
            .map(|t| extract_duration("request_timeout", t))
            .transpose()?
            .unwrap_or(DEFAULT_REQUEST_TIMEOUT),
        namespace: namespace.filter(|n| !n.is_empty()),
    })
}

/// Offset-based reader of RocketMQ queues over the remoting protocol.
#[pyclass(name = "RemotingReader", module = "ferrymq._native", frozen)]
pub struct PyRemotingReader {
    rt: RuntimeRef,
    reader: RemotingReader,
}

#[pymethods]
impl PyRemotingReader {
    #[new]
    #[pyo3(signature = (endpoints, group, *, tag_filter=None, pull_batch_size=32, credentials=None, namespace=None, request_timeout=None))]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        group: String,
        tag_filter: Option<String>,
        #[pyo3(from_py_with = crate::ints::pull_batch_size)] pull_batch_size: i32,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let options = options(endpoints, credentials, namespace, request_timeout)?;
        let _guard = rt.handle().enter();
        let reader =
            RemotingReader::new(options, group, tag_filter, pull_batch_size).map_err(to_pyerr)?;
        Ok(Self { rt, reader })
    }

    /// Check the name servers (one route-less round trip is not needed: this is cheap).
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
        let p = pull_reader::policy(policy, timestamp_ms)?;
        let q = pull_reader::queue(queue)?;
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.query_offset(&topic, &q, p).await })
    }

    /// The offset this group committed on the queue, or None.
    fn committed_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
    ) -> PyResult<Option<i64>> {
        let q = pull_reader::queue(queue)?;
        let r = self.reader.clone();
        self.rt
            .block_on(py, async move { r.committed_offset(&topic, &q).await })
    }

    /// Commit this group's next offset to read on the queue (lag tools see it).
    fn commit_offset(
        &self,
        py: Python<'_>,
        topic: String,
        queue: &str,
        #[pyo3(from_py_with = crate::ints::offset)] offset: i64,
    ) -> PyResult<()> {
        let q = pull_reader::queue(queue)?;
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
        let q = pull_reader::queue(queue)?;
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

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        self.reader.group()
    }

    /// Close the connections (idempotent).
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
            "RemotingReader(endpoints={:?}, group={:?})",
            self.reader.client().options().endpoints,
            self.reader.group()
        )
    }
}

/// Sends over the remoting protocol: a batch travels in `SEND_BATCH_MESSAGE` requests, each
/// message keeping its own keys, tag, properties and unique id.
#[pyclass(name = "RemotingProducer", module = "ferrymq._native", frozen)]
pub struct PyRemotingProducer {
    rt: RuntimeRef,
    client: RemotingClient,
}

fn receipt(r: BatchReceipt, topic: &str) -> ferrymq_core::Result<PySendReceipt> {
    let endpoints = Endpoints::parse_access_point(&r.address)?.endpoints;
    Ok(PySendReceipt::from(SendReceipt {
        message_id: r.message_id,
        topic: topic.to_string(),
        queue_id: r.queue.id,
        broker_name: r.queue.broker,
        endpoints,
        offset: r.offset,
        transaction_id: None,
        recall_handle: None,
    }))
}

async fn send_all(
    client: RemotingClient,
    msgs: Vec<Message>,
) -> ferrymq_core::Result<Vec<(BatchReceipt, String)>> {
    // One request stream per topic; receipts come back in the order of `msgs`.
    let mut topics: Vec<&str> = msgs.iter().map(Message::topic).collect();
    topics.sort_unstable();
    topics.dedup();
    if topics.len() == 1 {
        let topic = topics[0].to_string();
        let rs = client.send_batch(&topic, &msgs).await?;
        return Ok(rs.into_iter().map(|r| (r, topic.clone())).collect());
    }
    let mut out: Vec<Option<(BatchReceipt, String)>> = (0..msgs.len()).map(|_| None).collect();
    for topic in topics {
        let idx: Vec<usize> = (0..msgs.len())
            .filter(|&i| msgs[i].topic() == topic)
            .collect();
        let part: Vec<Message> = idx.iter().map(|&i| msgs[i].clone()).collect();
        let rs = client.send_batch(topic, &part).await?;
        for (i, r) in idx.into_iter().zip(rs) {
            out[i] = Some((r, topic.to_string()));
        }
    }
    out.into_iter()
        .map(|r| r.ok_or_else(|| ferrymq_core::Error::internal("a message got no receipt")))
        .collect()
}

#[pymethods]
impl PyRemotingProducer {
    #[new]
    #[pyo3(signature = (endpoints, *, credentials=None, namespace=None, request_timeout=None))]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let options = options(endpoints, credentials, namespace, request_timeout)?;
        let _guard = rt.handle().enter();
        let client = RemotingClient::new(options).map_err(to_pyerr)?;
        Ok(Self { rt, client })
    }

    /// Nothing to connect ahead of the first send (connections are made on demand); kept for
    /// the common lifecycle.
    fn start(&self) {}

    /// Send one message; returns where it was stored.
    fn send(&self, py: Python<'_>, message: PyRef<'_, PyMessage>) -> PyResult<PySendReceipt> {
        let c = self.client.clone();
        let m = message.inner.clone();
        self.rt.block_on(py, async move {
            let t = m.topic().to_string();
            receipt(c.send(&m).await?, &t)
        })
    }

    fn send_async<'py>(
        &self,
        py: Python<'py>,
        message: PyRef<'_, PyMessage>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = self.client.clone();
        let m = message.inner.clone();
        future_into_py(py, self.rt, async move {
            let t = m.topic().to_string();
            receipt(c.send(&m).await?, &t)
        })
    }

    /// Send many messages (of one or more topics) in batch requests; one receipt per message,
    /// in order. Messages of a message group go to the group's queue, in order.
    fn send_batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Vec<PySendReceipt>> {
        let msgs = extract_messages(messages)?;
        let c = self.client.clone();
        self.rt.block_on(py, async move {
            send_all(c, msgs)
                .await?
                .into_iter()
                .map(|(r, t)| receipt(r, &t))
                .collect()
        })
    }

    fn send_batch_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'_, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let msgs = extract_messages(messages)?;
        let c = self.client.clone();
        future_into_py(py, self.rt, async move {
            send_all(c, msgs)
                .await?
                .into_iter()
                .map(|(r, t)| receipt(r, &t))
                .collect::<ferrymq_core::Result<Vec<_>>>()
        })
    }

    /// Close the connections (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let c = self.client.clone();
        self.rt.block_on(py, async move {
            c.shutdown().await;
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
            "RemotingProducer(endpoints={:?})",
            self.client.options().endpoints
        )
    }
}
