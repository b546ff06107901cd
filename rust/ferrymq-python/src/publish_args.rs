//! The publish arguments and the acks of the managed publisher (`publisher.rs`,
//! `AsyncPublisher`): a subject or `ferrymq.Message`, a body, headers and publish options, read
//! into an `Outgoing`; a `PublishAck` back.

use ferrymq_core::publisher::{Outgoing, PublishAck, PublishOptions};
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::errors::invalid;
use crate::message::{extract_body, str_pairs, PyMessage};

/// A publish acknowledgement.
#[pyclass(
    name = "PublishAck",
    module = "ferrymq",
    frozen,
    get_all,
    eq,
    hash,
    skip_from_py_object
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyPublishAck {
    /// The id the message was published with (`Nats-Msg-Id` on JetStream).
    message_id: String,
    /// The stream (JetStream) or topic that stored the message.
    stream: String,
    /// The stream sequence (JetStream) or queue offset.
    sequence: u64,
    /// True when the broker recognised the id as a duplicate and did not store it again.
    duplicate: bool,
    /// The JetStream domain, if any.
    domain: Option<String>,
}

impl From<PublishAck> for PyPublishAck {
    fn from(a: PublishAck) -> Self {
        Self {
            message_id: a.message_id,
            stream: a.stream,
            sequence: a.sequence,
            duplicate: a.duplicate,
            domain: a.domain,
        }
    }
}

#[pymethods]
impl PyPublishAck {
    fn __repr__(&self) -> String {
        format!(
            "PublishAck(message_id={:?}, stream={:?}, sequence={}, duplicate={})",
            self.message_id,
            self.stream,
            self.sequence,
            if self.duplicate { "True" } else { "False" }
        )
    }
}

/// Build an [`Outgoing`] from `subject` (a str, or a `ferrymq.Message`), `body`, `headers` and
/// the publish options given as keyword arguments.
#[allow(clippy::too_many_arguments)]
pub fn extract_outgoing(
    subject: &Bound<'_, PyAny>,
    body: Option<&Bound<'_, PyAny>>,
    headers: Option<&Bound<'_, PyAny>>,
    message_id: Option<String>,
    expected_stream: Option<String>,
    expected_last_sequence: Option<u64>,
    expected_last_subject_sequence: Option<u64>,
    expected_last_msg_id: Option<String>,
) -> PyResult<Outgoing> {
    let options = PublishOptions {
        message_id,
        expected_stream,
        expected_last_sequence,
        expected_last_subject_sequence,
        expected_last_msg_id,
    };
    let body = body.filter(|b| !b.is_none());
    if let Ok(m) = subject.cast::<PyMessage>() {
        if body.is_some() {
            return Err(invalid(
                "body",
                "pass either a ferrymq.Message or a subject and a body, not both",
            ));
        }
        let msg = m.get().inner.clone();
        let mut hs = ferrymq_core::nats::message_headers(&msg);
        hs.extend(str_pairs("headers", "names", headers)?);
        return Ok(Outgoing {
            subject: msg.topic().to_string(),
            headers: hs,
            body: msg.body().clone(),
            options,
            message: Some(msg),
        });
    }
    let subject = crate::errors::text(
        "subject",
        subject
            .cast::<PyString>()
            .map_err(|_| invalid("subject", "must be a str (or a ferrymq.Message)"))?,
    )?;
    let Some(body) = body else {
        return Err(invalid("body", "is required (bytes)"));
    };
    Ok(Outgoing {
        subject,
        headers: str_pairs("headers", "names", headers)?,
        body: extract_body(body)?,
        options,
        message: None,
    })
}
