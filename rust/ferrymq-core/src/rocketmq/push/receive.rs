//! The receive loop of a process queue: reserve cache room, receive, cache the messages and hand
//! them to the consume service; back off when the broker throttles or a receive fails (see the
//! workflow in [`super::process_queue`]).
//!
//! It sits above the cache ([`super::process_queue`]), the shared `Context` and the consume
//! service it dispatches to; only the consumer imports it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::consume_service;
use super::context::Context;
use super::process_queue::ProcessQueue;
use crate::error::ErrorKind;
use crate::metrics::Operation;
use crate::rocketmq::consumer_rpc::{ConsumerRpc, ReceiveRequest};
use crate::rocketmq::message_view::MessageView;

/// Back-off after a throttled receive (`TOO_MANY_REQUESTS`).
pub const FLOW_CONTROL_BACKOFF: Duration = Duration::from_millis(20);
/// Back-off after a failed receive.
pub const RECEIVE_FAILURE_BACKOFF: Duration = Duration::from_secs(1);
/// Longest wait before the cache is checked again while it is full.
pub const CACHE_FULL_RECHECK: Duration = Duration::from_secs(1);

/// The receive loop of one process queue; returns when the queue is dropped.
///
/// The primary loop of a queue runs until the queue is dropped. While the queue has a backlog
/// (a receive came back full), extra loops are started, up to
/// `PushConsumerConfig::max_concurrent_receives` in all, so that several receives are in flight
/// at once; an extra loop ends at its first receive that is not full, fails, or finds the cache
/// full. An idle queue therefore has exactly one long-polling receive, as in the workflow.
pub(crate) async fn receive_loop<R: ConsumerRpc>(
    ctx: Arc<Context<R>>,
    pq: Arc<ProcessQueue>,
    primary: bool,
) {
    struct Extra<'a>(&'a AtomicUsize);
    impl Drop for Extra<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::AcqRel);
        }
    }
    let _extra = (!primary).then(|| Extra(&pq.extra_receivers));
    let mut failures: u32 = 0;
    loop {
        if pq.is_retired() {
            return;
        }
        pq.mark_active();
        // Armed before the check, so an eviction between the check and the wait is not missed.
        let room = ctx.stats.cache_changed();
        tokio::pin!(room);
        room.as_mut().enable();
        let (count_limit, bytes_limit) = ctx.per_queue_limits();
        let cached = pq.cached_messages();
        let settings = ctx.rpc.settings();
        let want = ctx
            .config
            .receive_batch_size
            .unwrap_or(settings.receive_batch_size)
            .max(1) as usize;
        let want = want.min(count_limit.saturating_sub(cached));
        // Slots are reserved in the consumer-wide count before the receive, so concurrent
        // receive loops can never exceed the limit together.
        let granted = if want == 0 || pq.cached_bytes() >= bytes_limit {
            0
        } else {
            ctx.stats.reserve(
                want,
                ctx.config.max_cache_messages,
                ctx.config.max_cache_bytes,
            )
        };
        if granted == 0 {
            ctx.stats.on_cache_full(1);
            if !primary {
                return;
            }
            tokio::select! {
                () = pq.cancel.cancelled() => return,
                _ = tokio::time::timeout(CACHE_FULL_RECHECK, room) => {}
            }
            continue;
        }
        let request = ReceiveRequest {
            queue: pq.queue.clone(),
            filter: pq.filter.clone(),
            batch_size: u32::try_from(granted).unwrap_or(u32::MAX),
            invisible_duration: None,
            auto_renew: true,
            long_polling_timeout: settings.long_polling_timeout,
        };
        // A receive cancelled with its queue is in flight until then, and not recorded.
        let timing = ctx.metrics.begin(Operation::Receive);
        let result = tokio::select! {
            () = pq.cancel.cancelled() => {
                ctx.stats.unreserve(granted);
                return;
            }
            r = ctx.rpc.receive(request) => r,
        };
        let result = result.map(|r| r.into_messages(&ctx.metrics, &pq.source.topic.name));
        timing.finish(
            &pq.source.topic.name,
            result.as_ref().map_or(0, |m| m.len() as u64),
            result.as_ref().map(|_| ()),
        );
        pq.mark_active();
        if result.as_ref().map_or(true, Vec::is_empty) {
            ctx.stats.unreserve(granted);
        }
        match result {
            Ok(messages) => {
                failures = 0;
                let full = messages.len() >= granted;
                if messages.is_empty() {
                    if primary {
                        continue;
                    }
                    return;
                }
                if full {
                    spawn_extra_receiver(&ctx, &pq);
                }
                if pq.is_retired() {
                    ctx.stats.unreserve(granted);
                    hand_back(&ctx, &pq, messages).await;
                    return;
                }
                let mut views = Vec::with_capacity(messages.len());
                for m in messages {
                    match MessageView::from_proto(m, pq.source.clone()) {
                        Ok(v) => views.push(Arc::new(v)),
                        Err(e) => tracing::warn!(
                            target: "ferrymq::consumer",
                            "dropping an undecodable message from {}: {e}",
                            pq.source.topic.name
                        ),
                    }
                }
                ctx.stats.on_received(views.len());
                pq.cache(&views, granted);
                consume_service::dispatch(&ctx, &pq, views);
                if !primary && !full {
                    return;
                }
            }
            Err(e) if e.kind() == ErrorKind::FlowControl => {
                ctx.stats.on_receive_throttled(1);
                if !primary {
                    return;
                }
                sleep_or_cancel(&pq, FLOW_CONTROL_BACKOFF).await;
            }
            Err(e) if e.kind() == ErrorKind::Closed => return,
            Err(e) => {
                ctx.stats.on_receive_failed(1);
                if !primary {
                    return;
                }
                failures += 1;
                // The first failure of a streak is a warning; the rest would only repeat it.
                if failures == 1 {
                    tracing::warn!(
                        target: "ferrymq::consumer",
                        "receive from {} queue {} failed, retrying every {:?}: {e}",
                        pq.source.topic.name, pq.queue.id, RECEIVE_FAILURE_BACKOFF
                    );
                } else {
                    tracing::debug!(
                        target: "ferrymq::consumer",
                        "receive from {} queue {} failed ({failures} in a row): {e}",
                        pq.source.topic.name, pq.queue.id
                    );
                }
                sleep_or_cancel(&pq, RECEIVE_FAILURE_BACKOFF).await;
            }
        }
    }
}

/// How soon messages received for a retired queue are visible again.
pub const HAND_BACK_DELAY: Duration = Duration::from_secs(1);

/// Messages a receive of a retired queue brought: visible again to the group after
/// [`HAND_BACK_DELAY`], never given to the listener (one attempt each; the broker redelivers
/// them anyway when the attempt fails).
async fn hand_back<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    pq: &ProcessQueue,
    messages: Vec<crate::proto::Message>,
) {
    for m in messages {
        let Ok(view) = MessageView::from_proto(m, pq.source.clone()) else {
            continue;
        };
        let timing = ctx.metrics.begin(Operation::Nack);
        let result = ctx
            .rpc
            .change_invisible_duration(&view, HAND_BACK_DELAY)
            .await;
        timing.finish(view.topic(), 1, result.as_ref().map(|_| ()));
        if let Err(e) = result {
            tracing::debug!(
                target: "ferrymq::consumer",
                "handing back message {} of retired queue {} of {} failed (the broker \
                 redelivers it when its invisibility ends): {e}",
                view.message_id(), pq.queue.id, pq.source.topic.name
            );
        }
    }
}

/// Start one more receive loop for `pq` if it has fewer than the allowed number in flight.
fn spawn_extra_receiver<R: ConsumerRpc>(ctx: &Arc<Context<R>>, pq: &Arc<ProcessQueue>) {
    let max_extra = ctx.config.max_concurrent_receives.saturating_sub(1);
    let started = pq
        .extra_receivers
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max_extra).then_some(n + 1)
        })
        .is_ok();
    if started {
        tokio::spawn(receive_loop(ctx.clone(), pq.clone(), false));
    }
}

async fn sleep_or_cancel(pq: &ProcessQueue, d: Duration) {
    tokio::select! {
        () = pq.cancel.cancelled() => {}
        () = tokio::time::sleep(d) => {}
    }
}
