//! What the settler did, for observers: one event before and one after every ack, nack and
//! dead-letter RPC attempt, with the messages it carried (the interceptor hook points of the
//! Java client, fired by the engine since it settles on its own).
//!
//! Off unless [`PushConsumerConfig::settle_events`](super::PushConsumerConfig) sets a capacity:
//! then a bounded channel carries the events to whoever drains
//! [`PushConsumer::settle_events`](super::PushConsumer::settle_events), in batches. A full
//! channel holds the settler back (nothing is dropped) until the consumer gives up at its
//! shutdown deadline; events the observer never read are counted, not lost silently.
//!
//! Imports nothing from the push consumer: `context` holds the sender.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::error::Error;
use crate::rocketmq::message_view::MessageView;

/// Which settle operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SettleOp {
    /// `AckMessage` (or the protocol's ack).
    Ack,
    /// A change of invisible duration: the message comes back after the retry policy's delay.
    Nack,
    /// A forward to the dead-letter queue (FIFO groups at their last attempt).
    DeadLetter,
}

impl SettleOp {
    /// The interceptor hook point's name: `ack`, `nack`, `dead_letter`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ack => "ack",
            Self::Nack => "nack",
            Self::DeadLetter => "dead_letter",
        }
    }
}

/// One observed step of a settle attempt.
#[derive(Debug)]
pub enum SettleEvent {
    /// The attempt is about to be sent with these messages.
    Before {
        op: SettleOp,
        messages: Vec<Arc<MessageView>>,
    },
    /// The attempt ended: `error` is `None` when the broker accepted these messages.
    After {
        op: SettleOp,
        messages: Vec<Arc<MessageView>>,
        error: Option<Arc<Error>>,
        duration: Duration,
    },
}

/// The sending side, in the push consumer's shared context.
pub(crate) struct SettleEventSender {
    tx: mpsc::Sender<SettleEvent>,
    /// Events not delivered: the shutdown deadline passed while the channel was full, or
    /// nobody reads it any more.
    undelivered: Arc<AtomicU64>,
}

impl SettleEventSender {
    /// Deliver `event`, waiting for room; gives up (and counts it) once `abandon` is cancelled.
    pub(crate) async fn send(&self, event: SettleEvent, abandon: &CancellationToken) {
        let sent = tokio::select! {
            r = self.tx.send(event) => r.is_ok(),
            () = abandon.cancelled() => false,
        };
        if !sent {
            self.undelivered.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The receiving side, kept by the [`PushConsumer`](super::PushConsumer).
pub(crate) struct SettleEventReceiver {
    rx: tokio::sync::Mutex<mpsc::Receiver<SettleEvent>>,
    undelivered: Arc<AtomicU64>,
}

impl SettleEventReceiver {
    /// Up to `max` events, waiting for the first one; `None` once `stopped` is cancelled and
    /// nothing is left to read.
    pub(crate) async fn next(
        &self,
        max: usize,
        stopped: &CancellationToken,
    ) -> Option<Vec<SettleEvent>> {
        let mut rx = self.rx.lock().await;
        let mut out = Vec::new();
        let max = max.max(1);
        tokio::select! {
            biased;
            n = rx.recv_many(&mut out, max) => (n > 0).then_some(out),
            () = stopped.cancelled() => {
                while out.len() < max {
                    match rx.try_recv() {
                        Ok(e) => out.push(e),
                        Err(_) => break,
                    }
                }
                (!out.is_empty()).then_some(out)
            }
        }
    }

    /// Events that were never delivered.
    pub(crate) fn undelivered(&self) -> u64 {
        self.undelivered.load(Ordering::Relaxed)
    }
}

/// A bounded channel of `capacity` events.
pub(crate) fn channel(capacity: usize) -> (SettleEventSender, SettleEventReceiver) {
    let (tx, rx) = mpsc::channel(capacity.max(1));
    let undelivered = Arc::new(AtomicU64::new(0));
    (
        SettleEventSender {
            tx,
            undelivered: undelivered.clone(),
        },
        SettleEventReceiver {
            rx: tokio::sync::Mutex::new(rx),
            undelivered,
        },
    )
}

/// Times one attempt for its `After` event.
pub(crate) struct Attempt {
    pub(crate) started: Instant,
}

impl Attempt {
    pub(crate) fn start() -> Self {
        Self {
            started: Instant::now(),
        }
    }
}
