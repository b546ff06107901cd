//! SendMessage of the `MessagingService`: checks (see [`super::send`]), batches, and the
//! transaction and delay messages held back from the queue.

use std::time::Instant;

use tonic::{Request, Response, Status};

use super::fault::Rpc;
use super::send;
use super::service_wire::{ok, resource_name, st, EndpointService};
use super::store::{self, kind_to_proto, now_ms};
use super::transaction::Half;
use crate::message::MessageKind;
use crate::proto;
use crate::status as code;
use crate::trace_context::ROCKETMQ_TRACE_CONTEXT;

/// `MESSAGE_CORRUPTED`: what the proxy answers a SendMessage without messages.
const MESSAGE_CORRUPTED: i32 = 40016;

impl EndpointService {
    pub(super) async fn on_send(
        &self,
        request: Request<proto::SendMessageRequest>,
    ) -> Result<Response<proto::SendMessageResponse>, Status> {
        // A refused send carries no entries, only the status (as the proxy answers).
        let fail = |s| {
            Ok(Response::new(proto::SendMessageResponse {
                status: Some(s),
                entries: Vec::new(),
            }))
        };
        let client_id = match self.admit(Rpc::SendMessage, request.metadata()).await {
            Ok(id) => id,
            Err(s) => return fail(s),
        };
        let mut msgs = request.into_inner().messages;
        let n = msgs.len();
        if n == 0 {
            return fail(st(MESSAGE_CORRUPTED, "no message to send"));
        }
        let topic_res = msgs[0].topic.clone();
        if msgs
            .iter()
            .any(|m| resource_name(m.topic.as_ref()) != resource_name(topic_res.as_ref()))
        {
            return fail(st(
                code::ILLEGAL_TOPIC,
                "every message of a batch must have the same topic",
            ));
        }
        let topic = match self.topic(topic_res.as_ref()) {
            Ok(t) => t,
            // The proxy checks the message type against the topic's before anything else, and an
            // unknown topic has type UNSPECIFIED.
            Err(s) if s.code == code::TOPIC_NOT_FOUND => {
                return fail(st(
                    code::MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
                    format!(
                        "topic {:?} not found: TopicMessageType validate failed, the expected \
                         type is UNSPECIFIED",
                        resource_name(topic_res.as_ref())
                    ),
                ))
            }
            Err(s) => return fail(s),
        };
        let now = now_ms();
        let mut kinds = Vec::with_capacity(n);
        let max_body_size = self.core.live.max_body_size();
        for m in &msgs {
            match send::validate(&self.core.config, max_body_size, &topic, m, now) {
                Ok(k) => kinds.push(k),
                Err(s) => return fail(s),
            }
        }
        let Some(queue) = send::pick_queue(&topic, self.ep.index, &msgs[0]) else {
            return fail(st(
                code::FORBIDDEN,
                format!(
                    "topic {:?} has no writable queue on this endpoint",
                    topic.name
                ),
            ));
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
                // The proxy keeps a trace context as the stored property `TRACE_CONTEXT`, which
                // it delivers both in the system field and among the user properties (remoting
                // pulls see the property). An empty one is not kept.
                match sp.trace_context.take().filter(|t| !t.is_empty()) {
                    Some(t) => {
                        m.user_properties
                            .insert(ROCKETMQ_TRACE_CONTEXT.to_string(), t.clone());
                        sp.trace_context = Some(t);
                    }
                    None => sp.trace_context = None,
                }
            }
        }
        let entry = |id: String, offset: i64, tx: String, recall: String| proto::SendResultEntry {
            status: Some(ok()),
            message_id: id,
            transaction_id: tx,
            offset,
            recall_handle: recall,
        };
        let refused = |id: String, e: store::AppendError| proto::SendResultEntry {
            status: Some(st(e.code, e.message)),
            message_id: id,
            ..Default::default()
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
                Err(e) => return fail(st(e.code, e.message)),
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
                        entries.push(refused(id, e));
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
                        Err(e) => entries.push(refused(id, e)),
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
}
