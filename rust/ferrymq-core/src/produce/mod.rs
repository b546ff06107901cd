//! The produce path every backend shares: `produce` never waits for the broker, `poll` / `flush`
//! hand out the delivery reports.
//!
//! * [`ProduceQueue::push`] puts a message (and a caller's token, e.g. its delivery callback)
//!   into a queue bounded by `max_pending`: messages produced and not yet handed out by
//!   [`ProduceQueue::take_ready`]. A full queue refuses the message ([`Refused::Full`]) and the
//!   caller serves reports before it tries again (back-pressure).
//! * One batcher task per queue ([`batcher`]) drains it: messages are grouped by topic, kind and
//!   message group (keeping their order), cut into chunks and sent concurrently with
//!   [`ProduceBackend::send_chunk`]; the chunks of one FIFO message group go one at a time.
//! * Reports come back in batches, and in produce order per topic, whatever order the chunks
//!   finish in: a caller runs its callbacks once per batch, not once per wake-up per message.
//! * [`ProduceQueue::close`] refuses new messages; the batcher sends what is queued and exits
//!   ([`ProduceQueue::drained`] resolves once every message has its report).

mod backends;
mod batcher;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::message::Message;

/// Default bound of produced-but-not-yet-reported messages.
pub const DEFAULT_MAX_PENDING: usize = 65_536;

/// What the produce path sends with: the RocketMQ 5 producer, the JMQ4 producer, NATS JetStream.
pub trait ProduceBackend: Clone + Send + Sync + 'static {
    /// What one delivered message reports.
    type Receipt: Send + 'static;
    /// Send `messages` (one topic, kind and message group, in produce order). `Ok`: one result
    /// per message, in input order; `Err`: every message of the chunk failed with it.
    fn send_chunk(
        &self,
        messages: Vec<Message>,
    ) -> BoxFuture<'static, Result<Vec<Result<Self::Receipt>>>>;
}

/// The report of one produced message: the caller's token and where the message went.
pub struct Delivery<R, T> {
    /// What the caller pushed with the message.
    pub token: T,
    /// The receipt, or why the message was not delivered.
    pub result: Result<R>,
}

/// Why [`ProduceQueue::push`] did not take a message.
pub enum Refused<T> {
    /// `max_pending` messages are unreported: serve reports, then push these again.
    Full(Box<Message>, T),
    /// The queue is closed.
    Closed(Error),
}

/// Reports held back until the earlier chunks of their topic are reported.
struct TopicOrder<R, T> {
    /// Tickets handed to chunks of the topic so far.
    issued: u64,
    /// Tickets reported so far (the next one to report).
    reported: u64,
    held: BTreeMap<u64, Vec<Delivery<R, T>>>,
}

impl<R, T> Default for TopicOrder<R, T> {
    fn default() -> Self {
        Self {
            issued: 0,
            reported: 0,
            held: BTreeMap::new(),
        }
    }
}

struct Shared<R, T> {
    /// Produced messages waiting for the batcher.
    queue: Mutex<Vec<(Message, T)>>,
    /// Wakes the batcher when `queue` becomes non-empty (once per batch, not per message).
    wake: Notify,
    /// No more `push`; the batcher exits once `queue` is empty.
    closed: AtomicBool,
    /// Reports ready for `take_ready`.
    completed: Mutex<Vec<Delivery<R, T>>>,
    /// Reports finished out of their topic's order, by topic.
    order: Mutex<HashMap<String, TopicOrder<R, T>>>,
    /// Pushed and not yet taken by `take_ready` (bounded by `max_pending`).
    pending: AtomicUsize,
    /// Pushed and not yet in `completed`.
    outstanding: AtomicUsize,
    ready: Notify,
    drained: Notify,
    max_pending: usize,
}

impl<R: Send + 'static, T: Send + 'static> Shared<R, T> {
    /// A ticket for the next chunk of `topic`: reports go out in ticket order per topic.
    fn ticket(&self, topic: &str) -> u64 {
        let mut order = self.order.lock();
        let o = order.entry(topic.to_string()).or_default();
        o.issued += 1;
        o.issued - 1
    }

    /// The reports of the chunk of `topic` with `ticket`.
    fn complete(&self, topic: &str, ticket: u64, deliveries: Vec<Delivery<R, T>>) {
        let mut ready: Vec<Delivery<R, T>> = Vec::new();
        {
            let mut order = self.order.lock();
            let o = order.entry(topic.to_string()).or_default();
            if ticket != o.reported {
                o.held.insert(ticket, deliveries);
                return;
            }
            ready.extend(deliveries);
            o.reported += 1;
            while let Some(held) = o.held.remove(&o.reported) {
                ready.extend(held);
                o.reported += 1;
            }
            if o.reported == o.issued {
                order.remove(topic);
            }
        }
        let n = ready.len();
        self.completed.lock().extend(ready);
        self.ready.notify_waiters();
        if self.outstanding.fetch_sub(n, Ordering::AcqRel) == n {
            self.drained.notify_waiters();
        }
    }
}

/// The bounded produce queue of one client and the handle of its batcher. Cheap to clone.
pub struct ProduceQueue<B: ProduceBackend, T> {
    shared: Arc<Shared<B::Receipt, T>>,
    backend: B,
    started: Arc<AtomicBool>,
    runtime: tokio::runtime::Handle,
}

impl<B: ProduceBackend, T> Clone for ProduceQueue<B, T> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
            backend: self.backend.clone(),
            started: Arc::clone(&self.started),
            runtime: self.runtime.clone(),
        }
    }
}

impl<B: ProduceBackend, T: Send + 'static> ProduceQueue<B, T> {
    /// A queue of at most `max_pending` unreported messages, sent with `backend` by a batcher
    /// that the first [`push`](Self::push) starts on `runtime`.
    pub fn new(backend: B, max_pending: usize, runtime: tokio::runtime::Handle) -> Result<Self> {
        Error::require_count("max_pending", max_pending)?;
        Ok(Self {
            shared: Arc::new(Shared {
                queue: Mutex::new(Vec::new()),
                wake: Notify::new(),
                closed: AtomicBool::new(false),
                completed: Mutex::new(Vec::new()),
                order: Mutex::new(HashMap::new()),
                pending: AtomicUsize::new(0),
                outstanding: AtomicUsize::new(0),
                ready: Notify::new(),
                drained: Notify::new(),
                max_pending,
            }),
            backend,
            started: Arc::new(AtomicBool::new(false)),
            runtime,
        })
    }

    /// The backend the batcher sends with.
    pub fn backend(&self) -> &B {
        &self.backend
    }

    /// Queue `message` with `token` (handed back in its [`Delivery`]).
    pub fn push(&self, message: Message, token: T) -> std::result::Result<(), Refused<T>> {
        let s = &self.shared;
        if s.closed.load(Ordering::Acquire) {
            return Err(Refused::Closed(Error::closed("the producer is closed")));
        }
        let max = s.max_pending;
        if s.pending
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| {
                (p < max).then_some(p + 1)
            })
            .is_err()
        {
            return Err(Refused::Full(Box::new(message), token));
        }
        s.outstanding.fetch_add(1, Ordering::AcqRel);
        if !self.started.swap(true, Ordering::AcqRel) {
            self.runtime
                .spawn(batcher::run(self.backend.clone(), Arc::clone(&self.shared)));
        }
        let first = {
            let mut q = s.queue.lock();
            q.push((message, token));
            q.len() == 1
        };
        if first {
            s.wake.notify_one();
        }
        Ok(())
    }

    /// Take every report ready now (in produce order per topic); they stop counting as pending.
    pub fn take_ready(&self) -> Vec<Delivery<B::Receipt, T>> {
        let ready = std::mem::take(&mut *self.shared.completed.lock());
        self.shared.pending.fetch_sub(ready.len(), Ordering::AcqRel);
        ready
    }

    /// Resolves when a report is ready or `wait` has passed.
    pub fn ready(&self, wait: Duration) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            let n = shared.ready.notified();
            tokio::pin!(n);
            n.as_mut().enable();
            if !shared.completed.lock().is_empty() {
                return;
            }
            let _ = tokio::time::timeout(wait, n).await;
        }
    }

    /// Resolves when every message pushed so far has its report ready.
    pub fn drained(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shared = Arc::clone(&self.shared);
        async move {
            loop {
                let n = shared.drained.notified();
                tokio::pin!(n);
                n.as_mut().enable();
                if shared.outstanding.load(Ordering::Acquire) == 0 {
                    return;
                }
                n.await;
            }
        }
    }

    /// Messages pushed and not yet taken by [`take_ready`](Self::take_ready).
    pub fn pending(&self) -> usize {
        self.shared.pending.load(Ordering::Acquire)
    }

    /// The bound of [`pending`](Self::pending).
    pub fn max_pending(&self) -> usize {
        self.shared.max_pending
    }

    /// Refuse new messages; the batcher sends what is queued, then exits. Idempotent.
    pub fn close(&self) {
        self.shared.closed.store(true, Ordering::Release);
        self.shared.wake.notify_one();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.shared.closed.load(Ordering::Acquire)
    }
}
