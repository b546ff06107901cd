//! `ferrymq.JmqServer`: the embedded JMQ4 server `ferrymq.testing` starts.

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::jmq::codec::command_type;
use ferrymq_server::jmq::server::{JmqServer as CoreServer, JmqServerConfig};
use pyo3::prelude::*;

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::runtime::RuntimeRef;

fn command_of(v: Option<&Bound<'_, PyAny>>) -> PyResult<Option<i8>> {
    let Some(v) = v else { return Ok(None) };
    if v.is_none() {
        return Ok(None);
    }
    if let Ok(i) = v.extract::<i8>() {
        return Ok(Some(i));
    }
    let name: String = v
        .extract()
        .map_err(|_| invalid("command", "must be a command name, a command id or None"))?;
    let upper = name.to_ascii_uppercase();
    command_type::KNOWN
        .iter()
        .copied()
        .find(|t| command_type::name(*t) == upper)
        .map(Some)
        .ok_or_else(|| invalid("command", format!("unknown JMQ4 command {name:?}")))
}

/// The embedded JMQ4 server (one or more broker nodes on loopback ports sharing one store).
#[pyclass(module = "ferrymq._native", frozen)]
pub struct JmqServer {
    inner: Arc<CoreServer>,
    rt: RuntimeRef,
}

#[pymethods]
impl JmqServer {
    #[new]
    #[pyo3(signature = (*, broker=None, nodes=1, port=None, host="127.0.0.1", advertised_host=None, regions=None, apps=None, retry_delay=None, max_body=3145728), text_signature = "(*, broker=None, nodes=1, port=None, host=\"127.0.0.1\", advertised_host=None, regions=None, apps=None, retry_delay=0.0, max_body=3145728)")]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        broker: Option<Bound<'_, crate::broker::EmbeddedBroker>>,
        #[pyo3(from_py_with = crate::ints::nodes)] nodes: usize,
        #[pyo3(from_py_with = crate::ints::port)] port: Option<u16>,
        host: &str,
        advertised_host: Option<String>,
        regions: Option<Vec<String>>,
        apps: Option<std::collections::HashMap<String, String>>,
        retry_delay: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::max_body)] max_body: usize,
    ) -> PyResult<Self> {
        if nodes == 0 || nodes > 64 {
            return Err(invalid("nodes", "must be between 1 and 64"));
        }
        let mut cfg = JmqServerConfig {
            bind_host: host.to_string(),
            advertised_host,
            nodes,
            ports: port.map(|p| vec![p]).unwrap_or_default(),
            regions: regions.unwrap_or_default(),
            ..JmqServerConfig::default()
        };
        if let Some(apps) = apps {
            cfg.apps.extend(apps);
        }
        cfg.store.retry_delay = durations::or(
            "retry_delay",
            retry_delay,
            Lower::NonNegative,
            Duration::ZERO,
        )?;
        cfg.store.max_body = max_body;
        let rt = RuntimeRef::server()?;
        let broker = broker.map(|b| b.get().inner.clone());
        let server = rt.block_on(py, async move {
            match broker {
                Some(b) => CoreServer::start_for_broker(&b, cfg).await,
                None => CoreServer::start(cfg).await,
            }
        })?;
        Ok(Self {
            inner: Arc::new(server),
            rt,
        })
    }

    /// `jmq://127.0.0.1:PORT` of the first node.
    #[getter]
    fn endpoint(&self) -> String {
        self.inner.endpoint()
    }

    /// `[(broker_id, "host:port", region), ...]`.
    #[getter]
    fn nodes(&self) -> Vec<(i32, String, String)> {
        self.inner
            .nodes()
            .iter()
            .map(|n| (n.id, n.addr.to_string(), n.region.clone()))
            .collect()
    }

    /// Create a topic with `partitions` partitions (idempotent for the same count).
    #[pyo3(signature = (name, partitions=4, *, broadcast=false))]
    fn create_topic(
        &self,
        name: &str,
        #[pyo3(from_py_with = crate::ints::partitions)] partitions: u16,
        broadcast: bool,
    ) -> PyResult<()> {
        self.inner
            .store()
            .create_topic(name, partitions, broadcast)
            .map_err(crate::errors::renamed("name", "topic"))
    }

    /// Register an app and its token.
    fn add_app(&self, app: &str, token: &str) {
        self.inner.add_app(app, token);
    }

    /// Messages (indices) stored in `topic`.
    fn message_count(&self, topic: &str) -> u64 {
        self.inner.store().message_count(topic)
    }

    /// Answer the next `times` requests of `command` (a name like "PRODUCE_MESSAGE", an id, or
    /// None for any) with JMQ4 code `code`.
    #[pyo3(signature = (code, *, command=None, times=1))]
    fn fail_next(
        &self,
        #[pyo3(from_py_with = crate::ints::code)] code: i32,
        command: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::times)] times: u32,
    ) -> PyResult<()> {
        let c = command_of(command)?;
        self.inner.fail_next(c, code, times);
        Ok(())
    }

    /// Delay every request by `seconds`.
    fn set_latency(&self, seconds_: &Bound<'_, PyAny>) -> PyResult<()> {
        self.inner
            .set_latency(durations::non_negative("seconds", seconds_)?);
        Ok(())
    }

    /// While true, drop every connection at once.
    fn set_unavailable(&self, unavailable: bool) {
        self.inner.set_unavailable(unavailable);
    }

    /// The FETCH_HEALTH point of `node` (0 healthy; ferrymq divides weights by 1 + point).
    fn set_health(&self, #[pyo3(from_py_with = crate::ints::node)] node: i32, point: f64) {
        self.inner.set_health(node, point);
    }

    /// Whether FIND_COORDINATOR finds a coordinator.
    fn set_coordinator_available(&self, available: bool) {
        self.inner.set_coordinator_available(available);
    }

    /// Move the leader of partition group `group` of `topic` to broker `node`.
    fn set_leader(
        &self,
        topic: &str,
        #[pyo3(from_py_with = crate::ints::group)] group: i32,
        #[pyo3(from_py_with = crate::ints::node)] node: i32,
    ) -> PyResult<()> {
        self.inner.set_leader(topic, group, node).map_err(to_pyerr)
    }

    /// Drop every connection (data kept), as a broker restart does.
    fn restart(&self) {
        self.inner.restart();
    }

    /// Connections open now.
    #[getter]
    fn connection_count(&self) -> usize {
        self.inner.connection_count()
    }

    /// Stop serving.
    fn shutdown(&self) {
        let _ = self.rt;
        self.inner.shutdown();
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __exit__(&self, _t: Py<PyAny>, _v: Py<PyAny>, _tb: Py<PyAny>) -> bool {
        self.inner.shutdown();
        false
    }

    fn __repr__(&self) -> String {
        format!("JmqServer(endpoint={:?})", self.inner.endpoint())
    }
}
