//! JMQ4 (JoyQueue) classes: the producer (behind `ferrymq.Producer`), `JmqTransaction`,
//! their results, and
//! `JmqServer` (the embedded JMQ4 server used by `ferrymq.testing`).
//!
//! Every method comes in a blocking form (GIL released through `RuntimeRef::block_on`) and an
//! asyncio form (`*_async`, through `future_into_py`). Clients connect lazily on first use, or
//! eagerly with `start()` / `start_async()` (also called by the context managers).
//!
//! One file per concern: `producer.rs` (`jmq_producer`, `JmqTransaction`, `JmqOrphan`,
//! `JmqSendReceipt`), `server.rs` (`JmqServer`); the argument helpers are here, with how the
//! client connects lazily (`crate::lazy`). Consuming is `ferrymq.SimpleConsumer` /
//! `ferrymq.PushConsumer`.

mod producer;
mod server;

use std::future::Future;
use std::time::Duration;

use ferrymq_core::jmq::client::ConnectOptions;
use ferrymq_core::jmq::cluster::ClusterOptions;
use ferrymq_core::jmq::producer::{JmqProducer as CoreProducer, ProducerOptions};
use ferrymq_core::Error;
use pyo3::prelude::*;
use pyo3::types::PyString;

use crate::durations;
use crate::errors::{invalid, text, to_pyerr};
use crate::lazy::Connect;

/// Both JMQ4 clients connect (lazily) from the cluster options and their own.
macro_rules! connect_jmq {
    ($($core:ty => $options:ty, $closed:literal;)+) => {$(
        impl Connect for $core {
            type Options = (ClusterOptions, $options);
            const CLOSED: &'static str = $closed;
            fn open((cluster, options): Self::Options) -> impl Future<Output = Result<Self, Error>> + Send {
                Self::connect(cluster, options)
            }
            async fn shut(&self) -> Result<(), Error> {
                self.close().await;
                Ok(())
            }
        }
    )+};
}

connect_jmq! {
    CoreProducer => ProducerOptions, "the JmqProducer is closed";
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn cluster_options(
    endpoint: &str,
    app: String,
    token: String,
    region: Option<String>,
    namespace: Option<String>,
    client_ip: Option<String>,
    request_timeout: Option<&Bound<'_, PyAny>>,
    metadata_refresh: Option<&Bound<'_, PyAny>>,
) -> PyResult<ClusterOptions> {
    let addr = ferrymq_core::jmq::parse_endpoint(endpoint).map_err(to_pyerr)?;
    let connect = ConnectOptions {
        app,
        token,
        region,
        namespace,
        client_ip,
        request_timeout: durations::timeout_or(
            "request_timeout",
            request_timeout,
            Duration::from_secs(10),
        )?,
        ..ConnectOptions::default()
    };
    connect.validate().map_err(to_pyerr)?;
    let mut o = ClusterOptions::new(addr, connect);
    o.metadata_refresh = durations::timeout_or(
        "metadata_refresh",
        metadata_refresh,
        Duration::from_secs(30),
    )?
    .max(Duration::from_millis(100));
    Ok(o)
}

/// The JMQ4 endpoint of a constructor: `endpoints`, or the older spelling `endpoint` (accepted
/// with a `DeprecationWarning`).
fn endpoints_arg(
    py: Python<'_>,
    endpoints: Option<&Bound<'_, PyAny>>,
    endpoint: Option<&Bound<'_, PyAny>>,
) -> PyResult<String> {
    let endpoints = endpoints.filter(|v| !v.is_none());
    let endpoint = endpoint.filter(|v| !v.is_none());
    let (field, value) = match (endpoints, endpoint) {
        (Some(e), None) => ("endpoints", e),
        (None, Some(e)) => {
            PyErr::warn(
                py,
                &py.get_type::<pyo3::exceptions::PyDeprecationWarning>(),
                c"endpoint= is deprecated: pass endpoints=",
                1,
            )?;
            ("endpoint", e)
        }
        (Some(_), Some(_)) => {
            return Err(invalid(
                "endpoint",
                "pass endpoints= only (endpoint= is its deprecated spelling)",
            ))
        }
        (None, None) => return Err(invalid("endpoints", "is required (\"jmq://host:port\")")),
    };
    let s = value
        .cast::<PyString>()
        .map_err(|_| invalid(field, "must be a str (\"jmq://host:port\")"))?;
    text(field, s)
}

pub use producer::{jmq_producer, JmqOrphan, JmqTransaction, PyJmqSendReceipt};
pub use server::JmqServer;
