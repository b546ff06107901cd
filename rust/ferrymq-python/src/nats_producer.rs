//! `_native.nats_producer` (what `ferrymq.Producer("nats://…")` calls) and
//! `ferrymq.NatsSendReceipt`.
//!
//! A message is published with its topic as subject, its properties as headers and a fresh
//! `Nats-Msg-Id` (the receipt's `message_id`). `send_batch` and `produce` go through the
//! JetStream produce path: published in order on the connection, acks awaited together. The
//! constructor only checks the arguments; `start()` connects, and sending before it fails.

use std::sync::Arc;

use ferrymq_core::nats::JetStream;
use ferrymq_core::produce::ProduceBackend;
use ferrymq_core::publisher::{PublishAck, PublishBackend};
use ferrymq_core::{Error, Message};
use futures::future::BoxFuture;
use futures::FutureExt;
use pyo3::prelude::*;

use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Handle, LazyClient};
use crate::produce::Produce;
use crate::protocol_producer::{Facts, Protocol, ProtocolProducer, Receipt};
use crate::runtime::RuntimeRef;

/// What JetStream answered for one message sent with `Producer("nats://…")`.
#[pyclass(
    name = "NatsSendReceipt",
    module = "ferrymq",
    frozen,
    get_all,
    eq,
    hash,
    skip_from_py_object
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyNatsSendReceipt {
    /// The `Nats-Msg-Id` the message was published (and de-duplicated) with.
    message_id: String,
    /// The subject (the message's topic).
    topic: String,
    /// The stream that stored it.
    stream: String,
    /// Its stream sequence.
    sequence: u64,
    /// True when the stream recognised the id as a duplicate and did not store it again.
    duplicate: bool,
    /// The JetStream domain, if any.
    domain: Option<String>,
}

impl PyNatsSendReceipt {
    fn new(topic: String, ack: PublishAck) -> Self {
        Self {
            message_id: ack.message_id,
            topic,
            stream: ack.stream,
            sequence: ack.sequence,
            duplicate: ack.duplicate,
            domain: ack.domain,
        }
    }
}

#[pymethods]
impl PyNatsSendReceipt {
    fn __repr__(&self) -> String {
        format!(
            "NatsSendReceipt(message_id={:?}, topic={:?}, stream={:?}, sequence={}, duplicate={})",
            self.message_id,
            self.topic,
            self.stream,
            self.sequence,
            if self.duplicate { "True" } else { "False" }
        )
    }
}

/// The JetStream produce path, its acks paired with the topics they answer.
#[derive(Clone)]
pub(crate) struct NatsSend(Handle<JetStream>);

impl ProduceBackend for NatsSend {
    type Receipt = PyNatsSendReceipt;
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<PyNatsSendReceipt, Error>>, Error>> {
        let topics: Vec<String> = messages.iter().map(|m| m.topic().to_string()).collect();
        let sent = self.0.send_chunk(messages);
        async move {
            Ok(sent
                .await?
                .into_iter()
                .zip(topics)
                .map(|(ack, topic)| ack.map(|ack| PyNatsSendReceipt::new(topic, ack)))
                .collect())
        }
        .boxed()
    }
}

impl NatsSend {
    /// `messages` sent in order, their receipts in order; the first failure fails the call.
    async fn send_all(&self, messages: Vec<Message>) -> Result<Vec<PyNatsSendReceipt>, Error> {
        self.send_chunk(messages).await?.into_iter().collect()
    }

    /// The connected client; refused before `start()`.
    fn connected(&self) -> PyResult<JetStream> {
        let h = &self.0;
        if h.is_closed() {
            return Err(to_pyerr(Error::closed("the client is closed")));
        }
        h.state.connected().cloned().ok_or_else(|| {
            to_pyerr(Error::closed(
                "the client is not started; call start() first",
            ))
        })
    }
}

fn receipt_to_py(py: Python<'_>, r: PyNatsSendReceipt) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, r)?.into_any())
}

/// A JetStream producer (`nats://host:port[,…]`); `ferrymq.Producer` makes it. The
/// constructor checks the arguments; `start()` connects.
#[pyfunction]
#[pyo3(signature = (endpoints, *, user=None, password=None, token=None, request_timeout=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING), text_signature = "(endpoints, *, user=None, password=None, token=None, request_timeout=5.0, max_pending=65536)")]
pub fn nats_producer(
    py: Python<'_>,
    endpoints: &Bound<'_, PyAny>,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
) -> PyResult<Py<ProtocolProducer>> {
    let rt = RuntimeRef::current()?;
    let (opts, shown) = crate::nats::options(
        endpoints,
        None,
        user,
        password,
        token,
        None,
        request_timeout,
    )?;
    let h = Handle::new(shown, opts, rt);
    let send = NatsSend(h.clone());
    let produce = Arc::new(Produce::new(send.clone(), max_pending, rt, receipt_to_py)?);
    let facts = Facts {
        protocol: "nats",
        refused: "NATS JetStream has no delayed messages to recall",
        client_id: String::new(),
        namespace: String::new(),
        shown: vec![("endpoints", h.endpoint.clone())],
    };
    let base = LazyClient::producer(&h, &produce);
    ProtocolProducer::create(py, base, send, Some(produce), rt, facts)
}

/// `send` and `send_batch` publish in order and wait for the acks; no transactions.
impl Protocol for NatsSend {
    fn ready(&self) -> PyResult<()> {
        self.connected().map(|_| ())
    }

    fn check(&self, m: &Message) -> Result<(), Error> {
        ferrymq_core::nats::check_message(m)
    }

    fn send(&self, m: Message) -> BoxFuture<'static, Result<Receipt, Error>> {
        let s = self.clone();
        async move {
            let mut acks = s.send_all(vec![m]).await?;
            let ack = acks
                .pop()
                .ok_or_else(|| Error::internal("a message got no ack"));
            ack.map(Receipt::Nats)
        }
        .boxed()
    }

    fn send_batch(&self, ms: Vec<Message>) -> BoxFuture<'static, Result<Vec<Receipt>, Error>> {
        let s = self.clone();
        async move {
            Ok(s.send_all(ms)
                .await?
                .into_iter()
                .map(Receipt::Nats)
                .collect())
        }
        .boxed()
    }

    fn begin_transaction(&self, _py: Python<'_>) -> PyResult<Py<PyAny>> {
        Err(invalid(
            "begin_transaction",
            "NATS JetStream has no transactions",
        ))
    }

    /// Flush the connection too, if it is open.
    fn flushed(&self, py: Python<'_>) -> PyResult<()> {
        if let Ok(js) = self.connected() {
            self.0.rt.block_on(py, async move { js.flush().await })?;
        }
        Ok(())
    }

    fn publish_backend(&self) -> PyResult<Arc<dyn PublishBackend>> {
        Ok(Arc::new(self.connected()?))
    }

    fn metrics(&self) -> Option<ferrymq_core::metrics::ClientMetrics> {
        self.0.state.connected().map(|js| js.metrics().clone())
    }
}
