//! `apache.rocketmq.v2.MessagingService` served by one endpoint.
//!
//! Every call goes through [`EndpointService::admit`]: count the call, apply the endpoint's
//! faults (latency, injected status), require `x-mq-client-id`, and check the signature when the
//! broker has credentials. Errors are answered the way the proxy answers them: a `Status` in the
//! response (gRPC status OK), never a gRPC error, except for transport-level faults.
//!
//! This module wires the service (server, routes, offsets, transactions, telemetry); SendMessage
//! is answered in [`super::service_send`], the receive side in [`super::service_receive`], and
//! what every handler shares is in [`super::service_wire`].

use std::ops::ControlFlow;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

use super::endpoint::{Core, Endpoint};
use super::fault::{FaultIo, Rpc};
use super::pop::Filter;
use super::route;
use super::serve;
use super::service_wire::{
    admit_or, check, grpc_timeout, namespace, ok, once, pull_status, refuse, resource_name, st,
    BoxStream, EndpointService, MAX_BATCH,
};
use super::store::{self, std_duration, valid_resource_name};
use super::telemetry::{merge_settings, TelemetryItem, TelemetryReply};
use super::transaction::Half;
use crate::proto;
use crate::proto::messaging_service_server::MessagingService;
use crate::status as code;

/// Start serving `ep` on the connections its accept loop hands over.
pub(crate) fn spawn_server(
    core: Arc<Core>,
    ep: Arc<Endpoint>,
    conns: mpsc::Receiver<FaultIo>,
) -> JoinHandle<()> {
    let shutdown = core.shutdown.clone();
    serve::spawn(Arc::new(EndpointService { core, ep }), conns, shutdown)
}

/// Ask a producer of the half message's topic to resolve it.
pub(crate) fn check_back(core: &Core, tx_id: &str, half: &Half) {
    let topic = half.topic.name.to_string();
    let mut order: Vec<usize> = (0..core.endpoints.len()).collect();
    order.sort_by_key(|i| *i != half.endpoint);
    for i in order {
        let ep = &core.endpoints[i];
        for client in ep.clients.producers_of(&topic, &half.producer) {
            if ep
                .clients
                .push(
                    &client,
                    super::transaction::recover_command(tx_id, &half.msg),
                )
                .is_ok()
            {
                core.txs.checks.fetch_add(1, Ordering::Relaxed);
                return;
            }
        }
    }
    tracing::debug!(target: "ferrymq::broker", "no producer of {topic} online to check transaction {tx_id}");
}

#[tonic::async_trait]
impl MessagingService for EndpointService {
    async fn query_route(
        &self,
        request: Request<proto::QueryRouteRequest>,
    ) -> Result<Response<proto::QueryRouteResponse>, Status> {
        let answer = |s| proto::QueryRouteResponse {
            status: Some(s),
            message_queues: vec![],
        };
        admit_or!(self, Rpc::QueryRoute, request, answer);
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        Ok(Response::new(proto::QueryRouteResponse {
            status: Some(ok()),
            message_queues: route::route(&self.core, &topic, namespace(req.topic.as_ref())),
        }))
    }

    async fn heartbeat(
        &self,
        request: Request<proto::HeartbeatRequest>,
    ) -> Result<Response<proto::HeartbeatResponse>, Status> {
        let answer = |s| proto::HeartbeatResponse { status: Some(s) };
        let client_id = admit_or!(self, Rpc::Heartbeat, request, answer);
        let req = request.into_inner();
        if !self.ep.clients.heartbeat(&client_id) {
            check!(self.require_settings(&client_id), answer);
        }
        let consumer = !matches!(
            proto::ClientType::try_from(req.client_type),
            Ok(proto::ClientType::Producer | proto::ClientType::Unspecified)
        );
        if consumer && !resource_name(req.group.as_ref()).is_empty() {
            check!(self.group(req.group.as_ref()), answer);
        }
        Ok(Response::new(answer(ok())))
    }

    async fn send_message(
        &self,
        request: Request<proto::SendMessageRequest>,
    ) -> Result<Response<proto::SendMessageResponse>, Status> {
        self.on_send(request).await
    }

    async fn query_assignment(
        &self,
        request: Request<proto::QueryAssignmentRequest>,
    ) -> Result<Response<proto::QueryAssignmentResponse>, Status> {
        let answer = |s| proto::QueryAssignmentResponse {
            status: Some(s),
            assignments: vec![],
        };
        admit_or!(self, Rpc::QueryAssignment, request, answer);
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        check!(self.group(req.group.as_ref()), answer);
        Ok(Response::new(proto::QueryAssignmentResponse {
            status: Some(ok()),
            assignments: route::assignments(&self.core, &topic, namespace(req.topic.as_ref())),
        }))
    }

    type ReceiveMessageStream = BoxStream<proto::ReceiveMessageResponse>;

    async fn receive_message(
        &self,
        request: Request<proto::ReceiveMessageRequest>,
    ) -> Result<Response<Self::ReceiveMessageStream>, Status> {
        self.on_receive(request).await
    }

    async fn ack_message(
        &self,
        request: Request<proto::AckMessageRequest>,
    ) -> Result<Response<proto::AckMessageResponse>, Status> {
        self.on_ack(request).await
    }

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<proto::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<proto::ForwardMessageToDeadLetterQueueResponse>, Status> {
        self.on_forward_to_dlq(request).await
    }

    type PullMessageStream = BoxStream<proto::PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<proto::PullMessageRequest>,
    ) -> Result<Response<Self::PullMessageStream>, Status> {
        let refused = |s| pull_status(s, None);
        admit_or!(self, Rpc::PullMessage, request, refused);
        let remaining = grpc_timeout(request.metadata());
        let req = request.into_inner();
        check!(self.group(req.group.as_ref()), refused);
        let (topic, queue) = check!(self.queue_of(req.message_queue.as_ref()), refused);
        let filter = check!(
            Filter::parse(req.filter_expression.as_ref()).map_err(|(c, m)| st(c, m)),
            refused
        );
        if req.batch_size <= 0 {
            return refuse(refused, code::BAD_REQUEST, "batch_size must be positive");
        }
        let batch = (req.batch_size as usize).min(MAX_BATCH);
        let mut wait = req
            .long_polling_timeout
            .as_ref()
            .and_then(std_duration)
            .unwrap_or_default()
            .min(self.core.config.long_polling_max);
        if let Some(r) = remaining {
            wait = wait.min(r.saturating_sub(Duration::from_millis(200)));
        }
        let deadline = crate::duration::deadline(Instant::now(), wait);
        let answer = topic.long_poll(&self.core.shutdown, || {
            let st_ = queue.state.lock();
            let (base, end) = (st_.base, st_.end());
            if req.offset < 0 || (req.offset as u64) < base || req.offset as u64 > end {
                let hint = if req.offset < 0 || (req.offset as u64) < base {
                    base
                } else {
                    end
                };
                return ControlFlow::Break(pull_status(
                    st(
                        code::ILLEGAL_OFFSET,
                        format!("offset {} is outside [{base}, {end}]", req.offset),
                    ),
                    Some(hint as i64),
                ));
            }
            let mut found = Vec::new();
            let mut next = req.offset as u64;
            while next < end && found.len() < batch {
                let m = st_.get(next).expect("in range");
                if filter.matches(m) {
                    found.push(m.clone());
                }
                next += 1;
            }
            drop(st_);
            if found.is_empty()
                && next == req.offset as u64
                && Instant::now() < deadline
                && !self.core.shutdown.is_cancelled()
            {
                return ControlFlow::Continue(deadline);
            }
            let status = if found.is_empty() {
                st(code::MESSAGE_NOT_FOUND, "no new message")
            } else {
                ok()
            };
            let mut out = Vec::with_capacity(found.len() + 2);
            out.push(proto::PullMessageResponse {
                content: Some(proto::pull_message_response::Content::Status(status)),
            });
            out.extend(found.into_iter().map(|m| proto::PullMessageResponse {
                content: Some(proto::pull_message_response::Content::Message(
                    m.to_message(&topic.name, queue.id),
                )),
            }));
            out.push(proto::PullMessageResponse {
                content: Some(proto::pull_message_response::Content::NextOffset(
                    next as i64,
                )),
            });
            ControlFlow::Break(once(out))
        });
        Ok(Response::new(answer.await))
    }

    async fn update_offset(
        &self,
        request: Request<proto::UpdateOffsetRequest>,
    ) -> Result<Response<proto::UpdateOffsetResponse>, Status> {
        let answer = |s| proto::UpdateOffsetResponse { status: Some(s) };
        admit_or!(self, Rpc::UpdateOffset, request, answer);
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), answer);
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), answer);
        let mut q = queue.state.lock();
        if req.offset < 0 || req.offset as u64 > q.end() {
            let end = q.end();
            return refuse(
                answer,
                code::ILLEGAL_OFFSET,
                format!("offset {} is outside [0, {end}]", req.offset),
            );
        }
        q.offsets.insert(group.name.clone(), req.offset);
        Ok(Response::new(answer(ok())))
    }

    async fn get_offset(
        &self,
        request: Request<proto::GetOffsetRequest>,
    ) -> Result<Response<proto::GetOffsetResponse>, Status> {
        let answer = |s| proto::GetOffsetResponse {
            status: Some(s),
            offset: 0,
        };
        admit_or!(self, Rpc::GetOffset, request, answer);
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), answer);
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), answer);
        let offset = queue.state.lock().offsets.get(&group.name).copied();
        Ok(Response::new(match offset {
            Some(o) => proto::GetOffsetResponse {
                status: Some(ok()),
                offset: o,
            },
            None => answer(st(
                code::OFFSET_NOT_FOUND,
                format!("group {:?} committed no offset on this queue", group.name),
            )),
        }))
    }

    async fn query_offset(
        &self,
        request: Request<proto::QueryOffsetRequest>,
    ) -> Result<Response<proto::QueryOffsetResponse>, Status> {
        let answer = |s| proto::QueryOffsetResponse {
            status: Some(s),
            offset: 0,
        };
        admit_or!(self, Rpc::QueryOffset, request, answer);
        let req = request.into_inner();
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), answer);
        let q = queue.state.lock();
        let offset = match proto::QueryOffsetPolicy::try_from(req.query_offset_policy) {
            Ok(proto::QueryOffsetPolicy::Beginning) => q.base,
            Ok(proto::QueryOffsetPolicy::End) => q.end(),
            Ok(proto::QueryOffsetPolicy::Timestamp) => {
                let Some(ts) = req.timestamp.as_ref() else {
                    return refuse(
                        answer,
                        code::BAD_REQUEST,
                        "the TIMESTAMP policy needs a timestamp",
                    );
                };
                let ms = store::ms_of(ts);
                let i = q.messages.partition_point(|m| m.store_ms < ms);
                q.base + i as u64
            }
            Err(_) => {
                return refuse(
                    answer,
                    code::BAD_REQUEST,
                    format!("unknown query_offset_policy {}", req.query_offset_policy),
                )
            }
        };
        Ok(Response::new(proto::QueryOffsetResponse {
            status: Some(ok()),
            offset: offset as i64,
        }))
    }

    async fn end_transaction(
        &self,
        request: Request<proto::EndTransactionRequest>,
    ) -> Result<Response<proto::EndTransactionResponse>, Status> {
        let answer = |s| proto::EndTransactionResponse { status: Some(s) };
        admit_or!(self, Rpc::EndTransaction, request, answer);
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        let resolution = proto::TransactionResolution::try_from(req.resolution)
            .unwrap_or(proto::TransactionResolution::Unspecified);
        if resolution == proto::TransactionResolution::Unspecified {
            // An "unknown" answer: the half message stays and is checked again later.
            return Ok(Response::new(answer(ok())));
        }
        let Some(half) = self.core.txs.take(&req.transaction_id, &req.message_id) else {
            return refuse(
                answer,
                code::INVALID_TRANSACTION_ID,
                format!(
                    "no pending transaction {:?} for message {:?}",
                    req.transaction_id, req.message_id
                ),
            );
        };
        if half.topic.name != topic.name {
            self.core.txs.add_back(req.transaction_id.clone(), half);
            return refuse(
                answer,
                code::ILLEGAL_TOPIC,
                "the transaction belongs to another topic",
            );
        }
        if resolution == proto::TransactionResolution::Commit {
            self.core
                .store
                .append_reserved(&half.topic, &half.queue, vec![half.msg]);
            self.core.txs.committed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.core
                .store
                .release(&half.topic, store::accounted_size(&half.msg));
            self.core.txs.rolled_back.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Response::new(answer(ok())))
    }

    type TelemetryStream = BoxStream<proto::TelemetryCommand>;

    async fn telemetry(
        &self,
        request: Request<Streaming<proto::TelemetryCommand>>,
    ) -> Result<Response<Self::TelemetryStream>, Status> {
        let (tx, rx) = mpsc::channel::<TelemetryItem>(64);
        let client_id = match self.admit(Rpc::Telemetry, request.metadata()).await {
            Ok(id) => id,
            Err(s) => {
                let _ = tx.try_send(Ok(proto::TelemetryCommand {
                    status: Some(s),
                    command: None,
                }));
                return Ok(Response::new(Box::pin(ReceiverStream::new(rx))));
            }
        };
        let mut inbound = request.into_inner();
        let (sid, token) = self.ep.clients.open_stream();
        let core = self.core.clone();
        let ep = self.ep.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = token.cancelled() => {
                        let _ = tx.send(Err(Status::unavailable(
                            "telemetry stream dropped by the broker",
                        ))).await;
                        break;
                    }
                    () = core.shutdown.cancelled() => break,
                    m = inbound.message() => match m {
                        Ok(Some(cmd)) => on_telemetry(&core, &ep, &client_id, sid, &tx, cmd).await,
                        Ok(None) | Err(_) => break,
                    },
                }
            }
            ep.clients.close_stream(sid);
        });
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }

    async fn notify_client_termination(
        &self,
        request: Request<proto::NotifyClientTerminationRequest>,
    ) -> Result<Response<proto::NotifyClientTerminationResponse>, Status> {
        let answer = |s| proto::NotifyClientTerminationResponse { status: Some(s) };
        let client_id = admit_or!(self, Rpc::NotifyClientTermination, request, answer);
        let req = request.into_inner();
        if let Some(g) = req.group.as_ref().filter(|g| !g.name.is_empty()) {
            if !valid_resource_name(&g.name) {
                return refuse(
                    answer,
                    code::ILLEGAL_CONSUMER_GROUP,
                    format!("illegal consumer group name {:?}", g.name),
                );
            }
        }
        if !self.ep.clients.remove(&client_id) {
            check!(self.require_settings(&client_id), answer);
        }
        Ok(Response::new(answer(ok())))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<proto::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<proto::ChangeInvisibleDurationResponse>, Status> {
        self.on_change_invisible(request).await
    }

    async fn recall_message(
        &self,
        request: Request<proto::RecallMessageRequest>,
    ) -> Result<Response<proto::RecallMessageResponse>, Status> {
        let answer = |s| proto::RecallMessageResponse {
            status: Some(s),
            message_id: String::new(),
        };
        admit_or!(self, Rpc::RecallMessage, request, answer);
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), answer);
        if !super::timer::is_recall_handle(&req.recall_handle) {
            return refuse(answer, code::BAD_REQUEST, "malformed recall handle");
        }
        match self.core.timer.recall(&req.recall_handle, &topic.name) {
            Some(d) => {
                self.core
                    .store
                    .release(&d.topic, store::accounted_size(&d.msg));
                Ok(Response::new(proto::RecallMessageResponse {
                    status: Some(ok()),
                    message_id: d
                        .msg
                        .system_properties
                        .map_or(String::new(), |s| s.message_id),
                }))
            }
            None => refuse(
                answer,
                40400,
                "no pending delay message for this recall handle (already delivered or recalled)",
            ),
        }
    }

    async fn sync_lite_subscription(
        &self,
        request: Request<proto::SyncLiteSubscriptionRequest>,
    ) -> Result<Response<proto::SyncLiteSubscriptionResponse>, Status> {
        let answer = |s| proto::SyncLiteSubscriptionResponse { status: Some(s) };
        admit_or!(self, Rpc::SyncLiteSubscription, request, answer);
        refuse(
            answer,
            code::NOT_IMPLEMENTED,
            "lite topics are not supported by the embedded broker",
        )
    }
}

/// Handle one command a client sent on Telemetry.
async fn on_telemetry(
    core: &Core,
    ep: &Endpoint,
    client_id: &str,
    stream: u64,
    tx: &mpsc::Sender<TelemetryItem>,
    cmd: proto::TelemetryCommand,
) {
    use proto::telemetry_command::Command;
    match cmd.command {
        Some(Command::Settings(settings)) => {
            let group = match &settings.pub_sub {
                Some(proto::settings::PubSub::Subscription(s)) => s
                    .group
                    .as_ref()
                    .and_then(|g| core.store.group_or_create(&g.name, &core.config)),
                _ => None,
            };
            let mut merged = merge_settings(&settings, group.as_deref(), &core.config);
            core.live.apply(&mut merged);
            ep.clients
                .store_settings(client_id, settings, merged.clone(), stream, tx.clone());
            let _ = tx
                .send(Ok(proto::TelemetryCommand {
                    status: Some(ok()),
                    command: Some(Command::Settings(merged)),
                }))
                .await;
        }
        Some(Command::ThreadStackTrace(t)) => core.replies.push(TelemetryReply {
            endpoint: ep.index,
            client_id: client_id.to_string(),
            kind: "thread_stack_trace",
            nonce: t.nonce,
            code: cmd.status.as_ref().map_or(0, |s| s.code),
            detail: t.thread_stack_trace.unwrap_or_default(),
        }),
        Some(Command::VerifyMessageResult(v)) => core.replies.push(TelemetryReply {
            endpoint: ep.index,
            client_id: client_id.to_string(),
            kind: "verify_message_result",
            nonce: v.nonce,
            code: cmd.status.as_ref().map_or(0, |s| s.code),
            detail: cmd.status.map(|s| s.message).unwrap_or_default(),
        }),
        _ => {}
    }
}
