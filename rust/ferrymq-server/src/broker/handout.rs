//! The answer of a ReceiveMessage as a stream that knows what it handed out: a message the
//! stream did not yield before it was dropped (the call was cancelled, its connection cut) was
//! never written to the client, so it is put back at once, as a proxy nacks a message it could
//! not write, instead of staying in flight until its invisible duration ends (or for as long as
//! auto-renewal holds it). A receive still long-polling at the client's deadline is cancelled
//! by the server (it honours `grpc-timeout`) before it pops anything.

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Instant;

use futures::Stream;
use tonic::Status;

use super::store::{Queue, Topic};
use crate::proto;

/// A message of the answer: where it was popped and with which receipt nonce.
#[derive(Debug, Clone)]
pub(crate) struct Handed {
    pub(crate) queue: Arc<Queue>,
    pub(crate) offset: u64,
    pub(crate) nonce: u32,
}

/// Put the messages back on their queues (see [`QueueState::release`]).
///
/// [`QueueState::release`]: super::store::QueueState::release
pub(crate) fn release(topic: &Topic, group: &Arc<str>, handed: impl IntoIterator<Item = Handed>) {
    let now = Instant::now();
    let mut any = false;
    for h in handed {
        any |= h.queue.state.lock().release(group, h.offset, h.nonce, now);
    }
    if any {
        topic.wake();
    }
}

/// The items of one receive answer; each message item carries what [`release`] needs.
pub(crate) struct Handout {
    items: VecDeque<(proto::ReceiveMessageResponse, Option<Handed>)>,
    topic: Arc<Topic>,
    group: Arc<str>,
}

impl Handout {
    pub(crate) fn new(
        topic: Arc<Topic>,
        group: Arc<str>,
        items: Vec<(proto::ReceiveMessageResponse, Option<Handed>)>,
    ) -> Self {
        Self {
            items: items.into(),
            topic,
            group,
        }
    }
}

impl Stream for Handout {
    type Item = Result<proto::ReceiveMessageResponse, Status>;

    fn poll_next(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Poll::Ready(self.items.pop_front().map(|(item, _)| Ok(item)))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.items.len(), Some(self.items.len()))
    }
}

impl Drop for Handout {
    fn drop(&mut self) {
        let left: Vec<Handed> = self.items.drain(..).filter_map(|(_, h)| h).collect();
        if !left.is_empty() {
            tracing::debug!(
                target: "ferrymq::broker",
                "receive answer dropped with {} unwritten messages: released", left.len()
            );
            release(&self.topic, &self.group, left);
        }
    }
}
