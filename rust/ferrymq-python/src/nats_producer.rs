//! `_native.NatsProducer` (what `ferrymq.Producer("nats://…")` constructs) and
//! `ferrymq.NatsSendReceipt`.
//!
//! A message is published with its topic as subject, its properties as headers and a fresh
//! `Nats-Msg-Id` (the receipt's `message_id`). `send_batch` and `produce` go through the
//! JetStream produce path: published in order on the connection, acks awaited together. The
//! constructor only checks the arguments; `start()` connects, and sending before it fails.

use std::sync::Arc;

use ferrymq_core::nats::JetStream;
use ferrymq_core::produce::ProduceBackend;
use ferrymq_core::publisher::PublishAck;
use ferrymq_core::{Error, Message};
use futures::future::BoxFuture;
use futures::FutureExt;
use pyo3::prelude::*;

use crate::errors::{invalid, to_pyerr};
use crate::lazy::{Handle, LazyClient};
use crate::message::extract_message;
use crate::produce::Produce;
use crate::producer::extract_messages;
use crate::producer_base::ProducerBase;
use crate::runtime::RuntimeRef;

/// What JetStream answered for one message sent with `Producer("nats://…")`.
#[pyclass(
    name = "NatsSendReceipt",
    module = "ferrymq",
    frozen,
    skip_from_py_object
)]
#[derive(Clone)]
pub struct PyNatsSendReceipt {
    topic: String,
    ack: PublishAck,
}

#[pymethods]
impl PyNatsSendReceipt {
    /// The `Nats-Msg-Id` the message was published (and de-duplicated) with.
    #[getter]
    fn message_id(&self) -> &str {
        &self.ack.message_id
    }
    /// The subject (the message's topic).
    #[getter]
    fn topic(&self) -> &str {
        &self.topic
    }
    /// The stream that stored it.
    #[getter]
    fn stream(&self) -> &str {
        &self.ack.stream
    }
    /// Its stream sequence.
    #[getter]
    fn sequence(&self) -> u64 {
        self.ack.sequence
    }
    /// True when the stream recognised the id as a duplicate and did not store it again.
    #[getter]
    fn duplicate(&self) -> bool {
        self.ack.duplicate
    }
    /// The JetStream domain, if any.
    #[getter]
    fn domain(&self) -> Option<&str> {
        self.ack.domain.as_deref()
    }
    fn __eq__(&self, other: &Bound<'_, PyAny>) -> bool {
        other
            .cast::<Self>()
            .is_ok_and(|o| o.get().topic == self.topic && o.get().ack == self.ack)
    }
    fn __hash__(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&self.ack.message_id, &self.ack.stream, self.ack.sequence).hash(&mut h);
        h.finish()
    }
    fn __repr__(&self) -> String {
        let a = &self.ack;
        format!(
            "NatsSendReceipt(message_id={:?}, topic={:?}, stream={:?}, sequence={}, duplicate={})",
            a.message_id,
            self.topic,
            a.stream,
            a.sequence,
            if a.duplicate { "True" } else { "False" }
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
                .map(|(ack, topic)| ack.map(|ack| PyNatsSendReceipt { topic, ack }))
                .collect())
        }
        .boxed()
    }
}

impl NatsSend {
    /// `messages` sent in order, their receipts in order; the first failure fails the call.
    async fn send(&self, messages: Vec<Message>) -> Result<Vec<PyNatsSendReceipt>, Error> {
        self.send_chunk(messages).await?.into_iter().collect()
    }
}

fn receipt_to_py(py: Python<'_>, r: PyNatsSendReceipt) -> PyResult<Py<PyAny>> {
    Ok(Py::new(py, r)?.into_any())
}

/// A JetStream producer; `ferrymq.Producer` constructs it for `nats://` endpoints.
#[pyclass(name = "NatsProducer", module = "ferrymq._native", frozen, extends = ProducerBase)]
pub struct NatsProducer {
    send: NatsSend,
    produce: Arc<Produce<NatsSend>>,
}

impl NatsProducer {
    /// The connected client, for the managed publisher; refused before `start()`.
    pub(crate) fn connected(&self) -> PyResult<JetStream> {
        let h = &self.send.0;
        if h.is_closed() {
            return Err(to_pyerr(Error::closed("the client is closed")));
        }
        h.state.connected().cloned().ok_or_else(|| {
            to_pyerr(Error::closed(
                "the client is not started; call start() first",
            ))
        })
    }

    fn messages(&self, messages: &Bound<'_, PyAny>) -> PyResult<(NatsSend, Vec<Message>)> {
        self.connected()?;
        Ok((self.send.clone(), extract_messages(messages)?))
    }

    fn one(&self, message: &Bound<'_, PyAny>) -> PyResult<(NatsSend, Vec<Message>)> {
        self.connected()?;
        Ok((self.send.clone(), vec![extract_message(message)?]))
    }
}

async fn first(s: NatsSend, m: Vec<Message>) -> Result<PyNatsSendReceipt, Error> {
    s.send(m)
        .await?
        .pop()
        .ok_or_else(|| Error::internal("a message got no ack"))
}

#[pymethods]
impl NatsProducer {
    /// Check the arguments; `start()` connects.
    #[new]
    #[pyo3(signature = (endpoints, *, user=None, password=None, token=None, request_timeout=None, max_pending=ferrymq_core::produce::DEFAULT_MAX_PENDING), text_signature = "(endpoints, *, user=None, password=None, token=None, request_timeout=5.0, max_pending=65536)")]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        request_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_pending)] max_pending: usize,
    ) -> PyResult<PyClassInitializer<Self>> {
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
        let facts = ProducerBase::new(
            "nats",
            "NATS JetStream has no delayed messages to recall",
            String::new(),
            String::new(),
            vec![("endpoints", h.endpoint.clone())],
        );
        Ok(PyClassInitializer::from(LazyClient::producer(&h, &produce))
            .add_subclass(facts)
            .add_subclass(Self { send, produce }))
    }

    /// Publish one message and wait for its ack.
    fn send(&self, py: Python<'_>, message: &Bound<'_, PyAny>) -> PyResult<PyNatsSendReceipt> {
        let (s, m) = self.one(message)?;
        self.send.0.rt.block_on(py, first(s, m))
    }

    fn send_async<'py>(
        &self,
        py: Python<'py>,
        message: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let (s, m) = self.one(message)?;
        crate::aio::future_into_py(py, self.send.0.rt, first(s, m))
    }

    /// Publish `messages` in order and wait for their acks (`packed` changes nothing).
    #[pyo3(signature = (messages, *, packed=false))]
    fn send_batch(
        &self,
        py: Python<'_>,
        messages: &Bound<'_, PyAny>,
        packed: bool,
    ) -> PyResult<Vec<PyNatsSendReceipt>> {
        let _ = packed;
        let (s, ms) = self.messages(messages)?;
        self.send.0.rt.block_on(py, async move { s.send(ms).await })
    }

    #[pyo3(signature = (messages, *, packed=false))]
    fn send_batch_async<'py>(
        &self,
        py: Python<'py>,
        messages: &Bound<'py, PyAny>,
        packed: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = packed;
        let (s, ms) = self.messages(messages)?;
        crate::aio::future_into_py(py, self.send.0.rt, async move { s.send(ms).await })
    }

    /// Queue `message` for a batched publish; `on_delivery(err, receipt)` runs later, on this
    /// thread, inside `poll()`/`flush()`. Blocks (serving callbacks) while `max_pending` are
    /// pending.
    #[pyo3(signature = (message, on_delivery=None))]
    fn produce(
        &self,
        py: Python<'_>,
        message: &Bound<'_, PyAny>,
        on_delivery: Option<Py<PyAny>>,
    ) -> PyResult<()> {
        let (_, mut m) = self.one(message)?;
        self.produce.produce(py, m.remove(0), on_delivery)
    }

    /// Run the callbacks of finished deliveries (waiting up to `timeout` seconds for one);
    /// returns how many were reported.
    #[pyo3(signature = (timeout=None), text_signature = "($self, timeout=0.0)")]
    fn poll(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        self.produce.poll(py, timeout)
    }

    /// Wait until every produced message is reported (or `timeout` seconds pass), running the
    /// callbacks here, then flush the connection if it is open; returns how many are pending.
    #[pyo3(signature = (timeout=None))]
    fn flush(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<usize> {
        let left = self.produce.flush(py, timeout)?;
        if let Ok(js) = self.connected() {
            self.send
                .0
                .rt
                .block_on(py, async move { js.flush().await })?;
        }
        Ok(left)
    }

    /// Messages produced and not yet reported.
    #[getter]
    fn pending(&self) -> usize {
        self.produce.pending()
    }

    fn begin_transaction(&self) -> PyResult<()> {
        Err(invalid(
            "begin_transaction",
            "NATS JetStream has no transactions",
        ))
    }
}
