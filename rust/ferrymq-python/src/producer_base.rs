//! `_native.ProducerBase`: what the JMQ4, NATS and remoting producers answer alike for
//! `ferrymq.Producer` (stated once: `recall` refused, `client_id`, `namespace`, no isolated
//! endpoints, `settings`, `repr`). It extends `LazyClient`, which holds their lifecycle.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::errors::invalid;
use crate::lazy::LazyClient;

/// The facts of one producer.
#[pyclass(name = "ProducerBase", module = "ferrymq._native", subclass, frozen, extends = LazyClient)]
pub struct ProducerBase {
    /// `jmq4`, `nats` or `remoting`.
    protocol: &'static str,
    /// Why `recall` is refused.
    no_recall: &'static str,
    client_id: String,
    namespace: String,
    /// What `settings` and `repr` show besides the protocol, e.g. `("endpoints", …)`.
    shown: Vec<(&'static str, String)>,
}

impl ProducerBase {
    pub(crate) fn new(
        protocol: &'static str,
        no_recall: &'static str,
        client_id: String,
        namespace: String,
        shown: Vec<(&'static str, String)>,
    ) -> Self {
        Self {
            protocol,
            no_recall,
            client_id,
            namespace,
            shown,
        }
    }
}

#[pymethods]
impl ProducerBase {
    fn recall(&self, topic: &str, recall_handle: &str) -> PyResult<String> {
        let _ = (topic, recall_handle);
        Err(invalid("recall", self.no_recall))
    }

    fn recall_async(&self, topic: &str, recall_handle: &str) -> PyResult<String> {
        self.recall(topic, recall_handle)
    }

    #[getter]
    fn client_id(&self) -> &str {
        &self.client_id
    }

    #[getter]
    fn namespace(&self) -> &str {
        &self.namespace
    }

    /// None: these protocols isolate no endpoint.
    #[getter]
    fn isolated_endpoints(&self) -> Vec<String> {
        Vec::new()
    }

    #[getter]
    fn settings<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let d = PyDict::new(py);
        d.set_item("protocol", self.protocol)?;
        for (k, v) in &self.shown {
            d.set_item(k, v)?;
        }
        Ok(d)
    }

    fn __repr__(&self) -> String {
        let mut s = String::from("Producer(");
        for (k, v) in &self.shown {
            s += &format!("{k}={v:?}, ");
        }
        s + &format!("protocol='{}')", self.protocol)
    }
}
