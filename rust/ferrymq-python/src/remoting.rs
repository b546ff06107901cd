//! `_native.RemotingProducer` and the remoting client options: RocketMQ over the classic
//! remoting protocol (name server + brokers). The producer sends batches in one request, each
//! message with its own metadata; the remoting reader is `OffsetReader.remoting`
//! (`offset_reader.rs`).

use std::time::Duration;

use ferrymq_core::remoting::{BatchReceipt, RemotingClient, RemotingOptions};
use ferrymq_core::rocketmq::endpoints::Endpoints;
use ferrymq_core::rocketmq::producer::SendReceipt;
use ferrymq_core::Message;
use pyo3::prelude::*;

use crate::aio::future_into_py;
use crate::client_options::{extract_credentials, extract_duration, extract_endpoints};
use crate::errors::to_pyerr;
use crate::message::PyMessage;
use crate::producer::{extract_messages, PySendReceipt};
use crate::runtime::RuntimeRef;

/// Default time a remoting request may take (the broker answers within milliseconds).
const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

pub(crate) fn options(
    endpoints: &Bound<'_, PyAny>,
    credentials: Option<&Bound<'_, PyAny>>,
    namespace: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<RemotingOptions> {
    Ok(RemotingOptions {
        endpoints: extract_endpoints(endpoints, "remoting://host:port[;host:port]")?,
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
