//! Consume services: what the push consumer does with messages its process queues received.
//!
//! * **Standard** (non-FIFO groups): every message goes to the listener at once; the result is
//!   settled by [`settle`](crate::rocketmq::settle): SUCCESS → ack, FAILURE → change the
//!   invisible duration to the retry policy's delay for that delivery attempt (the broker
//!   redelivers, and moves the message to the DLQ after the last attempt). A corrupted message
//!   is not shown to the listener; it is settled as a failure.
//! * **FIFO** (groups with `consumeMessageOrderly`): messages of one lane are consumed one at a
//!   time, oldest first. On success the message is acked, and the next one starts only after
//!   the broker confirmed the ack (retried every second, except for `INVALID_RECEIPT_HANDLE`).
//!   On failure it is consumed again locally after the policy's delay, until the maximum
//!   number of attempts; then it is forwarded to the dead-letter queue (retried until it
//!   succeeds) and the lane moves on. Without the accelerator a lane is the whole process
//!   queue; with it, each message group is its own lane, so different groups run in parallel
//!   while every group stays strictly ordered.

use std::sync::Arc;

use tokio::sync::oneshot;

use crate::rocketmq::consumer_rpc::ConsumerRpc;
use crate::rocketmq::listener::{ConsumeResult, Delivery};
use crate::rocketmq::message_view::MessageView;
use crate::rocketmq::process_queue::ProcessQueue;
use crate::rocketmq::push_consumer::Context;
use crate::rocketmq::settle;

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
            ctx.settle.submit(settle::Job::nack(pq.clone(), view));
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
                    ConsumeResult::Success => settle::Job::ack(pq, v),
                    ConsumeResult::Failure => settle::Job::nack(pq, v),
                };
                settle.submit(job);
            }
            None => settle.submit(settle::Job::release(pq, v)),
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

/// Consume one FIFO lane until it is empty.
async fn fifo_lane<R: ConsumerRpc>(ctx: Arc<Context<R>>, pq: Arc<ProcessQueue>, key: String) {
    loop {
        let next = {
            let mut lanes = pq.fifo_lanes.lock();
            let next = lanes.get_mut(&key).and_then(|l| l.pending.pop_front());
            if next.is_none() {
                lanes.remove(&key);
            }
            next
        };
        let Some(view) = next else { return };
        if ctx.is_closing() {
            // Not started: leave it to the broker, which redelivers it after its invisibility.
            pq.evict(&view);
            continue;
        }
        if consume_fifo_message(&ctx, &pq, &view).await == Settled::Here {
            pq.evict(&view);
        }
    }
}

/// Who takes a consumed FIFO message out of the cache.
#[derive(Debug, PartialEq, Eq)]
enum Settled {
    /// The lane, once `consume_fifo_message` returns.
    Here,
    /// The settler, once the broker confirmed the ack.
    BySettler,
}

async fn consume_fifo_message<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    pq: &Arc<ProcessQueue>,
    view: &Arc<MessageView>,
) -> Settled {
    let policy = ctx.rpc.settings().retry_policy;
    let max_attempts = policy.max_attempts;
    if view.is_corrupted() {
        tracing::warn!(
            target: "ferrymq::consumer",
            "FIFO message {} of {} is corrupted (digest mismatch); forwarding it to the \
             dead-letter queue",
            view.message_id(), view.topic()
        );
        settle::forward_to_dlq_until_done(ctx, view, max_attempts).await;
        return Settled::Here;
    }
    loop {
        let (tx, rx) = oneshot::channel();
        ctx.listener
            .submit(vec![Delivery::new(view.clone(), move |outcome| {
                let _ = tx.send(outcome);
            })]);
        let result = match rx.await {
            Ok(Some(result)) => result,
            // Abandoned at shutdown: not consumed, not settled.
            Ok(None) | Err(_) => return Settled::Here,
        };
        ctx.stats.on_consumed(result);
        match result {
            ConsumeResult::Success if ctx.config.fifo_accelerator => {
                // A lane per message group: its next message comes after this ack.
                settle::ack_until_done(ctx, pq, view).await;
                return Settled::Here;
            }
            ConsumeResult::Success => {
                // One lane for the whole queue, messages of many groups. The broker holds back
                // the next message of this message's group until the ack lands, so order per
                // group does not need the lane to wait for it: the settler acks (coalesced,
                // retried until done) and evicts, while the lane goes on with other groups.
                ctx.settle
                    .submit(settle::Job::ack(pq.clone(), view.clone()));
                return Settled::BySettler;
            }
            ConsumeResult::Failure => {
                if ctx.is_closing() {
                    return Settled::Here;
                }
                let attempt = view.delivery_attempt();
                if u32::try_from(attempt).unwrap_or(0) >= max_attempts {
                    settle::forward_to_dlq_until_done(ctx, view, max_attempts).await;
                    return Settled::Here;
                }
                let delay = policy.delay(u32::try_from(attempt).unwrap_or(1));
                tokio::select! {
                    () = ctx.closing.cancelled() => return Settled::Here,
                    () = tokio::time::sleep(delay) => {}
                }
                view.increment_delivery_attempt();
                ctx.stats.on_local_retry();
            }
        }
    }
}
