//! Received messages as consumers hold them: a [`MessageView`] plus the state that settling it
//! needs.
//!
//! A [`ReceivedMessage`] is decoded once (body inflated, digest checked) and then shared as an
//! `Arc` by the cache, the listener and the settle path. Its only mutable parts are the receipt
//! handle, which `ChangeInvisibleDuration` replaces, and the delivery attempt, which FIFO
//! consumption raises on each local retry.

use std::io::Read as _;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::proto;
use crate::rocketmq::endpoints::Endpoints;
use crate::rocketmq::message_view::MessageView;

/// Where received messages came from, shared by every message of one queue: the topic and the
/// broker endpoints that must settle them (ack, change invisible duration, forward to DLQ).
#[derive(Debug, Clone, PartialEq)]
pub struct MessageSource {
    /// The topic resource, namespace included.
    pub topic: proto::Resource,
    /// The broker that served the queue.
    pub endpoints: Endpoints,
    /// The queue id.
    pub queue_id: i32,
}

impl MessageSource {
    /// The source of messages received from `mq`; `fallback` (the access point) serves queues
    /// whose route carries no broker endpoints.
    pub fn of_queue(mq: &proto::MessageQueue, fallback: &Endpoints) -> Self {
        let endpoints = mq
            .broker
            .as_ref()
            .and_then(|b| b.endpoints.as_ref())
            .and_then(|e| Endpoints::from_proto(e).ok())
            .unwrap_or_else(|| fallback.clone());
        Self {
            topic: mq.topic.clone().unwrap_or_default(),
            endpoints,
            queue_id: mq.id,
        }
    }
}

/// A message received by a consumer.
#[derive(Debug)]
pub struct ReceivedMessage {
    view: MessageView,
    receipt_handle: Mutex<Arc<str>>,
    delivery_attempt: AtomicI32,
    corrupted: bool,
    source: Arc<MessageSource>,
    size: usize,
}

impl ReceivedMessage {
    /// Decode a wire message received from `source`.
    ///
    /// A GZIP body is inflated; a body whose CRC32 digest does not match (or that does not
    /// inflate) is kept as received and flagged [`ReceivedMessage::is_corrupted`].
    pub fn from_proto(mut msg: proto::Message, source: Arc<MessageSource>) -> Result<Self> {
        let Some(sp) = msg.system_properties.as_ref() else {
            return Err(Error::protocol(
                "received a message without system properties",
            ));
        };
        let mut corrupted = false;
        if let Some(d) = &sp.body_digest {
            if d.r#type == proto::DigestType::Crc32 as i32 {
                let crc = crc32fast::hash(&msg.body);
                corrupted = u32::from_str_radix(d.checksum.trim(), 16).ok() != Some(crc);
            }
        }
        if sp.body_encoding == proto::Encoding::Gzip as i32 {
            let mut out = Vec::with_capacity(msg.body.len() * 2);
            match flate2::read::GzDecoder::new(&msg.body[..]).read_to_end(&mut out) {
                Ok(_) => msg.body = Bytes::from(out),
                Err(_) => corrupted = true,
            }
        }
        Ok(Self::from_view(
            MessageView::from_proto(msg),
            corrupted,
            source,
        ))
    }

    /// A received message from an already decoded view (telemetry commands carry those).
    pub fn from_view(view: MessageView, corrupted: bool, source: Arc<MessageSource>) -> Self {
        let receipt_handle: Arc<str> = Arc::from(view.receipt_handle.as_deref().unwrap_or(""));
        let size = view.body.len()
            + view.topic.len()
            + view.message_id.len()
            + receipt_handle.len()
            + view.keys.iter().map(String::len).sum::<usize>()
            + view.tag.as_ref().map_or(0, String::len)
            + view
                .properties
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + view.message_group.as_ref().map_or(0, String::len);
        Self {
            delivery_attempt: AtomicI32::new(view.delivery_attempt.unwrap_or(1).max(1)),
            view,
            receipt_handle: Mutex::new(receipt_handle),
            corrupted,
            source,
            size,
        }
    }

    /// The decoded message (its `receipt_handle` and `delivery_attempt` are those of the
    /// receive; use the methods of this type for the current values).
    pub fn view(&self) -> &MessageView {
        &self.view
    }
    /// The message id.
    pub fn message_id(&self) -> &str {
        &self.view.message_id
    }
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.view.topic
    }
    /// The payload, decompressed.
    pub fn body(&self) -> &Bytes {
        &self.view.body
    }
    /// The FIFO message group, if any.
    pub fn message_group(&self) -> Option<&str> {
        self.view.message_group.as_deref()
    }
    /// Which delivery this is, starting at 1 (raised locally by FIFO retries).
    pub fn delivery_attempt(&self) -> i32 {
        self.delivery_attempt.load(Ordering::Relaxed)
    }
    /// Raise the delivery attempt by one (a local FIFO retry) and return the new value.
    pub fn increment_delivery_attempt(&self) -> i32 {
        self.delivery_attempt.fetch_add(1, Ordering::Relaxed) + 1
    }
    /// Whether the body failed its digest check or did not decompress.
    pub fn is_corrupted(&self) -> bool {
        self.corrupted
    }
    /// The current receipt handle (replaced by every `ChangeInvisibleDuration`).
    pub fn receipt_handle(&self) -> Arc<str> {
        self.receipt_handle.lock().clone()
    }
    /// Store the receipt handle returned by `ChangeInvisibleDuration`.
    pub fn set_receipt_handle(&self, handle: &str) {
        *self.receipt_handle.lock() = Arc::from(handle);
    }
    /// Where the message came from (topic resource and broker endpoints).
    pub fn source(&self) -> &Arc<MessageSource> {
        &self.source
    }
    /// Approximate memory held by the message, used by the cache limits.
    pub fn size(&self) -> usize {
        self.size
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::HashMap;
    use std::io::Write as _;

    use super::*;
    use crate::rocketmq::endpoints::Address;

    pub(crate) fn endpoints() -> Endpoints {
        Endpoints::new(vec![Address {
            host: "127.0.0.1".into(),
            port: 1,
        }])
        .unwrap()
    }

    fn wire_message(id: &str, body: &[u8], group: Option<&str>) -> proto::Message {
        proto::Message {
            topic: Some(proto::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            }),
            user_properties: HashMap::from([("k".to_string(), "v".to_string())]),
            system_properties: Some(proto::SystemProperties {
                tag: Some("TagA".into()),
                keys: vec!["key1".into()],
                message_id: id.into(),
                body_digest: Some(proto::Digest {
                    r#type: proto::DigestType::Crc32 as i32,
                    checksum: format!("{:08X}", crc32fast::hash(body)),
                }),
                receipt_handle: Some(format!("rh-{id}")),
                queue_id: 3,
                queue_offset: Some(42),
                delivery_attempt: Some(1),
                message_group: group.map(Into::into),
                ..Default::default()
            }),
            body: Bytes::copy_from_slice(body),
        }
    }

    fn source() -> Arc<MessageSource> {
        Arc::new(MessageSource {
            topic: proto::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            },
            endpoints: endpoints(),
            queue_id: 3,
        })
    }

    #[test]
    fn decodes_and_checks_the_digest() {
        let m =
            ReceivedMessage::from_proto(wire_message("M1", b"hello", Some("g")), source()).unwrap();
        assert_eq!(m.message_id(), "M1");
        assert_eq!(&m.body()[..], b"hello");
        assert_eq!(m.view().tag.as_deref(), Some("TagA"));
        assert_eq!(m.message_group(), Some("g"));
        assert!(!m.is_corrupted());
        assert_eq!(&*m.receipt_handle(), "rh-M1");
        m.set_receipt_handle("rh2");
        assert_eq!(&*m.receipt_handle(), "rh2");
        assert_eq!(m.delivery_attempt(), 1);
        assert_eq!(m.increment_delivery_attempt(), 2);
        assert!(m.size() > 5);

        let mut w = wire_message("M2", b"hello", None);
        w.body = Bytes::from_static(b"hellO");
        assert!(ReceivedMessage::from_proto(w, source())
            .unwrap()
            .is_corrupted());
        let mut w = wire_message("M3", b"x", None);
        w.system_properties = None;
        assert!(ReceivedMessage::from_proto(w, source()).is_err());
    }

    #[test]
    fn inflates_gzip_bodies() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"compressed payload").unwrap();
        let gz = enc.finish().unwrap();
        let mut w = wire_message("M3", &gz, None);
        w.system_properties.as_mut().unwrap().body_encoding = proto::Encoding::Gzip as i32;
        let m = ReceivedMessage::from_proto(w, source()).unwrap();
        assert!(!m.is_corrupted());
        assert_eq!(&m.body()[..], b"compressed payload");
    }

    #[test]
    fn queues_without_broker_endpoints_use_the_fallback() {
        let mq = proto::MessageQueue {
            topic: Some(proto::Resource {
                resource_namespace: "ns".into(),
                name: "t".into(),
            }),
            id: 2,
            ..Default::default()
        };
        let s = MessageSource::of_queue(&mq, &endpoints());
        assert_eq!(s.endpoints, endpoints());
        assert_eq!(s.queue_id, 2);
        assert_eq!(s.topic.resource_namespace, "ns");
    }
}
