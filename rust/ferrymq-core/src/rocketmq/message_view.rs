//! Received messages: the read-only view a consumer hands to its caller or listener.
//!
//! A [`MessageView`] is decoded once from the wire `Message` (body decompressed, digest
//! checked) and then shared as an `Arc` by the cache, the listener and the settle path. The only
//! mutable parts are the receipt handle, which `ChangeInvisibleDuration` replaces, and the
//! delivery attempt, which FIFO consumption raises on each local retry.

use std::collections::HashMap;
use std::io::Read as _;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::error::{Error, Result};
use crate::proto;
use crate::rocketmq::endpoints::Endpoints;

/// Where a received message came from, shared by every message of one queue: its topic and the
/// broker endpoints that must settle it (ack, change invisible duration, forward to DLQ).
#[derive(Debug, Clone, PartialEq)]
pub struct MessageSource {
    /// The topic resource, namespace included.
    pub topic: proto::Resource,
    /// The broker that served the queue (and settles its messages).
    pub endpoints: Endpoints,
    /// The queue id, or -1 when unknown.
    pub queue_id: i32,
    /// The name of the broker that holds the queue (empty when unknown).
    pub broker_name: String,
}

impl MessageSource {
    /// The source of messages received from `mq`; `fallback` (the access point) serves queues
    /// whose route names no broker endpoints.
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
            broker_name: mq
                .broker
                .as_ref()
                .map(|b| b.name.clone())
                .unwrap_or_default(),
        }
    }
}

/// A message received from a RocketMQ broker.
#[derive(Debug)]
pub struct MessageView {
    message_id: String,
    topic: String,
    body: Bytes,
    tag: Option<String>,
    keys: Vec<String>,
    properties: HashMap<String, String>,
    message_group: Option<String>,
    delivery_attempt: AtomicI32,
    queue_id: i32,
    offset: i64,
    born_timestamp_ms: Option<i64>,
    store_timestamp_ms: Option<i64>,
    delivery_timestamp_ms: Option<i64>,
    born_host: String,
    trace_context: Option<String>,
    trace_state: Option<String>,
    lite_topic: Option<String>,
    corrupted: bool,
    receipt_handle: Mutex<Arc<str>>,
    source: Arc<MessageSource>,
    size: usize,
}

fn millis(ts: Option<&prost_types::Timestamp>) -> Option<i64> {
    ts.map(|t| {
        t.seconds
            .saturating_mul(1000)
            .saturating_add(i64::from(t.nanos / 1_000_000))
    })
}

/// Whether a body matches its wire digest. A real proxy sends MD5 (upper-case hex); CRC32 is
/// accepted with or without leading zeros and hex digits in either case (servers differ), and
/// an unknown digest type is not checked.
fn digest_matches(d: &proto::Digest, body: &[u8]) -> bool {
    use sha1::Digest as _;
    let hex_eq = |sum: &[u8]| {
        let want = d.checksum.trim().as_bytes();
        want.len() == 2 * sum.len()
            && sum.iter().zip(want.chunks(2)).all(|(b, pair)| {
                let hi = char::from(pair[0]).to_digit(16);
                let lo = char::from(pair[1]).to_digit(16);
                matches!((hi, lo), (Some(h), Some(l)) if (h << 4 | l) == u32::from(*b))
            })
    };
    match proto::DigestType::try_from(d.r#type) {
        Ok(proto::DigestType::Crc32) => {
            u32::from_str_radix(d.checksum.trim(), 16).ok() == Some(crc32fast::hash(body))
        }
        Ok(proto::DigestType::Md5) => hex_eq(&md5::Md5::digest(body)),
        Ok(proto::DigestType::Sha1) => hex_eq(&sha1::Sha1::digest(body)),
        _ => true,
    }
}

impl MessageView {
    /// Decode a wire message received from `source`.
    ///
    /// A GZIP body is inflated; a body whose CRC32 digest does not match (or that does not
    /// inflate) is kept as received and flagged [`MessageView::is_corrupted`].
    pub fn from_proto(mut msg: proto::Message, source: Arc<MessageSource>) -> Result<Self> {
        let mut sp = msg
            .system_properties
            .ok_or_else(|| Error::protocol("received message without system properties"))?;
        let (trace_context, trace_state) =
            crate::trace_context::take_received(sp.trace_context.take(), &mut msg.user_properties);
        let receipt_handle = sp.receipt_handle.unwrap_or_default();
        let mut corrupted = false;
        let mut body = msg.body;
        if let Some(d) = &sp.body_digest {
            corrupted = !digest_matches(d, &body);
        }
        if sp.body_encoding == proto::Encoding::Gzip as i32 {
            let mut out = Vec::with_capacity(body.len() * 2);
            match flate2::read::GzDecoder::new(&body[..]).read_to_end(&mut out) {
                Ok(_) => body = Bytes::from(out),
                Err(_) => corrupted = true,
            }
        }
        let topic = msg.topic.map(|t| t.name).unwrap_or_default();
        let size = body.len()
            + topic.len()
            + sp.message_id.len()
            + receipt_handle.len()
            + sp.keys.iter().map(String::len).sum::<usize>()
            + sp.tag.as_ref().map_or(0, String::len)
            + msg
                .user_properties
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>()
            + sp.message_group.as_ref().map_or(0, String::len)
            + trace_context.as_ref().map_or(0, String::len)
            + trace_state.as_ref().map_or(0, String::len);
        Ok(Self {
            message_id: sp.message_id,
            topic,
            body,
            tag: sp.tag,
            keys: sp.keys,
            properties: msg.user_properties,
            message_group: sp.message_group,
            delivery_attempt: AtomicI32::new(sp.delivery_attempt.unwrap_or(1).max(1)),
            queue_id: sp.queue_id,
            offset: sp.queue_offset.unwrap_or(-1),
            born_timestamp_ms: millis(sp.born_timestamp.as_ref()),
            store_timestamp_ms: millis(sp.store_timestamp.as_ref()),
            delivery_timestamp_ms: millis(sp.delivery_timestamp.as_ref()),
            born_host: sp.born_host,
            trace_context,
            trace_state,
            lite_topic: sp.lite_topic,
            corrupted,
            receipt_handle: Mutex::new(Arc::from(receipt_handle)),
            source,
            size,
        })
    }

    /// The message id (34 upper-case hex characters for ids made by current clients).
    pub fn message_id(&self) -> &str {
        &self.message_id
    }
    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }
    /// The payload, decompressed.
    pub fn body(&self) -> &Bytes {
        &self.body
    }
    /// The tag, if any.
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }
    /// Business keys.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }
    /// User properties.
    pub fn properties(&self) -> &HashMap<String, String> {
        &self.properties
    }
    /// The FIFO message group, if any.
    pub fn message_group(&self) -> Option<&str> {
        self.message_group.as_deref()
    }
    /// Which delivery this is, starting at 1 (raised locally by FIFO retries).
    pub fn delivery_attempt(&self) -> i32 {
        self.delivery_attempt.load(Ordering::Relaxed)
    }
    /// Raise the delivery attempt by one (a local FIFO retry) and return the new value.
    pub fn increment_delivery_attempt(&self) -> i32 {
        self.delivery_attempt.fetch_add(1, Ordering::Relaxed) + 1
    }
    /// The id of the queue the message was stored in.
    pub fn queue_id(&self) -> i32 {
        self.queue_id
    }
    /// The offset of the message in its queue, or -1 when the broker did not say.
    pub fn offset(&self) -> i64 {
        self.offset
    }
    /// When the producer created the message, in milliseconds since the Unix epoch.
    pub fn born_timestamp_ms(&self) -> Option<i64> {
        self.born_timestamp_ms
    }
    /// When the broker stored the message, in milliseconds since the Unix epoch.
    pub fn store_timestamp_ms(&self) -> Option<i64> {
        self.store_timestamp_ms
    }
    /// When a delayed message became deliverable, in milliseconds since the Unix epoch.
    pub fn delivery_timestamp_ms(&self) -> Option<i64> {
        self.delivery_timestamp_ms
    }
    /// The host the producer ran on.
    pub fn born_host(&self) -> &str {
        &self.born_host
    }
    /// The W3C `traceparent` the producer propagated, if any, as received (not validated).
    pub fn trace_context(&self) -> Option<&str> {
        self.trace_context.as_deref()
    }
    /// The W3C `tracestate` that came with the trace context, if any.
    pub fn trace_state(&self) -> Option<&str> {
        self.trace_state.as_deref()
    }
    /// The lite topic (RocketMQ 5.5 lite consumers), if any.
    pub fn lite_topic(&self) -> Option<&str> {
        self.lite_topic.as_deref()
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

/// The wire form of a `Duration` (the embedded broker converts with it from here).
pub use crate::duration::to_proto_duration;

#[cfg(test)]
pub(crate) mod tests {
    use std::io::Write as _;

    use super::*;

    pub(crate) fn wire_message(id: &str, body: &[u8], group: Option<&str>) -> proto::Message {
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
                born_timestamp: Some(prost_types::Timestamp {
                    seconds: 1_700_000_000,
                    nanos: 123_000_000,
                }),
                ..Default::default()
            }),
            body: Bytes::copy_from_slice(body),
        }
    }

    pub(crate) fn endpoints() -> Endpoints {
        Endpoints::new(vec![crate::rocketmq::endpoints::Address {
            host: "127.0.0.1".into(),
            port: 1,
        }])
        .unwrap()
    }

    pub(crate) fn source() -> Arc<MessageSource> {
        Arc::new(MessageSource {
            topic: proto::Resource {
                resource_namespace: String::new(),
                name: "t".into(),
            },
            endpoints: endpoints(),
            queue_id: 3,
            broker_name: "broker-0".into(),
        })
    }

    #[test]
    fn decodes_fields_and_checks_the_digest() {
        let v = MessageView::from_proto(wire_message("M1", b"hello", Some("g")), source()).unwrap();
        assert_eq!(v.message_id(), "M1");
        assert_eq!(&v.body()[..], b"hello");
        assert_eq!(v.tag(), Some("TagA"));
        assert_eq!(v.keys(), ["key1".to_string()]);
        assert_eq!(v.properties()["k"], "v");
        assert_eq!(v.message_group(), Some("g"));
        assert_eq!(v.offset(), 42);
        assert_eq!(v.queue_id(), 3);
        assert_eq!(v.born_timestamp_ms(), Some(1_700_000_000_123));
        assert!(!v.is_corrupted());
        assert_eq!(&*v.receipt_handle(), "rh-M1");
        v.set_receipt_handle("rh2");
        assert_eq!(&*v.receipt_handle(), "rh2");
        assert_eq!(v.increment_delivery_attempt(), 2);

        let mut w = wire_message("M2", b"hello", None);
        w.body = Bytes::from_static(b"hellO");
        assert!(MessageView::from_proto(w, source()).unwrap().is_corrupted());
    }

    #[test]
    fn trace_context_from_the_system_field_or_the_properties() {
        const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let view = |system: Option<&str>, props: &[(&str, &str)]| {
            let mut w = wire_message("M", b"x", None);
            w.system_properties.as_mut().unwrap().trace_context = system.map(Into::into);
            w.user_properties = props
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            MessageView::from_proto(w, source()).unwrap()
        };
        let names = |v: &MessageView| {
            let mut k: Vec<String> = v.properties().keys().cloned().collect();
            k.sort();
            k
        };
        // The system field, as a proxy delivers it (repeated as TRACE_CONTEXT).
        let v = view(
            Some(TP),
            &[("TRACE_CONTEXT", TP), ("tracestate", "a=1"), ("k", "v")],
        );
        assert_eq!(
            (v.trace_context(), v.trace_state()),
            (Some(TP), Some("a=1"))
        );
        assert_eq!(names(&v), ["k"]);
        // A `traceparent` property (OpenTelemetry's Java instrumentation, headers, attributes).
        let v = view(None, &[("traceparent", TP), ("tracestate", "a=1")]);
        assert_eq!(
            (v.trace_context(), v.trace_state()),
            (Some(TP), Some("a=1"))
        );
        assert!(v.properties().is_empty());
        // The system field wins; a differing property stays a property.
        let v = view(Some(TP), &[("traceparent", "other")]);
        assert_eq!(v.trace_context(), Some(TP));
        assert_eq!(names(&v), ["traceparent"]);
        // Nothing, an empty field, a tracestate alone: no trace context, properties untouched.
        assert_eq!(view(None, &[]).trace_context(), None);
        assert_eq!(view(Some(""), &[]).trace_context(), None);
        let v = view(None, &[("tracestate", "a=1")]);
        assert_eq!((v.trace_context(), v.trace_state()), (None, None));
        assert_eq!(names(&v), ["tracestate"]);
    }

    #[test]
    fn checks_crc32_md5_and_sha1_digests_in_every_server_form() {
        let check = |kind: proto::DigestType, checksum: &str, body: &[u8]| {
            let mut w = wire_message("M", body, None);
            w.system_properties.as_mut().unwrap().body_digest = Some(proto::Digest {
                r#type: kind as i32,
                checksum: checksum.into(),
            });
            !MessageView::from_proto(w, source()).unwrap().is_corrupted()
        };
        use proto::DigestType::{Crc32, Md5, Sha1};
        // CRC32 of "crc-3" is 0x0CEDDC17: padded (Python client) or not (Java client, proxy).
        assert!(check(Crc32, "0CEDDC17", b"crc-3"));
        assert!(check(Crc32, "CEDDC17", b"crc-3"));
        assert!(check(Crc32, "ceddc17", b"crc-3"));
        assert!(!check(Crc32, "CEDDC18", b"crc-3"));
        // What a real proxy sends: MD5, upper-case.
        assert!(check(Md5, "5D41402ABC4B2A76B9719D911017C592", b"hello"));
        assert!(check(Md5, "5d41402abc4b2a76b9719d911017c592", b"hello"));
        assert!(!check(Md5, "5D41402ABC4B2A76B9719D911017C592", b"hellO"));
        assert!(!check(Md5, "5D41402ABC4B2A76B9719D911017C59", b"hello"));
        assert!(!check(Md5, "5D41402ABC4B2A76B9719D911017C5ZZ", b"hello"));
        assert!(check(
            Sha1,
            "AAF4C61DDCC5E8A2DABEDE0F3B482CD9AEA9434D",
            b"hello"
        ));
        assert!(!check(
            Sha1,
            "AAF4C61DDCC5E8A2DABEDE0F3B482CD9AEA9434E",
            b"hello"
        ));
    }

    #[test]
    fn inflates_gzip_bodies() {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(b"compressed payload").unwrap();
        let gz = enc.finish().unwrap();
        let mut w = wire_message("M3", &gz, None);
        w.system_properties.as_mut().unwrap().body_encoding = proto::Encoding::Gzip as i32;
        let v = MessageView::from_proto(w, source()).unwrap();
        assert!(!v.is_corrupted());
        assert_eq!(&v.body()[..], b"compressed payload");
    }
}
