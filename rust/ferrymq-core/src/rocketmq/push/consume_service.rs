//! Consume services: what the push consumer does with messages its process queues received.
//!
//! * **Standard** (non-FIFO groups): every message goes to the listener at once; the result is
//!   settled by [`settle`]: SUCCESS → ack, FAILURE → change the
//!   invisible duration to the retry policy's delay for that delivery attempt (the broker
//!   redelivers, and moves the message to the DLQ after the last attempt). A corrupted message
//!   is not shown to the listener; it is settled as a failure.
//! * **FIFO** (groups with `consumeMessageOrderly`): messages of one lane are consumed in
//!   order, oldest first, handed to the listener as runs that stop at the first failure. On
//!   success the message is acked (retried every second, except for `INVALID_RECEIPT_HANDLE`);
//!   the broker holds back a message group's next message until then. On failure it is
//!   consumed again locally after the policy's delay, until the maximum number of attempts;
//!   then it is forwarded to the dead-letter queue (retried until it succeeds) and the lane
//!   moves on. Without the accelerator a lane is the whole process
//!   queue; with it, each message group is its own lane, so different groups run in parallel
//!   while every group stays strictly ordered.
//!
//! The receive loop ([`super::receive`]) calls `dispatch`; this module imports the shared
//! context, the process queue and the settler, never the receive loop or the consumer.

use std::collections::VecDeque;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::context::{Context, Job};
use super::process_queue::ProcessQueue;
use super::settle;
use crate::rocketmq::consumer_rpc::ConsumerRpc;
use crate::rocketmq::listener::{ConsumeResult, Delivery, Run};
use crate::rocketmq::message_view::MessageView;

/// Hand freshly cached messages of `pq` to consumption.
pub(crate) fn dispatch<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    pq: &Arc<ProcessQueue>,
    views: Vec<Arc<MessageView>>,
) {
    if ctx.fifo {
        dispatch_fifo(ctx, pq, views);
    } else {
        dispatch_standard(ctx, pq, views);
    }
}

fn dispatch_standard<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    pq: &Arc<ProcessQueue>,
    views: Vec<Arc<MessageView>>,
) {
    let mut batch = Vec::with_capacity(views.len());
    for view in views {
        if view.is_corrupted() {
            tracing::warn!(
                target: "ferrymq::consumer",
                "message {} of {} is corrupted (digest mismatch); it will be redelivered",
                view.message_id(), view.topic()
            );
            ctx.settle.submit(Job::nack(pq.clone(), view));
            continue;
        }
        let pq = pq.clone();
        let settle = ctx.settle.clone();
        let stats = ctx.stats.clone();
        let v = view.clone();
        batch.push(Delivery::new(view, move |outcome| match outcome {
            Some(result) => {
                stats.on_consumed(result);
                let job = match result {
                    ConsumeResult::Success => Job::ack(pq, v),
                    ConsumeResult::Failure => Job::nack(pq, v),
                };
                settle.submit(job);
            }
            None => settle.submit(Job::release(pq, v)),
        }));
    }
    ctx.listener.submit(batch);
}

fn dispatch_fifo<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    pq: &Arc<ProcessQueue>,
    views: Vec<Arc<MessageView>>,
) {
    let mut start = Vec::new();
    {
        let mut lanes = pq.fifo_lanes.lock();
        for view in views {
            let key = if ctx.config.fifo_accelerator {
                view.message_group().unwrap_or_default().to_string()
            } else {
                String::new()
            };
            let lane = lanes.entry(key.clone()).or_insert_with(|| {
                start.push(key);
                Default::default()
            });
            lane.pending.push_back(view);
        }
    }
    for key in start {
        tokio::spawn(fifo_lane(ctx.clone(), pq.clone(), key));
    }
}

/// Most messages of a lane handed to the listener as one [`Run`].
pub const MAX_RUN: usize = 64;

/// Consume one FIFO lane until it is empty.
///
/// The lane's pending messages go to the listener as runs: consumed in order by one thread,
/// stopping at the first failure. Every success is acked through the settler (coalesced, retried
/// until done; the settler evicts it) while the lane goes on: the broker holds back the next
/// message of a message group until the previous one is acked, so the order per group does not
/// need the lane to wait for the ack. A failed message is consumed again locally after the retry
/// policy's delay, and after the last attempt forwarded to the dead-letter queue; the messages
/// behind it wait.
async fn fifo_lane<R: ConsumerRpc>(ctx: Arc<Context<R>>, pq: Arc<ProcessQueue>, key: String) {
    let mut current: VecDeque<Arc<MessageView>> = VecDeque::new();
    loop {
        if current.is_empty() {
            let mut lanes = pq.fifo_lanes.lock();
            match lanes.get_mut(&key) {
                Some(lane) if !lane.pending.is_empty() => current.extend(lane.pending.drain(..)),
                _ => {
                    lanes.remove(&key);
                    return;
                }
            }
        }
        if ctx.is_closing() {
            // Not started: leave them to the broker, which redelivers after their invisibility.
            for view in current.drain(..) {
                pq.evict(&view);
            }
            continue;
        }
        let policy = ctx.rpc.settings().retry_policy;
        let max_attempts = policy.max_attempts;
        if current[0].is_corrupted() {
            let view = current.pop_front().expect("not empty");
            tracing::warn!(
                target: "ferrymq::consumer",
                "FIFO message {} of {} is corrupted (digest mismatch); forwarding it to the \
                 dead-letter queue",
                view.message_id(), view.topic()
            );
            settle::forward_to_dlq_until_done(&ctx, &view, max_attempts).await;
            pq.evict(&view);
            continue;
        }
        let run: Vec<Arc<MessageView>> = current
            .iter()
            .take(MAX_RUN)
            .take_while(|v| !v.is_corrupted())
            .cloned()
            .collect();
        let (tx, rx) = oneshot::channel();
        ctx.listener.submit_run(Run::new(run, move |outcome| {
            let _ = tx.send(outcome);
        }));
        let Ok(Some(results)) = rx.await else {
            // Abandoned at shutdown: not consumed, not settled.
            for view in current.drain(..) {
                pq.evict(&view);
            }
            continue;
        };
        for result in results {
            ctx.stats.on_consumed(result);
            if result == ConsumeResult::Success {
                let view = current.pop_front().expect("a result per run message");
                ctx.settle.submit(Job::ack(pq.clone(), view));
                continue;
            }
            let view = current[0].clone();
            if ctx.is_closing() {
                break;
            }
            let attempt = view.delivery_attempt();
            if u32::try_from(attempt).unwrap_or(0) >= max_attempts {
                settle::forward_to_dlq_until_done(&ctx, &view, max_attempts).await;
                current.pop_front();
                pq.evict(&view);
                break;
            }
            let delay = policy.delay(u32::try_from(attempt).unwrap_or(1));
            tokio::select! {
                () = ctx.closing.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            view.increment_delivery_attempt();
            ctx.stats.on_local_retry();
            break;
        }
    }
}
