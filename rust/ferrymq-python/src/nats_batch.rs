//! `_native.NatsBatchPublisher`: pipelined JetStream batch publishes with `Nats-Msg-Id`, for
//! the PySpark sink; and the connection it shares with `OffsetReader.nats`.

use std::time::Duration;

use bytes::Bytes;
use ferrymq_core::nats::range::BatchMessage;
use ferrymq_core::nats::{parse_endpoints, JetStream, NatsOptions};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::durations::{self, Lower};
use crate::errors::invalid;
use crate::message::extract_body;
use crate::runtime::RuntimeRef;

/// Connect to `endpoints` as the Spark source and sink do (5 s timeouts by default).
#[allow(clippy::too_many_arguments)]
pub(crate) fn connect(
    py: Python<'_>,
    rt: RuntimeRef,
    endpoints: &str,
    user: Option<String>,
    password: Option<String>,
    token: Option<String>,
    connect_timeout: Option<&Bound<'_, PyAny>>,
    request_timeout: Option<&Bound<'_, PyAny>>,
) -> PyResult<JetStream> {
    let timeout = |name, value| durations::or(name, value, Lower::Positive, Duration::from_secs(5));
    let opts = NatsOptions {
        endpoints: parse_endpoints(endpoints).map_err(crate::errors::to_pyerr)?,
        name: Some("ferrymq-spark".to_string()),
        user,
        password,
        token,
        connect_timeout: timeout("connect_timeout", connect_timeout)?,
        request_timeout: timeout("request_timeout", request_timeout)?,
    };
    rt.block_on(py, async move { JetStream::connect(opts).await })
}

/// A JetStream connection that publishes batches.
#[pyclass(name = "NatsBatchPublisher", module = "ferrymq._native", frozen)]
pub struct PyNatsBatchPublisher {
    rt: RuntimeRef,
    js: JetStream,
    endpoints: String,
}

#[pymethods]
impl PyNatsBatchPublisher {
    /// Connect to `endpoints` (`nats://host:port[,nats://…]`).
    #[new]
    #[pyo3(signature = (endpoints, *, user=None, password=None, token=None, connect_timeout=None, request_timeout=None), text_signature = "(endpoints, *, user=None, password=None, token=None, connect_timeout=5.0, request_timeout=5.0)")]
    fn new(
        py: Python<'_>,
        endpoints: String,
        user: Option<String>,
        password: Option<String>,
        token: Option<String>,
        connect_timeout: Option<&Bound<'_, PyAny>>,
        request_timeout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Self> {
        let rt = RuntimeRef::current()?;
        let js = connect(
            py,
            rt,
            &endpoints,
            user,
            password,
            token,
            connect_timeout,
            request_timeout,
        )?;
        Ok(Self {
            rt,
            js,
            endpoints: ferrymq_core::nats::redact(&endpoints),
        })
    }

    /// Publish `(subject, body, headers, message_id)` tuples pipelined and wait for every ack;
    /// returns how many were stored (duplicates by message id count as stored).
    fn publish_batch(&self, py: Python<'_>, messages: &Bound<'_, PyAny>) -> PyResult<usize> {
        let mut batch = Vec::new();
        for item in messages
            .try_iter()
            .map_err(|_| invalid("messages", "must be an iterable of tuples"))?
        {
            let item = item?;
            let t = item
                .cast::<PyTuple>()
                .map_err(|_| invalid("messages", "every item must be a tuple"))?;
            if t.len() != 4 {
                return Err(invalid(
                    "messages",
                    "every item must be (subject, body, headers, message_id)",
                ));
            }
            let body: Bytes = extract_body(&t.get_item(1)?)?;
            batch.push(BatchMessage {
                subject: t.get_item(0)?.extract()?,
                body,
                headers: t.get_item(2)?.extract()?,
                message_id: t.get_item(3)?.extract()?,
            });
        }
        let js = self.js.clone();
        self.rt
            .block_on(py, async move { js.publish_batch(batch).await })
    }

    /// Close the connection.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let js = self.js.clone();
        self.rt.block_on(py, async move { js.close().await })
    }

    fn __repr__(&self) -> String {
        format!("NatsBatchPublisher(endpoints={:?})", self.endpoints)
    }
}
