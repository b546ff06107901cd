//! `apache.rocketmq.v2.MessagingService` served by one endpoint.
//!
//! Every call goes through [`EndpointService::admit`]: count the call, apply the endpoint's
//! faults (latency, injected status), require `x-mq-client-id`, and check the signature when the
//! broker has credentials. Errors are answered the way the proxy answers them: a `Status` in the
//! response (gRPC status OK), never a gRPC error, except for transport-level faults.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::Stream;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tokio_stream::StreamExt;
use tonic::metadata::MetadataMap;
use tonic::{Request, Response, Status, Streaming};

use super::endpoint::{Core, Endpoint};
use super::fault::{FaultIo, Rpc};
use super::handout::{Handed, Handout};
use super::pop::{self, Filter, Pop, PopOutcome};
use super::store::{
    self, kind_to_proto, now_ms, readable, std_duration, valid_resource_name, GroupConfig, Queue,
    Stored, Topic,
};
use super::telemetry::{merge_settings, TelemetryItem, TelemetryReply};
use super::transaction::Half;
use super::{auth, route, send};
use crate::message::MessageKind;
use crate::proto;
use crate::proto::messaging_service_server::{MessagingService, MessagingServiceServer};
use crate::status as code;

type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Largest request the server decodes (a batch of big messages).
const MAX_DECODE: usize = 256 * 1024 * 1024;
/// Largest receive/pull batch served in one call.
const MAX_BATCH: usize = 1024;
/// `MESSAGE_CORRUPTED`: what the proxy answers a SendMessage without messages.
const MESSAGE_CORRUPTED: i32 = 40016;

/// Start serving `ep` on the connections its accept loop hands over.
pub(crate) fn spawn_server(
    core: Arc<Core>,
    ep: Arc<Endpoint>,
    conns: mpsc::Receiver<FaultIo>,
) -> JoinHandle<()> {
    let shutdown = core.shutdown.clone();
    let svc = MessagingServiceServer::new(EndpointService { core, ep })
        .max_decoding_message_size(MAX_DECODE)
        .max_encoding_message_size(usize::MAX);
    let incoming = ReceiverStream::new(conns).map(Ok::<_, std::io::Error>);
    tokio::spawn(async move {
        // The one service is served directly, without a router: a router would match every
        // request's path to pick a service, and box the service and its response future.
        // Unknown methods are answered UNIMPLEMENTED by the service itself.
        let result = tonic::transport::Server::builder()
            .initial_connection_window_size(Some(16 * 1024 * 1024))
            .initial_stream_window_size(Some(8 * 1024 * 1024))
            .serve_with_incoming_shutdown(svc, incoming, shutdown.cancelled_owned())
            .await;
        if let Err(e) = result {
            tracing::warn!(target: "ferrymq::broker", "server stopped: {e}");
        }
    })
}

/// A `Status` message.
fn st(c: i32, message: impl Into<String>) -> proto::Status {
    proto::Status {
        code: c,
        message: message.into(),
    }
}

fn ok() -> proto::Status {
    st(code::OK, "OK")
}

/// The remaining time of the call, from its `grpc-timeout` header.
fn grpc_timeout(md: &MetadataMap) -> Option<Duration> {
    let v = md.get("grpc-timeout")?.to_str().ok()?;
    if v.len() < 2 {
        return None;
    }
    let (n, unit) = v.split_at(v.len() - 1);
    let n: u64 = n.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.saturating_mul(3600)),
        "M" => Duration::from_secs(n.saturating_mul(60)),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

fn resource_name(r: Option<&proto::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

fn namespace(r: Option<&proto::Resource>) -> &str {
    r.map_or("", |r| r.resource_namespace.as_str())
}

/// Decrements a topic's waiter count when a long poll ends.
pub(crate) struct Waiting<'a>(&'a Topic);

impl<'a> Waiting<'a> {
    pub(crate) fn new(t: &'a Topic) -> Self {
        t.waiters.fetch_add(1, Ordering::SeqCst);
        Self(t)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The service of one endpoint.
#[derive(Debug, Clone)]
pub(crate) struct EndpointService {
    core: Arc<Core>,
    ep: Arc<Endpoint>,
}

impl EndpointService {
    /// Count, apply faults, check headers. Returns the client id.
    async fn admit(&self, rpc: Rpc, md: &MetadataMap) -> Result<String, proto::Status> {
        self.ep.calls[rpc.index()].fetch_add(1, Ordering::Relaxed);
        if self.ep.faults.active() {
            let (latency, status) = self.ep.faults.check(rpc);
            if let Some(d) = latency {
                tokio::time::sleep(d).await;
            }
            if let Some((c, m)) = status {
                return Err(st(c, m));
            }
        }
        let client_id = auth::client_id(md).map_err(|(c, m)| st(c, m))?;
        if let Some(creds) = &self.core.config.credentials {
            if !matches!(rpc, Rpc::QueryRoute | Rpc::QueryAssignment) {
                auth::authorize(md, creds).map_err(|(c, m)| st(c, m))?;
            }
        }
        Ok(client_id)
    }

    fn topic(&self, r: Option<&proto::Resource>) -> Result<Arc<Topic>, proto::Status> {
        let name = resource_name(r);
        if !valid_resource_name(name) {
            return Err(st(
                code::ILLEGAL_TOPIC,
                format!("illegal topic name {name:?}"),
            ));
        }
        self.core
            .store
            .topic_or_create(name, &self.core.config)
            .ok_or_else(|| st(code::TOPIC_NOT_FOUND, format!("topic {name:?} not found")))
    }

    fn group(&self, r: Option<&proto::Resource>) -> Result<Arc<GroupConfig>, proto::Status> {
        let name = resource_name(r);
        if !valid_resource_name(name) {
            return Err(st(
                code::ILLEGAL_CONSUMER_GROUP,
                format!("illegal consumer group name {name:?}"),
            ));
        }
        self.core
            .store
            .group_or_create(name, &self.core.config)
            .ok_or_else(|| {
                st(
                    code::CONSUMER_GROUP_NOT_FOUND,
                    format!("consumer group {name:?} not found"),
                )
            })
    }

    fn require_settings(&self, client_id: &str) -> Result<(), proto::Status> {
        if self.ep.clients.known(client_id) {
            Ok(())
        } else {
            Err(st(
                code::UNRECOGNIZED_CLIENT_TYPE,
                "cannot find client settings for this client id: send Settings on the Telemetry \
                 stream of this endpoint first",
            ))
        }
    }

    /// The endpoint index named by a message queue's broker (this endpoint when absent).
    fn broker_of(&self, mq: Option<&proto::MessageQueue>) -> Result<usize, proto::Status> {
        match mq.and_then(|q| q.broker.as_ref()).map(|b| b.name.as_str()) {
            None | Some("") => Ok(self.ep.index),
            Some(name) => self
                .core
                .broker_index(name)
                .ok_or_else(|| st(code::BAD_REQUEST, format!("unknown broker {name:?}"))),
        }
    }

    /// The topic and queue a message queue names.
    fn queue_of(
        &self,
        mq: Option<&proto::MessageQueue>,
    ) -> Result<(Arc<Topic>, Arc<Queue>), proto::Status> {
        let topic = self.topic(mq.and_then(|q| q.topic.as_ref()))?;
        let broker = self.broker_of(mq)?;
        let id = mq.map_or(-1, |q| q.id);
        let q = topic.queue(broker, id).cloned().ok_or_else(|| {
            st(
                code::BAD_REQUEST,
                format!(
                    "topic {:?} has no queue {id} on broker-{broker}",
                    topic.name
                ),
            )
        })?;
        Ok((topic, q))
    }

    /// The long-polling time of a receive, clamped as the proxy does.
    fn polling_time(
        &self,
        requested: Option<&prost_types::Duration>,
        md: &MetadataMap,
    ) -> Result<Duration, proto::Status> {
        let cfg = &self.core.config;
        let remaining = grpc_timeout(md);
        let mut t = match requested.and_then(std_duration) {
            Some(d) => d,
            None => remaining.map_or(cfg.long_polling_max, |r| {
                r.saturating_sub(Duration::from_millis(500))
            }),
        };
        t = t.clamp(cfg.long_polling_min, cfg.long_polling_max);
        if let Some(r) = remaining {
            if t > r {
                if r >= cfg.long_polling_min {
                    t = r;
                } else {
                    // The proxy answers ILLEGAL_POLLING_TIME only to clients that know it: a
                    // version string >= "5.0.3" (compared as Java compares strings, so "5.0.10"
                    // is older); BAD_REQUEST to the others and when there is no version.
                    let version = md
                        .get("x-mq-client-version")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("");
                    let c = if version < "5.0.3" {
                        code::BAD_REQUEST
                    } else {
                        code::ILLEGAL_POLLING_TIME
                    };
                    return Err(st(
                        c,
                        format!(
                            "the call deadline ({} ms) is shorter than the minimum long-polling time ({} ms)",
                            r.as_millis(),
                            cfg.long_polling_min.as_millis()
                        ),
                    ));
                }
            }
        }
        Ok(t)
    }

    /// Move dead letters of `group` to its DLQ topic.
    fn to_dlq(
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

fn once<T: Send + 'static>(items: Vec<T>) -> BoxStream<T> {
    Box::pin(tokio_stream::iter(items.into_iter().map(Ok)))
}

/// The element that ends every receive stream of the proxy: the time of the answer.
fn delivery_timestamp() -> proto::ReceiveMessageResponse {
    proto::ReceiveMessageResponse {
        content: Some(proto::receive_message_response::Content::DeliveryTimestamp(
            store::timestamp_ms(now_ms()),
        )),
    }
}

/// A receive answer without messages: the status, then the delivery timestamp.
fn receive_status(s: proto::Status) -> BoxStream<proto::ReceiveMessageResponse> {
    once(vec![
        proto::ReceiveMessageResponse {
            content: Some(proto::receive_message_response::Content::Status(s)),
        },
        delivery_timestamp(),
    ])
}

fn pull_status(s: proto::Status, next: Option<i64>) -> BoxStream<proto::PullMessageResponse> {
    let mut v = vec![proto::PullMessageResponse {
        content: Some(proto::pull_message_response::Content::Status(s)),
    }];
    if let Some(n) = next {
        v.push(proto::PullMessageResponse {
            content: Some(proto::pull_message_response::Content::NextOffset(n)),
        });
    }
    once(v)
}

macro_rules! admit_or {
    ($self:ident, $rpc:expr, $req:ident, |$s:ident| $answer:expr) => {
        match $self.admit($rpc, $req.metadata()).await {
            Ok(id) => id,
            Err($s) => return Ok(Response::new($answer)),
        }
    };
}

macro_rules! check {
    ($e:expr, |$s:ident| $answer:expr) => {
        match $e {
            Ok(v) => v,
            Err($s) => return Ok(Response::new($answer)),
        }
    };
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
        admit_or!(self, Rpc::QueryRoute, request, |s| answer(s));
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
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
        let client_id = admit_or!(self, Rpc::Heartbeat, request, |s| answer(s));
        let req = request.into_inner();
        if !self.ep.clients.heartbeat(&client_id) {
            check!(self.require_settings(&client_id), |s| answer(s));
        }
        let consumer = !matches!(
            proto::ClientType::try_from(req.client_type),
            Ok(proto::ClientType::Producer | proto::ClientType::Unspecified)
        );
        if consumer && !resource_name(req.group.as_ref()).is_empty() {
            check!(self.group(req.group.as_ref()), |s| answer(s));
        }
        Ok(Response::new(answer(ok())))
    }

    async fn send_message(
        &self,
        request: Request<proto::SendMessageRequest>,
    ) -> Result<Response<proto::SendMessageResponse>, Status> {
        // A refused send carries no entries, only the status (as the proxy answers).
        let fail =
            |s: proto::Status, _n: usize, _msgs: &[proto::Message]| proto::SendMessageResponse {
                status: Some(s),
                entries: Vec::new(),
            };
        let client_id = match self.admit(Rpc::SendMessage, request.metadata()).await {
            Ok(id) => id,
            Err(s) => {
                let msgs = &request.get_ref().messages;
                return Ok(Response::new(fail(s, msgs.len(), msgs)));
            }
        };
        let mut msgs = request.into_inner().messages;
        let n = msgs.len();
        if n == 0 {
            return Ok(Response::new(fail(
                st(MESSAGE_CORRUPTED, "no message to send"),
                0,
                &[],
            )));
        }
        let topic_res = msgs[0].topic.clone();
        if msgs
            .iter()
            .any(|m| resource_name(m.topic.as_ref()) != resource_name(topic_res.as_ref()))
        {
            return Ok(Response::new(fail(
                st(
                    code::ILLEGAL_TOPIC,
                    "every message of a batch must have the same topic",
                ),
                n,
                &msgs,
            )));
        }
        let topic = match self.topic(topic_res.as_ref()) {
            Ok(t) => t,
            // The proxy checks the message type against the topic's before anything else, and an
            // unknown topic has type UNSPECIFIED.
            Err(s) if s.code == code::TOPIC_NOT_FOUND => {
                return Ok(Response::new(fail(
                    st(
                        code::MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                        format!(
                            "topic {:?} not found: TopicMessageType validate failed, the expected \
                             type is UNSPECIFIED",
                            resource_name(topic_res.as_ref())
                        ),
                    ),
                    n,
                    &msgs,
                )))
            }
            Err(s) => return Ok(Response::new(fail(s, n, &msgs))),
        };
        let now = now_ms();
        let mut kinds = Vec::with_capacity(n);
        let max_body_size = self.core.live.max_body_size();
        for m in &msgs {
            match send::validate(&self.core.config, max_body_size, &topic, m, now) {
                Ok(k) => kinds.push(k),
                Err(s) => return Ok(Response::new(fail(s, n, &msgs))),
            }
        }
        let Some(queue) = send::pick_queue(&topic, self.ep.index, &msgs[0]) else {
            return Ok(Response::new(fail(
                st(
                    code::FORBIDDEN,
                    format!(
                        "topic {:?} has no writable queue on this endpoint",
                        topic.name
                    ),
                ),
                n,
                &msgs,
            )));
        };
        // Bodies decode as slices of tonic's receive buffer; the store copies each into the
        // message's record, so no stored message keeps a request's buffer alive.
        for (m, k) in msgs.iter_mut().zip(&kinds) {
            let digest = send::body_digest(&m.body);
            if let Some(sp) = m.system_properties.as_mut() {
                sp.message_type = kind_to_proto(*k) as i32;
                sp.store_host.clone_from(&self.ep.addr_str);
                sp.body_digest = Some(digest);
                sp.receipt_handle = None;
                sp.delivery_attempt = None;
            }
        }
        let entry = |id: String, offset: i64, tx: String, recall: String| proto::SendResultEntry {
            status: Some(ok()),
            message_id: id,
            transaction_id: tx,
            offset,
            recall_handle: recall,
        };
        let id_of = |m: &proto::Message| {
            m.system_properties
                .as_ref()
                .map_or(String::new(), |s| s.message_id.clone())
        };
        let mut entries = Vec::with_capacity(n);
        if kinds
            .iter()
            .all(|k| *k != MessageKind::Transaction && *k != MessageKind::Delay)
        {
            // The proxy stores a multi-message SendMessage as one RocketMQ batch: every message
            // takes the first one's id, tag, keys and properties (only the bodies differ), and
            // the answer has ONE entry: a new broker-made id, the first message's id as
            // transaction_id and the first offset. Pinned by tests/test_conformance.py.
            if n > 1 {
                let head_sp = msgs[0].system_properties.clone();
                let head_props = msgs[0].user_properties.clone();
                for m in msgs.iter_mut().skip(1) {
                    let digest = m
                        .system_properties
                        .as_ref()
                        .and_then(|sp| sp.body_digest.clone());
                    m.system_properties.clone_from(&head_sp);
                    if let Some(sp) = m.system_properties.as_mut() {
                        sp.body_digest = digest;
                    }
                    m.user_properties.clone_from(&head_props);
                }
            }
            let ids: Vec<String> = msgs.iter().map(id_of).collect();
            let first = match self
                .core
                .store
                .append(&topic, &queue, msgs, &self.core.config)
            {
                Ok(o) => o,
                Err(e) => return Ok(Response::new(fail(st(e.code, e.message), n, &[]))),
            };
            if n > 1 {
                entries.push(entry(
                    crate::message_id::generate(),
                    first as i64,
                    ids.into_iter().next().unwrap_or_default(),
                    String::new(),
                ));
            } else {
                for (i, id) in ids.into_iter().enumerate() {
                    entries.push(entry(
                        id,
                        (first + i as u64) as i64,
                        String::new(),
                        String::new(),
                    ));
                }
            }
        } else {
            for (mut m, k) in msgs.into_iter().zip(kinds) {
                let id = id_of(&m);
                if matches!(k, MessageKind::Transaction | MessageKind::Delay) {
                    // Held until committed or due: a body of its own, not a slice that would
                    // keep the whole request buffer alive meanwhile.
                    m.body = bytes::Bytes::copy_from_slice(&m.body);
                    // Held messages count against the topic's bound from now on.
                    let size = store::accounted_size(&m);
                    if let Err(e) = self.core.store.reserve(&topic, size, &self.core.config) {
                        entries.push(proto::SendResultEntry {
                            status: Some(st(e.code, e.message)),
                            message_id: id,
                            ..Default::default()
                        });
                        continue;
                    }
                }
                match k {
                    MessageKind::Transaction => {
                        let now_i = Instant::now();
                        let tx = self.core.txs.add(Half {
                            topic: topic.clone(),
                            queue: queue.clone(),
                            msg: m,
                            producer: client_id.clone(),
                            endpoint: self.ep.index,
                            created: now_i,
                            checks: 0,
                            next_check: now_i + self.core.config.transaction_check_delay,
                        });
                        entries.push(entry(id, 0, tx, String::new()));
                    }
                    MessageKind::Delay => {
                        let due = m
                            .system_properties
                            .as_ref()
                            .and_then(|s| s.delivery_timestamp.as_ref())
                            .map_or(now, store::ms_of);
                        let handle = self.core.timer.schedule(
                            due,
                            super::timer::Delayed {
                                topic: topic.clone(),
                                queue: queue.clone(),
                                msg: m,
                            },
                        );
                        entries.push(entry(id, 0, String::new(), handle));
                    }
                    _ => match self
                        .core
                        .store
                        .append(&topic, &queue, vec![m], &self.core.config)
                    {
                        Ok(o) => entries.push(entry(id, o as i64, String::new(), String::new())),
                        Err(e) => entries.push(proto::SendResultEntry {
                            status: Some(st(e.code, e.message)),
                            message_id: id,
                            ..Default::default()
                        }),
                    },
                }
            }
        }
        let all_ok = entries
            .iter()
            .all(|e| e.status.as_ref().is_some_and(|s| s.code == code::OK));
        let status = if all_ok {
            ok()
        } else {
            st(
                code::MULTIPLE_RESULTS,
                "some messages failed; see the entries",
            )
        };
        Ok(Response::new(proto::SendMessageResponse {
            status: Some(status),
            entries,
        }))
    }

    async fn query_assignment(
        &self,
        request: Request<proto::QueryAssignmentRequest>,
    ) -> Result<Response<proto::QueryAssignmentResponse>, Status> {
        let answer = |s| proto::QueryAssignmentResponse {
            status: Some(s),
            assignments: vec![],
        };
        admit_or!(self, Rpc::QueryAssignment, request, |s| answer(s));
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        check!(self.group(req.group.as_ref()), |s| answer(s));
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
        let conn = request
            .remote_addr()
            .and_then(|a| self.ep.faults.io.connection(a));
        let client_id = admit_or!(self, Rpc::ReceiveMessage, request, |s| receive_status(s));
        // Without settings (and for an unknown topic, below) the proxy fails with a
        // NullPointerException: INTERNAL_SERVER_ERROR. We answer the same code.
        check!(
            self.require_settings(&client_id)
                .map_err(|s| st(code::INTERNAL_SERVER_ERROR, s.message)),
            |s| receive_status(s)
        );
        let polling = check!(
            self.polling_time(
                request.get_ref().long_polling_timeout.as_ref(),
                request.metadata()
            ),
            |s| receive_status(s)
        );
        let req = request.into_inner();
        let cfg = &self.core.config;
        let group = check!(self.group(req.group.as_ref()), |s| receive_status(s));
        let mq = req.message_queue.as_ref();
        let topic = check!(
            self.topic(mq.and_then(|q| q.topic.as_ref()))
                .map_err(|s| st(code::INTERNAL_SERVER_ERROR, s.message)),
            |s| receive_status(s)
        );
        let broker = check!(self.broker_of(mq), |s| receive_status(s));
        let filter = check!(
            Filter::parse(req.filter_expression.as_ref()).map_err(|(c, m)| st(c, m)),
            |s| receive_status(s)
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
                    return Ok(Response::new(receive_status(st(
                        code::ILLEGAL_INVISIBLE_TIME,
                        "invisible_duration is required without auto_renew",
                    ))))
                }
                Some(d) if d < cfg.min_invisible || d > cfg.max_invisible => {
                    return Ok(Response::new(receive_status(st(
                        code::ILLEGAL_INVISIBLE_TIME,
                        format!(
                            "invisible_duration must be between {} ms and {} ms",
                            cfg.min_invisible.as_millis(),
                            cfg.max_invisible.as_millis()
                        ),
                    ))))
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
            return Ok(Response::new(receive_status(st(
                code::FORBIDDEN,
                format!(
                    "topic {:?} has no readable queue on broker-{broker}",
                    topic.name
                ),
            ))));
        }
        let group_name: Arc<str> = group.name.as_str().into();
        let deadline = crate::duration::deadline(Instant::now(), polling);
        let mut messages = Vec::new();
        let mut dead = Vec::new();
        {
            let _waiting = Waiting::new(&topic);
            loop {
                let notified = topic.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
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
                    break;
                }
                let wake = next_due.map_or(deadline, |d| d.min(deadline));
                tokio::select! {
                    () = &mut notified => {}
                    () = tokio::time::sleep_until(wake.into()) => {}
                    () = self.core.shutdown.cancelled() => {}
                }
            }
        }
        let _ = self.to_dlq(&group.name, &topic.name, dead);
        if messages.is_empty() {
            return Ok(Response::new(receive_status(st(
                code::MESSAGE_NOT_FOUND,
                "no new message",
            ))));
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

    async fn ack_message(
        &self,
        request: Request<proto::AckMessageRequest>,
    ) -> Result<Response<proto::AckMessageResponse>, Status> {
        let answer = |s| proto::AckMessageResponse {
            status: Some(s),
            entries: vec![],
        };
        admit_or!(self, Rpc::AckMessage, request, |s| answer(s));
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), |s| answer(s));
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        if req.entries.is_empty() {
            return Ok(Response::new(answer(st(
                code::BAD_REQUEST,
                "no entries to ack",
            ))));
        }
        let g: Arc<str> = group.name.as_str().into();
        let now = Instant::now();
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
                        Some(queue) => match queue.state.lock().ack(&g, off, nonce, now) {
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

    async fn forward_message_to_dead_letter_queue(
        &self,
        request: Request<proto::ForwardMessageToDeadLetterQueueRequest>,
    ) -> Result<Response<proto::ForwardMessageToDeadLetterQueueResponse>, Status> {
        let answer = |s| proto::ForwardMessageToDeadLetterQueueResponse { status: Some(s) };
        admit_or!(self, Rpc::ForwardMessageToDeadLetterQueue, request, |s| {
            answer(s)
        });
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), |s| answer(s));
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        let g: Arc<str> = group.name.as_str().into();
        let result = pop::decode_handle(&req.receipt_handle)
            .ok_or_else(|| pop::HandleError("malformed receipt handle".into()))
            .and_then(|(b, q, off, nonce)| {
                let queue = topic
                    .queue(b, q)
                    .ok_or_else(|| pop::HandleError("no such queue".into()))?;
                let r = queue
                    .state
                    .lock()
                    .dead_letter(&g, off, nonce, Instant::now());
                r
            });
        let (stored, attempts) = check!(
            result.map_err(|pop::HandleError(why)| st(code::INVALID_RECEIPT_HANDLE, why)),
            |s| answer(s)
        );
        let dead = vec![pop::DeadLetter { stored, attempts }];
        check!(self.to_dlq(&group.name, &topic.name, dead), |s| answer(s));
        topic.wake();
        Ok(Response::new(answer(ok())))
    }

    type PullMessageStream = BoxStream<proto::PullMessageResponse>;

    async fn pull_message(
        &self,
        request: Request<proto::PullMessageRequest>,
    ) -> Result<Response<Self::PullMessageStream>, Status> {
        admit_or!(self, Rpc::PullMessage, request, |s| pull_status(s, None));
        let remaining = grpc_timeout(request.metadata());
        let req = request.into_inner();
        check!(self.group(req.group.as_ref()), |s| pull_status(s, None));
        let (topic, queue) = check!(self.queue_of(req.message_queue.as_ref()), |s| pull_status(
            s, None
        ));
        let filter = check!(
            Filter::parse(req.filter_expression.as_ref()).map_err(|(c, m)| st(c, m)),
            |s| pull_status(s, None)
        );
        if req.batch_size <= 0 {
            return Ok(Response::new(pull_status(
                st(code::BAD_REQUEST, "batch_size must be positive"),
                None,
            )));
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
        let _waiting = Waiting::new(&topic);
        loop {
            let notified = topic.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (found, next) = {
                let st_ = queue.state.lock();
                let (base, end) = (st_.base, st_.end());
                if req.offset < 0 || (req.offset as u64) < base || req.offset as u64 > end {
                    let hint = if req.offset < 0 || (req.offset as u64) < base {
                        base
                    } else {
                        end
                    };
                    drop(st_);
                    return Ok(Response::new(pull_status(
                        st(
                            code::ILLEGAL_OFFSET,
                            format!("offset {} is outside [{base}, {end}]", req.offset),
                        ),
                        Some(hint as i64),
                    )));
                }
                let mut found = Vec::new();
                let mut off = req.offset as u64;
                while off < end && found.len() < batch {
                    let m = st_.get(off).expect("in range");
                    if filter.matches(m) {
                        found.push(m.clone());
                    }
                    off += 1;
                }
                (found, off)
            };
            if !found.is_empty()
                || next > req.offset as u64
                || Instant::now() >= deadline
                || self.core.shutdown.is_cancelled()
            {
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
                return Ok(Response::new(once(out)));
            }
            tokio::select! {
                () = &mut notified => {}
                () = tokio::time::sleep_until(deadline.into()) => {}
                () = self.core.shutdown.cancelled() => {}
            }
        }
    }

    async fn update_offset(
        &self,
        request: Request<proto::UpdateOffsetRequest>,
    ) -> Result<Response<proto::UpdateOffsetResponse>, Status> {
        let answer = |s| proto::UpdateOffsetResponse { status: Some(s) };
        admit_or!(self, Rpc::UpdateOffset, request, |s| answer(s));
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), |s| answer(s));
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), |s| answer(s));
        let mut q = queue.state.lock();
        if req.offset < 0 || req.offset as u64 > q.end() {
            let end = q.end();
            return Ok(Response::new(answer(st(
                code::ILLEGAL_OFFSET,
                format!("offset {} is outside [0, {end}]", req.offset),
            ))));
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
        admit_or!(self, Rpc::GetOffset, request, |s| answer(s));
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), |s| answer(s));
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), |s| answer(s));
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
        admit_or!(self, Rpc::QueryOffset, request, |s| answer(s));
        let req = request.into_inner();
        let (_, queue) = check!(self.queue_of(req.message_queue.as_ref()), |s| answer(s));
        let q = queue.state.lock();
        let offset = match proto::QueryOffsetPolicy::try_from(req.query_offset_policy) {
            Ok(proto::QueryOffsetPolicy::Beginning) => q.base,
            Ok(proto::QueryOffsetPolicy::End) => q.end(),
            Ok(proto::QueryOffsetPolicy::Timestamp) => {
                let Some(ts) = req.timestamp.as_ref() else {
                    return Ok(Response::new(answer(st(
                        code::BAD_REQUEST,
                        "the TIMESTAMP policy needs a timestamp",
                    ))));
                };
                let ms = store::ms_of(ts);
                let i = q.messages.partition_point(|m| m.store_ms < ms);
                q.base + i as u64
            }
            Err(_) => {
                return Ok(Response::new(answer(st(
                    code::BAD_REQUEST,
                    format!("unknown query_offset_policy {}", req.query_offset_policy),
                ))))
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
        admit_or!(self, Rpc::EndTransaction, request, |s| answer(s));
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        let resolution = proto::TransactionResolution::try_from(req.resolution)
            .unwrap_or(proto::TransactionResolution::Unspecified);
        if resolution == proto::TransactionResolution::Unspecified {
            // An "unknown" answer: the half message stays and is checked again later.
            return Ok(Response::new(answer(ok())));
        }
        let Some(half) = self.core.txs.take(&req.transaction_id, &req.message_id) else {
            return Ok(Response::new(answer(st(
                code::INVALID_TRANSACTION_ID,
                format!(
                    "no pending transaction {:?} for message {:?}",
                    req.transaction_id, req.message_id
                ),
            ))));
        };
        if half.topic.name != topic.name {
            self.core.txs.add_back(req.transaction_id.clone(), half);
            return Ok(Response::new(answer(st(
                code::ILLEGAL_TOPIC,
                "the transaction belongs to another topic",
            ))));
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
        let client_id = admit_or!(self, Rpc::NotifyClientTermination, request, |s| answer(s));
        let req = request.into_inner();
        if let Some(g) = req.group.as_ref().filter(|g| !g.name.is_empty()) {
            if !valid_resource_name(&g.name) {
                return Ok(Response::new(answer(st(
                    code::ILLEGAL_CONSUMER_GROUP,
                    format!("illegal consumer group name {:?}", g.name),
                ))));
            }
        }
        if !self.ep.clients.remove(&client_id) {
            check!(self.require_settings(&client_id), |s| answer(s));
        }
        Ok(Response::new(answer(ok())))
    }

    async fn change_invisible_duration(
        &self,
        request: Request<proto::ChangeInvisibleDurationRequest>,
    ) -> Result<Response<proto::ChangeInvisibleDurationResponse>, Status> {
        let answer = |s| proto::ChangeInvisibleDurationResponse {
            status: Some(s),
            receipt_handle: String::new(),
        };
        admit_or!(self, Rpc::ChangeInvisibleDuration, request, |s| answer(s));
        let req = request.into_inner();
        let group = check!(self.group(req.group.as_ref()), |s| answer(s));
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        let invisible = match req.invisible_duration.as_ref().and_then(std_duration) {
            Some(d) if d <= self.core.config.max_invisible => d,
            _ => {
                return Ok(Response::new(answer(st(
                    code::ILLEGAL_INVISIBLE_TIME,
                    format!(
                        "invisible_duration is required, at most {} s",
                        self.core.config.max_invisible.as_secs()
                    ),
                ))))
            }
        };
        let g: Arc<str> = group.name.as_str().into();
        // Like the proxy: a handle that does not parse is INTERNAL_SERVER_ERROR; a well-formed
        // one always gets OK and a new handle. (The proxy then writes a new checkpoint, so a stale
        // or acked message may come back; here a stale handle gets a new handle without effect.)
        let Some((b, q, off, nonce)) = pop::decode_handle(&req.receipt_handle) else {
            return Ok(Response::new(answer(st(
                code::INTERNAL_SERVER_ERROR,
                "malformed receipt handle: parse failed",
            ))));
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

    async fn recall_message(
        &self,
        request: Request<proto::RecallMessageRequest>,
    ) -> Result<Response<proto::RecallMessageResponse>, Status> {
        let answer = |s| proto::RecallMessageResponse {
            status: Some(s),
            message_id: String::new(),
        };
        admit_or!(self, Rpc::RecallMessage, request, |s| answer(s));
        let req = request.into_inner();
        let topic = check!(self.topic(req.topic.as_ref()), |s| answer(s));
        if !super::timer::is_recall_handle(&req.recall_handle) {
            return Ok(Response::new(answer(st(
                code::BAD_REQUEST,
                "malformed recall handle",
            ))));
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
            None => Ok(Response::new(answer(st(
                40400,
                "no pending delay message for this recall handle (already delivered or recalled)",
            )))),
        }
    }

    async fn sync_lite_subscription(
        &self,
        request: Request<proto::SyncLiteSubscriptionRequest>,
    ) -> Result<Response<proto::SyncLiteSubscriptionResponse>, Status> {
        let answer = |s| proto::SyncLiteSubscriptionResponse { status: Some(s) };
        admit_or!(self, Rpc::SyncLiteSubscription, request, |s| answer(s));
        Ok(Response::new(answer(st(
            code::NOT_IMPLEMENTED,
            "lite topics are not supported by the embedded broker",
        ))))
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
