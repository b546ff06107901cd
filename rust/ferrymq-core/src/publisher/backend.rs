//! What a publisher drives: the [`PublishBackend`] trait (one attempt per call) and the
//! [`AckSink`] through which a backend can deliver acks to the runner.

use std::fmt;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::future::BoxFuture;
use futures::task::AtomicWaker;
use parking_lot::Mutex;

use crate::error::Result;
use crate::metrics::ClientMetrics;

use super::flight::{Flight, Outgoing, PublishAck};

/// The future of one attempt's acknowledgement.
pub type AckFuture = BoxFuture<'static, Result<PublishAck>>;
/// The future of handing one attempt to the connection; it yields the ack future.
pub type SendFuture = BoxFuture<'static, Result<AckFuture>>;
/// The future of handing one attempt to the connection when its ack goes to an [`AckSink`].
pub type SendToFuture = BoxFuture<'static, Result<()>>;

/// A producer the managed publisher can drive: NATS JetStream, RocketMQ, JMQ4.
///
/// [`send`](PublishBackend::send) makes **one attempt**. Its future resolves once the message
/// has been handed to the connection (that instant is the flight's publish time) and yields the
/// future of the broker's acknowledgement. Backends must put [`Flight::id`] on the wire as the
/// de-duplication id when the protocol has one, so that retries are idempotent.
pub trait PublishBackend: Send + Sync + 'static {
    /// Start one attempt to publish `flight`.
    fn send(&self, flight: &Arc<Flight>) -> SendFuture;
    /// Start one attempt to publish `flight` whose outcome the backend delivers to `acks`
    /// ([`AckSink::deliver`]) instead of returning a future of it: exactly once for every
    /// attempt whose future resolved `Ok` (ack, error, the backend's own time-out, or the
    /// connection closing). An attempt whose future fails or is dropped may still deliver.
    ///
    /// `None` (the default): not supported, the runner uses [`send`](PublishBackend::send).
    /// The runner uses this only for publishers without a retry policy.
    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        let _ = (flight, acks);
        None
    }
    /// Check what the backend needs of a message (subject syntax, header names, …) before it is
    /// accepted, so that bad input fails at the call with an error naming the field.
    fn validate(&self, out: &Outgoing) -> Result<()> {
        let _ = out;
        Ok(())
    }
    /// A short description for logs and reprs (endpoints, never credentials).
    fn describe(&self) -> String;
    /// The metrics of the producer behind the backend, which records every attempt as a
    /// `send` (the publisher records none of its own: nothing is counted twice); the runner
    /// counts its retries there. `None` (the default): the backend records nothing (or is not
    /// connected yet).
    fn metrics(&self) -> Option<ClientMetrics> {
        None
    }
}

impl<T: PublishBackend + ?Sized> PublishBackend for Arc<T> {
    fn send(&self, flight: &Arc<Flight>) -> SendFuture {
        (**self).send(flight)
    }
    fn send_to(&self, flight: &Arc<Flight>, acks: &AckSink) -> Option<SendToFuture> {
        (**self).send_to(flight, acks)
    }
    fn validate(&self, out: &Outgoing) -> Result<()> {
        (**self).validate(out)
    }
    fn describe(&self) -> String {
        (**self).describe()
    }
    fn metrics(&self) -> Option<ClientMetrics> {
        (**self).metrics()
    }
}

/// The runner's one inbox of acks, for backends that deliver them
/// ([`PublishBackend::send_to`]) rather than returning a future per message: no oneshot, boxed
/// future or timer entry per flight, and one wake-up of the runner per batch of acks.
///
/// It holds at most one result per attempt sent, so it is bounded by the window (plus late
/// results of attempts the runner already finished, which it ignores).
#[derive(Clone)]
pub struct AckSink(Arc<SinkQueue>);

struct SinkQueue {
    ready: Mutex<Vec<(Arc<Flight>, Result<PublishAck>)>>,
    waker: AtomicWaker,
}

impl fmt::Debug for AckSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AckSink")
            .field("ready", &self.0.ready.lock().len())
            .finish()
    }
}

impl AckSink {
    pub(crate) fn new() -> Self {
        Self(Arc::new(SinkQueue {
            ready: Mutex::new(Vec::new()),
            waker: AtomicWaker::new(),
        }))
    }

    /// Hand the outcome of an attempt of `flight` to the runner.
    pub fn deliver(&self, flight: Arc<Flight>, result: Result<PublishAck>) {
        self.0.ready.lock().push((flight, result));
        self.0.waker.wake();
    }

    /// Everything delivered so far.
    #[cfg(test)]
    pub(crate) fn take_all(&self) -> Vec<(Arc<Flight>, Result<PublishAck>)> {
        std::mem::take(&mut *self.0.ready.lock())
    }

    /// Swap what was delivered into `out` (which must be empty); `Pending` when nothing was.
    pub(super) fn poll_take(
        &self,
        cx: &mut Context<'_>,
        out: &mut Vec<(Arc<Flight>, Result<PublishAck>)>,
    ) -> Poll<()> {
        for attempt in 0..2 {
            {
                let mut ready = self.0.ready.lock();
                if !ready.is_empty() {
                    std::mem::swap(&mut *ready, out);
                    return Poll::Ready(());
                }
            }
            if attempt == 0 {
                // Register, then look again: a delivery in between is not missed.
                self.0.waker.register(cx.waker());
            }
        }
        Poll::Pending
    }
}
