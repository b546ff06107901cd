//! `ferrymq._native`: the private extension module behind the `ferrymq` package.
//!
//! A thin layer: it converts Python values into core types, releases the GIL through
//! [`runtime::enter`] (blocking) or [`aio::future_into_py`] (asyncio, completions delivered to the loop in batches), and maps errors in
//! [`errors::to_pyerr`]. Everything else lives in `ferrymq-core`.

// First: its macro is used by the modules below (macros are in scope after their definition).
#[macro_use]
mod dual;

mod aio;
mod broker;
mod client_options;
mod columns;
mod consumer;
mod durations;
mod errors;
mod exit;
mod histogram;
mod ints;
mod jmq;
mod lazy;
mod logging;
mod message;
mod message_view;
mod metrics;
mod nats;
mod nats_producer;
mod offset_consumer;
mod offset_reader;
mod probe;
mod produce;
mod producer;
mod protocol_producer;
mod publish_args;
mod publisher;
mod remoting;
mod runtime;

use pyo3::prelude::*;

/// Rust allocations of the extension (Python objects keep using Python's allocator).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Features compiled into this build, for `ferrymq.features()`.
const FEATURES: &[&str] = &[
    "rocketmq-v2",
    "embedded-broker",
    "rocketmq-producer",
    "nats-jetstream",
    "managed-publisher",
    "jmq4",
];

#[pymodule]
mod _native {
    use super::*;

    #[pymodule_export]
    use crate::broker::EmbeddedBroker;
    #[pymodule_export]
    use crate::client_options::{PyCredentials, PyTlsConfig};
    #[pymodule_export]
    use crate::columns::PyMessageColumns;
    #[pymodule_export]
    use crate::consumer::set_process_hook;
    #[pymodule_export]
    use crate::consumer::{
        PyCompletion, PyConsumeResult, PyFilterExpression, PyPushConsumer, PySimpleConsumer,
    };
    #[pymodule_export]
    use crate::durations::seconds;
    #[pymodule_export]
    use crate::histogram::PyLatencyHistogram;
    #[pymodule_export]
    use crate::jmq::{jmq_producer, JmqOrphan, JmqServer, JmqTransaction, PyJmqSendReceipt};
    #[pymodule_export]
    use crate::lazy::LazyClient;
    #[pymodule_export]
    use crate::message::PyMessage;
    #[pymodule_export]
    use crate::message_view::PyMessageView;
    #[pymodule_export]
    use crate::nats::{PyJetStream, PyStreamInfo};
    #[pymodule_export]
    use crate::nats_producer::{nats_producer, PyNatsSendReceipt};
    #[pymodule_export]
    use crate::offset_consumer::PyOffsetConsumer;
    #[pymodule_export]
    use crate::offset_reader::PyOffsetReader;
    #[pymodule_export]
    use crate::probe::Probe;
    #[pymodule_export]
    use crate::producer::{PyProducer, PySendReceipt, PyTransaction};
    #[pymodule_export]
    use crate::protocol_producer::ProtocolProducer;
    #[pymodule_export]
    use crate::publish_args::PyPublishAck;
    #[pymodule_export]
    use crate::publisher::{PublisherCore, PyEventBatch, PyFlight};
    #[pymodule_export]
    use crate::remoting::remoting_producer;

    #[pymodule_init]
    fn init(m: &Bound<'_, PyModule>) -> PyResult<()> {
        m.add("__version__", ferrymq_core::VERSION)?;
        crate::logging::init();
        Ok(())
    }

    /// The features compiled into this build.
    #[pyfunction]
    fn features() -> Vec<&'static str> {
        FEATURES.to_vec()
    }

    /// Set the most verbose level forwarded from Rust to Python logging (a logging level number).
    #[pyfunction]
    fn set_log_level(#[pyo3(from_py_with = crate::ints::level)] level: i64) {
        crate::logging::set_python_level(level);
    }

    /// Called at interpreter exit (`atexit`): Rust threads stop attaching to the interpreter.
    #[pyfunction]
    fn python_exiting() {
        crate::exit::python_exiting();
    }

    /// Generate a message id in the Java v1 layout.
    #[pyfunction]
    fn new_message_id() -> String {
        ferrymq_core::message_id::generate()
    }

    /// The Java-compatible SipHash of a message group, as a signed 64-bit integer.
    #[pyfunction]
    fn message_group_hash(group: &str) -> i64 {
        ferrymq_core::selector::message_group_hash(group)
    }

    /// The FIFO queue index of `group` among `queues` writable leader queues.
    #[pyfunction]
    fn fifo_queue_index(
        group: &str,
        #[pyo3(from_py_with = crate::ints::queues)] queues: usize,
    ) -> PyResult<usize> {
        if queues == 0 {
            return Err(crate::errors::invalid("queues", "must be at least 1"));
        }
        Ok(ferrymq_core::selector::fifo_queue_index(group, queues))
    }
}
