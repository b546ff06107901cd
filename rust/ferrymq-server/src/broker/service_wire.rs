//! What the handlers of the `MessagingService` share: the service of one endpoint with its
//! admission ([`EndpointService::admit`]: count the call, apply the endpoint's faults, require
//! `x-mq-client-id`, check the signature) and resource lookups, `Status` and answer-stream helpers,
//! and the `admit_or!` / `check!` macros that turn a refused step into the proxy's answer.

use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use tonic::metadata::MetadataMap;
use tonic::Status;

use super::auth;
use super::endpoint::{Core, Endpoint};
use super::fault::Rpc;
use super::store::{self, now_ms, std_duration, valid_resource_name, GroupConfig, Queue, Topic};
use crate::proto;
use crate::status as code;

pub(super) type BoxStream<T> = Pin<Box<dyn Stream<Item = Result<T, Status>> + Send + 'static>>;

/// Largest receive/pull batch served in one call.
pub(super) const MAX_BATCH: usize = 1024;

/// A `Status` message.
pub(super) fn st(c: i32, message: impl Into<String>) -> proto::Status {
    proto::Status {
        code: c,
        message: message.into(),
    }
}

/// A handler's answer (made by `answer`) carrying status `c` with `message`.
pub(super) fn refuse<R>(
    answer: impl FnOnce(proto::Status) -> R,
    c: i32,
    message: impl Into<String>,
) -> Result<tonic::Response<R>, Status> {
    Ok(tonic::Response::new(answer(st(c, message))))
}

pub(super) fn ok() -> proto::Status {
    st(code::OK, "OK")
}

/// The remaining time of the call, from its `grpc-timeout` header.
pub(super) fn grpc_timeout(md: &MetadataMap) -> Option<Duration> {
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

pub(super) fn resource_name(r: Option<&proto::Resource>) -> &str {
    r.map_or("", |r| r.name.as_str())
}

pub(super) fn namespace(r: Option<&proto::Resource>) -> &str {
    r.map_or("", |r| r.resource_namespace.as_str())
}

/// The service of one endpoint.
#[derive(Debug, Clone)]
pub(crate) struct EndpointService {
    pub(super) core: Arc<Core>,
    pub(super) ep: Arc<Endpoint>,
}

impl EndpointService {
    /// Count, apply faults, check headers. Returns the client id.
    pub(super) async fn admit(&self, rpc: Rpc, md: &MetadataMap) -> Result<String, proto::Status> {
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
                self.core
                    .verified
                    .authorize(md, creds)
                    .map_err(|(c, m)| st(c, m))?;
            }
        }
        Ok(client_id)
    }

    pub(super) fn topic(&self, r: Option<&proto::Resource>) -> Result<Arc<Topic>, proto::Status> {
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

    pub(super) fn group(
        &self,
        r: Option<&proto::Resource>,
    ) -> Result<Arc<GroupConfig>, proto::Status> {
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

    pub(super) fn require_settings(&self, client_id: &str) -> Result<(), proto::Status> {
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
    pub(super) fn broker_of(
        &self,
        mq: Option<&proto::MessageQueue>,
    ) -> Result<usize, proto::Status> {
        match mq.and_then(|q| q.broker.as_ref()).map(|b| b.name.as_str()) {
            None | Some("") => Ok(self.ep.index),
            Some(name) => self
                .core
                .broker_index(name)
                .ok_or_else(|| st(code::BAD_REQUEST, format!("unknown broker {name:?}"))),
        }
    }

    /// The topic and queue a message queue names.
    pub(super) fn queue_of(
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
    pub(super) fn polling_time(
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
}

pub(super) fn once<T: Send + 'static>(items: Vec<T>) -> BoxStream<T> {
    Box::pin(tokio_stream::iter(items.into_iter().map(Ok)))
}

/// The element that ends every receive stream of the proxy: the time of the answer.
pub(super) fn delivery_timestamp() -> proto::ReceiveMessageResponse {
    proto::ReceiveMessageResponse {
        content: Some(proto::receive_message_response::Content::DeliveryTimestamp(
            store::timestamp_ms(now_ms()),
        )),
    }
}

/// A receive answer without messages: the status, then the delivery timestamp.
pub(super) fn receive_status(s: proto::Status) -> BoxStream<proto::ReceiveMessageResponse> {
    once(vec![
        proto::ReceiveMessageResponse {
            content: Some(proto::receive_message_response::Content::Status(s)),
        },
        delivery_timestamp(),
    ])
}

pub(super) fn pull_status(
    s: proto::Status,
    next: Option<i64>,
) -> BoxStream<proto::PullMessageResponse> {
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
    ($self:ident, $rpc:expr, $req:ident, $answer:expr) => {
        match $self.admit($rpc, $req.metadata()).await {
            Ok(id) => id,
            Err(s) => return Ok(::tonic::Response::new($answer(s))),
        }
    };
}

macro_rules! check {
    ($e:expr, $answer:expr) => {
        match $e {
            Ok(v) => v,
            Err(s) => return Ok(::tonic::Response::new($answer(s))),
        }
    };
}

pub(super) use {admit_or, check};
