//! `ferrymq.SimpleConsumer`: the core simple consumer over RocketMQ 5, JMQ4 or JetStream
//! (where it connects is built in `target.rs`, as for the push consumer).

use std::sync::Arc;

use ferrymq_core::consumer_backend::ConsumerTarget;
use ferrymq_core::metrics::{ClientMetrics, Operation};
use ferrymq_core::rocketmq::simple_consumer::{SimpleConsumer, SimpleConsumerConfig};
use ferrymq_core::Error;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::aio::future_into_py;
use crate::durations::{optional, positive, timeout_or, Lower};
use crate::errors::{invalid, to_pyerr};
use crate::message_view::PyMessageView;
use crate::metrics::{metrics_into, percentiles_arg, snapshot_dict};
use crate::runtime::RuntimeRef;

use super::life::{closed_during_start, Life};
use super::target::{endpoints_repr, TargetArgs};
use super::{extract_filter, extract_subscriptions, message_arg, messages_arg, subscriptions_dict};

// ---------------------------------------------------------------------------------------------
// SimpleConsumer

/// A simple consumer (RocketMQ 5, JMQ4 or JetStream): `receive`, `ack`,
/// `change_invisible_duration`. Thin wrappers over the RPCs; nothing is retried internally.
#[pyclass(name = "SimpleConsumer", module = "ferrymq", frozen)]
pub struct PySimpleConsumer {
    rt: RuntimeRef,
    target: ConsumerTarget,
    config: SimpleConsumerConfig,
    life: Life<Arc<SimpleConsumer>>,
    /// The metrics of the consumer once closed (`stats()` still shows them).
    last_metrics: Mutex<Option<ClientMetrics>>,
}

impl PySimpleConsumer {
    fn keep_metrics(&self, closed: Option<&SimpleConsumer>) {
        if let Some(c) = closed {
            *self.last_metrics.lock() = Some(c.metrics().clone());
        }
    }

    fn running(&self) -> PyResult<Arc<SimpleConsumer>> {
        self.life.running(Arc::clone)
    }

    fn start_future(
        &self,
    ) -> impl std::future::Future<Output = Result<Arc<SimpleConsumer>, Error>> + Send + 'static
    {
        let target = self.target.clone();
        let config = self.config.clone();
        async move { SimpleConsumer::connect(target, config).await.map(Arc::new) }
    }
}

pymethods_with_async! {
    impl PySimpleConsumer {
        #[new]
        #[pyo3(signature = (endpoints, group, *, subscriptions=None, await_duration=None, credentials=None, namespace=None, tls=None, request_timeout=None, route_refresh_interval=None, settings_sync_interval=None, jmq=None, nats=None, nats_stream=None, nats_ack_wait=None))]
        #[allow(clippy::too_many_arguments)]
        fn new(
            endpoints: &Bound<'_, PyAny>,
            group: String,
            subscriptions: Option<&Bound<'_, PyAny>>,
            await_duration: Option<&Bound<'_, PyAny>>,
            credentials: Option<&Bound<'_, PyAny>>,
            namespace: Option<String>,
            tls: Option<&Bound<'_, PyAny>>,
            request_timeout: Option<&Bound<'_, PyAny>>,
            route_refresh_interval: Option<&Bound<'_, PyAny>>,
            settings_sync_interval: Option<&Bound<'_, PyAny>>,
            jmq: Option<&Bound<'_, PyAny>>,
            nats: Option<&Bound<'_, PyAny>>,
            nats_stream: Option<String>,
            nats_ack_wait: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<Self> {
            if group.trim().is_empty() {
                return Err(invalid("group", "must not be blank"));
            }
            let subscriptions = extract_subscriptions(subscriptions)?;
            let target = TargetArgs {
                endpoints,
                group: &group,
                subscriptions: &subscriptions,
                credentials,
                namespace,
                tls,
                request_timeout,
                route_refresh_interval,
                settings_sync_interval,
                jmq,
                nats,
                nats_stream,
                nats_ack_wait,
            }
            .target()?;
            let mut config = SimpleConsumerConfig::new(group);
            config.subscriptions = subscriptions;
            config.await_duration =
                timeout_or("await_duration", await_duration, config.await_duration)?;
            Ok(Self {
                rt: RuntimeRef::current()?,
                target,
                config,
                life: Life::new(),
                last_metrics: Mutex::new(None),
            })
        }

        /// Connect (RocketMQ: send the client settings, wait for the broker's, fetch the routes;
        /// JMQ4: connect and check the topics; JetStream: bind the durable consumers).
        fn start(&self, py: Python<'_>) -> PyResult<()> {
            let Some(starting) = self.life.begin_start()? else {
                return Ok(());
            };
            let fut = self.start_future();
            // Interrupted (Ctrl-C): `starting` is dropped, the consumer is created again.
            let r = self.rt.block_on(py, async move { Ok(fut.await) })?;
            if let Some(c) = starting.finish(r.as_ref().ok().cloned()) {
                self.rt.block_on(py, async move {
                    c.close().await;
                    Ok(())
                })?;
                return Err(to_pyerr(closed_during_start()));
            }
            r.map(drop).map_err(to_pyerr)
        }

        /// Async form of `start`.
        fn start_async<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let me = slf.get();
            let Some(starting) = me.life.begin_start()? else {
                return future_into_py(py, me.rt, async { Ok(()) });
            };
            let fut = me.start_future();
            // Cancelled: this future and `starting` are dropped, the consumer is created again.
            future_into_py(py, me.rt, async move {
                let r = fut.await;
                if let Some(c) = starting.finish(r.as_ref().ok().cloned()) {
                    c.close().await;
                    return Err(closed_during_start());
                }
                r.map(drop)
            })
        }

        /// Subscribe to `topic` with `filter` (a tag expression, a FilterExpression or None = all).
        #[pyo3(signature = (topic, filter=None))]
        fn subscribe(
            &self,
            py: Python<'_>,
            topic: String,
            filter: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<()> {
            let f = extract_filter(filter, &topic)?;
            let c = self.running()?;
            self.rt
                .block_on(py, async move { c.subscribe(&topic, f).await })
        }

        /// Stop receiving from `topic`.
        fn unsubscribe(&self, py: Python<'_>, topic: String) -> PyResult<()> {
            let c = self.running()?;
            self.rt
                .block_on(py, async move { c.unsubscribe(&topic).await })
        }

        /// `{topic: FilterExpression}` of the current subscriptions.
        #[getter]
        fn subscriptions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
            let subs = self
                .life
                .map_running(|c| c.subscriptions())
                .unwrap_or_else(|| self.config.subscriptions.clone());
            subscriptions_dict(py, subs)
        }

        /// The consumer group.
        #[getter]
        fn group(&self) -> &str {
            &self.config.group
        }

        /// The client id sent to brokers (`x-mq-client-id`), once started.
        #[getter]
        fn client_id(&self) -> Option<String> {
            self.life.map_running(|c| c.client_id())
        }

        /// Tell the brokers this consumer is gone. Idempotent.
        fn close(&self, py: Python<'_>) -> PyResult<()> {
            let c = self.life.close();
            self.keep_metrics(c.as_deref());
            match c {
                Some(c) => self.rt.block_on(py, async move {
                    c.close().await;
                    Ok(())
                }),
                None => Ok(()),
            }
        }

        /// Async form of `close`.
        fn close_async<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
            let c = self.life.close();
            self.keep_metrics(c.as_deref());
            future_into_py(py, self.rt, async move {
                if let Some(c) = c {
                    c.close().await;
                }
                Ok(())
            })
        }

        /// Live figures as a plain dict (every protocol): `received`, `acked` and `nacked`
        /// (messages of successful receives, acks and changes of invisible duration),
        /// `failed` (calls that failed), `in_flight` (calls running), `overflowed`, `client`
        /// and `operations` (per operation: calls, messages, failures by error type, calls in
        /// flight, `latency_ms` with mean, min, max and `p<q>` for each of `percentiles`,
        /// default 50, 90 and 99). Kept after `close()`; zeros before `start()`.
        #[pyo3(signature = (percentiles=None))]
        fn stats<'py>(
            &self,
            py: Python<'py>,
            percentiles: Option<&Bound<'py, PyAny>>,
        ) -> PyResult<Bound<'py, PyDict>> {
            let qs = percentiles_arg(percentiles)?;
            let metrics = self
                .life
                .map_running(|c| c.metrics().clone())
                .or_else(|| self.last_metrics.lock().clone());
            let d = PyDict::new(py);
            let summary = metrics_into(&d, metrics.as_ref(), &qs)?;
            d.set_item("received", summary.ok_messages(Operation::Receive))?;
            d.set_item("acked", summary.ok_messages(Operation::Ack))?;
            d.set_item(
                "nacked",
                summary.ok_messages(Operation::ChangeInvisibleDuration),
            )?;
            Ok(d)
        }

        /// The consumer's metrics as plain data for exporters (`ferrymq.telemetry`; the
        /// layout of `metrics.rs`'s `snapshot_dict`, no gauges): None before `start()`; kept
        /// after `close()`.
        fn metrics_snapshot<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
            let metrics = self
                .life
                .map_running(|c| c.metrics().clone())
                .or_else(|| self.last_metrics.lock().clone());
            let closed = self.life.name() == "closed";
            metrics.map(|m| snapshot_dict(py, &m, closed, &[])).transpose()
        }

        fn __repr__(&self) -> String {
            format!(
                "SimpleConsumer(endpoints={}, group={:?}, {})",
                endpoints_repr(&self.target),
                self.config.group,
                self.life.name()
            )
        }
    }

    /// Receive up to `max_messages` messages that stay invisible to other consumers for
    /// `invisible_duration` seconds (default: 30 s for RocketMQ, JMQ4's ack timeout,
    /// JetStream's `ack_wait`). Returns an empty list when the await duration passes
    /// without a message.
    #[pyo3(signature = (max_messages=16, invisible_duration=None))]
    fn receive / receive_async(
        &self,
        py,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: u32,
        invisible_duration: Option<&Bound<'_, PyAny>>,
    ) -> Vec<PyMessageView> {
        let d = optional("invisible_duration", invisible_duration, Lower::Positive)?;
        let c = self.running()?;
        async move {
            let msgs = c.receive(max_messages, d).await?;
            Ok(msgs
                .into_iter()
                .map(|inner| PyMessageView {
                    inner,
                    transaction_id: None,
                })
                .collect::<Vec<_>>())
        }
    }

    /// Acknowledge `message` (a `MessageView` or an iterable of them): not delivered again.
    fn ack / ack_async(&self, py, message: &Bound<'_, PyAny>) -> () {
        let m = messages_arg(message)?;
        let c = self.running()?;
        async move {
            c.ack(&m.iter().map(AsRef::as_ref).collect::<Vec<_>>())
                .await
        }
    }

    /// Make `message` invisible for `duration` seconds from now. Later acks use the new receipt
    /// handle the broker returned.
    fn change_invisible_duration / change_invisible_duration_async(
        &self,
        py,
        message: &Bound<'_, PyAny>,
        duration: &Bound<'_, PyAny>,
    ) -> () {
        let m = message_arg(message)?;
        let d = positive("duration", duration)?;
        let c = self.running()?;
        async move { c.change_invisible_duration(&m, d).await }
    }
}
