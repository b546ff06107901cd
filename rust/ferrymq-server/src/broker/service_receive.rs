//! The receive side of the `MessagingService`: ReceiveMessage (long polling, FIFO, the answer
//! stream), AckMessage, ChangeInvisibleDuration and ForwardMessageToDeadLetterQueue, and the move
//! of dead letters to a group's DLQ topic.

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use tonic::{Request, Response, Status};

use super::fault::Rpc;
use super::handout::{Handed, Handout};
use super::pop::{self, Filter, Pop, PopOutcome};
use super::service_wire::{
    admit_or, check, delivery_timestamp, ok, receive_status, refuse, st, BoxStream,
    EndpointService, MAX_BATCH,
};
use super::store::{readable, std_duration, Queue, Stored, Topic};
use crate::proto;
use crate::status as code;

impl EndpointService {
    /// Move dead letters of `group` to its DLQ topic.
    pub(super) fn to_dlq(
        &self,
        group: &str,
        topic: &str,
        dead: Vec<pop::DeadLetter>,
    ) -> Result<(), proto::Status> {
        if dead.is_empty() {
            return Ok(());
        }
        let dlq = self.core.store.dlq_of(group);
        let msgs: Vec<_> = dead
            .iter()
            .map(|d| dlq_copy(&dlq, topic, &d.stored))
            .collect();
        self.core
            .store
            .append(&dlq, &dlq.queues[0], msgs, &self.core.config)
            .map(|_| ())
            .map_err(|e| {
                tracing::warn!(target: "ferrymq::broker", "DLQ {} full: {}", dlq.name, e.message);
                st(e.code, e.message)
            })
    }

    pub(super) async fn on_receive(
        &self,
        request: Request<proto::ReceiveMessageRequest>,
    ) -> Result<Response<BoxStream<proto::ReceiveMessageResponse>>, Status> {
        let conn = request
            .remote_addr()
            .and_then(|a| self.ep.faults.io.connection(a));
        let client_id = admit_or!(self, Rpc::ReceiveMessage, request, receive_status);
        // Without settings (and for an unknown topic, below) the proxy fails with a
        // NullPointerException: INTERNAL_SERVER_ERROR. We answer the same code.
        check!(
            self.require_settings(&client_id)
                .map_err(|s| st(code::INTERNAL_SERVER_ERROR, s.message)),
            receive_status
        );
        let polling = check!(
            self.polling_time(
                request.get_ref().long_polling_timeout.as_ref(),
                request.metadata()
            ),
            receive_status
        );
        let req = request.into_inner();
        let cfg = &self.core.config;
        let group = check!(self.group(req.group.as_ref()), receive_status);
        let mq = req.message_queue.as_ref();
        let topic = check!(
            self.topic(mq.and_then(|q| q.topic.as_ref()))
                .map_err(|s| st(code::INTERNAL_SERVER_ERROR, s.message)),
            receive_status
        );
        let broker = check!(self.broker_of(mq), receive_status);
        let filter = check!(
            Filter::parse(req.filter_expression.as_ref()).map_err(|(c, m)| st(c, m)),
            receive_status
        );
        // A batch size of 0 (or less) long-polls for nothing, then MESSAGE_NOT_FOUND, as the
        // proxy does.
        let batch = usize::try_from(req.batch_size).unwrap_or(0).min(MAX_BATCH);
        let requested = req.invisible_duration.as_ref().and_then(std_duration);
        let invisible = if req.auto_renew {
            requested.unwrap_or(cfg.auto_renew_invisible)
        } else {
            match requested {
                None => {
                    return refuse(
                        receive_status,
                        code::ILLEGAL_INVISIBLE_TIME,
                        "invisible_duration is required without auto_renew",
                    )
                }
                Some(d) if d < cfg.min_invisible || d > cfg.max_invisible => {
                    return refuse(
                        receive_status,
                        code::ILLEGAL_INVISIBLE_TIME,
                        format!(
                            "invisible_duration must be between {} ms and {} ms",
                            cfg.min_invisible.as_millis(),
                            cfg.max_invisible.as_millis()
                        ),
                    )
                }
                Some(d) => d,
            }
        };
        let renew = if req.auto_renew {
            self.ep.clients.liveness(&client_id)
        } else {
            None
        };
        let queues: Vec<Arc<Queue>> = topic.by_broker[broker]
            .iter()
            .map(|i| topic.queues[*i].clone())
            .filter(|q| readable(q.permission()))
            .collect();
        if queues.is_empty() {
            return refuse(
                receive_status,
                code::FORBIDDEN,
                format!(
                    "topic {:?} has no readable queue on broker-{broker}",
                    topic.name
                ),
            );
        }
        let group_name: Arc<str> = group.name.as_str().into();
        let deadline = crate::duration::deadline(Instant::now(), polling);
        let mut messages = Vec::new();
        let mut dead = Vec::new();
        let polled = topic.long_poll(&self.core.shutdown, || {
            let now = Instant::now();
            let mut next_due: Option<Instant> = None;
            let start = fastrand::usize(..queues.len());
            for k in 0..queues.len() {
                let q = &queues[(start + k) % queues.len()];
                let pop = Pop {
                    group: &group_name,
                    fifo: group.fifo,
                    max_attempts: group.max_delivery_attempts,
                    max: batch - messages.len(),
                    invisible,
                    filter: &filter,
                    now,
                    renew: renew.as_ref(),
                    conn: conn.as_ref(),
                    renew_max: cfg.auto_renew_max,
                    renew_slice: cfg.auto_renew_invisible,
                    nonces: &self.core.nonces,
                };
                let mut out = PopOutcome::default();
                q.state.lock().pop(&pop, &mut out);
                for d in &out.deliveries {
                    let handed = Handed {
                        queue: q.clone(),
                        offset: d.stored.offset,
                        nonce: d.nonce,
                    };
                    messages.push((delivered(broker, &topic.name, q, d), Some(handed)));
                }
                dead.extend(out.dead);
                if let Some(due) = out.next_due {
                    next_due = Some(next_due.map_or(due, |n: Instant| n.min(due)));
                }
                if messages.len() >= batch {
                    break;
                }
            }
            if !messages.is_empty() || now >= deadline || self.core.shutdown.is_cancelled() {
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(next_due.map_or(deadline, |d| d.min(deadline)))
        });
        polled.await;
        let _ = self.to_dlq(&group.name, &topic.name, dead);
        if messages.is_empty() {
            return refuse(receive_status, code::MESSAGE_NOT_FOUND, "no new message");
        }
        let mut out = Vec::with_capacity(messages.len() + 2);
        out.push((
            proto::ReceiveMessageResponse {
                content: Some(proto::receive_message_response::Content::Status(ok())),
            },
            None,
        ));
        out.extend(messages.into_iter().map(|(m, handed)| {
            (
                proto::ReceiveMessageResponse {
                    content: Some(proto::receive_message_response::Content::Message(m)),
                },
                handed,
            )
        }));
        out.push((delivery_timestamp(), None));
        Ok(Response::new(Box::pin(Handout::new(
            topic.clone(),
            group_name,
            out,
        ))))
    }

    pub(super) async fn on_ack(
        &self,
        request: Request<proto::AckMessageRequest>,
    ) -> Result<Response<proto::AckMessageResponse>, Status> {
        let answer = |s| proto::AckMessageResponse {
            status: Some(s),
            entries: vec![],
        };
        admit_or!(self, Rpc::AckMessage, request, answer);
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), answer);
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        if req.entries.is_empty() {
            return refuse(answer, code::BAD_REQUEST, "no entries to ack");
        }
        let g: Arc<str> = group.name.as_str().into();
        let entries: Vec<_> = req
            .entries
            .into_iter()
            .map(|e| {
                // Like the proxy: a handle that does not parse is INTERNAL_SERVER_ERROR; a
                // well-formed one is OK even when it has no effect (already acked, or, for a
                // normal group, stale after a redelivery or a ChangeInvisibleDuration). A FIFO
                // group's message handed out again is refused, as RocketMQ 5.3 refuses it
                // (INVALID_RECEIPT_HANDLE): the consumer must not go on with the group's next
                // messages while the message comes back before them.
                let status = match pop::decode_handle(&e.receipt_handle) {
                    None => st(
                        code::INTERNAL_SERVER_ERROR,
                        "malformed receipt handle: parse failed",
                    ),
                    Some((b, q, off, nonce)) => match topic.queue(b, q) {
                        Some(queue) => match queue.state.lock().ack(&g, off, nonce) {
                            Err(err) if group.fifo && err.is_stale() => {
                                st(code::INVALID_RECEIPT_HANDLE, err.0)
                            }
                            Err(pop::HandleError(why)) => {
                                tracing::debug!(target: "ferrymq::broker", "ack without effect: {why}");
                                ok()
                            }
                            Ok(_) => ok(),
                        },
                        None => ok(),
                    },
                };
                proto::AckMessageResultEntry {
                    message_id: e.message_id,
                    receipt_handle: e.receipt_handle,
                    status: Some(status),
                }
            })
            .collect();
        topic.wake();
        let first = entries[0].status.clone().unwrap_or_else(ok);
        let same = entries
            .iter()
            .all(|e| e.status.as_ref().map(|s| s.code) == Some(first.code));
        let status = if same {
            first
        } else {
            st(
                code::MULTIPLE_RESULTS,
                "some entries failed; see the entries",
            )
        };
        Ok(Response::new(proto::AckMessageResponse {
            status: Some(status),
            entries,
        }))
    }

    pub(super) async fn on_change_invisible(
        &self,
        request: Request<proto::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<proto::ChangeInvisibleDurationResponse>, Status> {
        let answer = |s| proto::ChangeInvisibleDurationResponse {
            status: Some(s),
            receipt_handle: String::new(),
        };
        admit_or!(self, Rpc::ChangeInvisibleDuration, request, answer);
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), answer);
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        let invisible = match req.invisible_duration.as_ref().and_then(std_duration) {
            Some(d) if d <= self.core.config.max_invisible => d,
            _ => {
                return refuse(
                    answer,
                    code::ILLEGAL_INVISIBLE_TIME,
                    format!(
                        "invisible_duration is required, at most {} s",
                        self.core.config.max_invisible.as_secs()
                    ),
                )
            }
        };
        let g: Arc<str> = group.name.as_str().into();
        // Like the proxy: a handle that does not parse is INTERNAL_SERVER_ERROR; a well-formed
        // one always gets OK and a new handle. (The proxy then writes a new checkpoint, so a stale
        // or acked message may come back; here a stale handle gets a new handle without effect.)
        let Some((b, q, off, nonce)) = pop::decode_handle(&req.receipt_handle) else {
            return refuse(
                answer,
                code::INTERNAL_SERVER_ERROR,
                "malformed receipt handle: parse failed",
            );
        };
        let changed = topic.queue(b, q).map(|queue| {
            queue.state.lock().change_invisible(
                &g,
                off,
                nonce,
                invisible,
                Instant::now(),
                &self.core.nonces,
            )
        });
        let handle = match changed {
            Some(Ok(n)) => pop::encode_handle(b, q, off, n),
            Some(Err(pop::HandleError(why))) => {
                tracing::debug!(target: "ferrymq::broker", "change invisible duration without effect: {why}");
                pop::encode_handle(b, q, off, self.core.nonces.fetch_add(1, Ordering::Relaxed))
            }
            None => pop::encode_handle(b, q, off, self.core.nonces.fetch_add(1, Ordering::Relaxed)),
        };
        topic.wake();
        Ok(Response::new(proto::ChangeInvisibleDurationResponse {
            status: Some(ok()),
            receipt_handle: handle,
        }))
    }

    pub(super) async fn on_forward_to_dlq(
        &self,
        request: Request<proto::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<proto::ForwardMessageToDeadLetterQueueResponse>, Status> {
        let answer = |s| proto::ForwardMessageToDeadLetterQueueResponse { status: Some(s) };
        admit_or!(self, Rpc::ForwardMessageToDeadLetterQueue, request, answer);
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), answer);
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        let g: Arc<str> = group.name.as_str().into();
        let result = pop::decode_handle(&req.receipt_handle)
            .ok_or_else(|| pop::HandleError("malformed receipt handle".into()))
            .and_then(|(b, q, off, nonce)| {
                let queue = topic
                    .queue(b, q)
                    .ok_or_else(|| pop::HandleError("no such queue".into()))?;
                let r = queue.state.lock().dead_letter(&g, off, nonce);
                r
            });
        let (stored, attempts) = check!(
            result.map_err(|pop::HandleError(why)| st(code::INVALID_RECEIPT_HANDLE, why)),
            answer
        );
        let dead = vec![pop::DeadLetter { stored, attempts }];
        check!(self.to_dlq(&group.name, &topic.name, dead), answer);
        topic.wake();
        Ok(Response::new(answer(ok())))
    }
}

/// The copy of a message of `topic` stored in a DLQ topic.
fn dlq_copy(dlq: &Topic, topic: &str, s: &Stored) -> proto::Message {
    // Queue id and offset are the DLQ's, given when the copy is stored.
    let mut m = s.to_message(&dlq.name, 0);
    if let Some(sp) = m.system_properties.as_mut() {
        sp.dead_letter_queue = Some(proto::DeadLetterQueue {
            topic: topic.to_string(),
            message_id: sp.message_id.clone(),
        });
    }
    m
}

/// The message handed to a consumer for one delivery.
/// The proxy does not tell the invisible duration in delivered messages.
fn delivered(broker: usize, topic: &str, q: &Queue, d: &pop::Delivery) -> proto::Message {
    let mut m = d.stored.to_message(topic, q.id);
    let sp = m.system_properties.get_or_insert_with(Default::default);
    sp.receipt_handle = Some(pop::encode_handle(broker, q.id, d.stored.offset, d.nonce));
    sp.delivery_attempt = Some(d.attempt as i32);
    m
}
