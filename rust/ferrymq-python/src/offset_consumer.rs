//! `_native.OffsetConsumer`: the native half of `ferrymq.PullConsumer` (assign / seek / poll /
//! commit over the remoting protocol; the engine is `ferrymq_core::remoting::OffsetConsumer`).
//! Queues cross the boundary as `(topic, broker, queue id)` tuples; the facade turns them into
//! `ferrymq.MessageQueue`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use ferrymq_core::proto;
use ferrymq_core::remoting::{OffsetConsumer, OffsetReset, Polled, TopicQueue};
use ferrymq_core::rocketmq::endpoints::Endpoints;
use ferrymq_core::rocketmq::message_view::MessageSource;
use ferrymq_core::rocketmq::pull::QueueRef;
use ferrymq_core::rocketmq::MessageView;
use pyo3::prelude::*;

use crate::errors::{invalid, to_pyerr};
use crate::message_view::PyMessageView;
use crate::remoting::options;
use crate::runtime::RuntimeRef;

/// `(topic, broker, queue id)`.
type QueueTuple = (String, String, i32);

fn tq((topic, broker, id): QueueTuple) -> PyResult<TopicQueue> {
    if topic.is_empty() {
        return Err(invalid("queue", "the topic must not be empty"));
    }
    if broker.is_empty() || id < 0 {
        return Err(invalid(
            "queue",
            format!("{topic}/{broker}:{id} is not a (topic, broker, queue id) of a queue"),
        ));
    }
    Ok(TopicQueue::new(topic, QueueRef { broker, id }))
}

fn tqs(v: Vec<QueueTuple>) -> PyResult<Vec<TopicQueue>> {
    v.into_iter().map(tq).collect()
}

fn tuple(t: &TopicQueue) -> QueueTuple {
    (t.topic.clone(), t.queue.broker.clone(), t.queue.id)
}

/// Messages as `ferrymq.MessageView`s, one shared source per queue.
fn views(polled: Vec<Polled>) -> ferrymq_core::Result<Vec<PyMessageView>> {
    let mut sources: HashMap<TopicQueue, Arc<MessageSource>> = HashMap::new();
    let mut out = Vec::with_capacity(polled.len());
    for p in polled {
        let source = match sources.get(&p.queue) {
            Some(s) => s.clone(),
            None => {
                let endpoints = Endpoints::parse_access_point(&p.message.store_host)
                    .map(|a| a.endpoints)
                    .or_else(|_| {
                        Endpoints::parse_access_point("127.0.0.1:0").map(|a| a.endpoints)
                    })?;
                let s = Arc::new(MessageSource {
                    topic: proto::Resource {
                        resource_namespace: String::new(),
                        name: p.queue.topic.clone(),
                    },
                    endpoints,
                    queue_id: p.queue.queue.id,
                    broker_name: p.queue.queue.broker.clone(),
                });
                sources.insert(p.queue.clone(), s.clone());
                s
            }
        };
        let view = MessageView::from_proto(p.message.to_proto(), source)?;
        out.push(PyMessageView {
            inner: Arc::new(view),
            transaction_id: None,
        });
    }
    Ok(out)
}

/// Offset-based consumer of one group (assign / seek / poll / commit).
#[pyclass(name = "OffsetConsumer", module = "ferrymq._native", frozen)]
pub struct PyOffsetConsumer {
    rt: RuntimeRef,
    inner: OffsetConsumer,
}

pymethods_with_async! {
    impl PyOffsetConsumer {
        #[new]
        #[pyo3(signature = (endpoints, group, *, tag_filter=None, auto_offset_reset="latest", credentials=None, namespace=None, request_timeout=None))]
        fn new(
            endpoints: &Bound<'_, PyAny>,
            group: String,
            tag_filter: Option<String>,
            auto_offset_reset: &str,
            credentials: Option<&Bound<'_, PyAny>>,
            namespace: Option<String>,
            request_timeout: Option<&Bound<'_, PyAny>>,
        ) -> PyResult<Self> {
            let rt = RuntimeRef::current()?;
            let options = options(endpoints, credentials, namespace, request_timeout)?;
            let reset = OffsetReset::parse(auto_offset_reset).map_err(to_pyerr)?;
            let _guard = rt.handle().enter();
            let inner =
                OffsetConsumer::new(options, group, tag_filter.as_deref(), reset).map_err(to_pyerr)?;
            Ok(Self { rt, inner })
        }

        #[getter]
        fn group(&self) -> &str {
            self.inner.group()
        }

        fn assign(&self, queues: Vec<QueueTuple>) -> PyResult<()> {
            self.inner.assign(tqs(queues)?).map_err(to_pyerr)
        }

        fn assignment(&self) -> Vec<QueueTuple> {
            self.inner.assignment().iter().map(tuple).collect()
        }

        fn seek(
            &self,
            queue: QueueTuple,
            #[pyo3(from_py_with = crate::ints::offset)] offset: i64,
        ) -> PyResult<()> {
            self.inner.seek(&tq(queue)?, offset).map_err(to_pyerr)
        }

        fn __repr__(&self) -> String {
            format!(
                "OffsetConsumer(endpoints={:?}, group={:?})",
                self.inner.client().options().endpoints,
                self.inner.group()
            )
        }
    }

    fn queues / queues_async(&self, py, topic: String) -> Vec<QueueTuple> {
        let c = self.inner.clone();
        async move { Ok(c.queues(&topic).await?.iter().map(tuple).collect::<Vec<_>>()) }
    }

    fn seek_to_beginning / seek_to_beginning_async(&self, py, queues: Vec<QueueTuple>) -> () {
        let q = tqs(queues)?;
        let c = self.inner.clone();
        async move { c.seek_to_beginning(&q).await }
    }

    fn seek_to_end / seek_to_end_async(&self, py, queues: Vec<QueueTuple>) -> () {
        let q = tqs(queues)?;
        let c = self.inner.clone();
        async move { c.seek_to_end(&q).await }
    }

    fn position / position_async(&self, py, queue: QueueTuple) -> i64 {
        let q = tq(queue)?;
        let c = self.inner.clone();
        async move { c.position(&q).await }
    }

    fn beginning_offsets / beginning_offsets_async(&self, py, queues: Vec<QueueTuple>) -> Vec<i64> {
        let q = tqs(queues)?;
        let c = self.inner.clone();
        async move { c.beginning_offsets(&q).await }
    }

    fn end_offsets / end_offsets_async(&self, py, queues: Vec<QueueTuple>) -> Vec<i64> {
        let q = tqs(queues)?;
        let c = self.inner.clone();
        async move { c.end_offsets(&q).await }
    }

    /// `[(queue, unix ms)]` → the first offset stored at or after each time, or None.
    fn offsets_for_times / offsets_for_times_async(
        &self,
        py,
        items: Vec<(QueueTuple, i64)>,
    ) -> Vec<Option<i64>> {
        let items = offsets_arg(items)?;
        let c = self.inner.clone();
        async move { c.offsets_for_times(&items).await }
    }

    #[pyo3(signature = (max_messages=16, timeout=None))]
    fn poll / poll_async(
        &self,
        py,
        #[pyo3(from_py_with = crate::ints::max_messages)] max_messages: usize,
        timeout: Option<&Bound<'_, PyAny>>,
    ) -> Vec<PyMessageView> {
        let t = wait(timeout)?;
        let c = self.inner.clone();
        async move { views(c.poll(max_messages, t).await?) }
    }

    #[pyo3(signature = (offsets=None))]
    fn commit / commit_async(&self, py, offsets: Option<Vec<(QueueTuple, i64)>>) -> () {
        let o = offsets.map(offsets_arg).transpose()?;
        let c = self.inner.clone();
        async move { c.commit(o).await }
    }

    fn committed / committed_async(&self, py, queues: Vec<QueueTuple>) -> Vec<Option<i64>> {
        let q = tqs(queues)?;
        let c = self.inner.clone();
        async move { c.committed(&q).await }
    }

    fn close / close_async(&self, py) -> () {
        let c = self.inner.clone();
        async move {
            c.close().await;
            Ok(())
        }
    }
}

/// How long a poll may wait: seconds or a timedelta, zero allowed (default 1 s).
fn wait(timeout: Option<&Bound<'_, PyAny>>) -> PyResult<Duration> {
    match timeout.filter(|t| !t.is_none()) {
        None => Ok(crate::durations::RECEIVE_WAIT),
        Some(t) => crate::durations::non_negative("timeout", t),
    }
}

/// `[(queue, offset or unix ms)]` with each queue checked.
fn offsets_arg(items: Vec<(QueueTuple, i64)>) -> PyResult<Vec<(TopicQueue, i64)>> {
    items.into_iter().map(|(q, n)| Ok((tq(q)?, n))).collect()
}
