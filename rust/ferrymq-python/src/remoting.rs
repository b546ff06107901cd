//! `_native.RemotingProducer` (what `ferrymq.Producer("remoting://…")` constructs) and the
//! remoting client options: RocketMQ over the classic remoting protocol (name server +
//! brokers). The producer sends batches in one request, each message with its own metadata;
//! `produce`, transactions and recall are refused by name. The remoting reader is
//! `OffsetReader.remoting` (`offset_reader.rs`).

use std::time::Duration;

use ferrymq_core::remoting::{BatchReceipt, RemotingClient, RemotingOptions};
use ferrymq_core::rocketmq::endpoints::Endpoints;
use ferrymq_core::rocketmq::producer::SendReceipt;
use ferrymq_core::Message;
use pyo3::prelude::*;

use ferrymq_core::Error;

use crate::client_options::{extract_credentials, extract_duration, extract_endpoints};
use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Connect, Handle, LazyClient};
use crate::message::PyMessage;
use crate::producer::{extract_messages, PySendReceipt};
use crate::producer_base::ProducerBase;
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

/// The client is made (and its endpoints checked) by the constructor; connections are opened
/// by the first request.
impl Connect for RemotingClient {
    type Options = RemotingClient;
    const CLOSED: &'static str = "the client is closed";
    async fn open(client: RemotingClient) -> Result<Self, Error> {
        Ok(client)
    }
    async fn shut(&self) -> Result<(), Error> {
        self.shutdown().await;
        Ok(())
    }
}

/// Why `produce`, transactions and recall are refused.
const REFUSED: &str = "not available over remoting:// (send and send_batch are; use a gRPC \
                       endpoint host:port for transactions, delayed-message recall and produce())";

fn unsupported(what: &str) -> PyErr {
    invalid(what, REFUSED)
}

/// Sends over the remoting protocol: a batch travels in `SEND_BATCH_MESSAGE` requests, each
/// message keeping its own keys, tag, properties and unique id.
#[pyclass(name = "RemotingProducer", module = "ferrymq._native", frozen, extends = ProducerBase)]
pub struct PyRemotingProducer {
    h: Handle<RemotingClient>,
}

async fn send_batch(
    c: RemotingClient,
    msgs: Vec<Message>,
) -> ferrymq_core::Result<Vec<PySendReceipt>> {
    send_all(c, msgs)
        .await?
        .into_iter()
        .map(|(r, t)| receipt(r, &t))
        .collect()
}

async fn send_one(c: RemotingClient, m: Message) -> ferrymq_core::Result<PySendReceipt> {
    receipt(c.send(&m).await?, m.topic())
}

#[pymethods]
impl PyRemotingProducer {
    #[new]
    #[pyo3(signature = (endpoints, *, credentials=None, namespace=None, request_timeout=None, transaction_checker=None))]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        credentials: Option<&Bound<'_, PyAny>>,
        namespace: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        transaction_checker: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyClassInitializer<Self>> {
        if transaction_checker.is_some_and(|c| !c.is_none()) {
            return Err(unsupported("transaction_checker"));
        }
        let rt = RuntimeRef::current()?;
        let options = options(endpoints, credentials, namespace, request_timeout)?;
        let shown = options.endpoints.clone();
        let _guard = rt.handle().enter();
        let client = RemotingClient::new(options).map_err(to_pyerr)?;
        let namespace = client.options().namespace.clone().unwrap_or_default();
        let h = Handle::new(shown.clone(), client, rt);
        let facts = ProducerBase::new(
            "remoting",
            REFUSED,
            String::new(),
            namespace,
            vec![("endpoints", shown)],
        );
        Ok(PyClassInitializer::from(LazyClient::of(&h))
            .add_subclass(facts)
            .add_subclass(Self { h }))
    }

    /// Send one message; returns where it was stored.
    fn send(&self, py: Python<'_>, message: PyRef<'_, PyMessage>) -> PyResult<PySendReceipt> {
        let m = message.inner.clone();
        self.h.block(py, move |c| send_one(c, m))
    }

    fn send_async<'py>(
        &self,
        py: Python<'py>,
        message: PyRef<'_, PyMessage>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let m = message.inner.clone();
        self.h.spawn(py, move |c| send_one(c, m))
    }

    /// Send many messages (of one or more topics) in batch requests; one receipt per message,
    /// in order. Messages of a message group go to the group's queue, in order. A remoting
    /// batch always packs many messages per request, each keeping its metadata: `packed`
    /// changes nothing.
    #[pyo3(signature = (messages, *, packed=false))]
    fn send_batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        packed: bool,
    ) -> PyResult<Vec<PySendReceipt>> {
        let _ = packed;
        let msgs = extract_messages(messages)?;
        self.h.block(py, move |c| send_batch(c, msgs))
    }

    #[pyo3(signature = (messages, *, packed=false))]
    fn send_batch_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'_, PyAny>,
        packed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = packed;
        let msgs = extract_messages(messages)?;
        self.h.spawn(py, move |c| send_batch(c, msgs))
    }

    #[pyo3(signature = (message, on_delivery=None))]
    fn produce(
        &self,
        message: &Bound<'_, PyAny>,
        on_delivery: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let _ = (message, on_delivery);
        Err(unsupported("produce"))
    }

    /// Nothing is ever produced here; the argument is still checked as everywhere.
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=0.0)")]
    fn poll(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        durations::optional("timeout", timeout, Lower::NonNegative)?;
        Ok(0)
    }

    #[pyo3(signature = (timeout=None))]
    fn flush(&self, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        self.poll(timeout)
    }

    #[getter]
    fn pending(&self) -> usize {
        0
    }

    fn begin_transaction(&self) -> PyResult<()> {
        Err(unsupported("begin_transaction"))
    }
}
