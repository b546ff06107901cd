//! The JetStream connection of the PySpark source (`OffsetReader.nats`). The sink publishes with
//! the NATS producer (`nats_producer`), each row's write id as its `Nats-Msg-Id` property.

use std::time::Duration;

use ferrymq_core::nats::{parse_endpoints, JetStream, NatsOptions};
use pyo3::prelude::*;

use crate::durations::{self, Lower};
use crate::runtime::RuntimeRef;

/// Connect to `endpoints` as the Spark source does (5 s timeouts by default).
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
