//! `ferrymq.PushConsumer`: the core push engine over RocketMQ 5, JMQ4 (`jmq=` its settings) or
//! JetStream (`nats=` a `ferrymq.JetStream`); where it connects is built in `target.rs`.

use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::consumer_backend::{ConsumerBackend, ConsumerTarget};
use ferrymq_core::metrics::ClientMetrics;
use ferrymq_core::rocketmq::listener::Listener;
use ferrymq_core::rocketmq::push::{PushConsumer, PushConsumerConfig, SettleEvent, StatsSnapshot};
use ferrymq_core::rocketmq::worker_pool::WorkerPool;
use ferrymq_core::Error;
use parking_lot::Mutex;
use pyo3::prelude::*;
use pyo3::types::{IntoPyDict, PyDict, PyList};

use crate::aio::future_into_py;
use crate::durations::timeout_or;
use crate::errors::{invalid, to_pyerr, to_pyerr_ref};
use crate::message_view::PyMessageView;
use crate::metrics::{metrics_into, percentiles_arg, snapshot_dict};
use crate::runtime::RuntimeRef;

use super::life::{closed_during_start, Life, Starting};
use super::listener::{PyAsyncListener, PySyncListener};
use super::target::{endpoints_repr, without_groups, TargetArgs};
use super::{extract_filter, extract_subscriptions, stats_dict, subscriptions_dict};

/// How long `PushConsumer.close` waits for running callbacks and their acks by default.
const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(30);

/// The most listener threads a `PushConsumer` runs.
const MAX_CONSUMPTION_THREADS: usize = 1024;

/// The event loop thread started for an async listener run from blocking code, if any.
type PrivateLoop = Option<Py<PyAny>>;

type Consumer = Arc<PushConsumer<ConsumerBackend>>;

/// A push consumer (RocketMQ 5, JMQ4 or JetStream): receives continuously and calls `listener` for each
/// message.
#[pyclass(name = "PushConsumer", module = "ferrymq", frozen)]
pub struct PyPushConsumer {
    rt: RuntimeRef,
    target: ConsumerTarget,
    config: PushConsumerConfig,
    listener: Py<PyAny>,
    is_async: bool,
    consumption_threads: usize,
    shutdown_timeout: Duration,
    /// The running consumer and the private loop of its listener, if any.
    life: Life<(Consumer, PrivateLoop)>,
    /// The counters and metrics of the consumer once closed (`stats()` still shows them).
    last_stats: Mutex<Option<(StatsSnapshot, ClientMetrics)>>,
    /// The closed consumer while its settle events may still be read (`settle_events=` set).
    closed_consumer: Mutex<Option<Consumer>>,
}

impl PyPushConsumer {
    fn running(&self) -> PyResult<Consumer> {
        self.life.running(|(c, _)| Arc::clone(c))
    }

    /// Keep a closed consumer whose settle events may not all have been read yet.
    fn keep_for_events(&self, c: &Consumer) {
        if self.config.settle_events.is_some() {
            *self.closed_consumer.lock() = Some(Arc::clone(c));
        }
    }

    /// The running consumer, or the closed one kept for its settle events.
    fn observed(&self) -> Option<Consumer> {
        self.life
            .map_running(|(c, _)| Arc::clone(c))
            .or_else(|| self.closed_consumer.lock().clone())
    }

    /// The attributes of the consumer's process spans (`ferrymq.telemetry`), made once:
    /// `messaging.system` and `messaging.consumer.group.name`.
    fn span_attributes<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let system = match &self.target {
            ConsumerTarget::RocketMq(_) => "rocketmq",
            ConsumerTarget::Jmq(..) => "jmq",
            ConsumerTarget::Nats(..) => "nats",
        };
        let d = PyDict::new(py);
        d.set_item("messaging.system", system)?;
        d.set_item("messaging.consumer.group.name", &self.config.group)?;
        Ok(d)
    }

    /// Build the listener side. `event_loop` is the loop of an async listener (None: start a
    /// private loop thread).
    fn make_listener(
        &self,
        py: Python<'_>,
        event_loop: Option<Bound<'_, PyAny>>,
    ) -> PyResult<(Arc<dyn Listener>, PrivateLoop)> {
        let attributes = self.span_attributes(py)?;
        if !self.is_async {
            let pool = WorkerPool::start(
                Arc::new(PySyncListener {
                    callback: self.listener.clone_ref(py),
                    attributes: attributes.into_any().unbind(),
                }),
                self.consumption_threads,
                1024,
            )
            .map_err(to_pyerr)?;
            return Ok((Arc::new(pool), None));
        }
        let helpers = py.import("ferrymq._consumer")?;
        let (event_loop, private) = match event_loop {
            Some(l) => (l, None),
            None => {
                let l = helpers.call_method0("start_private_loop")?;
                (l.clone(), Some(l.unbind()))
            }
        };
        let listener = PyAsyncListener::start(
            event_loop.unbind(),
            self.listener.clone_ref(py),
            py.import("functools")?
                .call_method(
                    "partial",
                    (helpers.getattr("run_batch")?,),
                    Some(&[("attributes", attributes)].into_py_dict(py)?),
                )?
                .unbind(),
            self.consumption_threads,
        )?;
        Ok((Arc::new(listener), private))
    }

    /// Record the outcome of a start. A consumer that `close()` overtook comes back, with its
    /// private loop: the caller closes it, then stops the loop.
    fn finish_start(
        py: Python<'_>,
        starting: Starting<(Consumer, PrivateLoop)>,
        r: &Result<Consumer, Error>,
        private_loop: Option<Py<PyAny>>,
    ) -> Option<(Consumer, PrivateLoop)> {
        match r {
            Ok(consumer) => starting.finish(Some((consumer.clone(), private_loop))),
            Err(_) => {
                drop(starting);
                if let Some(l) = private_loop {
                    stop_private_loop(py, &l);
                }
                None
            }
        }
    }

    fn connect_future(
        &self,
        listener: Arc<dyn Listener>,
    ) -> impl std::future::Future<Output = Result<Consumer, Error>> + Send + 'static {
        let target = self.target.clone();
        let config = self.config.clone();
        async move {
            PushConsumer::connect(target, config, listener)
                .await
                .map(Arc::new)
        }
    }
}

fn stop_private_loop(py: Python<'_>, l: &Py<PyAny>) {
    let r = py
        .import("ferrymq._consumer")
        .and_then(|h| h.call_method1("stop_private_loop", (l,)));
    if let Err(e) = r {
        e.write_unraisable(py, None);
    }
}

fn is_coroutine_function(py: Python<'_>, f: &Bound<'_, PyAny>) -> PyResult<bool> {
    let inspect = py.import("inspect")?;
    if inspect
        .call_method1("iscoroutinefunction", (f,))?
        .is_truthy()?
    {
        return Ok(true);
    }
    // A callable object whose __call__ is `async def`.
    if !f.is_instance_of::<pyo3::types::PyFunction>() && f.hasattr("__call__")? {
        return inspect
            .call_method1("iscoroutinefunction", (f.getattr("__call__")?,))?
            .is_truthy();
    }
    Ok(false)
}

#[pymethods]
impl PyPushConsumer {
    #[new]
    #[pyo3(signature = (endpoints, group, *, subscriptions, listener, consumption_threads=20, max_cache_messages=4096, max_cache_bytes=67108864, fifo_accelerator=false, fifo_pipelining=false, receive_batch_size=None, max_concurrent_receives=4, shutdown_timeout=None, settle_events=None, credentials=None, namespace=None, tls=None, request_timeout=None, route_refresh_interval=None, settings_sync_interval=None, jmq=None, nats=None, nats_stream=None, nats_ack_wait=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: &Bound<'_, PyAny>,
        group: String,
        subscriptions: &Bound<'_, PyAny>,
        listener: Bound<'_, PyAny>,
        #[pyo3(from_py_with = crate::ints::consumption_threads)] consumption_threads: i128,
        #[pyo3(from_py_with = crate::ints::max_cache_messages)] max_cache_messages: usize,
        #[pyo3(from_py_with = crate::ints::max_cache_bytes)] max_cache_bytes: usize,
        fifo_accelerator: bool,
        fifo_pipelining: bool,
        #[pyo3(from_py_with = crate::ints::receive_batch_size)] receive_batch_size: Option<u32>,
        #[pyo3(from_py_with = crate::ints::max_concurrent_receives)] max_concurrent_receives: usize,
        shutdown_timeout: Option<&Bound<'_, PyAny>>,
        #[pyo3(from_py_with = crate::ints::settle_events)] settle_events: Option<usize>,
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
        let subscriptions = extract_subscriptions(Some(subscriptions))?;
        let mut target = TargetArgs {
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
        if let Some(why) = without_groups(&target) {
            for (name, on) in [
                ("fifo_accelerator", fifo_accelerator),
                ("fifo_pipelining", fifo_pipelining),
            ] {
                if on {
                    return Err(invalid(name, why));
                }
            }
        }
        if let (ConsumerTarget::Nats(_, options), Some(n)) = (&mut target, receive_batch_size) {
            options.receive_batch_size = n;
        }
        if !listener.is_callable() {
            return Err(invalid(
                "listener",
                "must be a callable (or an async function) taking a ferrymq.MessageView",
            ));
        }
        let consumption_threads = usize::try_from(consumption_threads)
            .ok()
            .filter(|n| (1..=MAX_CONSUMPTION_THREADS).contains(n))
            .ok_or_else(|| {
                invalid(
                    "consumption_threads",
                    format!(
                        "{consumption_threads} is not from 1 to {MAX_CONSUMPTION_THREADS} threads"
                    ),
                )
            })?;
        let config = PushConsumerConfig {
            group,
            subscriptions,
            max_cache_messages,
            max_cache_bytes,
            fifo_accelerator,
            fifo_pipelining,
            receive_batch_size,
            max_concurrent_receives,
            settle_events,
            ..Default::default()
        };
        config.validate().map_err(to_pyerr)?;
        Ok(Self {
            rt: RuntimeRef::current()?,
            target,
            config,
            is_async: is_coroutine_function(py, &listener)?,
            listener: listener.unbind(),
            consumption_threads,
            shutdown_timeout: timeout_or(
                "shutdown_timeout",
                shutdown_timeout,
                DEFAULT_SHUTDOWN_TIMEOUT,
            )?,
            life: Life::new(),
            last_stats: Mutex::new(None),
            closed_consumer: Mutex::new(None),
        })
    }

    /// Connect and start consuming. An `async def` listener started this way runs on a private
    /// event loop thread; use `start_async` (or `async with`) to run it on your own loop.
    fn start(&self, py: Python<'_>) -> PyResult<()> {
        let Some(starting) = self.life.begin_start()? else {
            return Ok(());
        };
        let (listener, private) = self.make_listener(py, None)?;
        let fut = self.connect_future(listener);
        let r = self.rt.block_on(py, async move { Ok(fut.await) });
        match r {
            Ok(r) => {
                if let Some((c, private)) = Self::finish_start(py, starting, &r, private) {
                    let t = self.shutdown_timeout;
                    let closed = self.rt.block_on(py, async move {
                        c.close(t).await;
                        Ok(())
                    });
                    if let Some(l) = private {
                        stop_private_loop(py, &l);
                    }
                    closed?;
                    return Err(to_pyerr(closed_during_start()));
                }
                r.map(drop).map_err(to_pyerr)
            }
            Err(e) => {
                // Interrupted (Ctrl-C): `starting` is dropped, the consumer is created again.
                if let Some(l) = private {
                    stop_private_loop(py, &l);
                }
                Err(e)
            }
        }
    }

    /// Async form of `start`; an `async def` listener runs on the calling event loop.
    fn start_async<'py>(slf: Bound<'py, Self>, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let Some(starting) = me.life.begin_start()? else {
            return future_into_py(py, me.rt, async { Ok(()) });
        };
        let event_loop = if me.is_async {
            Some(crate::aio::running_loop(py)?)
        } else {
            None
        };
        let (listener, private) = me.make_listener(py, event_loop)?;
        let fut = me.connect_future(listener);
        let t = me.shutdown_timeout;
        // Cancelled: this future and `starting` are dropped, the consumer is created again.
        future_into_py(py, me.rt, async move {
            let r = fut.await;
            let late = Python::attach(|py| Self::finish_start(py, starting, &r, private));
            if let Some((c, private)) = late {
                c.close(t).await;
                if let Some(l) = private {
                    Python::attach(|py| stop_private_loop(py, &l));
                }
                return Err(closed_during_start());
            }
            r.map(drop)
        })
    }

    /// Live counters as a plain dict (every protocol): cache (`process_queues`,
    /// `cached_messages`, `cached_bytes` and their maxima), `received`, `consumed_ok`,
    /// `consumed_failed`, `local_retries`, `acked`, `nacked`, `dead_lettered`, settle
    /// refusals, retries and abandons, receive failures and throttling, listener queue and
    /// running callbacks; then the metrics: `failed` (receives, settle calls and listener
    /// calls that failed), `in_flight` (calls running), `overflowed`, `client` and
    /// `operations` (per operation: calls, messages, failures by error type, calls in
    /// flight, `latency_ms` with mean, min, max and `p<q>` for each of `percentiles`,
    /// default 50, 90 and 99). Kept after `close()`; zeros before `start()`.
    #[pyo3(signature = (percentiles=None))]
    fn stats<'py>(
        &self,
        py: Python<'py>,
        percentiles: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyDict>> {
        let qs = percentiles_arg(percentiles)?;
        let s = self
            .life
            .map_running(|(c, _)| (c.stats(), c.metrics().clone()));
        let (s, metrics) = match s {
            Some((s, m)) => (s, Some(m)),
            None => match self.last_stats.lock().clone() {
                Some((s, m)) => (s, Some(m)),
                None => (StatsSnapshot::default(), None),
            },
        };
        let d = stats_dict(py, &s)?;
        metrics_into(&d, metrics.as_ref(), &qs)?;
        Ok(d)
    }

    /// The consumer's metrics as plain data for exporters (`ferrymq.telemetry`; the layout
    /// of `metrics.rs`'s `snapshot_dict`, gauges `cached_messages` and `cached_bytes`): None
    /// before `start()`; kept after `close()`.
    fn metrics_snapshot<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, PyDict>>> {
        let running = self.life.map_running(|(c, _)| Arc::clone(c));
        let s = running
            .as_ref()
            .map(|c| (c.stats(), c.metrics().clone()))
            .or_else(|| self.last_stats.lock().clone());
        let Some((s, metrics)) = s else {
            return Ok(None);
        };
        let gauges = [
            ("cached_messages", s.cached_messages as u64),
            ("cached_bytes", s.cached_bytes as u64),
        ];
        let closed = running.is_none();
        let d = snapshot_dict(py, &metrics, closed, &gauges)?;
        // The Java client's cache gauges are per topic (RocketMQ clients only).
        let per_topic = PyDict::new(py);
        if let Some(c) = running.filter(|_| metrics.keeps_rocketmq()) {
            let mut topics: Vec<(String, u64, u64)> = Vec::new();
            for pq in c.process_queues() {
                let topic = &pq.source().topic.name;
                let (m, b) = (pq.cached_messages() as u64, pq.cached_bytes() as u64);
                match topics.iter_mut().find(|t| &t.0 == topic) {
                    Some(t) => {
                        t.1 += m;
                        t.2 += b;
                    }
                    None => topics.push((topic.clone(), m, b)),
                }
            }
            for (topic, m, b) in topics {
                per_topic.set_item(topic, (m, b))?;
            }
        }
        d.set_item("cached_by_topic", per_topic)?;
        Ok(Some(d))
    }

    /// Up to `max` settle attempts the engine reported (with `settle_events=` set), waiting
    /// for the first with the GIL released: a list of `(point, before, messages, error,
    /// duration)` where `point` is `"ack"`, `"nack"` or `"dead_letter"`, `before` tells the
    /// event before the attempt from the one after it, `error` is the exception of a failed
    /// attempt and `duration` its seconds (after only). `None` when not observed, not
    /// started, or closed with every event read.
    #[pyo3(signature = (max=256))]
    fn next_settle_events<'py>(
        &self,
        py: Python<'py>,
        #[pyo3(from_py_with = crate::ints::max)] max: usize,
    ) -> PyResult<Option<Bound<'py, PyList>>> {
        let Some(c) = self.observed() else {
            return Ok(None);
        };
        let events = self
            .rt
            .block_on(py, async move { Ok(c.settle_events(max).await) })?;
        let Some(events) = events else {
            return Ok(None);
        };
        let out = PyList::empty(py);
        for event in events {
            let (op, before, messages, error, duration) = match event {
                SettleEvent::Before { op, messages } => (op, true, messages, None, None),
                SettleEvent::After {
                    op,
                    messages,
                    error,
                    duration,
                } => (op, false, messages, error, Some(duration.as_secs_f64())),
            };
            let views = PyList::empty(py);
            for m in messages {
                views.append(PyMessageView::new(m))?;
            }
            let error = error.map(|e| to_pyerr_ref(&e).into_value(py));
            out.append((op.as_str(), before, views, error, duration))?;
        }
        Ok(Some(out))
    }

    /// Settle events the engine could not deliver (the shutdown deadline passed while
    /// nobody read them).
    #[getter]
    fn undelivered_settle_events(&self) -> u64 {
        self.observed().map_or(0, |c| c.undelivered_settle_events())
    }

    /// Whether the broker configured the group for FIFO consumption (known once started).
    #[getter]
    fn fifo(&self) -> Option<bool> {
        self.life.map_running(|(c, _)| c.is_fifo())
    }

    /// The consumer group.
    #[getter]
    fn group(&self) -> &str {
        &self.config.group
    }

    /// Read `topic` with `filter` (a tag expression, a FilterExpression or None = all) from
    /// now on, or replace the filter of a subscribed topic. Running consumers only.
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

    /// Stop reading `topic` (messages already received are still consumed). Running
    /// consumers only.
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
            .map_running(|(c, _)| c.subscriptions())
            .unwrap_or_else(|| self.config.subscriptions.clone());
        subscriptions_dict(py, subs)
    }

    /// The client id sent to brokers (`x-mq-client-id`), once started (kept after `close()`
    /// while its settle events are read).
    #[getter]
    fn client_id(&self) -> Option<String> {
        self.observed().map(|c| c.rpc().client_id())
    }

    /// Stop: no new receives, running callbacks finish (up to `timeout`, default the
    /// consumer's `shutdown_timeout`), their acks are settled, the brokers are told. Messages
    /// received but not yet consumed are redelivered by the broker. Idempotent.
    #[pyo3(signature = (timeout=None))]
    fn close(&self, py: Python<'_>, timeout: Option<&Bound<'_, PyAny>>) -> PyResult<()> {
        let t = timeout_or("timeout", timeout, self.shutdown_timeout)?;
        let Some((c, private)) = self.life.close() else {
            return Ok(());
        };
        let c2 = c.clone();
        let r = self.rt.block_on(py, async move {
            c2.close(t).await;
            Ok(())
        });
        *self.last_stats.lock() = Some((c.stats(), c.metrics().clone()));
        self.keep_for_events(&c);
        if let Some(l) = private {
            stop_private_loop(py, &l);
        }
        r
    }

    /// Async form of `close`.
    #[pyo3(signature = (timeout=None))]
    fn close_async<'py>(
        slf: Bound<'py, Self>,
        py: Python<'py>,
        timeout: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let me = slf.get();
        let t = timeout_or("timeout", timeout, me.shutdown_timeout)?;
        let taken = me.life.close();
        let this = slf.clone().unbind();
        future_into_py(py, me.rt, async move {
            if let Some((c, private)) = taken {
                c.close(t).await;
                let stats = (c.stats(), c.metrics().clone());
                Python::attach(|py| {
                    *this.get().last_stats.lock() = Some(stats);
                    this.get().keep_for_events(&c);
                    if let Some(l) = private {
                        stop_private_loop(py, &l);
                    }
                });
            }
            Ok(())
        })
    }

    fn __repr__(&self) -> String {
        let state = self.life.name();
        let endpoints = endpoints_repr(&self.target);
        format!(
            "PushConsumer(endpoints={endpoints}, group={:?}, {state})",
            self.config.group
        )
    }
}

impl Drop for PyPushConsumer {
    fn drop(&mut self) {
        self.life.map_running(|(consumer, _)| {
            tracing::warn!(
                target: "ferrymq::consumer",
                "PushConsumer of group {} dropped without close(); unsettled messages will be \
                 redelivered after their invisibility",
                consumer.config().group
            );
        });
    }
}
