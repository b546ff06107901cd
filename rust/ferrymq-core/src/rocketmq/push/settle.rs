//! Settling consumed messages: ack, change invisible duration ("nack"), forward to the DLQ.
//!
//! Each operation is retried every [`SETTLE_RETRY_INTERVAL`] until it succeeds, except when the
//! broker answers `INVALID_RECEIPT_HANDLE` (the handle expired; the broker redelivers the
//! message and retrying cannot help), or when the consumer gives up at the end of its shutdown
//! deadline. A message leaves the process queue cache only once it is settled.
//!
//! Acks are coalesced: one settler task reads finished messages from a channel and sends one
//! `AckMessage` with many entries per topic and broker, with at most [`MAX_INFLIGHT_ACKS`] ack
//! RPCs in flight. While those are busy, more results accumulate and the next RPC carries
//! them all; a batch that is not full waits up to [`ACK_LINGER`] for more (1 ms of ack latency
//! for far fewer RPCs under load: 782 instead of 4,354 `AckMessage`s for 200k messages, and twice
//! the throughput; pipelined FIFO groups linger only below [`FIFO_ACK_LINGER_BELOW`] entries,
//! ordered FIFO lanes never, as each waits on its ack). The channel holds at most one job per
//! cached message, so the cache limits bound it.
//!
//! A job may carry a confirmation: an ordered FIFO lane learns whether the broker accepted its
//! ack ([`Settled`]) before it starts its next message.
//!
//! The channel itself (`SettleHandle` and its jobs) is part of the shared `Context` in
//! [`super::context`]; this module is the task that reads it. When observed, every attempt is
//! reported before and after ([`super::settle_events`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, Semaphore};

use super::context::{Context, Job, Kind, Settled};
use super::settle_events::{Attempt, SettleEvent, SettleOp};
use crate::error::{Error, Result};
use crate::metrics::Operation;
use crate::rocketmq::consumer_rpc::ConsumerRpc;
use crate::rocketmq::message_view::{MessageSource, MessageView};
use crate::status;

/// Interval between two attempts of a failed ack, nack or DLQ forward.
pub const SETTLE_RETRY_INTERVAL: Duration = Duration::from_secs(1);
/// Most entries in one `AckMessage`.
pub const MAX_ACK_BATCH: usize = 256;
/// Most `AckMessage` RPCs in flight per consumer.
pub const MAX_INFLIGHT_ACKS: usize = 4;
/// The same for FIFO groups, where acks are not batched up (each ack releases its group's next
/// message, so its latency is the group's throughput): 4 → 16 took bench_consumer's FIFO
/// scenario from 34k to 47k msg/s.
pub const MAX_INFLIGHT_FIFO_ACKS: usize = 16;
/// How long the settler waits for more acks to fill an `AckMessage` that is not full.
pub const ACK_LINGER: Duration = Duration::from_millis(1);
/// FIFO groups: an `AckMessage` with at least this many entries goes without lingering. With
/// the accelerator, lanes settle a few acks at a time (9.5k `AckMessage`s for 200k messages
/// without a linger; bench_consumer 141–161k msg/s without, 171–182k with); without it, a
/// lane's run settles a whole received batch at once and lingering only delays the group's next
/// batch (176–247k msg/s with no FIFO linger, 174–208k with it always, 238–267k this way).
pub const FIFO_ACK_LINGER_BELOW: usize = 16;

fn same_destination(a: &Arc<MessageSource>, b: &Arc<MessageSource>) -> bool {
    Arc::ptr_eq(a, b) || (a.topic == b.topic && a.endpoints == b.endpoints)
}

/// The first failure of a settle operation is a warning; its retries (every second, maybe for
/// as long as a broker is down) are debug records.
fn log_retry(failures: u32, what: &str, view: &MessageView, e: &Error) {
    if failures == 1 {
        tracing::warn!(
            target: "ferrymq::consumer",
            "{what} of message {} failed, retrying every {:?} until it succeeds: {e}",
            view.message_id(), SETTLE_RETRY_INTERVAL
        );
    } else {
        tracing::debug!(
            target: "ferrymq::consumer",
            "{what} of message {} failed ({failures} times): {e}", view.message_id()
        );
    }
}

fn is_invalid_handle(e: &Error) -> bool {
    e.rocketmq_code() == Some(status::INVALID_RECEIPT_HANDLE)
}

/// The settler task: batches acks and starts nacks until the consumer stops.
pub(crate) async fn run<R: ConsumerRpc>(
    ctx: Arc<Context<R>>,
    mut rx: mpsc::UnboundedReceiver<Job>,
) {
    let permits = Arc::new(Semaphore::new(if ctx.fifo {
        MAX_INFLIGHT_FIFO_ACKS
    } else {
        MAX_INFLIGHT_ACKS
    }));
    let mut jobs: Vec<Job> = Vec::new();
    loop {
        let first = tokio::select! {
            () = ctx.stopped.cancelled() => break,
            j = rx.recv() => match j { Some(j) => j, None => break },
        };
        jobs.push(first);
        // Take an ack slot before draining the queue: while every slot is busy, settled
        // messages pile up into the next (bigger) AckMessage instead of waiting in small ones.
        let mut permit = tokio::select! {
            () = ctx.stopped.cancelled() => {
                jobs.drain(..).for_each(Job::finish_unsettled);
                break;
            }
            p = permits.clone().acquire_owned() => match p {
                Ok(p) => Some(p),
                Err(_) => break,
            },
        };
        // Then linger up to ACK_LINGER for a fuller batch: every AckMessage costs both sides
        // far more than an entry in it, and a consumed message waits invisible for much longer.
        // FIFO groups linger only for small batches: the broker holds back a message group's
        // next messages until its acks land, and a lane's run already settles many at once.
        let linger = tokio::time::sleep(ACK_LINGER);
        tokio::pin!(linger);
        while jobs.len() < MAX_ACK_BATCH {
            match rx.try_recv() {
                Ok(j) => jobs.push(j),
                // Ordered FIFO lanes each wait on their ack: lingering would add to every
                // message's latency; acks of many lanes pile up while the slots are busy.
                Err(_) if ctx.fifo_ordered() => break,
                Err(_) if ctx.fifo && jobs.len() >= FIFO_ACK_LINGER_BELOW => break,
                Err(_) => tokio::select! {
                    () = &mut linger => break,
                    j = rx.recv() => match j {
                        Some(j) => jobs.push(j),
                        None => break,
                    },
                },
            }
        }
        let mut groups: Vec<Vec<Job>> = Vec::new();
        for job in jobs.drain(..) {
            match job.kind {
                Kind::Ack => {
                    match groups
                        .iter_mut()
                        .find(|g| same_destination(g[0].view.source(), job.view.source()))
                    {
                        Some(g) => g.push(job),
                        None => groups.push(vec![job]),
                    }
                }
                Kind::Nack => {
                    tokio::spawn(nack_until_done(ctx.clone(), job));
                }
                Kind::Release => job.finish(Settled::Abandoned),
            }
        }
        for group in groups {
            let permit = match permit.take() {
                Some(p) => p,
                None => tokio::select! {
                    () = ctx.stopped.cancelled() => {
                        group.into_iter().for_each(Job::finish_unsettled);
                        break;
                    }
                    p = permits.clone().acquire_owned() => match p {
                        Ok(p) => p,
                        Err(_) => break,
                    },
                },
            };
            let ctx = ctx.clone();
            tokio::spawn(async move {
                ack_batch(&ctx, group).await;
                drop(permit);
            });
        }
    }
    // Stopped: whatever is still queued stays unsettled (the broker redelivers it).
    rx.close();
    while let Ok(job) = rx.try_recv() {
        job.finish_unsettled();
    }
}

async fn ack_batch<R: ConsumerRpc>(ctx: &Arc<Context<R>>, jobs: Vec<Job>) {
    let source = jobs[0].view.source().clone();
    let observed = ctx.observed();
    if observed {
        let messages = jobs.iter().map(|j| j.view.clone()).collect();
        ctx.observe(|| SettleEvent::Before {
            op: SettleOp::Ack,
            messages,
        })
        .await;
    }
    let attempt = Attempt::start();
    let views: Vec<&MessageView> = jobs.iter().map(|j| &*j.view).collect();
    let timing = ctx.metrics.begin(Operation::Ack);
    let result = ctx.rpc.ack(&source, &views).await;
    match &result {
        Ok(r) => timing.finish_entries(&source.topic.name, r.iter().map(|r| r.as_ref().err())),
        Err(e) => timing.finish(&source.topic.name, views.len() as u64, Err(e)),
    }
    drop(views);
    if observed {
        report_ack(ctx, &jobs, &result, &attempt).await;
    }
    let mut retry = Vec::new();
    match result {
        Ok(results) => {
            let mut results = results.into_iter();
            let mut acked = 0;
            let mut notify = None;
            for job in jobs {
                match results.next() {
                    Some(Ok(())) => {
                        acked += 1;
                        notify = job.finish_quietly(Settled::Accepted).or(notify);
                    }
                    Some(Err(e)) if is_invalid_handle(&e) => {
                        ctx.stats.on_invalid_handle(1);
                        tracing::warn!(
                            target: "ferrymq::consumer",
                            "ack of message {} refused ({e}); the broker will redeliver it",
                            job.view.message_id()
                        );
                        job.finish(Settled::Refused);
                    }
                    Some(Err(e)) => {
                        tracing::debug!(
                            target: "ferrymq::consumer",
                            "ack of message {} failed, retrying: {e}", job.view.message_id()
                        );
                        retry.push(job);
                    }
                    None => retry.push(job),
                }
            }
            ctx.stats.on_acked(acked);
            if let Some(stats) = notify {
                stats.notify_changed();
            }
        }
        Err(e) if is_invalid_handle(&e) => {
            ctx.stats.on_invalid_handle(1);
            tracing::warn!(
                target: "ferrymq::consumer",
                "ack of {} messages refused ({e}); the broker will redeliver them", jobs.len()
            );
            jobs.into_iter().for_each(|j| j.finish(Settled::Refused));
        }
        Err(e) => {
            tracing::warn!(
                target: "ferrymq::consumer",
                "ack of {} messages of {} failed, retrying in {:?}: {e}",
                jobs.len(), source.topic.name, SETTLE_RETRY_INTERVAL
            );
            retry = jobs;
        }
    }
    if !retry.is_empty() {
        ctx.stats.on_settle_retry(retry.len());
        let ctx = ctx.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = ctx.abandon.cancelled() => {
                    ctx.stats.on_settle_abandoned(retry.len());
                    retry.into_iter().for_each(Job::finish_unsettled);
                }
                () = tokio::time::sleep(SETTLE_RETRY_INTERVAL) => {
                    for job in retry {
                        ctx.settle.submit(job);
                    }
                }
            }
        });
    }
}

/// The `After` events of one `AckMessage`: one for the entries the broker accepted, one per
/// entry it refused, one for all when the call itself failed.
async fn report_ack<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    jobs: &[Job],
    result: &Result<Vec<Result<()>>>,
    attempt: &Attempt,
) {
    let duration = attempt.started.elapsed();
    let after = |messages, error| SettleEvent::After {
        op: SettleOp::Ack,
        messages,
        error,
        duration,
    };
    match result {
        Err(e) => {
            let all = jobs.iter().map(|j| j.view.clone()).collect();
            ctx.observe(|| after(all, Some(Arc::new(e.to_report()))))
                .await;
        }
        Ok(entries) => {
            let mut accepted = Vec::new();
            let mut refused = Vec::new();
            for (i, job) in jobs.iter().enumerate() {
                match entries.get(i) {
                    Some(Ok(())) => accepted.push(job.view.clone()),
                    Some(Err(e)) => refused.push((job.view.clone(), e.to_report())),
                    None => refused.push((
                        job.view.clone(),
                        Error::protocol("the ack's answer has no entry for this message"),
                    )),
                }
            }
            if !accepted.is_empty() {
                ctx.observe(|| after(accepted, None)).await;
            }
            for (view, e) in refused {
                ctx.observe(|| after(vec![view], Some(Arc::new(e)))).await;
            }
        }
    }
}

async fn nack_until_done<R: ConsumerRpc>(ctx: Arc<Context<R>>, job: Job) {
    let how = nack(&ctx, &job.view).await;
    job.finish(how);
}

async fn nack<R: ConsumerRpc>(ctx: &Arc<Context<R>>, view: &Arc<MessageView>) -> Settled {
    let delay = ctx
        .rpc
        .settings()
        .retry_policy
        .delay(u32::try_from(view.delivery_attempt()).unwrap_or(1));
    let op = || ctx.rpc.change_invisible_duration(view, delay);
    let what = (Operation::Nack, "changing the invisible duration");
    until_done(ctx, view, what, op, |handle| {
        view.set_receipt_handle(&handle);
        ctx.stats.on_nacked(1);
    })
    .await
}

/// Forward a FIFO message to the dead-letter queue, retrying until it succeeds (or the
/// broker refuses its receipt handle, or the consumer gives up). The caller evicts the message
/// afterwards.
pub(crate) async fn forward_to_dlq_until_done<R: ConsumerRpc>(
    ctx: &Arc<Context<R>>,
    view: &Arc<MessageView>,
    max_attempts: u32,
) -> Settled {
    let op = || ctx.rpc.forward_to_dead_letter_queue(view, max_attempts);
    let what = (Operation::DeadLetter, "forwarding to the dead-letter queue");
    until_done(ctx, view, what, op, |()| {
        ctx.stats.on_dead_lettered(1);
    })
    .await
}

/// Run `op` (`what`: the operation it records each attempt as, and its description for the
/// logs) on `view` every [`SETTLE_RETRY_INTERVAL`] until it succeeds (its result goes to
/// `accepted`), the broker refuses the receipt handle, or the consumer gives up.
async fn until_done<R: ConsumerRpc, T, F: Future<Output = Result<T>>>(
    ctx: &Arc<Context<R>>,
    view: &Arc<MessageView>,
    (operation, what): (Operation, &str),
    mut op: impl FnMut() -> F,
    accepted: impl FnOnce(T),
) -> Settled {
    let mut failures = 0u32;
    let observed = ctx.observed().then(|| {
        if operation == Operation::DeadLetter {
            SettleOp::DeadLetter
        } else {
            SettleOp::Nack
        }
    });
    loop {
        if let Some(op) = observed {
            let messages = vec![view.clone()];
            ctx.observe(|| SettleEvent::Before { op, messages }).await;
        }
        let attempt = Attempt::start();
        let timing = ctx.metrics.begin(operation);
        let result = op().await;
        timing.finish(view.topic(), 1, result.as_ref().map(|_| ()));
        if let Some(op) = observed {
            let error = result.as_ref().err().map(|e| Arc::new(e.to_report()));
            let messages = vec![view.clone()];
            let duration = attempt.started.elapsed();
            ctx.observe(|| SettleEvent::After {
                op,
                messages,
                error,
                duration,
            })
            .await;
        }
        match result {
            Ok(v) => {
                accepted(v);
                return Settled::Accepted;
            }
            Err(e) if is_invalid_handle(&e) => {
                ctx.stats.on_invalid_handle(1);
                tracing::warn!(
                    target: "ferrymq::consumer",
                    "{what} of message {} was refused ({e}); the broker will redeliver it",
                    view.message_id()
                );
                return Settled::Refused;
            }
            Err(e) => {
                ctx.stats.on_settle_retry(1);
                failures += 1;
                log_retry(failures, what, view, &e);
                tokio::select! {
                    () = ctx.abandon.cancelled() => {
                        ctx.stats.on_settle_abandoned(1);
                        return Settled::Abandoned;
                    }
                    () = tokio::time::sleep(SETTLE_RETRY_INTERVAL) => {}
                }
            }
        }
    }
}
