//! `_native.remoting_producer` (what `ferrymq.Producer("remoting://…")` calls) and the
//! remoting client options: RocketMQ over the classic remoting protocol (name server +
//! brokers). The producer sends batches in one request, each message with its own metadata;
//! `produce`, transactions and recall are refused by name. The remoting reader is
//! `OffsetReader.remoting` (`offset_reader.rs`).

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::publisher::PublishBackend;
use ferrymq_core::remoting::{BatchReceipt, RemotingClient, RemotingOptions};
use ferrymq_core::rocketmq::endpoints::Endpoints;
use ferrymq_core::rocketmq::producer::SendReceipt;
use ferrymq_core::{Error, Message};
use futures::future::BoxFuture;
use pyo3::prelude::*;

use crate::client_options::{extract_credentials, extract_endpoints};
use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Connect, Handle, LazyClient};
use crate::producer::PySendReceipt;
use crate::protocol_producer::{Facts, Protocol, ProtocolProducer, Receipt};
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
            .map(|t| crate::durations::positive("request_timeout", t))
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

async fn send_batch(c: RemotingClient, msgs: Vec<Message>) -> ferrymq_core::Result<Vec<Receipt>> {
    send_all(c, msgs)
        .await?
        .into_iter()
        .map(|(r, t)| receipt(r, &t).map(Receipt::Remoting))
        .collect()
}

/// A producer over the remoting protocol (`remoting://host:port[;host:port]`);
/// `ferrymq.Producer` makes it. No produce path; transactions are refused by name.
#[pyfunction]
#[pyo3(signature = (endpoints, *, credentials=None, namespace=None, request_timeout=None, transaction_checker=None))]
pub fn remoting_producer(
    py: Python<'_>,
    endpoints: &Bound<'_, PyAny>,
    credentials: Option<&Bound<'_, PyAny>>,
    namespace: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    transaction_checker: Option<&Bound<'_, PyAny>>,
) -> PyResult<Py<ProtocolProducer>> {
    if transaction_checker.is_some_and(|c| !c.is_none()) {
        return Err(unsupported("transaction_checker"));
    }
    let rt = RuntimeRef::current()?;
    let options = options(endpoints, credentials, namespace, request_timeout)?;
    let shown = options.endpoints.clone();
    let _guard = rt.handle().enter();
    let client = RemotingClient::new(options).map_err(to_pyerr)?;
    let namespace = client.options().namespace.clone().unwrap_or_default();
    let h: Handle<RemotingClient> = Handle::new(shown.clone(), client, rt);
    let facts = Facts {
        protocol: "remoting",
        refused: REFUSED,
        client_id: String::new(),
        namespace,
        shown: vec![("endpoints", shown)],
    };
    ProtocolProducer::create(py, LazyClient::of(&h), h, None, rt, facts)
}

/// A batch travels in `SEND_BATCH_MESSAGE` requests (one per topic), each message keeping its
/// own keys, tag, properties and unique id; messages of a message group go to the group's
/// queue, in order. Receipts are `ferrymq.SendReceipt`s.
impl Protocol for Handle<RemotingClient> {
    fn send(&self, m: Message) -> BoxFuture<'static, Result<Receipt, Error>> {
        self.run(
            move |c| async move { Ok(Receipt::Remoting(receipt(c.send(&m).await?, m.topic())?)) },
        )
    }

    fn send_batch(&self, ms: Vec<Message>) -> BoxFuture<'static, Result<Vec<Receipt>, Error>> {
        self.run(move |c| send_batch(c, ms))
    }

    fn begin_transaction(&self, _py: Python<'_>) -> PyResult<Py<PyAny>> {
        Err(unsupported("begin_transaction"))
    }

    fn publish_backend(&self) -> PyResult<Arc<dyn PublishBackend>> {
        Err(invalid(
            "producer",
            "AsyncPublisher does not publish over remoting://; use a gRPC endpoint \
             (host:port), jmq:// or nats://",
        ))
    }

    fn metrics(&self) -> Option<ferrymq_core::metrics::ClientMetrics> {
        self.state.connected().map(|c| c.metrics().clone())
    }
}
