//! `_native.EmbeddedBroker`: the in-process RocketMQ v2 broker of `ferrymq-core`, for tests,
//! development and benchmarks. The public face is `ferrymq.testing.EmbeddedBroker`.

use std::sync::Arc;

use ferrymq_core::proto;
use ferrymq_core::rocketmq::Endpoints;
use ferrymq_server::broker::admin::MessageInfo;
use ferrymq_server::broker::{
    Broker, BrokerConfig, Credentials, GroupConfig, Rpc, StatusFault, Unavailable, WhenFull,
};
use prost::Message as _;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList};

use crate::durations::{self, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::runtime::RuntimeRef;

/// A running embedded broker.
#[pyclass(module = "ferrymq._native", frozen)]
pub struct EmbeddedBroker {
    /// Also read by `JmqServer(broker=...)`, which serves JMQ4 next to it.
    pub(crate) inner: Arc<Broker>,
    rt: RuntimeRef,
}

fn rpc_of(rpc: Option<&str>) -> PyResult<Option<Rpc>> {
    rpc.map(Rpc::parse).transpose().map_err(to_pyerr)
}

fn message_dict<'py>(py: Python<'py>, m: &MessageInfo) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    let msg = &m.message;
    let sp = msg.system_properties.clone().unwrap_or_default();
    d.set_item("topic", msg.topic.as_ref().map_or("", |t| t.name.as_str()))?;
    d.set_item("message_id", &sp.message_id)?;
    d.set_item("body", PyBytes::new(py, &msg.body))?;
    d.set_item("tag", sp.tag.as_deref())?;
    d.set_item("keys", &sp.keys)?;
    d.set_item("properties", msg.user_properties.clone())?;
    d.set_item("message_group", sp.message_group.as_deref())?;
    d.set_item(
        "message_type",
        proto::MessageType::try_from(sp.message_type)
            .map_or("MESSAGE_TYPE_UNSPECIFIED", |t| t.as_str_name()),
    )?;
    d.set_item("endpoint", m.broker)?;
    d.set_item("queue_id", m.queue)?;
    d.set_item("offset", m.offset)?;
    d.set_item("born_host", &sp.born_host)?;
    d.set_item(
        "delivery_timestamp",
        sp.delivery_timestamp
            .as_ref()
            .map(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9),
    )?;
    match &sp.dead_letter_queue {
        Some(dlq) => {
            let x = PyDict::new(py);
            x.set_item("topic", &dlq.topic)?;
            x.set_item("message_id", &dlq.message_id)?;
            d.set_item("dead_letter_queue", x)?;
        }
        None => d.set_item("dead_letter_queue", py.None())?,
    }
    Ok(d)
}

#[pymethods]
impl EmbeddedBroker {
    /// Start a broker; durations are in seconds. Unset options keep the proxy's defaults.
    #[new]
    #[pyo3(signature = (
        *, endpoints=1, auto_create=false, host="127.0.0.1", ports=None, max_body_size=None,
        max_topic_bytes=None, when_full="reject", long_polling_min=None, long_polling_max=None,
        min_invisible=None, max_invisible=None, auto_renew_invisible=None,
        transaction_check_delay=None, transaction_check_interval=None,
        transaction_check_max=None, max_delay=None, access_key=None, secret_key=None,
        auto_create_queues=None, metric_collector=None
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::endpoints)] endpoints: usize,
        auto_create: bool,
        host: &str,
        ports: Option<Vec<u16>>,
        #[pyo3(from_py_with = crate::ints::max_body_size)] max_body_size: Option<usize>,
        #[pyo3(from_py_with = crate::ints::max_topic_bytes)] max_topic_bytes: Option<usize>,
        when_full: &str,
        long_polling_min: Option<&Bound<'_, PyAny>>,
        long_polling_max: Option<&Bound<'_, PyAny>>,
        min_invisible: Option<&Bound<'_, PyAny>>,
        max_invisible: Option<&Bound<'_, PyAny>>,
        auto_renew_invisible: Option<&Bound<'_, PyAny>>,
        transaction_check_delay: Option<&Bound<'_, PyAny>>,
        transaction_check_interval: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::transaction_check_max)] transaction_check_max: Option<
            u32,
        >,
        max_delay: Option<&Bound<'_, PyAny>>,
        access_key: Option<String>,
        secret_key: Option<String>,
        #[pyo3(from_py_with = crate::ints::auto_create_queues)] auto_create_queues: Option<usize>,
        metric_collector: Option<String>,
    ) -> PyResult<Self> {
        let mut c = BrokerConfig {
            endpoints,
            auto_create,
            host: host
                .parse()
                .map_err(|_| invalid("host", format!("{host:?} is not an IP address")))?,
            ports: ports.unwrap_or_default(),
            ..BrokerConfig::default()
        };
        c.metric_collector = match metric_collector {
            None => None,
            Some(hp) => Some(
                Endpoints::parse_access_point(&hp)
                    .map_err(|e| invalid("metric_collector", e))?
                    .endpoints,
            ),
        };
        c.when_full = match when_full {
            "reject" => WhenFull::Reject,
            "drop_oldest" => WhenFull::DropOldest,
            other => {
                return Err(invalid(
                    "when_full",
                    format!("{other:?} is not \"reject\" or \"drop_oldest\""),
                ))
            }
        };
        // Each option given overrides the field of the same name.
        macro_rules! given {
            ($($field:ident),*) => {$(
                if let Some(v) = $field {
                    c.$field = v;
                }
            )*};
        }
        macro_rules! given_durations {
            ($($field:ident),*) => {$(
                let d = durations::optional(stringify!($field), $field, Lower::NonNegative)?;
                if let Some(d) = d {
                    c.$field = d;
                }
            )*};
        }
        given!(
            max_body_size,
            max_topic_bytes,
            transaction_check_max,
            auto_create_queues
        );
        given_durations!(
            long_polling_min,
            long_polling_max,
            min_invisible,
            max_invisible,
            auto_renew_invisible,
            transaction_check_delay,
            transaction_check_interval,
            max_delay
        );
        c.credentials = match (access_key, secret_key) {
            (None, None) => None,
            (Some(access_key), Some(secret_key)) => Some(Credentials {
                access_key,
                secret_key,
            }),
            _ => {
                return Err(invalid(
                    "access_key",
                    "access_key and secret_key must be given together",
                ))
            }
        };
        let rt = RuntimeRef::server()?;
        let broker = rt.block_on(py, async move { Broker::start(c).await })?;
        Ok(Self {
            inner: Arc::new(broker),
            rt,
        })
    }

    /// Every endpoint as `host:port`, joined by `;`.
    #[getter]
    fn endpoints(&self) -> String {
        self.inner.access_point()
    }

    /// The `host:port` of each endpoint.
    #[getter]
    fn addresses(&self) -> Vec<String> {
        self.inner
            .addresses()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// `remoting://host:port` of the first endpoint's remoting listener, a name server for
    /// every topic (empty when remoting is off).
    #[getter]
    fn remoting_endpoint(&self) -> String {
        self.inner.remoting_access_point()
    }

    /// The `host:port` of each endpoint's remoting listener.
    #[getter]
    fn remoting_addresses(&self) -> Vec<String> {
        self.inner
            .remoting_addresses()
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.is_closed()
    }

    /// Stop the broker (idempotent).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let b = self.inner.clone();
        self.rt.block_on(py, async move {
            b.shutdown().await;
            Ok(())
        })
    }

    #[pyo3(signature = (name, message_type="NORMAL", queues=8))]
    fn create_topic(
        &self,
        name: &str,
        message_type: &str,
        #[pyo3(from_py_with = crate::ints::queues)] queues: usize,
    ) -> PyResult<()> {
        self.inner
            .create_topic(name, message_type, queues)
            .map_err(to_pyerr)
    }

    fn delete_topic(&self, name: &str) -> bool {
        self.inner.delete_topic(name)
    }

    #[pyo3(signature = (name, fifo=false, max_delivery_attempts=17, retry_backoff=None))]
    fn create_group(
        &self,
        name: &str,
        fifo: bool,
        #[pyo3(from_py_with = crate::ints::max_delivery_attempts)] max_delivery_attempts: u32,
        retry_backoff: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let mut backoff = Vec::new();
        if let Some(list) = retry_backoff.filter(|v| !v.is_none()) {
            for s in list.try_iter()? {
                backoff.push(durations::non_negative("retry_backoff", &s?)?);
            }
        }
        self.inner
            .create_group(GroupConfig {
                name: name.to_string(),
                fifo,
                max_delivery_attempts,
                retry_backoff: backoff,
            })
            .map_err(to_pyerr)
    }

    #[pyo3(signature = (*, max_body_size=None, producer_max_attempts=None))]
    fn update_settings(
        &self,
        #[pyo3(from_py_with = crate::ints::max_body_size)] max_body_size: Option<usize>,
        #[pyo3(from_py_with = crate::ints::producer_max_attempts)] producer_max_attempts: Option<
            i32,
        >,
    ) -> PyResult<()> {
        self.inner
            .update_settings(max_body_size, producer_max_attempts)
            .map_err(to_pyerr)
    }

    fn set_queue_permission(
        &self,
        topic: &str,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
        #[pyo3(from_py_with = crate::ints::queue)] queue: i32,
        permission: &str,
    ) -> PyResult<()> {
        self.inner
            .set_queue_permission(topic, endpoint, queue, permission)
            .map_err(to_pyerr)
    }

    #[pyo3(signature = (endpoint, mode))]
    fn set_unavailable(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
        mode: Option<&str>,
    ) -> PyResult<()> {
        let mode = match mode {
            None => None,
            Some("refuse") => Some(Unavailable::Refuse),
            Some("hang") => Some(Unavailable::Hang),
            Some(other) => {
                return Err(invalid(
                    "mode",
                    format!("{other:?} is not \"refuse\", \"hang\" or None"),
                ))
            }
        };
        let b = self.inner.clone();
        self.rt
            .block_on(py, async move { b.set_unavailable(endpoint, mode).await })
    }

    #[pyo3(signature = (endpoint, code, *, rpc=None, count=None, fraction=1.0, message=None))]
    fn inject_status(
        &self,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
        #[pyo3(from_py_with = crate::ints::code)] code: i32,
        rpc: Option<&str>,
        #[pyo3(from_py_with = crate::ints::count)] count: Option<u64>,
        fraction: f64,
        message: Option<String>,
    ) -> PyResult<()> {
        let mut f = StatusFault::new(code);
        f.rpc = rpc_of(rpc)?;
        f.count = count;
        f.fraction = fraction;
        if let Some(m) = message {
            f.message = m;
        }
        self.inner.inject_status(endpoint, f).map_err(to_pyerr)
    }

    #[pyo3(signature = (endpoint, seconds, *, rpc=None))]
    fn set_latency(
        &self,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
        seconds: &Bound<'_, PyAny>,
        rpc: Option<&str>,
    ) -> PyResult<()> {
        let d = durations::non_negative("seconds", seconds)?;
        self.inner
            .set_latency(endpoint, rpc_of(rpc)?, d)
            .map_err(to_pyerr)
    }

    #[pyo3(signature = (endpoint=None))]
    fn clear_faults(
        &self,
        py: Python<'_>,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: Option<usize>,
    ) -> PyResult<()> {
        let b = self.inner.clone();
        let all: Vec<usize> = match endpoint {
            Some(e) => vec![e],
            None => (0..b.addresses().len()).collect(),
        };
        self.rt.block_on(py, async move {
            for e in all {
                b.clear_faults(e).await?;
            }
            Ok(())
        })
    }

    fn drop_telemetry(
        &self,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
    ) -> PyResult<()> {
        self.inner.drop_telemetry(endpoint).map_err(to_pyerr)
    }

    fn restart(
        &self,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
    ) -> PyResult<()> {
        self.inner.restart(endpoint).map_err(to_pyerr)
    }

    fn print_thread_stack_trace(&self, client_id: &str) -> PyResult<String> {
        self.inner
            .print_thread_stack_trace(client_id)
            .map_err(to_pyerr)
    }

    fn reconnect_endpoints(&self, client_id: &str) -> PyResult<String> {
        self.inner.reconnect_endpoints(client_id).map_err(to_pyerr)
    }

    fn verify_message(&self, client_id: &str, topic: &str, message_id: &str) -> PyResult<String> {
        self.inner
            .verify_message(client_id, topic, message_id)
            .map_err(to_pyerr)
    }

    #[pyo3(signature = (transaction_id, client_id=None))]
    fn recover_orphaned_transaction(
        &self,
        transaction_id: &str,
        client_id: Option<&str>,
    ) -> PyResult<()> {
        self.inner
            .recover_orphaned_transaction(transaction_id, client_id)
            .map_err(to_pyerr)
    }

    fn telemetry_replies<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for r in self.inner.telemetry_replies() {
            let d = PyDict::new(py);
            d.set_item("endpoint", r.endpoint)?;
            d.set_item("client_id", r.client_id)?;
            d.set_item("kind", r.kind)?;
            d.set_item("nonce", r.nonce)?;
            d.set_item("code", r.code)?;
            d.set_item("detail", r.detail)?;
            out.append(d)?;
        }
        Ok(out)
    }

    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let out = PyDict::new(py);
        let topics = PyDict::new(py);
        for t in self.inner.topic_stats() {
            let d = PyDict::new(py);
            d.set_item("message_type", t.message_type)?;
            d.set_item("messages", t.messages)?;
            d.set_item("bytes", t.bytes)?;
            d.set_item("delayed", t.delayed)?;
            let queues = PyList::empty(py);
            for q in t.queues {
                let qd = PyDict::new(py);
                qd.set_item("endpoint", q.broker)?;
                qd.set_item("queue_id", q.id)?;
                qd.set_item("permission", q.permission)?;
                qd.set_item("min_offset", q.min_offset)?;
                qd.set_item("max_offset", q.max_offset)?;
                qd.set_item("messages", q.messages)?;
                qd.set_item("bytes", q.bytes)?;
                let groups = PyDict::new(py);
                for (g, acked, inflight) in q.groups {
                    let gd = PyDict::new(py);
                    gd.set_item("acked_offset", acked)?;
                    gd.set_item("inflight", inflight)?;
                    groups.set_item(g, gd)?;
                }
                qd.set_item("groups", groups)?;
                queues.append(qd)?;
            }
            d.set_item("queues", queues)?;
            topics.set_item(t.name, d)?;
        }
        out.set_item("topics", topics)?;
        let endpoints = PyList::empty(py);
        for e in self.inner.endpoint_stats() {
            let d = PyDict::new(py);
            d.set_item("index", e.index)?;
            d.set_item("address", e.address)?;
            d.set_item("name", e.name)?;
            let calls = PyDict::new(py);
            for (rpc, n) in e.calls {
                calls.set_item(rpc, n)?;
            }
            d.set_item("calls", calls)?;
            d.set_item("injected", e.injected)?;
            d.set_item("unavailable", e.unavailable)?;
            d.set_item("clients", e.clients)?;
            d.set_item("connections_accepted", e.connections_accepted)?;
            d.set_item("connections_open", e.connections_open)?;
            endpoints.append(d)?;
        }
        out.set_item("endpoints", endpoints)?;
        let tx = self.inner.transaction_counts();
        let t = PyDict::new(py);
        t.set_item("pending", tx.pending)?;
        t.set_item("committed", tx.committed)?;
        t.set_item("rolled_back", tx.rolled_back)?;
        t.set_item("checks", tx.checks)?;
        t.set_item("discarded", tx.discarded)?;
        out.set_item("transactions", t)?;
        Ok(out)
    }

    #[pyo3(signature = (topic, limit=100_000))]
    fn messages<'py>(
        &self,
        py: Python<'py>,
        topic: &str,
        #[pyo3(from_py_with = crate::ints::limit)] limit: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for m in self.inner.messages(topic, limit).map_err(to_pyerr)? {
            out.append(message_dict(py, &m)?)?;
        }
        Ok(out)
    }

    fn dead_letters<'py>(&self, py: Python<'py>, group: &str) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for m in self.inner.dead_letters(group) {
            out.append(message_dict(py, &m)?)?;
        }
        Ok(out)
    }

    #[pyo3(signature = (endpoint, rpc))]
    fn calls(
        &self,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
        rpc: &str,
    ) -> PyResult<u64> {
        let rpc = Rpc::parse(rpc).map_err(to_pyerr)?;
        self.inner.calls(endpoint, rpc).map_err(to_pyerr)
    }

    #[pyo3(signature = (endpoint=0))]
    fn clients<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::endpoint)] endpoint: usize,
    ) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for s in self.inner.clients(endpoint).map_err(to_pyerr)? {
            let d = PyDict::new(py);
            d.set_item("client_id", &s.client_id)?;
            d.set_item("client_type", s.client_type().as_str_name())?;
            d.set_item("group", s.group())?;
            d.set_item("topics", s.topics())?;
            d.set_item("heartbeats", s.heartbeats)?;
            d.set_item("connected", s.connected())?;
            let ua = s.settings.user_agent.clone().unwrap_or_default();
            d.set_item(
                "language",
                proto::Language::try_from(ua.language)
                    .map_or("LANGUAGE_UNSPECIFIED", |l| l.as_str_name()),
            )?;
            d.set_item("version", ua.version)?;
            d.set_item(
                "request_timeout",
                s.settings
                    .request_timeout
                    .map(|t| t.seconds as f64 + f64::from(t.nanos) / 1e9),
            )?;
            d.set_item("settings", PyBytes::new(py, &s.settings.encode_to_vec()))?;
            d.set_item(
                "merged_settings",
                PyBytes::new(py, &s.merged.encode_to_vec()),
            )?;
            out.append(d)?;
        }
        Ok(out)
    }

    fn pending_transactions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for (tx, topic, id) in self.inner.pending_transactions() {
            let d = PyDict::new(py);
            d.set_item("transaction_id", tx)?;
            d.set_item("topic", topic)?;
            d.set_item("message_id", id)?;
            out.append(d)?;
        }
        Ok(out)
    }

    fn __repr__(&self) -> String {
        format!("EmbeddedBroker(endpoints={:?})", self.inner.access_point())
    }
}
