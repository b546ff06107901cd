//! Consume services: what the push consumer does with messages its process queues received.
//!
//! * **Standard** (non-FIFO groups): every message goes to the listener at once; the result is
//!   settled by [`settle`]: SUCCESS → ack, FAILURE → change the
//!   invisible duration to the retry policy's delay for that delivery attempt (the broker
//!   redelivers, and moves the message to the DLQ after the last attempt). A corrupted message
//!   is not shown to the listener; it is settled as a failure.
//! * **FIFO** (groups with `consumeMessageOrderly`): messages of one lane are consumed in
//!   order, oldest first. By default (the workflow's order) a lane's next message starts only
//!   once the broker accepted the previous one's result: its ack (retried every second until it
//!   lands; acks of different lanes still share `AckMessage`s) or, after the last attempt, its
//!   dead-letter forward. If the broker refuses a result with `INVALID_RECEIPT_HANDLE`, it
//!   redelivers that message; the lane drops the messages received with it, unconsumed, so
//!   they come back after it. With `fifo_pipelining` a lane hands runs of messages to the
//!   listener and acks each success without waiting (faster; order then holds only while acks
//!   land). On failure a message is consumed again locally after the policy's delay, until the
//!   maximum number of attempts; then it is forwarded to the dead-letter queue (retried until
//!   it succeeds) and the lane moves on. Without the accelerator a lane is the whole process
//!   queue; with it, each message group is its own lane, so different groups run in parallel
//!   while every group stays strictly ordered.
//!
//! The receive loop ([`super::receive`]) calls `dispatch`; this module imports the shared
//! context, the process queue and the settler, never the receive loop or the consumer.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::oneshot;

use super::context::{Context, Job, Settled};
use super::process_queue::{ProcessQueue, Rewind};
use super::settle;
use crate::metrics::{Operation, PROCESS_FAILURE};
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
    let handed = Instant::now();
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
        let metrics = ctx.metrics.clone();
        let v = view.clone();
        batch.push(Delivery::new(view, move |outcome, started| match outcome {
            Some(result) => {
                stats.on_consumed(result);
                // A message is the listener's unit of work here: one record each, timed from
                // the start of its listener call (from the hand-off when the listener does
                // not say), after its wait since the receive.
                let started = started.unwrap_or(handed);
                let waited = started.saturating_duration_since(handed);
                let error = (result == ConsumeResult::Failure).then_some(PROCESS_FAILURE);
                metrics.record_processed(v.topic(), waited, started.elapsed(), error);
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
        let mut fifo = pq.fifo_lanes.lock();
        fifo.receives += 1;
        let receive = fifo.receives;
        for view in views {
            let key = if ctx.config.fifo_accelerator {
                view.message_group().unwrap_or_default().to_string()
            } else {
                String::new()
            };
            let lane = fifo.lanes.entry(key.clone()).or_insert_with(|| {
                start.push(key);
                Default::default()
            });
            lane.push(receive, view);
        }
    }
    for key in start {
        tokio::spawn(fifo_lane(ctx.clone(), pq.clone(), key));
    }
}

/// Most messages of a lane handed to the listener as one [`Run`] with `fifo_pipelining` (in
/// the default, ordered mode a run is one message).
pub const MAX_RUN: usize = 64;

/// Consume one FIFO lane until it is empty.
///
/// The lane's pending messages go to the listener oldest first. A failed message is consumed
/// again locally after the retry policy's delay, and after the last attempt forwarded to the
/// dead-letter queue (retried until the broker accepts it); the messages behind it wait.
///
/// * Ordered (the default): one message at a time, and the next starts only once the broker
///   accepted this one's ack (retried by the settler until it lands, coalesced with the acks of
///   other lanes) or its dead-letter forward: the workflow's definition of FIFO order. If the
///   broker refuses the result with `INVALID_RECEIPT_HANDLE` (the handle expired), it
///   redelivers the message, and the rest of the batch it came in after it (it holds a FIFO
///   queue's next messages until the earlier ones are settled); so the lane drops, unconsumed,
///   its messages that came with the refused one or before, and goes on with later receives,
///   which bring the redelivered message first. A proxy answers OK to an ack with a stale
///   handle, so redeliveries are also recognised as they arrive: a message of a group at or
///   below an offset the lane already received of that group makes the lane drop its older
///   copies of the group from that offset on.
/// * Pipelined (`fifo_pipelining`): runs of up to [`MAX_RUN`], consumed by one thread,
///   stopping at the first failure; each success's ack is handed to the settler without
///   waiting. Order holds as long as acks land; if one is refused for good, the broker
///   redelivers that message after the ones behind it were consumed.
async fn fifo_lane<R: ConsumerRpc>(ctx: Arc<Context<R>>, pq: Arc<ProcessQueue>, key: String) {
    let ordered = ctx.fifo_ordered();
    let run_len = if ordered { 1 } else { MAX_RUN };
    let mut current: VecDeque<(u64, Arc<MessageView>)> = VecDeque::new();
    loop {
        if current.is_empty() || ordered {
            let mut fifo = pq.fifo_lanes.lock();
            match fifo.lanes.get_mut(&key) {
                Some(lane) if !lane.pending.is_empty() || !current.is_empty() => {
                    current.extend(lane.pending.drain(..));
                    let rewinds = std::mem::take(&mut lane.rewinds);
                    drop(fifo);
                    if ordered {
                        drop_stale(&ctx, &pq, &mut current, &rewinds);
                    }
                    if current.is_empty() {
                        continue;
                    }
                }
                _ => {
                    fifo.lanes.remove(&key);
                    return;
                }
            }
        }
        if ctx.is_closing() {
            // Not started: leave them to the broker, which redelivers after their invisibility.
            for (_, view) in current.drain(..) {
                pq.evict(&view);
            }
            continue;
        }
        let policy = ctx.rpc.settings().retry_policy;
        let max_attempts = policy.max_attempts;
        if current[0].1.is_corrupted() {
            let (receive, view) = current.pop_front().expect("not empty");
            tracing::warn!(
                target: "ferrymq::consumer",
                "FIFO message {} of {} is corrupted (digest mismatch); forwarding it to the \
                 dead-letter queue",
                view.message_id(), view.topic()
            );
            let how = settle::forward_to_dlq_until_done(&ctx, &view, max_attempts).await;
            pq.evict(&view);
            if ordered && how == Settled::Refused {
                leave_for_redelivery(&ctx, &pq, &mut current, receive, &view);
            }
            continue;
        }
        let run: Vec<Arc<MessageView>> = current
            .iter()
            .take(run_len)
            .map(|(_, v)| v)
            .take_while(|v| !v.is_corrupted())
            .cloned()
            .collect();
        let (tx, rx) = oneshot::channel();
        let timing = ctx.metrics.begin(Operation::Process);
        ctx.listener.submit_run(Run::new(run, move |outcome| {
            let _ = tx.send(outcome);
        }));
        let Ok(Some(results)) = rx.await else {
            // Abandoned at shutdown: not consumed, not settled.
            for (_, view) in current.drain(..) {
                pq.evict(&view);
            }
            continue;
        };
        timing.finish_types(
            &pq.source.topic.name,
            results
                .iter()
                .map(|r| (*r == ConsumeResult::Failure).then_some(PROCESS_FAILURE)),
        );
        for result in results {
            ctx.stats.on_consumed(result);
            if result == ConsumeResult::Success {
                let (receive, view) = current.pop_front().expect("a result per run message");
                if !ordered {
                    ctx.settle.submit(Job::ack(pq.clone(), view));
                    continue;
                }
                let (job, settled) = Job::confirmed_ack(pq.clone(), view.clone());
                ctx.settle.submit(job);
                // A closed channel: the job was dropped at shutdown.
                if settled.await.unwrap_or(Settled::Abandoned) == Settled::Refused {
                    leave_for_redelivery(&ctx, &pq, &mut current, receive, &view);
                }
                break;
            }
            let (receive, view) = current[0].clone();
            if ctx.is_closing() {
                break;
            }
            let attempt = view.delivery_attempt();
            if u32::try_from(attempt).unwrap_or(0) >= max_attempts {
                let how = settle::forward_to_dlq_until_done(&ctx, &view, max_attempts).await;
                current.pop_front();
                pq.evict(&view);
                if ordered && how == Settled::Refused {
                    leave_for_redelivery(&ctx, &pq, &mut current, receive, &view);
                }
                break;
            }
            let delay = policy.delay(u32::try_from(attempt).unwrap_or(1));
            tokio::select! {
                () = ctx.closing.cancelled() => break,
                () = tokio::time::sleep(delay) => {}
            }
            view.increment_delivery_attempt();
            ctx.stats.on_local_retry(1);
            break;
        }
    }
}

/// The broker redelivers some of the lane's messages (`rewinds`): drop their stale copies,
/// unconsumed, so that the redelivered ones (already behind them in the lane) come first. This
/// also covers an ack the broker answered OK without effect because the message had been
/// redelivered already (a proxy does so for a stale receipt handle).
fn drop_stale<R: ConsumerRpc>(
    ctx: &Context<R>,
    pq: &ProcessQueue,
    current: &mut VecDeque<(u64, Arc<MessageView>)>,
    rewinds: &[Rewind],
) {
    if rewinds.is_empty() {
        return;
    }
    let before = current.len();
    current.retain(|(receive, view)| {
        let stale = rewinds.iter().any(|rw| rw.stales(*receive, view));
        if stale {
            pq.evict_quietly(view);
        }
        !stale
    });
    let dropped = before - current.len();
    if dropped > 0 {
        ctx.stats.on_left_for_redelivery(dropped);
        ctx.stats.notify_changed();
        tracing::warn!(
            target: "ferrymq::consumer",
            "the broker redelivers FIFO messages of {} from offset {} of queue {}; {dropped} \
             earlier copies are dropped unconsumed so that the redelivery comes first",
            pq.source().topic.name, rewinds[0].offset, rewinds[0].queue_id
        );
    }
}

/// The broker refused the result of `refused` (received by receive number `receive`): it
/// redelivers it, and the messages it handed out with it, after their invisibility. Drop the
/// lane's messages of that receive (or earlier) from the cache unconsumed, so that none of them
/// runs ahead of the redelivered one; later receives stay (they bring the redelivery).
fn leave_for_redelivery<R: ConsumerRpc>(
    ctx: &Context<R>,
    pq: &ProcessQueue,
    current: &mut VecDeque<(u64, Arc<MessageView>)>,
    receive: u64,
    refused: &MessageView,
) {
    let mut dropped = 0;
    while current.front().is_some_and(|(r, _)| *r <= receive) {
        let (_, view) = current.pop_front().expect("not empty");
        pq.evict_quietly(&view);
        dropped += 1;
    }
    ctx.stats.on_left_for_redelivery(dropped);
    ctx.stats.notify_changed();
    tracing::warn!(
        target: "ferrymq::consumer",
        "the broker refused the result of FIFO message {} of {} (it redelivers it); {dropped} \
         messages received with it are left unconsumed for the broker to redeliver after it",
        refused.message_id(), refused.topic()
    );
}
